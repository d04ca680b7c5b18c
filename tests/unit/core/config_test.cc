// ConnectionConfig: Validate() accepts the documented defaults and refuses each inconsistent
// setting with a message that names it; InitialPort() picks the path's first source port.
#include "lib/core/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace metaroce::core {
namespace {

using ::testing::HasSubstr;

// Validates `c` and returns the refusal message, or "" when it is accepted.
std::string Refusal(const ConnectionConfig& c) {
  const absl::Status s = c.Validate();
  if (s.ok()) return "";
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_FALSE(s.message().empty());
  return std::string(s.message());
}

ConnectionConfig With(const std::function<void(ConnectionConfig&)>& change) {
  ConnectionConfig c;
  change(c);
  return c;
}

TEST(ConnectionConfig_Validate, AcceptsDefaults) {
  EXPECT_TRUE(ConnectionConfig().Validate().ok());
}

TEST(ConnectionConfig_Validate, AcceptsEveryNamedProfile) {
  for (const TransportProfile& p : {TransportProfile::MetaRoce(), TransportProfile::GoBackN(),
                                    TransportProfile::ReorderBuffer()}) {
    EXPECT_EQ(Refusal(With([&](ConnectionConfig& c) { c.profile = p; })), "") << p.Name();
  }
}

TEST(ConnectionConfig_Validate, PathCountMustBe1To256) {
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.path_count = 0; })),
              HasSubstr("path_count"));
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.path_count = 257; })),
              HasSubstr("path_count"));
  EXPECT_EQ(Refusal(With([](ConnectionConfig& c) { c.path_count = 1; })), "");
  EXPECT_EQ(Refusal(With([](ConnectionConfig& c) { c.path_count = 256; })), "");
}

TEST(ConnectionConfig_Validate, DelayedAckMustNotBeNegative) {
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.delayed_ack = Duration(-1); })),
              HasSubstr("delayed_ack"));
  EXPECT_EQ(Refusal(With([](ConnectionConfig& c) { c.delayed_ack = Duration(0); })), "");
}

TEST(ConnectionConfig_Validate, PlaneCountMustBePositive) {
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.plane_count = 0; })),
              HasSubstr("plane_count"));
}

TEST(ConnectionConfig_Validate, InitialPortsMustHaveOneEntryPerPath) {
  const std::string msg = Refusal(With([](ConnectionConfig& c) {
    c.path_count = 4;
    c.initial_ports = {50000, 50001, 50002};
  }));
  EXPECT_THAT(msg, HasSubstr("initial_ports"));
  EXPECT_THAT(msg, HasSubstr("3 entries for 4 paths"));
  EXPECT_EQ(Refusal(With([](ConnectionConfig& c) {
              c.path_count = 2;
              c.initial_ports = {50000, 50001};
            })),
            "");
}

TEST(ConnectionConfig_Validate, PortBasePlusPathsMustFitIn16Bits) {
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) {
                c.path_count = 8;
                c.port_base = 65530;  // 65530 + 7 > 65535
              })),
              HasSubstr("port_base"));
  EXPECT_EQ(Refusal(With([](ConnectionConfig& c) {
              c.path_count = 8;
              c.port_base = 65528;  // last path on 65535
            })),
            "");
}

TEST(ConnectionConfig_Validate, RotationRangeMustHoldMorePortsThanPaths) {
  // [lo, hi] holds hi - lo + 1 ports: 8 ports for 8 paths is too few, 9 is enough.
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) {
                c.path_count = 8;
                c.rotate_port_lo = 60000;
                c.rotate_port_hi = 60007;
              })),
              HasSubstr("rotation port range [60000, 60007]"));
  EXPECT_EQ(Refusal(With([](ConnectionConfig& c) {
              c.path_count = 8;
              c.rotate_port_lo = 60000;
              c.rotate_port_hi = 60008;
            })),
            "");
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) {
                c.rotate_port_lo = 60001;
                c.rotate_port_hi = 60000;
              })),
              HasSubstr("rotation port range"));
}

// wire-format.md §1: the source ports of one direction differ from each other.
TEST(ConnectionConfig_Validate, InitialPortsMustDiffer) {
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) {
                c.path_count = 3;
                c.initial_ports = {50000, 50001, 50000};
              })),
              HasSubstr("paths 0 and 2 have the same initial port 50000"));
}

// paths-and-recovery.md §8: the rotation range MUST NOT contain udp_port.
TEST(ConnectionConfig_Validate, RotationRangeMustNotContainUdpPort) {
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) {
                c.rotate_port_lo = 4000;
                c.rotate_port_hi = 5000;  // holds 4792
              })),
              HasSubstr("contains udp_port 4792"));
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.udp_port = 65535; })),  // the default's top
              HasSubstr("contains udp_port 65535"));
  EXPECT_EQ(Refusal(With([](ConnectionConfig& c) {
              c.rotate_port_lo = 4793;
              c.rotate_port_hi = 5000;
            })),
            "");
}

TEST(ConnectionConfig_Validate, UdpPortMustNotBeZero) {
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.udp_port = 0; })), HasSubstr("udp_port"));
}

TEST(ConnectionConfig_Validate, MtuBounds) {
  const uint32_t max_mtu = 65527 - wire::kDataHeadersSize;
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.mtu = 63; })), HasSubstr("mtu"));
  EXPECT_EQ(Refusal(With([](ConnectionConfig& c) {
              c.mtu = 64;
              c.min_cwnd_bytes = 64;
            })),
            "");
  EXPECT_EQ(Refusal(With([&](ConnectionConfig& c) { c.mtu = max_mtu; })), "");
  EXPECT_THAT(Refusal(With([&](ConnectionConfig& c) { c.mtu = max_mtu + 1; })),
              HasSubstr("mtu must be 64..65471"));
}

TEST(ConnectionConfig_Validate, ReorderBufferMustHoldOneMtu) {
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) {
                c.mtu = 4096;
                c.profile = TransportProfile::ReorderBuffer(4095);
              })),
              HasSubstr("reorder buffer"));
  EXPECT_EQ(Refusal(With([](ConnectionConfig& c) {
              c.mtu = 4096;
              c.profile = TransportProfile::ReorderBuffer(4096);
            })),
            "");
}

TEST(ConnectionConfig_Validate, GoBackNNeedsInOrderPlacement) {
  for (PlacementPolicy placement : {PlacementPolicy::kDirect, PlacementPolicy::kReorderBuffer}) {
    EXPECT_THAT(Refusal(With([&](ConnectionConfig& c) {
                  c.profile = TransportProfile::GoBackN();
                  c.profile.placement = placement;
                  c.profile.reorder_buffer_bytes = 1u << 20;
                })),
                HasSubstr("go-back-N"));
  }
}

TEST(ConnectionConfig_Validate, CongestionWindowsMustBeOrdered) {
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.min_cwnd_bytes = 0; })),
              HasSubstr("congestion windows"));
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) {
                c.min_cwnd_bytes = 8192;
                c.max_cwnd_bytes = 4096;
              })),
              HasSubstr("min_cwnd <= max_cwnd"));
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.initial_window_bytes = 0; })),
              HasSubstr("0 < initial window"));
  // The initial window is the connection's, spread over its paths and clamped to the bounds:
  // any positive value is valid.
  EXPECT_EQ(Refusal(With([](ConnectionConfig& c) {
              c.min_cwnd_bytes = c.max_cwnd_bytes = 8192;
              c.initial_window_bytes = 1;
            })),
            "");
}

TEST(ConnectionConfig_Validate, EcnGainMustBeInZeroOne) {
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.ecn_gain = 0; })), HasSubstr("ecn_gain"));
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.ecn_gain = -0.1; })),
              HasSubstr("ecn_gain"));
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.ecn_gain = 1.5; })),
              HasSubstr("ecn_gain"));
  EXPECT_EQ(Refusal(With([](ConnectionConfig& c) { c.ecn_gain = 1.0; })), "");
}

TEST(ConnectionConfig_Validate, AckEveryMustBePositive) {
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.ack_every = 0; })),
              HasSubstr("ack_every"));
}

TEST(ConnectionConfig_Validate, MaxTransmissionsMustBe1To255) {
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.max_transmissions = 0; })),
              HasSubstr("max_transmissions"));
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.max_transmissions = 256; })),
              HasSubstr("max_transmissions"));
  EXPECT_EQ(Refusal(With([](ConnectionConfig& c) { c.max_transmissions = 1; })), "");
  EXPECT_EQ(Refusal(With([](ConnectionConfig& c) { c.max_transmissions = 255; })), "");
}

TEST(ConnectionConfig_Validate, FailAfterTimeoutsMustBePositive) {
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.fail_after_timeouts = 0; })),
              HasSubstr("fail_after_timeouts"));
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.fail_after_overtaken = 0; })),
              HasSubstr("fail_after_overtaken"));
}

TEST(ConnectionConfig_Validate, QueueDepthsMustBePositive) {
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.max_send_queue = 0; })),
              HasSubstr("queue depths"));
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.max_recv_queue = 0; })),
              HasSubstr("queue depths"));
}

TEST(ConnectionConfig_Validate, TimersMustBePositive) {
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.min_probe_timeout = Duration(0); })),
              HasSubstr("min_probe_timeout"));
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.initial_rtt = Duration(-1); })),
              HasSubstr("initial_rtt"));
}

TEST(ConnectionConfig_Validate, RnrRetryMustBe0To7) {
  EXPECT_THAT(Refusal(With([](ConnectionConfig& c) { c.rnr_retry = 8; })),
              HasSubstr("rnr_retry"));
  EXPECT_EQ(Refusal(With([](ConnectionConfig& c) { c.rnr_retry = 7; })), "");
  EXPECT_EQ(Refusal(With([](ConnectionConfig& c) { c.rnr_retry = 0; })), "");
}

TEST(ConnectionConfig_InitialPort, PortBasePlusPathWhenNoListIsGiven) {
  ConnectionConfig c;
  c.port_base = 50000;
  EXPECT_EQ(c.InitialPort(0), 50000);
  EXPECT_EQ(c.InitialPort(7), 50007);
}

TEST(ConnectionConfig_InitialPort, ListEntryWhenGiven) {
  ConnectionConfig c;
  c.path_count = 3;
  c.initial_ports = {61000, 52000, 60001};
  EXPECT_EQ(c.InitialPort(0), 61000);
  EXPECT_EQ(c.InitialPort(1), 52000);
  EXPECT_EQ(c.InitialPort(2), 60001);
}

TEST(TransportProfile_Name, NamesTheEvaluatedProfiles) {
  EXPECT_EQ(TransportProfile::MetaRoce().Name(), "metaroce");
  EXPECT_EQ(TransportProfile::GoBackN().Name(), "gbn");
  EXPECT_EQ(TransportProfile::ReorderBuffer().Name(), "reorder");
  TransportProfile custom = TransportProfile::MetaRoce();
  custom.spray = SprayPolicy::kSinglePath;
  EXPECT_EQ(custom.Name(), "custom");
}

}  // namespace
}  // namespace metaroce::core
