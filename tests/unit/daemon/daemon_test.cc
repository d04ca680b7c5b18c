// The pure pieces of daemon/daemon.cc (the daemon itself runs in the privileged suite,
// tests/daemon/).
#include "daemon/daemon.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaroce::daemon {
namespace {

TEST(Features, CopyModeVethPort) {
  PortFeatures f = FeaturesFromDescriptions(
      {"af_xdp pl0 queue 0 copy-mode (zero-copy refused: Operation not supported) need_wakeup "
       "frame 2048"});
  EXPECT_FALSE(f.zero_copy);  // "zero-copy" inside the refusal does not count
  EXPECT_TRUE(f.need_wakeup);
  EXPECT_FALSE(f.busy_poll);
  EXPECT_FALSE(f.multi_buffer);
}

TEST(Features, TrueOnlyWhenEveryPortHasIt) {
  PortFeatures f = FeaturesFromDescriptions(
      {"af_xdp eth0 queue 0 zero-copy need_wakeup busy_poll frame 4096",
       "af_xdp eth0 queue 1 zero-copy need_wakeup busy_poll unsupported (EPERM) frame 4096"});
  EXPECT_TRUE(f.zero_copy);
  EXPECT_TRUE(f.need_wakeup);
  EXPECT_FALSE(f.busy_poll);
}

TEST(Features, KernelUdpPortsHaveNone) {
  PortFeatures f = FeaturesFromDescriptions({"udp io_uring 198.18.0.2:4792"});
  EXPECT_FALSE(f.zero_copy);
  EXPECT_FALSE(f.need_wakeup);
  EXPECT_FALSE(f.busy_poll);
  EXPECT_FALSE(f.multi_buffer);
  EXPECT_FALSE(FeaturesFromDescriptions({}).need_wakeup);
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
  EXPECT_EQ(ContextOptionsFrom(c).observed_event_depth, ObservedEventDepth(c));
  EXPECT_GT(ContextOptionsFrom(c).observed_event_depth, api::ContextOptions().observed_event_depth);
  c.daemon.observed_event_depth = 3000;
  EXPECT_EQ(ContextOptionsFrom(c).observed_event_depth, 3000u);
}

// The host's receive budget (docs/spec/congestion.md §5.2) is on by default and reaches the
// Context as configured; 0 turns the hints off.
TEST(ConfigToManagers, ContextReceiveBudgetFollowsTheConfig) {
  Config c;
  c.daemon.interfaces = {"pl0"};
  EXPECT_EQ(ContextOptionsFrom(c).receive_budget_bytes, uint64_t{1} << 20);
  c.daemon.receive_budget_bytes = 0;
  EXPECT_EQ(ContextOptionsFrom(c).receive_budget_bytes, 0u);
  c.daemon.receive_budget_bytes = 262144;
  EXPECT_EQ(ContextOptionsFrom(c).receive_budget_bytes, 262144u);
}

}  // namespace
}  // namespace metaroce::daemon
