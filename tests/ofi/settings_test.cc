// lib/ofi/settings.h: the FI_METAROCE_* parameters: defaults, each one parsed, values out of range
// refused naming the variable, inject_size above eager_size refused; and the embedded engine's
// default interfaces from metaroced.conf's [daemon] section.
#include "lib/ofi/settings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

namespace metaroce::ofi {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::IsSupersetOf;

absl::StatusOr<Settings> ReadFrom(const std::map<std::string, std::string>& vars) {
  return Settings::Read([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(Settings, DefaultsWhenNothingIsSet) {
  absl::StatusOr<Settings> s = ReadFrom({});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->mode, Mode::kAuto);
  EXPECT_EQ(s->socket_path, "");
  EXPECT_THAT(s->interfaces, IsEmpty());
  EXPECT_FALSE(s->udp_port_kind);
  EXPECT_FALSE(s->port_kind_set);
  EXPECT_EQ(s->engine_threads, 1);
  EXPECT_EQ(s->paths, 8);
  EXPECT_EQ(s->eager_size, 8192u);
  EXPECT_EQ(s->inject_size, 4096u);
  EXPECT_EQ(s->chunk_size, 128u * 1024);
  EXPECT_EQ(s->chunks_in_flight, 4u);
  EXPECT_EQ(s->recv_slots, 32u);
  EXPECT_EQ(s->connect_timeout_ms, 5000u);
  EXPECT_TRUE(s->zero_copy);
}

TEST(Settings, ReadsEveryVariable) {
  absl::StatusOr<Settings> s = ReadFrom({
      {"mode", "EMBEDDED"},
      {"socket", "/tmp/x.sock"},
      {"interfaces", " eth0 , eth1,"},
      {"port_kind", "udp"},
      {"engine_threads", "0"},
      {"paths", "16"},
      {"eager_size", "16384"},
      {"inject_size", "64"},
      {"chunk_size", "65536"},
      {"chunks_in_flight", "2"},
      {"recv_slots", "8"},
      {"connect_timeout_ms", "250"},
      {"zero_copy", "0"},
  });
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->mode, Mode::kEmbedded);
  EXPECT_EQ(s->socket_path, "/tmp/x.sock");
  EXPECT_THAT(s->interfaces, ElementsAre("eth0", "eth1"));
  EXPECT_TRUE(s->udp_port_kind);
  EXPECT_TRUE(s->port_kind_set);
  EXPECT_EQ(s->engine_threads, 0);
  EXPECT_EQ(s->paths, 16);
  EXPECT_EQ(s->eager_size, 16384u);
  EXPECT_EQ(s->inject_size, 64u);
  EXPECT_EQ(s->chunk_size, 65536u);
  EXPECT_EQ(s->chunks_in_flight, 2u);
  EXPECT_EQ(s->recv_slots, 8u);
  EXPECT_EQ(s->connect_timeout_ms, 250u);
  EXPECT_FALSE(s->zero_copy);
}

TEST(Settings, ReadsTheOtherModesAndPortKind) {
  EXPECT_EQ(ReadFrom({{"mode", "attached"}})->mode, Mode::kAttached);
  EXPECT_EQ(ReadFrom({{"mode", "auto"}})->mode, Mode::kAuto);
  absl::StatusOr<Settings> s = ReadFrom({{"port_kind", "af_xdp"}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->udp_port_kind);
  EXPECT_TRUE(s->port_kind_set);
}

TEST(Settings, RefusesAnUnknownMode) {
  EXPECT_THAT(ReadFrom({{"mode", "remote"}}).status().message(),
              HasSubstr("FI_METAROCE_MODE=remote"));
}

TEST(Settings, RefusesAnUnknownPortKind) {
  EXPECT_THAT(ReadFrom({{"port_kind", "dpdk"}}).status().message(),
              HasSubstr("FI_METAROCE_PORT_KIND=dpdk"));
}

// Each numeric variable: a value just out of range, and text, are refused naming the variable.
TEST(Settings, RefusesNumbersOutOfRangeNamingTheVariable) {
  const std::map<std::string, std::vector<std::string>> bad = {
      {"engine_threads", {"65", "-1", "two"}},
      {"paths", {"0", "257"}},
      {"eager_size", {"63", "1048577"}},
      {"inject_size", {"1048577", "x"}},
      {"chunk_size", {"4095", "67108865"}},
      {"chunks_in_flight", {"0", "65"}},
      {"recv_slots", {"3", "4097"}},
      {"connect_timeout_ms", {"99", "600001"}},
      {"zero_copy", {"2", "yes"}},
  };
  for (const auto& [name, values] : bad) {
    std::string upper = name;
    for (char& c : upper) c = static_cast<char>(std::toupper(c));
    for (const std::string& v : values) {
      absl::StatusOr<Settings> s = ReadFrom({{name, v}});
      ASSERT_FALSE(s.ok()) << name << "=" << v;
      EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(s.status().message(), HasSubstr("FI_METAROCE_" + upper + "=" + v));
    }
  }
}

TEST(Settings, AcceptsTheRangesBounds) {
  absl::StatusOr<Settings> lo = ReadFrom({{"engine_threads", "0"}, {"paths", "1"},
                                          {"eager_size", "64"}, {"inject_size", "0"},
                                          {"chunk_size", "4096"}, {"chunks_in_flight", "1"},
                                          {"recv_slots", "4"}, {"connect_timeout_ms", "100"}});
  EXPECT_TRUE(lo.ok()) << lo.status();
  absl::StatusOr<Settings> hi = ReadFrom({{"engine_threads", "64"}, {"paths", "256"},
                                          {"eager_size", "1048576"}, {"inject_size", "1048576"},
                                          {"chunk_size", "67108864"}, {"chunks_in_flight", "64"},
                                          {"recv_slots", "4096"},
                                          {"connect_timeout_ms", "600000"}});
  EXPECT_TRUE(hi.ok()) << hi.status();
}

TEST(Settings, RefusesInjectSizeAboveEagerSize) {
  absl::StatusOr<Settings> s = ReadFrom({{"eager_size", "1024"}, {"inject_size", "1025"}});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("FI_METAROCE_INJECT_SIZE=1025"));
  EXPECT_THAT(s.status().message(), HasSubstr("FI_METAROCE_EAGER_SIZE=1024"));
  // The default inject size (4096) against a smaller eager size.
  EXPECT_FALSE(ReadFrom({{"eager_size", "2048"}}).ok());
}

TEST(Settings, ListsTheDocumentedParametersWithHelp) {
  std::vector<std::string> names;
  for (const Settings::Parameter& p : Settings::Parameters()) {
    names.push_back(p.name);
    EXPECT_NE(std::string(p.help), "") << p.name;
  }
  EXPECT_THAT(names, IsSupersetOf({"mode", "socket", "interfaces", "port_kind", "engine_threads",
                                   "paths", "eager_size", "inject_size", "chunk_size",
                                   "chunks_in_flight", "recv_slots", "connect_timeout_ms",
                                   "zero_copy"}));
}

class DaemonConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/ofi_settings_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/metaroced.conf";
  }
  void TearDown() override {
    std::remove(path_.c_str());
    rmdir(dir_.c_str());
  }
  void Write(const std::string& text) { std::ofstream(path_) << text; }
  std::string dir_, path_;
};

TEST_F(DaemonConfig, ReadsInterfacesOfTheDaemonSection) {
  Write("# metaroced\n[limits]\ninterfaces = wrong\n\n[daemon]\nworkers = 2\n"
        "interfaces = a, b\n");
  EXPECT_THAT(InterfacesFromDaemonConfig(path_), ElementsAre("a", "b"));
}

TEST_F(DaemonConfig, NoInterfacesWithoutTheLine) {
  Write("[daemon]\nworkers = 2\n");
  EXPECT_THAT(InterfacesFromDaemonConfig(path_), IsEmpty());
}

TEST_F(DaemonConfig, NoInterfacesWithoutTheFile) {
  EXPECT_THAT(InterfacesFromDaemonConfig(dir_ + "/absent.conf"), IsEmpty());
}

// ---- Offerable: fi_getinfo offers only what fi_domain can open ----

Settings WithMode(Mode m, std::vector<std::string> interfaces = {}) {
  Settings s;
  s.mode = m;
  s.interfaces = std::move(interfaces);
  return s;
}

TEST(Offerable, NoDaemonAndNoInterfacesIsNotOffered) {
  // The provider with no metaroced and no metaroced.conf: fi_info listed it, then fi_domain
  // failed with -FI_ENODEV.
  const absl::Status st = Offerable(WithMode(Mode::kAuto), "/run/x.sock", false, {});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("FI_METAROCE_INTERFACES"));
  EXPECT_THAT(st.message(), HasSubstr("/run/x.sock"));
}

TEST(Offerable, ADaemonSocketOffersAutoAndAttached) {
  EXPECT_TRUE(Offerable(WithMode(Mode::kAuto), "/run/x.sock", true, {}).ok());
  EXPECT_TRUE(Offerable(WithMode(Mode::kAttached), "/run/x.sock", true, {}).ok());
}

TEST(Offerable, AttachedWithoutASocketIsNotOffered) {
  EXPECT_THAT(Offerable(WithMode(Mode::kAttached), "/run/x.sock", false, {"eth0"}).message(),
              HasSubstr("start metaroced"));
}

TEST(Offerable, InterfacesFromTheEnvironmentOrTheConfigOfferEmbedded) {
  EXPECT_TRUE(Offerable(WithMode(Mode::kEmbedded, {"pl0"}), "/run/x.sock", false, {}).ok());
  EXPECT_TRUE(Offerable(WithMode(Mode::kEmbedded), "/run/x.sock", false, {"pl0"}).ok());
  EXPECT_TRUE(Offerable(WithMode(Mode::kAuto), "/run/x.sock", false, {"pl0"}).ok());
  EXPECT_FALSE(Offerable(WithMode(Mode::kEmbedded), "/run/x.sock", true, {}).ok())
      << "embedded needs interfaces, whatever daemon runs";
}

}  // namespace
}  // namespace metaroce::ofi
