// bpf/fabric_fault.bpf.c through BPF_PROG_TEST_RUN (verdicts, rewritten bytes, counters), and
// loaded by iproute2's tc from build/bpf/fabric_fault.bpf.o the way the test fabric loads it.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/pkt_cls.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "bpf/fabric_fault.skel.h"
#include "bpf/include/fabric_fault_abi.h"
#include "gtest/gtest.h"
#include "tests/bpf/bpf_test_support.h"

namespace metaroce::bpf_test {
namespace {

static_assert(offsetof(mr_fault_config, drop_ppm) == 0);
static_assert(offsetof(mr_fault_config, ce_ppm) == 4);
static_assert(offsetof(mr_fault_config, flags) == 8);
static_assert(offsetof(mr_fault_config, udp_dport) == 12);
static_assert(offsetof(mr_fault_counters, unmatched) == MR_FAULT_UNMATCHED * 8);
static_assert(offsetof(mr_fault_counters, passed) == MR_FAULT_PASSED * 8);
static_assert(offsetof(mr_fault_counters, ce_marked) == MR_FAULT_CE_MARKED * 8);
static_assert(offsetof(mr_fault_counters, ce_not_ect) == MR_FAULT_CE_NOT_ECT * 8);
static_assert(offsetof(mr_fault_counters, drop_random) == MR_FAULT_DROP_RANDOM * 8);
static_assert(offsetof(mr_fault_counters, drop_blackhole) == MR_FAULT_DROP_BLACKHOLE * 8);

using Counters = std::array<uint64_t, MR_FAULT_COUNTER_COUNT>;

constexpr uint8_t kEct0 = 0x2, kEct1 = 0x1, kCe = 0x3;

struct SkelDeleter {
  void operator()(fabric_fault* s) const { fabric_fault__destroy(s); }
};

class FabricFaultTest : public testing::Test {
 protected:
  void SetUp() override {
    skel_.reset(fabric_fault__open_and_load());
    ASSERT_NE(skel_, nullptr) << strerror(errno);
    prog_fd_ = bpf_program__fd(skel_->progs.mr_fabric_fault);
  }

  void Configure(uint32_t drop_ppm, uint32_t ce_ppm, uint32_t flags, uint16_t udp_dport = 0) {
    mr_fault_config cfg = {};
    cfg.drop_ppm = drop_ppm;
    cfg.ce_ppm = ce_ppm;
    cfg.flags = flags;
    cfg.udp_dport = htons(udp_dport);
    uint32_t key = 0;
    ASSERT_EQ(bpf_map_update_elem(bpf_map__fd(skel_->maps.mr_fault_config), &key, &cfg, BPF_ANY),
              0)
        << strerror(errno);
  }

  Counters ReadCounters() {
    int ncpu = libbpf_num_possible_cpus();
    std::vector<mr_fault_counters> per_cpu(static_cast<size_t>(ncpu));
    uint32_t key = 0;
    EXPECT_EQ(bpf_map_lookup_elem(bpf_map__fd(skel_->maps.mr_fault_counts), &key, per_cpu.data()),
              0);
    Counters sum = {};
    for (const mr_fault_counters& c : per_cpu) {
      const auto* v = reinterpret_cast<const uint64_t*>(&c);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += v[i];
    }
    return sum;
  }

  // Runs the frame `repeat` times; returns the last verdict and the frame as the program left it.
  int RunFrame(const Bytes& frame, Bytes* out = nullptr, int repeat = 1) {
    Bytes buf(frame.size() + 256);
    bpf_test_run_opts opts = {};
    opts.sz = sizeof(opts);
    opts.data_in = frame.data();
    opts.data_size_in = static_cast<uint32_t>(frame.size());
    opts.data_out = buf.data();
    opts.data_size_out = static_cast<uint32_t>(buf.size());
    opts.repeat = repeat;
    if (bpf_prog_test_run_opts(prog_fd_, &opts) != 0) return -errno;
    buf.resize(opts.data_size_out);
    if (out != nullptr) *out = buf;
    return static_cast<int>(opts.retval);
  }

  // Runs one frame and checks the verdict and that exactly `counter` moved by one.
  void Expect(const Bytes& frame, int verdict, mr_fault_counter counter, Bytes* out = nullptr) {
    Counters before = ReadCounters();
    EXPECT_EQ(RunFrame(frame, out), verdict);
    Counters after = ReadCounters();
    for (int i = 0; i < MR_FAULT_COUNTER_COUNT; ++i) {
      EXPECT_EQ(after[i] - before[i], i == counter ? 1u : 0u) << "counter " << i;
    }
  }

  static Bytes Udp4(uint8_t tos, uint16_t dport = kPort) {
    FrameSpec s;
    s.tos = tos;
    s.dport = dport;
    s.payload = MetaRoceBase(1, 16);
    return BuildFrame(s);
  }

  std::unique_ptr<fabric_fault, SkelDeleter> skel_;
  int prog_fd_ = -1;
};

TEST_F(FabricFaultTest, ZeroConfigPassesEverythingUnchanged) {
  Bytes out;
  Bytes frame = Udp4(kEct0);
  Expect(frame, TC_ACT_OK, MR_FAULT_PASSED, &out);
  EXPECT_EQ(out, frame);
  Expect(ArpFrame(), TC_ACT_OK, MR_FAULT_UNMATCHED);
}

TEST_F(FabricFaultTest, DropAllDropsEveryIpPacket) {
  Configure(MR_FAULT_PPM, 0, 0);
  Expect(Udp4(0), TC_ACT_SHOT, MR_FAULT_DROP_RANDOM);
  FrameSpec tcp6;
  tcp6.ipv6 = true;
  tcp6.l4_proto = 6;
  Expect(BuildFrame(tcp6), TC_ACT_SHOT, MR_FAULT_DROP_RANDOM);
  // ARP is not subject to faults: neighbour resolution keeps working.
  Expect(ArpFrame(), TC_ACT_OK, MR_FAULT_UNMATCHED);
}

TEST_F(FabricFaultTest, HalfDropIsRoughlyHalf) {
  Configure(MR_FAULT_PPM / 2, 0, 0);
  constexpr int kRuns = 10000;
  Counters before = ReadCounters();
  ASSERT_GE(RunFrame(Udp4(0), nullptr, kRuns), 0);
  Counters after = ReadCounters();
  uint64_t dropped = after[MR_FAULT_DROP_RANDOM] - before[MR_FAULT_DROP_RANDOM];
  uint64_t passed = after[MR_FAULT_PASSED] - before[MR_FAULT_PASSED];
  EXPECT_EQ(dropped + passed, uint64_t{kRuns});
  // Binomial(10000, 0.5): sigma = 50; +-10 sigma never fails by chance.
  EXPECT_GT(dropped, 4500u);
  EXPECT_LT(dropped, 5500u);
}

TEST_F(FabricFaultTest, BlackholeDropsMatchedPackets) {
  Configure(0, 0, MR_FAULT_BLACKHOLE);
  Expect(Udp4(kEct0), TC_ACT_SHOT, MR_FAULT_DROP_BLACKHOLE);
  FrameSpec icmp;
  icmp.l4_proto = 1;
  Expect(BuildFrame(icmp), TC_ACT_SHOT, MR_FAULT_DROP_BLACKHOLE);
  Expect(ArpFrame(), TC_ACT_OK, MR_FAULT_UNMATCHED);
}

// The first drop after user space zeroes mr_fault_first_drop records its CLOCK_MONOTONIC instant
// (the clock bpf_ktime_get_ns reads); later drops and passed packets leave it alone.
TEST_F(FabricFaultTest, FirstDropRecordsItsInstantOnce) {
  const int fd = bpf_map__fd(skel_->maps.mr_fault_first_drop);
  auto first_drop = [&] {
    uint32_t key = 0;
    uint64_t ns = 0;
    EXPECT_EQ(bpf_map_lookup_elem(fd, &key, &ns), 0);
    return ns;
  };
  auto monotonic_ns = [] {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
  };
  Expect(Udp4(0), TC_ACT_OK, MR_FAULT_PASSED);
  EXPECT_EQ(first_drop(), 0u);
  Configure(0, 0, MR_FAULT_BLACKHOLE);
  const uint64_t before = monotonic_ns();
  Expect(Udp4(0), TC_ACT_SHOT, MR_FAULT_DROP_BLACKHOLE);
  const uint64_t after = monotonic_ns();
  const uint64_t first = first_drop();
  EXPECT_GE(first, before);
  EXPECT_LE(first, after);
  Expect(Udp4(0), TC_ACT_SHOT, MR_FAULT_DROP_BLACKHOLE);
  EXPECT_EQ(first_drop(), first);
  // Zeroed by user space (as mrfabric does with each new configuration): the next drop counts.
  uint32_t key = 0;
  uint64_t zero = 0;
  ASSERT_EQ(bpf_map_update_elem(fd, &key, &zero, BPF_ANY), 0);
  Configure(MR_FAULT_PPM, 0, 0);
  Expect(Udp4(0), TC_ACT_SHOT, MR_FAULT_DROP_RANDOM);
  EXPECT_GT(first_drop(), first);
}

TEST_F(FabricFaultTest, UdpPortFilterLimitsFaults) {
  Configure(0, 0, MR_FAULT_BLACKHOLE, kPort);
  Expect(Udp4(0), TC_ACT_SHOT, MR_FAULT_DROP_BLACKHOLE);
  Expect(Udp4(0, 53), TC_ACT_OK, MR_FAULT_UNMATCHED);
  FrameSpec tcp;
  tcp.l4_proto = 6;
  Expect(BuildFrame(tcp), TC_ACT_OK, MR_FAULT_UNMATCHED);
  FrameSpec v6;
  v6.ipv6 = true;
  v6.payload = MetaRoceBase();
  Expect(BuildFrame(v6), TC_ACT_SHOT, MR_FAULT_DROP_BLACKHOLE);
  FrameSpec later_fragment;
  later_fragment.frag_off = 0x0010;
  Expect(BuildFrame(later_fragment), TC_ACT_OK, MR_FAULT_UNMATCHED);
}

TEST_F(FabricFaultTest, CeMarkSetsCeAndFixesIpv4Checksum) {
  Configure(0, MR_FAULT_PPM, 0);
  for (uint8_t ect : {kEct0, kEct1}) {
    for (uint8_t ihl : {5, 6}) {
      SCOPED_TRACE(testing::Message() << "ect " << int{ect} << " ihl " << int{ihl});
      FrameSpec s;
      s.tos = static_cast<uint8_t>(0xb8 | ect);  // DSCP EF + ECT
      s.ihl = ihl;
      s.payload = MetaRoceBase();
      Bytes in = BuildFrame(s);
      ASSERT_TRUE(Ipv4ChecksumOk(&in[14], ihl * 4u));
      Bytes out;
      Expect(in, TC_ACT_OK, MR_FAULT_CE_MARKED, &out);
      ASSERT_EQ(out.size(), in.size());
      EXPECT_EQ(out[15], 0xb8 | kCe) << "DSCP kept, ECN = CE";
      EXPECT_TRUE(Ipv4ChecksumOk(&out[14], ihl * 4u));
      EXPECT_NE(out[24] << 8 | out[25], in[24] << 8 | in[25]) << "checksum changed";
      // Nothing else changed.
      Bytes a = in, b = out;
      a[15] = b[15] = 0;
      a[24] = b[24] = a[25] = b[25] = 0;
      EXPECT_EQ(a, b);
    }
  }
}

TEST_F(FabricFaultTest, CeMarkOnVlanIpv4) {
  Configure(0, MR_FAULT_PPM, 0);
  FrameSpec s;
  s.vlan_tpid = kEthP8021Q;
  s.tos = kEct0;
  s.payload = MetaRoceBase();
  Bytes out;
  Expect(BuildFrame(s), TC_ACT_OK, MR_FAULT_CE_MARKED, &out);
  EXPECT_EQ(out[19] & 3, kCe);
  EXPECT_TRUE(Ipv4ChecksumOk(&out[18], 20));
}

TEST_F(FabricFaultTest, CeMarkSetsIpv6TrafficClass) {
  Configure(0, MR_FAULT_PPM, 0);
  FrameSpec s;
  s.ipv6 = true;
  s.tos = 0x28 | kEct0;  // DSCP AF11 + ECT(0)
  s.payload = MetaRoceBase();
  Bytes in = BuildFrame(s);
  Bytes out;
  Expect(in, TC_ACT_OK, MR_FAULT_CE_MARKED, &out);
  uint32_t word0 = uint32_t{out[14]} << 24 | uint32_t{out[15]} << 16 | out[16] << 8 | out[17];
  EXPECT_EQ(word0 >> 28, 6u);
  EXPECT_EQ((word0 >> 20) & 0xff, 0x28u | kCe);
  EXPECT_EQ(word0 & 0xfffff, 0x12345u) << "flow label kept";
}

TEST_F(FabricFaultTest, CeMarkLeavesNotEctAndCeAlone) {
  Configure(0, MR_FAULT_PPM, 0);
  Bytes out;
  Bytes not_ect = Udp4(0xb8);
  Expect(not_ect, TC_ACT_OK, MR_FAULT_CE_NOT_ECT, &out);
  EXPECT_EQ(out, not_ect);
  FrameSpec v6;
  v6.ipv6 = true;
  Bytes not_ect6 = BuildFrame(v6);
  Expect(not_ect6, TC_ACT_OK, MR_FAULT_CE_NOT_ECT, &out);
  EXPECT_EQ(out, not_ect6);
  Bytes ce = Udp4(kCe);
  Expect(ce, TC_ACT_OK, MR_FAULT_CE_MARKED, &out);
  EXPECT_EQ(out, ce) << "already CE: unchanged, checksum still right";
}

TEST_F(FabricFaultTest, DropComesBeforeMark) {
  Configure(MR_FAULT_PPM, MR_FAULT_PPM, 0);
  Expect(Udp4(kEct0), TC_ACT_SHOT, MR_FAULT_DROP_RANDOM);
}

// With a UDP port filter, a datagram whose UDP header is cut short cannot match. (The kernel
// refuses to test-run a frame cut inside the IPv4 header: EINVAL, asserted.)
TEST_F(FabricFaultTest, TruncatedFramesPass) {
  Configure(MR_FAULT_PPM, 0, MR_FAULT_BLACKHOLE, kPort);
  Expect(Truncated(Udp4(0), 14 + 20 + 4), TC_ACT_OK, MR_FAULT_UNMATCHED);
  EXPECT_EQ(RunFrame(Truncated(Udp4(0), 14 + 10)), -EINVAL);
}

// The object meson builds is loadable by iproute2's tc (the test fabric's way), and its config
// map is then reachable by name with bpftool.
TEST(FabricFaultTc, LoadsWithTcDirectAction) {
  ASSERT_NE(BpfBuildDir(), "") << "run with --bpf-dir=BUILD/bpf";
  std::string obj = BpfBuildDir() + "/fabric_fault.bpf.o";
  ASSERT_EQ(Shell("ip link add mrff0 type veth peer name mrff1 && ip link set mrff0 up && "
                "ip link set mrff1 up"),
            0);
  EXPECT_EQ(Shell("tc qdisc add dev mrff0 clsact && tc filter add dev mrff0 egress bpf da obj " +
                obj + " sec tc"),
            0);
  EXPECT_EQ(Shell("tc filter show dev mrff0 egress | grep -q mr_fabric_fault"), 0);
  EXPECT_EQ(Shell("bpftool map show name " MR_FAULT_CONFIG_MAP_NAME " >/dev/null"), 0);
  Shell("ip link del mrff0");
}

}  // namespace
}  // namespace metaroce::bpf_test
