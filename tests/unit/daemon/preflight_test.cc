#include "daemon/preflight.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaroce::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr uint64_t kAllCaps = ~uint64_t{0};

Config TwoPlanes(PortKindSetting kind = PortKindSetting::kAfXdp) {
  Config c;
  c.daemon.interfaces = {"pl0", "pl1"};
  c.daemon.port_kind = kind;
  return c;
}

PreflightFacts Root() {
  PreflightFacts f;
  f.euid = 0;
  f.effective_caps = kAllCaps;
  f.bpffs_mounted = true;
  f.memlock_soft = f.memlock_hard = UINT64_MAX;
  return f;
}

TEST(Preflight, RootWithEverythingGoes) {
  EXPECT_THAT(PreflightRefusals(TwoPlanes(), Root()), IsEmpty());
}

TEST(Preflight, UnprivilegedUserIsToldWhatIsMissing) {
  PreflightFacts f = Root();
  f.euid = 1000;
  f.effective_caps = 0;
  f.memlock_soft = f.memlock_hard = 8 << 20;
  std::vector<std::string> r = PreflightRefusals(TwoPlanes(), f);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_THAT(r[0], HasSubstr("uid 1000 lacks CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW"));
  EXPECT_THAT(r[0], HasSubstr("--port-kind udp"));
  EXPECT_THAT(r[1], HasSubstr("RLIMIT_MEMLOCK is 8 MiB (hard limit 8 MiB), below the 32 MiB"));
  EXPECT_THAT(r[1], HasSubstr("LimitMEMLOCK=infinity in the unit, or ulimit -l unlimited"));
}

TEST(Preflight, CapSysAdminStandsInForCapBpf) {
  PreflightFacts f = Root();
  f.effective_caps = (1ull << 12) | (1ull << 13) | (1ull << 14) | (1ull << 21);
  EXPECT_THAT(PreflightRefusals(TwoPlanes(), f), IsEmpty());
  f.effective_caps &= ~(1ull << 21);
  EXPECT_THAT(PreflightRefusals(TwoPlanes(), f),
              ElementsAre(HasSubstr("root without CAP_BPF")));
}

TEST(Preflight, MemlockIsFineWithCapIpcLockOrARaisableLimit) {
  PreflightFacts f = Root();
  f.memlock_soft = f.memlock_hard = 1 << 20;
  EXPECT_THAT(PreflightRefusals(TwoPlanes(), f), IsEmpty());  // CAP_IPC_LOCK
  f.effective_caps &= ~(1ull << 14);
  EXPECT_THAT(PreflightRefusals(TwoPlanes(), f), ElementsAre(HasSubstr("RLIMIT_MEMLOCK")));
  f.memlock_hard = UINT64_MAX;  // the Datapath raises the soft limit itself
  EXPECT_THAT(PreflightRefusals(TwoPlanes(), f), IsEmpty());
}

TEST(Preflight, BpffsMissing) {
  PreflightFacts f = Root();
  f.bpffs_mounted = false;
  EXPECT_THAT(PreflightRefusals(TwoPlanes(), f),
              ElementsAre(HasSubstr("mount -t bpf bpf /sys/fs/bpf")));
}

TEST(Preflight, MissingInterface) {
  PreflightFacts f = Root();
  f.missing_interfaces = {"pl1"};
  EXPECT_THAT(PreflightRefusals(TwoPlanes(), f),
              ElementsAre(HasSubstr("interface 'pl1' not found: check `ip link`")));
}

TEST(Preflight, AnotherDaemonOnTheSocket) {
  PreflightFacts f = Root();
  f.socket_answers = true;
  Config c = TwoPlanes();
  c.daemon.socket = "/run/metaroce/x.sock";
  EXPECT_THAT(PreflightRefusals(c, f),
              ElementsAre("another metaroced is running (/run/metaroce/x.sock): stop it first, "
                          "or give this one another --socket"));
}

TEST(Preflight, UdpPortsNeedNoPrivileges) {
  PreflightFacts f;
  f.euid = 1000;
  EXPECT_THAT(PreflightRefusals(TwoPlanes(PortKindSetting::kUdp), f), IsEmpty());
}

TEST(Preflight, UmemGrowsWithWorkersAndPlanes) {
  Config c = TwoPlanes();
  c.daemon.workers = 3;
  EXPECT_EQ(UmemBytesNeeded(c), uint64_t{6} * 16 << 20);
}

TEST(Preflight, GatherDoesNotCrashAndFindsLoopback) {
  Config c;
  c.daemon.interfaces = {"lo", "no-such-if0"};
  c.daemon.socket = "/nonexistent-dir/metaroced.sock";
  PreflightFacts f = GatherPreflightFacts(c);
  EXPECT_THAT(f.missing_interfaces, ElementsAre("no-such-if0"));
  EXPECT_FALSE(f.socket_answers);
}

}  // namespace
}  // namespace metaroce::daemon
