#include "daemon/config.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaroce::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

LoadedConfig Parse(absl::string_view text, std::vector<ConfigOverride> overrides = {}) {
  return ParseConfigText(text, "metaroced.conf", overrides);
}

// A file with the one required key, for tests about the others.
std::string WithInterfaces(absl::string_view more = "") {
  return "[daemon]\ninterfaces = pl0\n" + std::string(more);
}

std::string OnlyError(const LoadedConfig& c) {
  EXPECT_EQ(c.errors.size(), 1u) << ::testing::PrintToString(c.errors);
  return c.errors.empty() ? std::string() : c.errors.front();
}

TEST(Config, Defaults) {
  LoadedConfig c = Parse(WithInterfaces());
  ASSERT_TRUE(c.ok()) << ::testing::PrintToString(c.errors);
  const Config& k = c.config;
  EXPECT_EQ(k.path, "metaroced.conf");
  EXPECT_THAT(k.daemon.interfaces, ElementsAre("pl0"));
  EXPECT_THAT(k.daemon.local_ips, IsEmpty());
  EXPECT_EQ(k.daemon.port_kind, PortKindSetting::kAfXdp);
  EXPECT_EQ(k.daemon.udp_port, 4792);
  EXPECT_EQ(k.daemon.control_port, 4793);
  EXPECT_EQ(k.daemon.control_bind, "::");
  EXPECT_EQ(k.daemon.socket, "/run/metaroce/metaroced.sock");
  EXPECT_EQ(k.daemon.socket_group, "");
  EXPECT_EQ(k.daemon.workers, 1);
  EXPECT_THAT(k.daemon.cpus, IsEmpty());
  EXPECT_EQ(k.daemon.log_format, LogFormat::kText);
  EXPECT_EQ(k.daemon.metrics_listen, "");  // off
  EXPECT_EQ(FormatConfigValue(k, "metrics_listen"), "off");
  EXPECT_EQ(k.daemon.observed_event_depth, 0u);  // auto
  EXPECT_EQ(FormatConfigValue(k, "observed_event_depth"), "auto");
  EXPECT_FALSE(k.daemon.pull_rate_gbps.has_value());  // auto
  EXPECT_EQ(FormatConfigValue(k, "pull_rate_gbps"), "auto");
  EXPECT_EQ(k.limits.max_connections, 4096u);
  EXPECT_EQ(k.limits.max_paths, 256);
  EXPECT_EQ(k.limits.max_memory_bytes, uint64_t{1} << 30);
  EXPECT_EQ(k.paths.rotation_holddown_ms, 5u);
  EXPECT_EQ(k.paths.degraded_hold_ms, 50u);
  EXPECT_EQ(k.paths.rotations_per_second, 50);
  EXPECT_EQ(k.paths.rotation_burst, 8u);
}

TEST(Config, EveryKey) {
  LoadedConfig c = Parse(R"(
# a comment
; another
[daemon]
interfaces = pl0, pl1
local_ips = 198.18.0.1,fd00::1
port_kind = af_xdp
udp_port = 5000
control_port = 0
control_bind = 127.0.0.1
socket = /tmp/x/m.sock   # trailing comment
socket_group = root
workers = 2
cpus = 0,2-3
log_format = json
metrics_listen = 127.0.0.1:9469
observed_event_depth = 5000
pull_rate_gbps = 12.5

[limits]
max_connections = 10
max_paths = 16
max_memory = 64M

[paths]
rotation_holddown_ms = 7
degraded_hold_ms = 0
rotations_per_second = 2.5
rotation_burst = 3
)");
  ASSERT_TRUE(c.ok()) << ::testing::PrintToString(c.errors);
  const Config& k = c.config;
  EXPECT_THAT(k.daemon.interfaces, ElementsAre("pl0", "pl1"));
  EXPECT_THAT(k.daemon.local_ips, ElementsAre("198.18.0.1", "fd00::1"));
  EXPECT_EQ(k.daemon.udp_port, 5000);
  EXPECT_EQ(k.daemon.control_port, 0);
  EXPECT_EQ(k.daemon.control_bind, "127.0.0.1");
  EXPECT_EQ(k.daemon.socket, "/tmp/x/m.sock");
  EXPECT_EQ(k.daemon.socket_group, "root");
  EXPECT_EQ(k.daemon.workers, 2);
  EXPECT_THAT(k.daemon.cpus, ElementsAre(0, 2, 3));
  EXPECT_EQ(k.daemon.log_format, LogFormat::kJson);
  EXPECT_EQ(k.daemon.metrics_listen, "127.0.0.1:9469");
  EXPECT_EQ(k.daemon.observed_event_depth, 5000u);
  EXPECT_EQ(ObservedEventDepth(k), 5000u);  // as given: the engine rounds it up
  EXPECT_EQ(k.daemon.pull_rate_gbps, 12.5);
  EXPECT_EQ(k.limits.max_connections, 10u);
  EXPECT_EQ(k.limits.max_paths, 16);
  EXPECT_EQ(k.limits.max_memory_bytes, uint64_t{64} << 20);
  EXPECT_EQ(k.paths.rotation_holddown_ms, 7u);
  EXPECT_EQ(k.paths.degraded_hold_ms, 0u);
  EXPECT_EQ(k.paths.rotations_per_second, 2.5);
  EXPECT_EQ(k.paths.rotation_burst, 3u);
}

TEST(Config, UdpPortKindAndQuotedValues) {
  LoadedConfig c = Parse("[daemon]\ninterfaces = \"pl0\"\nport_kind = udp\r\n");
  ASSERT_TRUE(c.ok()) << ::testing::PrintToString(c.errors);
  EXPECT_EQ(c.config.daemon.port_kind, PortKindSetting::kUdp);
  EXPECT_THAT(c.config.daemon.interfaces, ElementsAre("pl0"));
}

TEST(Config, EmptyOptionalValuesMeanNone) {
  LoadedConfig c = Parse(WithInterfaces("local_ips =\nsocket_group =\ncpus =\n"));
  ASSERT_TRUE(c.ok()) << ::testing::PrintToString(c.errors);
  EXPECT_THAT(c.config.daemon.local_ips, IsEmpty());
}

TEST(Config, UnknownKeyNamesFileLineAndSection) {
  LoadedConfig c = Parse(WithInterfaces("\n\n\n\nworkrs = 2\n"));
  EXPECT_EQ(OnlyError(c),
            "metaroced.conf:7: unknown key 'workrs' in [daemon] (did you mean 'workers'?)");
}

TEST(Config, UnknownKeyWithoutNearMiss) {
  LoadedConfig c = Parse(WithInterfaces("colour = blue\n"));
  EXPECT_EQ(OnlyError(c), "metaroced.conf:3: unknown key 'colour' in [daemon]");
}

TEST(Config, KeyInTheWrongSection) {
  LoadedConfig c = Parse(WithInterfaces("max_paths = 8\n"));
  EXPECT_EQ(OnlyError(c),
            "metaroced.conf:3: unknown key 'max_paths' in [daemon]: it belongs in [limits]");
}

TEST(Config, UnknownSectionIsReportedOnceNotItsKeys) {
  LoadedConfig c = Parse(WithInterfaces("[tuning]\na = 1\nb = 2\n[limits]\nmax_paths = 8\n"));
  EXPECT_EQ(OnlyError(c),
            "metaroced.conf:3: unknown section [tuning]: expected [daemon], [limits] or [paths]");
}

TEST(Config, SyntaxErrors) {
  LoadedConfig c = Parse("workers = 1\n[daemon\ninterfaces = pl0\n[daemon]\njust words\n");
  EXPECT_THAT(c.errors,
              ElementsAre("metaroced.conf:1: key 'workers' before any section: put it under "
                          "[daemon], [limits] or [paths]",
                          "metaroced.conf:2: malformed section header '[daemon': expected "
                          "[daemon], [limits] or [paths]",
                          "metaroced.conf:5: expected 'key = value', got 'just words'",
                          // interfaces (line 3) sat under the malformed header
                          "no interfaces: set interfaces = IF[,IF...] in [daemon] of "
                          "metaroced.conf, or give --interface IF[,IF...] (one per plane)"));
}

TEST(Config, RepeatedKey) {
  LoadedConfig c = Parse(WithInterfaces("workers = 1\nworkers = 2\n"));
  EXPECT_EQ(OnlyError(c), "metaroced.conf:4: workers set again (first at line 3)");
}

TEST(Config, EmptyRequiredValue) {
  LoadedConfig c = Parse(WithInterfaces("udp_port =\n"));
  EXPECT_EQ(OnlyError(c),
            "metaroced.conf:3: udp_port: empty value (remove the line for the default)");
}

// Every bad value: key, line and reason.
TEST(Config, BadValues) {
  struct Case {
    std::string line;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"udp_port = 70000", "udp_port: 70000 is not in 1..65535"},
      {"udp_port = 0", "udp_port: 0 is not in 1..65535"},
      {"udp_port = http", "udp_port: 'http' is not an integer in 1..65535"},
      {"control_port = 65536", "control_port: 65536 is not in 0..65535"},
      {"control_bind = any",
       "control_bind: 'any' is not an IP address (:: for every IPv4 and IPv6 address, 0.0.0.0 "
       "for every IPv4 one)"},
      {"port_kind = dpdk", "port_kind: 'dpdk' is not one of af_xdp, udp"},
      {"local_ips = 198.18.0.300", "local_ips: '198.18.0.300' is not an IP address"},
      {"socket = run/m.sock", "socket: 'run/m.sock' is not an absolute path"},
      {"socket = /" + std::string(120, 'x'),
       "socket: '/" + std::string(120, 'x') +
           "' is longer than 107 bytes (the limit of a Unix socket path)"},
      {"socket_group = no-such-group-metaroce",
       "socket_group: no group 'no-such-group-metaroce': create it (groupadd "
       "no-such-group-metaroce) or remove socket_group"},
      {"workers = 0", "workers: 0 is not in 1..64"},
      {"workers = 65", "workers: 65 is not in 1..64"},
      {"cpus = 0,,1", "cpus: empty entry in '0,,1'"},
      {"cpus = 3-1", "cpus: range '3-1' runs backwards"},
      {"cpus = a", "cpus: 'a' is not an integer in 0..4095"},
      {"log_format = xml", "log_format: 'xml' is not one of text, json"},
      {"observed_event_depth = 0",
       "observed_event_depth: 0 is not in 1..16777216 (events per worker), or auto"},
      {"observed_event_depth = 16777217",
       "observed_event_depth: 16777217 is not in 1..16777216 (events per worker), or auto"},
      {"observed_event_depth = big",
       "observed_event_depth: 'big' is not an integer in 1..16777216 (events per worker), or "
       "auto"},
      {"pull_rate_gbps = fast",
       "pull_rate_gbps: 'fast' is not a rate in Gb/s in 0.01..100000 (0: no pulls), or auto"},
      {"pull_rate_gbps = -1",
       "pull_rate_gbps: '-1' is not a rate in Gb/s in 0.01..100000 (0: no pulls), or auto"},
      {"pull_rate_gbps = 0.001",
       "pull_rate_gbps: '0.001' is not a rate in Gb/s in 0.01..100000 (0: no pulls), or auto"},
      {"pull_rate_gbps = 100001",
       "pull_rate_gbps: '100001' is not a rate in Gb/s in 0.01..100000 (0: no pulls), or auto"},
      {"pull_rate_gbps = nan",
       "pull_rate_gbps: 'nan' is not a rate in Gb/s in 0.01..100000 (0: no pulls), or auto"},
      {"pull_rate_gbps = inf",
       "pull_rate_gbps: 'inf' is not a rate in Gb/s in 0.01..100000 (0: no pulls), or auto"},
      {"pull_rate_gbps = 100 Gb/s",
       "pull_rate_gbps: '100 Gb/s' is not a rate in Gb/s in 0.01..100000 (0: no pulls), or "
       "auto"},
      {"metrics_listen = 9469",
       "metrics_listen: '9469' is not IP:PORT (e.g. 127.0.0.1:9469 or [::1]:9469; off: no "
       "listener)"},
      {"metrics_listen = localhost:9469",
       "metrics_listen: 'localhost' is not an IPv4 address (a listener needs an address, not a "
       "name)"},
      {"metrics_listen = 127.0.0.1:0", "metrics_listen: port of '127.0.0.1:0': 0 is not in 1..65535"},
      {"metrics_listen = 127.0.0.1:", "metrics_listen: port of '127.0.0.1:': '' is not an integer "
                                      "in 1..65535"},
      {"metrics_listen = ::1:9469",
       "metrics_listen: '::1:9469': write an IPv6 address in brackets, e.g. [::1]:9469"},
      {"metrics_listen = [::1]9469",
       "metrics_listen: '[::1]9469' is not IP:PORT (e.g. 127.0.0.1:9469 or [::1]:9469; off: no "
       "listener)"},
      {"metrics_listen = [127.0.0.1]:9469",
       "metrics_listen: '127.0.0.1' is not an IPv6 address (a listener needs an address, not a "
       "name)"},
  };
  for (const Case& k : cases) {
    LoadedConfig c = Parse("[daemon]\ninterfaces = pl0\n" + k.line + "\n");
    EXPECT_EQ(OnlyError(c), "metaroced.conf:3: " + k.error) << k.line;
  }
  const std::vector<Case> interfaces = {
      {"interfaces = pl0,pl0", "interfaces: pl0 appears twice"},
      {"interfaces = a/b", "interfaces: 'a/b' is not an interface name"},
      {"interfaces = abcdefghijklmnop", "interfaces: 'abcdefghijklmnop' is longer than 15 characters"},
      {"interfaces = pl0,", "interfaces: empty entry in 'pl0,'"},
  };
  for (const Case& k : interfaces) {
    LoadedConfig c = Parse("[daemon]\n" + k.line + "\n");
    ASSERT_FALSE(c.errors.empty()) << k.line;
    EXPECT_EQ(c.errors.front(), "metaroced.conf:2: " + k.error) << k.line;
  }
  const std::vector<Case> limits = {
      {"max_connections = 0", "max_connections: 0 is not in 1..1048576"},
      {"max_paths = 257", "max_paths: 257 is not in 1..256"},
      {"max_memory = lots", "max_memory: 'lots' is not a byte count (e.g. 1G; K/M/G suffixes)"},
      {"max_memory = 1K", "max_memory: 1K is below 1M"},
  };
  for (const Case& k : limits) {
    LoadedConfig c = Parse(WithInterfaces("[limits]\n" + k.line + "\n"));
    EXPECT_EQ(OnlyError(c), "metaroced.conf:4: " + k.error) << k.line;
  }
  const std::vector<Case> paths = {
      {"rotation_holddown_ms = 60001", "rotation_holddown_ms: 60001 is not in 0..60000"},
      {"degraded_hold_ms = -1", "degraded_hold_ms: '-1' is not an integer in 0..60000"},
      {"rotations_per_second = 0", "rotations_per_second: '0' is not a number in (0, 1000000]"},
      {"rotations_per_second = nan", "rotations_per_second: 'nan' is not a number in (0, 1000000]"},
      {"rotation_burst = 0", "rotation_burst: 0 is not in 1..1024"},
  };
  for (const Case& k : paths) {
    LoadedConfig c = Parse(WithInterfaces("[paths]\n" + k.line + "\n"));
    EXPECT_EQ(OnlyError(c), "metaroced.conf:4: " + k.error) << k.line;
  }
}

TEST(Config, MetricsListen) {
  for (const std::string v : {"off", "", "\"off\""}) {
    LoadedConfig c = Parse(WithInterfaces("metrics_listen = " + v + "\n"));
    ASSERT_TRUE(c.ok()) << v << ": " << ::testing::PrintToString(c.errors);
    EXPECT_EQ(c.config.daemon.metrics_listen, "") << v;
  }
  LoadedConfig v6 = Parse(WithInterfaces("metrics_listen = [::1]:9469\n"));
  ASSERT_TRUE(v6.ok()) << ::testing::PrintToString(v6.errors);
  EXPECT_EQ(v6.config.daemon.metrics_listen, "[::1]:9469");
  // The flag overrides the file, `off` included.
  LoadedConfig flag = Parse(WithInterfaces("metrics_listen = 127.0.0.1:9469\n"),
                            {{"--metrics-listen", "metrics_listen", "off"}});
  ASSERT_TRUE(flag.ok());
  EXPECT_EQ(flag.config.daemon.metrics_listen, "");
  // A restart is needed to move the listener.
  Config a = Parse(WithInterfaces()).config;
  Config b = Parse(WithInterfaces("metrics_listen = 127.0.0.1:9469\n")).config;
  std::vector<ConfigChange> changes = DiffConfig(a, b);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].key, "metrics_listen");
  EXPECT_EQ(changes[0].from, "off");
  EXPECT_EQ(changes[0].to, "127.0.0.1:9469");
  EXPECT_FALSE(changes[0].reloadable);
}

TEST(Config, ListenAddresses) {
  absl::StatusOr<ListenAddress> a = ParseListenAddress("127.0.0.1:9469");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->ip, "127.0.0.1");
  EXPECT_EQ(a->port, 9469);
  EXPECT_FALSE(a->v6);
  EXPECT_TRUE(IsLoopback(*a));
  a = ParseListenAddress("[fd00::1]:80");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->ip, "fd00::1");
  EXPECT_TRUE(a->v6);
  EXPECT_FALSE(IsLoopback(*a));
  EXPECT_TRUE(IsLoopback(*ParseListenAddress("[::1]:1")));
  EXPECT_TRUE(IsLoopback(*ParseListenAddress("127.8.9.10:1")));
  EXPECT_FALSE(IsLoopback(*ParseListenAddress("0.0.0.0:1")));
  EXPECT_FALSE(ParseListenAddress("127.0.0.1:0").ok());
  EXPECT_EQ(ParseListenAddress("127.0.0.1:0", /*allow_port_zero=*/true)->port, 0);
  EXPECT_FALSE(ParseListenAddress("[::1]").ok());
  EXPECT_FALSE(ParseListenAddress("").ok());
}

TEST(Config, EveryErrorIsReportedNotOnlyTheFirst) {
  LoadedConfig c = Parse(WithInterfaces("udp_port = 0\nworkers = 0\n[limits]\nmax_paths = 0\n"));
  EXPECT_EQ(c.errors.size(), 3u);
}

TEST(Config, InterfacesAreRequired) {
  LoadedConfig c = Parse("[daemon]\nworkers = 1\n");
  EXPECT_EQ(OnlyError(c),
            "no interfaces: set interfaces = IF[,IF...] in [daemon] of metaroced.conf, or give "
            "--interface IF[,IF...] (one per plane)");
}

TEST(Config, OneLocalIpPerInterface) {
  LoadedConfig c = Parse("[daemon]\ninterfaces = pl0,pl1\nlocal_ips = 198.18.0.1\n");
  EXPECT_EQ(OnlyError(c),
            "metaroced.conf:3: local_ips: 1 address(es) for 2 interface(s): give one per "
            "interface, in the same order");
}

TEST(Config, UdpPortsRunOneWorker) {
  LoadedConfig c = Parse(WithInterfaces("port_kind = udp\nworkers = 2\n"));
  EXPECT_EQ(OnlyError(c),
            "metaroced.conf:4: workers: port_kind udp runs one worker (every port binds "
            "udp_port): set workers = 1");
}

TEST(Config, OverridesWinOverTheFile) {
  LoadedConfig c = Parse(WithInterfaces("workers = 2\nlog_format = json\n"),
                         {{"--interface", "interfaces", "eth1,eth2"},
                          {"--workers", "workers", "4"},
                          {"--socket", "socket", "/tmp/t.sock"}});
  ASSERT_TRUE(c.ok()) << ::testing::PrintToString(c.errors);
  EXPECT_THAT(c.config.daemon.interfaces, ElementsAre("eth1", "eth2"));
  EXPECT_EQ(c.config.daemon.workers, 4);
  EXPECT_EQ(c.config.daemon.socket, "/tmp/t.sock");
  EXPECT_EQ(c.config.daemon.log_format, LogFormat::kJson);  // untouched by the flags
}

TEST(Config, BadOverrideNamesTheFlag) {
  LoadedConfig c = Parse(WithInterfaces(), {{"--workers", "workers", "0"}});
  EXPECT_EQ(OnlyError(c), "--workers: 0 is not in 1..64");
}

TEST(Config, OverrideSuppliesTheInterfaces) {
  LoadedConfig c = Parse("", {{"--interface", "interfaces", "pl0"}});
  EXPECT_TRUE(c.ok());
}

TEST(Config, LocalIpMismatchNamesTheFlag) {
  LoadedConfig c = Parse(WithInterfaces(), {{"--local-ip", "local_ips", "1.2.3.4,1.2.3.5"}});
  EXPECT_EQ(OnlyError(c),
            "--local-ip: local_ips: 2 address(es) for 1 interface(s): give one per interface, "
            "in the same order");
}

class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/metaroced_config_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    unlink((dir_ + "/metaroced.conf").c_str());
    rmdir(dir_.c_str());
  }
  std::string Write(absl::string_view text) {
    const std::string path = dir_ + "/metaroced.conf";
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
};

TEST_F(ConfigFile, ReadsTheFileAndNamesItInErrors) {
  const std::string path = Write("[daemon]\ninterfaces = pl0\nworkers = x\n");
  LoadedConfig c = LoadConfig({.path = path, .path_required = true});
  EXPECT_EQ(OnlyError(c), path + ":3: workers: 'x' is not an integer in 1..64");
}

TEST_F(ConfigFile, MissingDefaultFileIsFine) {
  LoadedConfig c = LoadConfig({.path = dir_ + "/absent.conf",
                               .path_required = false,
                               .overrides = {{"--interface", "interfaces", "pl0"}}});
  ASSERT_TRUE(c.ok()) << ::testing::PrintToString(c.errors);
  EXPECT_EQ(c.config.path, "");
  EXPECT_EQ(c.config.daemon.workers, 1);
}

TEST_F(ConfigFile, MissingDefaultFileWithoutInterfaces) {
  LoadedConfig c = LoadConfig({.path = dir_ + "/absent.conf", .path_required = false});
  EXPECT_THAT(OnlyError(c), HasSubstr("no interfaces: give --interface IF[,IF...]"));
}

TEST_F(ConfigFile, MissingGivenFileIsAnError) {
  LoadedConfig c = LoadConfig({.path = dir_ + "/absent.conf", .path_required = true});
  EXPECT_EQ(OnlyError(c),
            dir_ + "/absent.conf: cannot read: No such file or directory (check --config)");
}

TEST_F(ConfigFile, TheInstalledExampleIsValidOnceInterfacesAreGiven) {
  const std::string example = std::string(METAROCE_SOURCE_ROOT) + "/daemon/metaroced.conf";
  LoadedConfig bare = LoadConfig({.path = example, .path_required = true});
  EXPECT_THAT(OnlyError(bare), HasSubstr("no interfaces"));
  LoadedConfig c = LoadConfig({.path = example,
                               .path_required = true,
                               .overrides = {{"--interface", "interfaces", "pl0"}}});
  EXPECT_TRUE(c.ok()) << ::testing::PrintToString(c.errors);
  // Every key is documented in it (commented out, with its default).
  std::ifstream in(example);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const ConfigKeyInfo& k : ConfigKeys()) {
    EXPECT_THAT(text, HasSubstr("#" + std::string(k.key) + " =")) << k.key;
  }
}

// `auto` sizes the observer rings for every path of max_connections connections of 8 paths to
// change 4 times within one tick (config.h): 131,072 events for the default 4,096 connections,
// where the engine's own default, 1,024, is 128 times too few.
// The depth the paths really held need, by the same rule: `auto`'s 8 paths a connection is an
// assumption the daemon checks against it (daemon.show observed_event_depth_needed).
TEST(Config, ObservedEventDepthForThePathsHeld) {
  EXPECT_EQ(ObservedEventDepthForPaths(4096 * 8), 131072u);   // what auto assumes
  EXPECT_EQ(ObservedEventDepthForPaths(4096 * 16), 262144u);  // twice the paths, twice the ring
  EXPECT_EQ(ObservedEventDepthForPaths(3000 * 16), 262144u);  // 192,000 rounded up
  EXPECT_EQ(ObservedEventDepthForPaths(0), kMinAutoObservedEventDepth);
  EXPECT_EQ(ObservedEventDepthForPaths(uint64_t{1} << 40), kMaxObservedEventDepth);
  Config c;
  c.limits.max_connections = 3000;
  EXPECT_EQ(ObservedEventDepth(c), ObservedEventDepthForPaths(3000 * 8));
}

TEST(Config, AutoObservedEventDepthFollowsMaxConnections) {
  Config c;
  EXPECT_EQ(ObservedEventDepth(c), 131072u);
  c.limits.max_connections = 4000;
  EXPECT_EQ(ObservedEventDepth(c), 131072u);  // 128,000 rounded up to a power of two
  c.limits.max_connections = 1;
  EXPECT_EQ(ObservedEventDepth(c), kMinAutoObservedEventDepth);
  c.limits.max_connections = 1u << 20;
  EXPECT_EQ(ObservedEventDepth(c), kMaxObservedEventDepth);
  c.daemon.observed_event_depth = 64;
  EXPECT_EQ(ObservedEventDepth(c), 64u);
  LoadedConfig a = Parse(WithInterfaces("observed_event_depth = auto\n"));
  ASSERT_TRUE(a.ok()) << ::testing::PrintToString(a.errors);
  EXPECT_EQ(a.config.daemon.observed_event_depth, 0u);
}

// pull_rate_gbps: auto (the interfaces' speeds, read at start: daemon.h), a rate in Gb/s, or 0
// for no pulls; each written back as read.
TEST(Config, PullRateIsAutoARateOrZero) {
  for (const char* value : {"auto", "100", "0", "400", "0.01", "100000", "2.5"}) {
    LoadedConfig c = Parse(WithInterfaces(absl::StrCat("pull_rate_gbps = ", value, "\n")));
    ASSERT_TRUE(c.ok()) << value << ": " << ::testing::PrintToString(c.errors);
    EXPECT_EQ(FormatConfigValue(c.config, "pull_rate_gbps"), value);
  }
  EXPECT_FALSE(Parse(WithInterfaces("pull_rate_gbps = auto\n")).config.daemon.pull_rate_gbps);
  EXPECT_EQ(Parse(WithInterfaces("pull_rate_gbps = 100\n")).config.daemon.pull_rate_gbps, 100);
  EXPECT_EQ(Parse(WithInterfaces("pull_rate_gbps = 0\n")).config.daemon.pull_rate_gbps, 0);
  EXPECT_EQ(FormatConfigValue(Parse(WithInterfaces("pull_rate_gbps = -0\n")).config,
                              "pull_rate_gbps"),
            "0");
  // The error names the file, the line and the key.
  EXPECT_EQ(OnlyError(Parse(WithInterfaces("pull_rate_gbps = 1e9\n"))),
            "metaroced.conf:3: pull_rate_gbps: '1e9' is not a rate in Gb/s in 0.01..100000 (0: "
            "no pulls), or auto");
}

// ---- reload ----

TEST(ConfigReload, DiffListsChangedKeysAndWhichAreReloadable) {
  Config a = Parse(WithInterfaces("workers = 1\n[limits]\nmax_connections = 10\n")).config;
  Config b = Parse("[daemon]\ninterfaces = pl0,pl1\nworkers = 1\nlog_format = json\n"
                   "[limits]\nmax_connections = 20\n[paths]\nrotation_burst = 4\n")
                 .config;
  std::vector<ConfigChange> changes = DiffConfig(a, b);
  ASSERT_EQ(changes.size(), 4u);
  EXPECT_EQ(changes[0].key, "interfaces");
  EXPECT_EQ(changes[0].from, "pl0");
  EXPECT_EQ(changes[0].to, "pl0,pl1");
  EXPECT_FALSE(changes[0].reloadable);
  EXPECT_EQ(changes[1].key, "log_format");
  EXPECT_TRUE(changes[1].reloadable);
  EXPECT_EQ(changes[2].key, "max_connections");
  EXPECT_EQ(changes[2].from, "10");
  EXPECT_EQ(changes[2].to, "20");
  EXPECT_TRUE(changes[2].reloadable);
  EXPECT_EQ(changes[3].key, "rotation_burst");
  EXPECT_TRUE(changes[3].reloadable);
  EXPECT_TRUE(DiffConfig(a, a).empty());
}

TEST(ConfigReload, ReloadableKeysAreLimitsPathsAndLogFormat) {
  std::set<std::string> reloadable;
  for (const ConfigKeyInfo& k : ConfigKeys()) {
    if (k.reloadable) reloadable.insert(std::string(k.key));
    EXPECT_EQ(k.reloadable, k.section != "daemon" || k.key == "log_format") << k.key;
  }
  EXPECT_EQ(reloadable.size(), 8u);
}

// ApplyReloadable takes exactly the keys marked reloadable: a config that differs in every key
// keeps the running value of each non-reloadable one.
TEST(ConfigReload, ApplyReloadableTakesExactlyTheReloadableKeys) {
  Config running = Parse(WithInterfaces()).config;
  Config next = Parse(R"([daemon]
interfaces = eth9
local_ips = 10.0.0.1
port_kind = udp
udp_port = 1
control_port = 2
control_bind = 127.0.0.1
socket = /tmp/other.sock
socket_group = root
workers = 1
cpus = 1
log_format = json
metrics_listen = 127.0.0.1:9469
observed_event_depth = 2048
receive_budget_bytes = 262144
pull_rate_gbps = 100
[limits]
max_connections = 1
max_paths = 1
max_memory = 2M
[paths]
rotation_holddown_ms = 1
degraded_hold_ms = 1
rotations_per_second = 1
rotation_burst = 1
)").config;
  next.daemon.workers = 3;  // differs too (udp allows only 1 in a file)
  const Config merged = ApplyReloadable(running, next);
  for (const ConfigKeyInfo& k : ConfigKeys()) {
    const std::string expected = FormatConfigValue(k.reloadable ? next : running, k.key);
    EXPECT_EQ(FormatConfigValue(merged, k.key), expected) << k.key;
    EXPECT_NE(FormatConfigValue(running, k.key), FormatConfigValue(next, k.key))
        << k.key << ": make the test's `next` differ in this key";
  }
}

}  // namespace
}  // namespace metaroce::daemon
