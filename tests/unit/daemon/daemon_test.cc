// The pure pieces of daemon/daemon.cc (the daemon itself runs in the privileged suite,
// tests/daemon/).
#include "daemon/daemon.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaroce::daemon {
namespace {

using ::testing::HasSubstr;

io::PortFeatures AfXdp(bool zero_copy, bool need_wakeup, bool busy_poll, bool multi_buffer) {
  return {.af_xdp = true,
          .zero_copy = zero_copy,
          .need_wakeup = need_wakeup,
          .busy_poll = busy_poll,
          .multi_buffer = multi_buffer};
}

TEST(Features, CopyModeVethPort) {
  io::PortFeatures f = FeaturesOfPorts({AfXdp(false, true, false, false)});
  EXPECT_FALSE(f.zero_copy);
  EXPECT_TRUE(f.need_wakeup);
  EXPECT_FALSE(f.busy_poll);
  EXPECT_FALSE(f.multi_buffer);
}

TEST(Features, TrueOnlyWhenEveryPortHasIt) {
  io::PortFeatures f =
      FeaturesOfPorts({AfXdp(true, true, true, true), AfXdp(true, true, false, false)});
  EXPECT_TRUE(f.zero_copy);
  EXPECT_TRUE(f.need_wakeup);
  EXPECT_FALSE(f.busy_poll);
  EXPECT_FALSE(f.multi_buffer) << "one port without it";
  f = FeaturesOfPorts({AfXdp(false, true, true, true), AfXdp(true, false, true, true)});
  EXPECT_FALSE(f.zero_copy);
  EXPECT_FALSE(f.need_wakeup);
  EXPECT_TRUE(f.busy_poll);
  EXPECT_TRUE(f.multi_buffer);
}

TEST(Features, KernelUdpPortsHaveNone) {
  io::PortFeatures f = FeaturesOfPorts({io::PortFeatures{}, io::PortFeatures{}});
  EXPECT_FALSE(f.zero_copy);
  EXPECT_FALSE(f.need_wakeup);
  EXPECT_FALSE(f.busy_poll);
  EXPECT_FALSE(f.multi_buffer);
  EXPECT_FALSE(FeaturesOfPorts({}).need_wakeup);
  EXPECT_FALSE(f.af_xdp);
}

// Ports other than AF_XDP have none of the features and do not count against the AF_XDP ones.
TEST(Features, PortsOfOtherKindsDoNotCount) {
  io::PortFeatures f = FeaturesOfPorts({AfXdp(true, true, true, true), io::PortFeatures{}});
  EXPECT_TRUE(f.af_xdp);
  EXPECT_TRUE(f.zero_copy);
  EXPECT_TRUE(f.need_wakeup);
  EXPECT_TRUE(f.busy_poll);
  EXPECT_TRUE(f.multi_buffer);
}

TEST(ConfigToManagers, PathPolicyAndLimits) {
  PathSettings s;
  s.rotation_holddown_ms = 7;
  s.degraded_hold_ms = 60;
  s.rotations_per_second = 2.5;
  s.rotation_burst = 3;
  PathPolicy p = PathPolicyFrom(s);
  EXPECT_EQ(p.rotation_holddown, absl::Milliseconds(7));
  EXPECT_EQ(p.degraded_hold, absl::Milliseconds(60));
  EXPECT_EQ(p.rotations_per_second, 2.5);
  EXPECT_EQ(p.rotation_burst, 3u);
  LimitSettings l;
  l.max_connections = 9;
  l.max_paths = 4;
  ConnectionLimits c = ConnectionLimitsFrom(l);
  EXPECT_EQ(c.max_connections, 9u);
  EXPECT_EQ(c.max_paths, 4);
}

TEST(ConfigToManagers, DefaultsMatchTheManagersOwn) {
  PathPolicy from_config = PathPolicyFrom(PathSettings());
  PathPolicy defaults;
  EXPECT_EQ(from_config.rotation_holddown, defaults.rotation_holddown);
  EXPECT_EQ(from_config.degraded_hold, defaults.degraded_hold);
  EXPECT_EQ(from_config.rotations_per_second, defaults.rotations_per_second);
  EXPECT_EQ(from_config.rotation_burst, defaults.rotation_burst);
  ConnectionLimits limits = ConnectionLimitsFrom(LimitSettings());
  EXPECT_EQ(limits.max_connections, ConnectionLimits().max_connections);
  EXPECT_EQ(limits.max_paths, ConnectionLimits().max_paths);
}

// The daemon's Context gets observer rings sized from the config (config.h, `auto`), not the
// engine's default of 1,024 events, which a failure under 4,000 connections overflows.
TEST(ConfigToManagers, ContextObserverRingsFollowTheConfig) {
  Config c;
  c.daemon.interfaces = {"pl0"};
  EXPECT_EQ(ContextOptionsFrom(c, PullRate{}).observed_event_depth, ObservedEventDepth(c));
  EXPECT_GT(ContextOptionsFrom(c, PullRate{}).observed_event_depth, api::ContextOptions().observed_event_depth);
  c.daemon.observed_event_depth = 3000;
  EXPECT_EQ(ContextOptionsFrom(c, PullRate{}).observed_event_depth, 3000u);
}

// The host's receive budget (docs/spec/congestion.md §5.2) is on by default and reaches the
// Context as configured; 0 turns the hints off.
TEST(ConfigToManagers, ContextReceiveBudgetFollowsTheConfig) {
  Config c;
  c.daemon.interfaces = {"pl0"};
  EXPECT_EQ(ContextOptionsFrom(c, PullRate{}).receive_budget_bytes, uint64_t{1} << 20);
  c.daemon.receive_budget_bytes = 0;
  EXPECT_EQ(ContextOptionsFrom(c, PullRate{}).receive_budget_bytes, 0u);
  c.daemon.receive_budget_bytes = 262144;
  EXPECT_EQ(ContextOptionsFrom(c, PullRate{}).receive_budget_bytes, 262144u);
}

// ---- the pull pacer's rate ([daemon] pull_rate_gbps) ----

// Speeds as /sys/class/net would give them, by interface name.
LinkSpeedReader Speeds(std::map<std::string, absl::StatusOr<int64_t>> speeds) {
  return [speeds = std::move(speeds)](const std::string& ifname) -> absl::StatusOr<int64_t> {
    auto it = speeds.find(ifname);
    if (it == speeds.end()) return absl::NotFoundError(absl::StrCat("no ", ifname));
    return it->second;
  };
}

LinkSpeedReader NoReads() {
  return [](const std::string& ifname) -> absl::StatusOr<int64_t> {
    ADD_FAILURE() << "a configured rate read the speed of " << ifname;
    return absl::InternalError("unexpected");
  };
}

// `auto` (the default): the speed of the interface served, in Gb/s; several planes add up.
TEST(PullRate, AutoIsTheInterfacesSpeedsAddedUp) {
  DaemonSettings d;
  ASSERT_FALSE(d.pull_rate_gbps.has_value());  // auto
  d.interfaces = {"eth0"};
  PullRate r = ResolvePullRate(d, Speeds({{"eth0", 100000}}));
  EXPECT_EQ(r.gbps, 100);
  EXPECT_EQ(r.source, "auto: eth0 100000 Mb/s");
  d.interfaces = {"pl0", "pl1"};
  r = ResolvePullRate(d, Speeds({{"pl0", 200000}, {"pl1", 200000}}));
  EXPECT_EQ(r.gbps, 400);
  EXPECT_EQ(r.source, "auto: pl0 200000 Mb/s + pl1 200000 Mb/s");
  r = ResolvePullRate(d, Speeds({{"pl0", 25000}, {"pl1", 10000}}));
  EXPECT_EQ(r.gbps, 35);
}

// An interface without a speed (veth: -1 in some kernels; lo: EINVAL on read; a link down: -1)
// turns pulls off, saying which interface and why: a rate made of the other planes alone would
// be wrong.
TEST(PullRate, AutoWithoutASpeedTurnsPullsOffAndSaysWhy) {
  DaemonSettings d;
  d.interfaces = {"veth0"};
  PullRate r = ResolvePullRate(d, Speeds({{"veth0", -1}}));
  EXPECT_EQ(r.gbps, 0);
  EXPECT_THAT(r.source, HasSubstr("veth0 reports speed -1"));
  EXPECT_THAT(r.source, HasSubstr("pulls off"));
  d.interfaces = {"pl0", "lo"};
  r = ResolvePullRate(
      d, Speeds({{"pl0", 100000},
                 {"lo", absl::InvalidArgumentError("cannot read /sys/class/net/lo/speed")}}));
  EXPECT_EQ(r.gbps, 0);
  EXPECT_THAT(r.source, HasSubstr("lo: cannot read /sys/class/net/lo/speed"));
  EXPECT_THAT(r.source, HasSubstr("pulls off"));
  r = ResolvePullRate(d, Speeds({{"pl0", 100000}, {"lo", 0}}));
  EXPECT_EQ(r.gbps, 0);
}

// A number in the config is the rate, whatever the interfaces say; 0 turns pulls off.
TEST(PullRate, ANumberIsTakenAsItIs) {
  DaemonSettings d;
  d.interfaces = {"eth0"};
  d.pull_rate_gbps = 40;
  EXPECT_EQ(ResolvePullRate(d, NoReads()).gbps, 40);
  EXPECT_EQ(ResolvePullRate(d, NoReads()).source, "config");
  d.pull_rate_gbps = 0;
  EXPECT_EQ(ResolvePullRate(d, NoReads()).gbps, 0);
}

TEST(ConfigToManagers, ContextPullRateIsTheResolvedOne) {
  Config c;
  c.daemon.interfaces = {"pl0", "pl1"};
  EXPECT_EQ(ContextOptionsFrom(c, PullRate{}).pull_rate_gbps, 0);
  const PullRate auto_rate = ResolvePullRate(c.daemon, Speeds({{"pl0", 100000}, {"pl1", 100000}}));
  EXPECT_EQ(ContextOptionsFrom(c, auto_rate).pull_rate_gbps, 200);
}

// The reader itself, on this machine: lo has no speed (EINVAL on read), a name that is no
// interface has no file.
TEST(PullRate, ReadLinkSpeedMbpsRefusesWhatHasNoSpeed) {
  EXPECT_FALSE(ReadLinkSpeedMbps("no-such-if0").ok());
  absl::StatusOr<int64_t> lo = ReadLinkSpeedMbps("lo");
  if (lo.ok()) {
    EXPECT_LE(*lo, 0);  // a kernel that reports a number for lo reports "unknown"
  } else {
    EXPECT_THAT(std::string(lo.status().message()), HasSubstr("/sys/class/net/lo/speed"));
  }
}

}  // namespace
}  // namespace metaroce::daemon
