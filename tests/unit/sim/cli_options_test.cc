#include "tools/sim/cli_options.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaroce::sim {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<CommandLine> Parse(std::vector<const char*> args) {
  return ParseCommandLine(std::span<const char* const>(args.data(), args.size()));
}

TEST(CliOptions_Parse, MapsFlagsOntoConfig) {
  auto cl = Parse({"--paths=4", "--connections", "2", "--size=64K", "--op=write_imm",
                   "--transport=reorder", "--loss=0.01", "--slow=1:25,2:50",
                   "--blackhole", "0@100-250.5", "--json", "--ordered", "--delay-us=3.5"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  const ScenarioConfig& c = cl->config;
  EXPECT_EQ(c.physical_paths, 4);
  EXPECT_EQ(c.connections, 2u);
  EXPECT_EQ(c.message_bytes, 64u * 1024);
  EXPECT_EQ(c.op, Operation::kWriteImm);
  EXPECT_EQ(c.transport, TransportKind::kReorderBuffer);
  EXPECT_DOUBLE_EQ(c.loss, 0.01);
  ASSERT_EQ(c.slow_paths.size(), 2u);
  EXPECT_EQ(c.slow_paths[1].path, 2);
  EXPECT_DOUBLE_EQ(c.slow_paths[1].rate_gbps, 50);
  ASSERT_EQ(c.blackholes.size(), 1u);
  EXPECT_EQ(c.blackholes[0].window.begin.ns, 100'000);
  EXPECT_EQ(c.blackholes[0].window.end.ns, 250'500);
  EXPECT_EQ(c.delay.count(), 3500);
  EXPECT_TRUE(c.ordered_completion);
  EXPECT_TRUE(cl->json);
}

TEST(CliOptions_Parse, GoBackNHasOneLogicalPath) {
  auto cl = Parse({"--transport=gbn", "--paths=8"});
  ASSERT_TRUE(cl.ok());
  EXPECT_EQ(cl->config.EffectiveLogicalPaths(), 1);
}

TEST(CliOptions_Errors, NameTheFlag) {
  EXPECT_THAT(Parse({"--bogus=1"}).status().message(), HasSubstr("unknown flag --bogus"));
  EXPECT_THAT(Parse({"--paths=x"}).status().message(), HasSubstr("--paths=x"));
  EXPECT_THAT(Parse({"--op=read"}).status().message(), HasSubstr("write, send or write_imm"));
  EXPECT_THAT(Parse({"--messages"}).status().message(), HasSubstr("needs a value"));
  EXPECT_THAT(Parse({"--loss=1.5"}).status().message(), HasSubstr("--loss"));
  EXPECT_THAT(Parse({"--paths=2", "--slow=3:10"}).status().message(), HasSubstr("--slow"));
  EXPECT_THAT(Parse({"--blackhole=0@5-1"}).status().message(), HasSubstr("--blackhole"));
  EXPECT_THAT(Parse({"positional"}).status().message(), HasSubstr("unexpected argument"));
}

TEST(CliOptions_Help, ListsEveryFlag) {
  auto cl = Parse({"--help"});
  ASSERT_TRUE(cl.ok());
  EXPECT_TRUE(cl->help);
  const std::string usage = UsageText();
  for (const char* flag : {"--paths", "--transport", "--blackhole", "--recv-delay-us", "--json"}) {
    EXPECT_THAT(usage, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace metaroce::sim
