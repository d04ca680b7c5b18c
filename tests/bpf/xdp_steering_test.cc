// lib/io/xdp_steering: the owner of the attached steering program, on veth pairs in the test's
// private network namespace: attach modes, refusal to replace another program, detach on
// destruction, errors that name the fix, and real frames steered into a real AF_XDP socket.
#include "lib/io/xdp_steering.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/bpf/bpf_test_support.h"

namespace metaroce::io {
namespace {

using bpf_test::Bytes;
using bpf_test::Shell;
using testing::HasSubstr;

// The program ids attached to an interface, per mode.
struct Attached {
  uint32_t native = 0, generic = 0;
};
Attached Query(int ifindex) {
  bpf_xdp_query_opts q = {};
  q.sz = sizeof(q);
  EXPECT_EQ(bpf_xdp_query(ifindex, 0, &q), 0);
  return {q.drv_prog_id, q.skb_prog_id};
}

class XdpSteeringTest : public testing::Test {
 protected:
  void SetUp() override {
    Shell("sysctl -qw net.ipv6.conf.default.disable_ipv6=1");  // no ND/MLD noise in the counters
    Shell("ip link del mrst0 >/dev/null 2>&1");
    ASSERT_EQ(Shell("ip link add mrst0 type veth peer name mrst1 && ip link set mrst0 up && "
                  "ip link set mrst1 up"),
              0);
    ifindex_ = static_cast<int>(if_nametoindex("mrst0"));
    peer_ifindex_ = static_cast<int>(if_nametoindex("mrst1"));
    ASSERT_NE(ifindex_, 0);
  }
  void TearDown() override { Shell("ip link del mrst0 >/dev/null 2>&1"); }

  XdpSteering::Options Options() const {
    XdpSteering::Options o;
    o.ifname = "mrst0";
    o.port = bpf_test::kPort;
    return o;
  }

  int ifindex_ = 0;
  int peer_ifindex_ = 0;
};

TEST_F(XdpSteeringTest, AttachesNativeOnVethAndDetachesOnDestruction) {
  auto steering = XdpSteering::Load(Options());
  ASSERT_TRUE(steering.ok()) << steering.status();
  EXPECT_EQ((*steering)->attached_mode(), XdpMode::kNative);
  EXPECT_EQ((*steering)->ifindex(), ifindex_);
  EXPECT_NE((*steering)->prog_id(), 0u);
  EXPECT_EQ(Query(ifindex_).native, (*steering)->prog_id());
  steering->reset();
  EXPECT_EQ(Query(ifindex_).native, 0u);
  EXPECT_EQ(Query(ifindex_).generic, 0u);
}

TEST_F(XdpSteeringTest, GenericModeAndIfindex) {
  XdpSteering::Options o = Options();
  o.ifname.clear();
  o.ifindex = ifindex_;
  o.mode = XdpMode::kGeneric;
  auto steering = XdpSteering::Load(o);
  ASSERT_TRUE(steering.ok()) << steering.status();
  EXPECT_EQ((*steering)->ifname(), "mrst0");
  EXPECT_EQ((*steering)->attached_mode(), XdpMode::kGeneric);
  EXPECT_EQ(Query(ifindex_).generic, (*steering)->prog_id());
}

TEST_F(XdpSteeringTest, RefusesToReplaceAnotherProgramAndNamesIt) {
  auto first = XdpSteering::Load(Options());
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = XdpSteering::Load(Options());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(second.status().message(), HasSubstr("'mr_xdp_steer'"));
  EXPECT_THAT(second.status().message(), HasSubstr("ip link set dev mrst0 xdp off"));
  // The failed attempt did not disturb the first.
  EXPECT_EQ(Query(ifindex_).native, (*first)->prog_id());
}

TEST_F(XdpSteeringTest, DoesNotDetachAProgramItDidNotAttach) {
  auto steering = XdpSteering::Load(Options());
  ASSERT_TRUE(steering.ok()) << steering.status();
  // Someone replaces ours behind our back; our destructor must leave theirs alone.
  XdpSteering::Options o = Options();
  o.ifname = "mrst1";
  auto other = XdpSteering::Load(o);  // a second loaded program to swap in
  ASSERT_TRUE(other.ok()) << other.status();
  bpf_xdp_attach_opts opts = {};
  opts.sz = sizeof(opts);
  opts.old_prog_fd = (*steering)->prog_fd();
  ASSERT_EQ(bpf_xdp_attach(ifindex_, (*other)->prog_fd(), XDP_FLAGS_DRV_MODE, &opts), 0);
  steering->reset();
  EXPECT_EQ(Query(ifindex_).native, (*other)->prog_id());
  bpf_xdp_detach(ifindex_, XDP_FLAGS_DRV_MODE, nullptr);
}

TEST_F(XdpSteeringTest, MissingInterfaceIsNotFound) {
  XdpSteering::Options o = Options();
  o.ifname = "mr-nonexistent";
  auto steering = XdpSteering::Load(o);
  ASSERT_FALSE(steering.ok());
  EXPECT_EQ(steering.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(steering.status().message(), HasSubstr("mr-nonexistent"));
  o.ifname.clear();
  o.ifindex = 99999;
  EXPECT_EQ(XdpSteering::Load(o).status().code(), absl::StatusCode::kNotFound);
}

// ENVIRONMENT.md: native XDP on veth takes MTU <= 3506 without frags.
TEST_F(XdpSteeringTest, JumboMtuNeedsFrags) {
  ASSERT_EQ(Shell("ip link set mrst0 mtu 9000 && ip link set mrst1 mtu 9000"), 0);
  XdpSteering::Options o = Options();
  o.mode = XdpMode::kNative;
  auto linear = XdpSteering::Load(o);
  ASSERT_FALSE(linear.ok());
  EXPECT_EQ(linear.status().code(), absl::StatusCode::kFailedPrecondition) << linear.status();
  EXPECT_THAT(linear.status().message(), HasSubstr("frags"));
  EXPECT_THAT(linear.status().message(), HasSubstr("9000"));
  EXPECT_EQ(Query(ifindex_).native, 0u);
  o.frags = true;
  auto frags = XdpSteering::Load(o);
  ASSERT_TRUE(frags.ok()) << frags.status();
  EXPECT_TRUE((*frags)->frags());
  EXPECT_EQ(Query(ifindex_).native, (*frags)->prog_id());
}

TEST_F(XdpSteeringTest, RegisterSocketRejectsWhatIsNotABoundXsk) {
  auto steering = XdpSteering::Load(Options());
  ASSERT_TRUE(steering.ok()) << steering.status();
  int udp = socket(AF_INET, SOCK_DGRAM, 0);
  absl::Status s = (*steering)->RegisterSocket(0, udp);
  close(udp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("AF_XDP"));
  EXPECT_EQ((*steering)->RegisterSocket(256, 0).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE((*steering)->UnregisterSocket(0).ok()) << "idempotent";
  EXPECT_EQ((*steering)->UnregisterSocket(256).code(), absl::StatusCode::kOutOfRange);
}

// Real frames from the peer: ours land in the AF_XDP socket byte for byte, others go to the
// kernel, and without a socket ours fall back to the kernel. Each is counted.
TEST_F(XdpSteeringTest, SteersRealFramesIntoAnAfXdpSocket) {
  auto steering = XdpSteering::Load(Options());
  ASSERT_TRUE(steering.ok()) << steering.status();
  XdpSteering& st = **steering;
  bpf_test::RawXsk xsk;
  ASSERT_EQ(xsk.Open(ifindex_, 0), "");
  ASSERT_TRUE(st.RegisterSocket(0, xsk.fd()).ok());
  xsk.FillAll();

  bpf_test::FrameSpec ours;
  ours.payload = bpf_test::MetaRoceBase(1, 100);
  ours.payload[30] = 0xab;
  Bytes frame = bpf_test::BuildFrame(ours);
  ASSERT_EQ(bpf_test::SendRawFrame(peer_ifindex_, frame), 0);
  Bytes got;
  ASSERT_TRUE(xsk.Receive(&got, 2000)) << "nothing arrived in the AF_XDP socket";
  EXPECT_EQ(got, frame);

  bpf_test::FrameSpec other = ours;
  other.dport = 9;
  ASSERT_EQ(bpf_test::SendRawFrame(peer_ifindex_, bpf_test::BuildFrame(other)), 0);
  bpf_test::FrameSpec bad = ours;
  bad.payload[0] = 7;
  ASSERT_EQ(bpf_test::SendRawFrame(peer_ifindex_, bpf_test::BuildFrame(bad)), 0);

  ASSERT_TRUE(st.UnregisterSocket(0).ok());
  ASSERT_EQ(bpf_test::SendRawFrame(peer_ifindex_, frame), 0);
  EXPECT_FALSE(xsk.Receive(&got, 100));

  // veth runs the receiver's XDP in the sender's context, so the counters are final now.
  auto c = st.Counters();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->redirected, 1u);
  EXPECT_EQ(c->pass_other_port, 1u);
  EXPECT_EQ(c->drop_bad_version, 1u);
  EXPECT_EQ(c->pass_no_socket, 1u);
  EXPECT_EQ(c->drop_truncated + c->drop_no_socket + c->pass_fragment + c->pass_malformed, 0u);
}

}  // namespace
}  // namespace metaroce::io
