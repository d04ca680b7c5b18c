#include "daemon/command_line.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaroce::daemon {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<CommandLine> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "metaroced");
  return ParseCommandLine(static_cast<int>(args.size()), args.data());
}

TEST(CommandLine, NoFlagsReadsTheDefaultConfigIfPresent) {
  absl::StatusOr<CommandLine> cl = Parse({});
  ASSERT_TRUE(cl.ok());
  EXPECT_EQ(cl->config.path, "/etc/metaroce/metaroced.conf");
  EXPECT_FALSE(cl->config.path_required);
  EXPECT_TRUE(cl->config.overrides.empty());
  EXPECT_FALSE(cl->check_config);
}

TEST(CommandLine, ConfigFlagMakesTheFileRequired) {
  absl::StatusOr<CommandLine> cl = Parse({"--config", "/tmp/m.conf", "--check-config"});
  ASSERT_TRUE(cl.ok());
  EXPECT_EQ(cl->config.path, "/tmp/m.conf");
  EXPECT_TRUE(cl->config.path_required);
  EXPECT_TRUE(cl->check_config);
}

TEST(CommandLine, KeyFlagsBecomeOverridesInOrder) {
  absl::StatusOr<CommandLine> cl =
      Parse({"--interface", "pl0,pl1", "--local-ip=198.18.0.1,198.18.1.1", "--socket", "/tmp/s",
             "--port-kind", "udp", "--workers=1", "--log-format", "json", "--metrics-listen",
             "127.0.0.1:9469"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  const auto& o = cl->config.overrides;
  ASSERT_EQ(o.size(), 7u);
  EXPECT_EQ(o[0].flag, "--interface");
  EXPECT_EQ(o[0].key, "interfaces");
  EXPECT_EQ(o[0].value, "pl0,pl1");
  EXPECT_EQ(o[1].key, "local_ips");
  EXPECT_EQ(o[1].value, "198.18.0.1,198.18.1.1");
  EXPECT_EQ(o[2].key, "socket");
  EXPECT_EQ(o[3].key, "port_kind");
  EXPECT_EQ(o[4].key, "workers");
  EXPECT_EQ(o[4].value, "1");
  EXPECT_EQ(o[5].key, "log_format");
  EXPECT_EQ(o[6].flag, "--metrics-listen");
  EXPECT_EQ(o[6].key, "metrics_listen");
  EXPECT_EQ(o[6].value, "127.0.0.1:9469");
  EXPECT_THAT(Usage(), HasSubstr("--metrics-listen"));
}

TEST(CommandLine, HelpAndVersion) {
  EXPECT_TRUE(Parse({"--help"})->help);
  EXPECT_TRUE(Parse({"-h"})->help);
  EXPECT_TRUE(Parse({"--version"})->version);
  EXPECT_THAT(Usage(), HasSubstr("--check-config"));
}

TEST(CommandLine, Refusals) {
  EXPECT_THAT(std::string(Parse({"--workers"}).status().message()),
              HasSubstr("--workers needs a value"));
  EXPECT_THAT(std::string(Parse({"--frobnicate"}).status().message()),
              HasSubstr("unknown argument '--frobnicate'"));
  EXPECT_THAT(std::string(Parse({"eth0"}).status().message()),
              HasSubstr("unknown argument 'eth0'"));
  EXPECT_THAT(std::string(Parse({"--version=2"}).status().message()),
              HasSubstr("--version takes no value"));
  EXPECT_THAT(std::string(Parse({"--config="}).status().message()), HasSubstr("empty path"));
}

// Values are checked by LoadConfig, with the flag's name (config_test): here they pass as is.
TEST(CommandLine, ValuesAreCheckedLater) {
  absl::StatusOr<CommandLine> cl = Parse({"--workers", "many"});
  ASSERT_TRUE(cl.ok());
  LoadedConfig c = ParseConfigText("[daemon]\ninterfaces = pl0\n", "f", cl->config.overrides);
  ASSERT_EQ(c.errors.size(), 1u);
  EXPECT_EQ(c.errors[0], "--workers: 'many' is not an integer in 1..64");
}

}  // namespace
}  // namespace metaroce::daemon
