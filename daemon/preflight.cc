#include "daemon/preflight.h"

#include <linux/capability.h>
#include <net/if.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace metaroce::daemon {
namespace {

// Capability numbers (linux/capability.h; CAP_BPF is missing from older headers).
constexpr int kCapNetAdmin = 12;
constexpr int kCapNetRaw = 13;
constexpr int kCapIpcLock = 14;
constexpr int kCapSysAdmin = 21;
constexpr int kCapBpf = 39;

bool Has(uint64_t caps, int cap) { return (caps >> cap) & 1; }

uint64_t EffectiveCapabilities() {
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  header.pid = 0;
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return 0;
  return static_cast<uint64_t>(data[0].effective) |
         (static_cast<uint64_t>(data[1].effective) << 32);
}

// Whether something listens on the Unix socket at `path` (another daemon).
bool SocketAnswers(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool answers = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return answers;
}

uint64_t ToBytes(rlim_t v) { return v == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(v); }

std::string Mebibytes(uint64_t bytes) {
  if (bytes == UINT64_MAX) return "unlimited";
  return absl::StrCat(bytes >> 20, " MiB");
}

}  // namespace

uint64_t UmemBytesNeeded(const Config& config) {
  // AfXdpPort's default UMEM: 4096 frames of up to 4096 bytes (frame size 2048 below MTU ~2000).
  constexpr uint64_t kUmemBytes = uint64_t{4096} * 4096;
  return kUmemBytes * static_cast<uint64_t>(config.daemon.workers) *
         config.daemon.interfaces.size();
}

PreflightFacts GatherPreflightFacts(const Config& config) {
  PreflightFacts f;
  f.euid = geteuid();
  f.effective_caps = EffectiveCapabilities();
  struct statfs sfs;
  f.bpffs_mounted = statfs(kBpfFsPath, &sfs) == 0 &&
                    static_cast<uint32_t>(sfs.f_type) == kBpfFsMagic;
  rlimit rl{};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
    f.memlock_soft = ToBytes(rl.rlim_cur);
    f.memlock_hard = ToBytes(rl.rlim_max);
  }
  for (const std::string& name : config.daemon.interfaces) {
    if (if_nametoindex(name.c_str()) == 0) f.missing_interfaces.push_back(name);
  }
  f.socket_answers = SocketAnswers(config.daemon.socket);
  return f;
}

std::vector<std::string> PreflightRefusals(const Config& config, const PreflightFacts& facts) {
  std::vector<std::string> out;
  if (facts.socket_answers) {
    out.push_back(absl::StrCat("another metaroced is running (", config.daemon.socket,
                               "): stop it first, or give this one another --socket"));
  }
  for (const std::string& name : facts.missing_interfaces) {
    out.push_back(absl::StrCat("interface '", name,
                               "' not found: check `ip link` in this network namespace, and "
                               "interfaces in the config or --interface"));
  }
  if (config.daemon.port_kind != PortKindSetting::kAfXdp) return out;

  std::vector<std::string> missing;
  if (!Has(facts.effective_caps, kCapNetAdmin)) missing.push_back("CAP_NET_ADMIN");
  if (!Has(facts.effective_caps, kCapBpf) && !Has(facts.effective_caps, kCapSysAdmin)) {
    missing.push_back("CAP_BPF");
  }
  if (!Has(facts.effective_caps, kCapNetRaw)) missing.push_back("CAP_NET_RAW");
  if (!missing.empty()) {
    out.push_back(absl::StrCat(
        facts.euid == 0 ? "root without " : absl::StrCat("uid ", facts.euid, " lacks "),
        absl::StrJoin(missing, ", "),
        ": AF_XDP ports need them; run metaroced as root or through its systemd unit (which "
        "grants them), or use --port-kind udp (kernel UDP, no privileges)"));
  }
  if (!facts.bpffs_mounted) {
    out.push_back(absl::StrCat(
        "bpffs is not mounted at ", kBpfFsPath, ": mount -t bpf bpf ", kBpfFsPath,
        " (in a network namespace enter with `nsenter --net=/run/netns/NS`, which keeps /sys, "
        "rather than `ip netns exec`, which remounts it)"));
  }
  const uint64_t need = UmemBytesNeeded(config);
  if (!Has(facts.effective_caps, kCapIpcLock) && facts.memlock_hard < need) {
    out.push_back(absl::StrCat(
        "RLIMIT_MEMLOCK is ", Mebibytes(facts.memlock_soft), " (hard limit ",
        Mebibytes(facts.memlock_hard), "), below the ", Mebibytes(need),
        " the AF_XDP UMEMs pin, and CAP_IPC_LOCK is missing: LimitMEMLOCK=infinity in the "
        "unit, or ulimit -l unlimited"));
  }
  return out;
}

}  // namespace metaroce::daemon
