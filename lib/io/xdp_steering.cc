#include "lib/io/xdp_steering.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bpf/include/metaroce_xdp_abi.h"
#include "bpf/xdp_steer.skel.h"
#include "lib/wire/packet.h"

namespace metaroce::io {
namespace {

// The ABI header is the contract with the BPF program: check the layout the C++ side reads.
static_assert(sizeof(mr_xdp_counters) == 80);
static_assert(offsetof(mr_xdp_counters, redirected) == MR_XDP_REDIRECTED * 8);
static_assert(offsetof(mr_xdp_counters, pass_no_socket) == MR_XDP_PASS_NO_SOCKET * 8);
static_assert(offsetof(mr_xdp_counters, drop_no_socket) == MR_XDP_DROP_NO_SOCKET * 8);
static_assert(offsetof(mr_xdp_counters, drop_truncated) == MR_XDP_DROP_TRUNCATED * 8);
static_assert(offsetof(mr_xdp_counters, drop_bad_version) == MR_XDP_DROP_BAD_VERSION * 8);
static_assert(offsetof(mr_xdp_counters, pass_not_ip) == MR_XDP_PASS_NOT_IP * 8);
static_assert(offsetof(mr_xdp_counters, pass_not_udp) == MR_XDP_PASS_NOT_UDP * 8);
static_assert(offsetof(mr_xdp_counters, pass_other_port) == MR_XDP_PASS_OTHER_PORT * 8);
static_assert(offsetof(mr_xdp_counters, pass_fragment) == MR_XDP_PASS_FRAGMENT * 8);
static_assert(offsetof(mr_xdp_counters, pass_malformed) == MR_XDP_PASS_MALFORMED * 8);
static_assert(MR_XDP_COUNTER_COUNT == 10);
static_assert(MR_XDP_BASE_HEADER_LEN == sizeof(wire::BaseHeader));
static_assert(MR_XDP_WIRE_VERSION == wire::kVersion);
static_assert(MR_XDP_DEFAULT_UDP_PORT == wire::kDefaultUdpPort);
// The skeleton's view of the rodata the program reads.
static_assert(sizeof(xdp_steer::xdp_steer__rodata::metaroce_port) == 2);
static_assert(sizeof(xdp_steer::xdp_steer__rodata::no_socket_verdict) == 4);

// libbpf diagnostics (verifier log, attach errors) go here during Load() instead of stderr.
thread_local std::string* g_libbpf_log = nullptr;

int CaptureLibbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  if (g_libbpf_log == nullptr || level == LIBBPF_DEBUG) return 0;
  char line[1024];
  int n = vsnprintf(line, sizeof(line), format, args);
  if (n > 0) g_libbpf_log->append(line, std::min<size_t>(static_cast<size_t>(n), sizeof(line) - 1));
  return n;
}

// Routes libbpf's printing into `log` for the lifetime of the object.
class ScopedLibbpfCapture {
 public:
  explicit ScopedLibbpfCapture(std::string* log) {
    g_libbpf_log = log;
    previous_ = libbpf_set_print(CaptureLibbpfPrint);
  }
  ~ScopedLibbpfCapture() {
    libbpf_set_print(previous_);
    g_libbpf_log = nullptr;
  }
  ScopedLibbpfCapture(const ScopedLibbpfCapture&) = delete;
  ScopedLibbpfCapture& operator=(const ScopedLibbpfCapture&) = delete;

 private:
  libbpf_print_fn_t previous_ = nullptr;
};

// The tail of libbpf's log, which holds the reason (the verifier's last lines).
std::string LogTail(const std::string& log) {
  constexpr size_t kMax = 2000;
  if (log.empty()) return "";
  std::string tail = log.size() > kMax ? "..." + log.substr(log.size() - kMax) : log;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  return absl::StrCat("\nlibbpf said:\n", tail);
}

constexpr const char* kPrivilegeFix =
    "run as root or grant CAP_BPF and CAP_NET_ADMIN (systemd: AmbientCapabilities=CAP_BPF "
    "CAP_NET_ADMIN); on kernels older than 5.11 also raise RLIMIT_MEMLOCK (ulimit -l unlimited, "
    "LimitMEMLOCK=infinity)";

absl::Status PrivilegeError(int err, const std::string& what) {
  return absl::PermissionDeniedError(
      absl::StrCat(what, ": ", strerror(err), ": ", kPrivilegeFix));
}

uint32_t ModeFlag(XdpMode mode) {
  return mode == XdpMode::kGeneric ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
}

// "'name' (id N, native mode)" for the program with this id, as far as we can learn it.
std::string DescribeProgram(uint32_t id, const char* mode) {
  std::string name = "?";
  int fd = bpf_prog_get_fd_by_id(id);
  if (fd >= 0) {
    bpf_prog_info info = {};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) name = info.name;
    close(fd);
  }
  return absl::StrFormat("'%s' (id %u, %s mode)", name, id, mode);
}

// If the interface has any XDP program, an error naming it and how to remove it.
absl::Status CheckNoProgramAttached(int ifindex, const std::string& ifname) {
  bpf_xdp_query_opts q = {};
  q.sz = sizeof(q);
  if (int rc = bpf_xdp_query(ifindex, 0, &q); rc != 0) {
    if (-rc == EPERM || -rc == EACCES) return PrivilegeError(-rc, "querying XDP programs");
    return absl::ErrnoToStatus(-rc, absl::StrCat("querying the XDP programs of ", ifname));
  }
  std::vector<std::string> found;
  if (q.drv_prog_id != 0) found.push_back(DescribeProgram(q.drv_prog_id, "native"));
  if (q.skb_prog_id != 0) found.push_back(DescribeProgram(q.skb_prog_id, "generic"));
  if (q.hw_prog_id != 0) found.push_back(DescribeProgram(q.hw_prog_id, "offload"));
  if (found.empty()) return absl::OkStatus();
  std::string names = found[0];
  for (size_t i = 1; i < found.size(); ++i) absl::StrAppend(&names, ", ", found[i]);
  std::string stale;
  if (names.find(std::string("'") + MR_XDP_PROG_NAME) != std::string::npos ||
      names.find(std::string("'") + MR_XDP_FRAGS_PROG_NAME) != std::string::npos) {
    stale = " It is a MetaRoCE steering program: another metaroced/test owns this interface, or "
            "one exited without detaching.";
  }
  return absl::AlreadyExistsError(absl::StrFormat(
      "interface %s already has XDP program %s attached.%s Remove it with `ip link set dev %s "
      "xdp off` (generic mode: `xdpgeneric off`; if libxdp loaded it: `xdp-loader unload %s "
      "--all`), or use another interface",
      ifname, names, stale, ifname, ifname));
}

int InterfaceMtu(const std::string& ifname) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  ifreq req = {};
  snprintf(req.ifr_name, sizeof(req.ifr_name), "%s", ifname.c_str());
  int mtu = ioctl(fd, SIOCGIFMTU, &req) == 0 ? req.ifr_mtu : -1;
  close(fd);
  return mtu;
}

absl::Status AttachError(int err, const std::string& ifname, XdpMode mode, bool frags,
                         const std::string& log) {
  std::string what = absl::StrFormat("attaching XDP program to %s in %s mode", ifname,
                                     std::string(XdpModeName(mode)));
  switch (err) {
    case EPERM:
    case EACCES:
      return PrivilegeError(err, what);
    case EBUSY:
    case EEXIST:
      return absl::AlreadyExistsError(absl::StrCat(
          what, ": another XDP program was attached meanwhile; see `ip link show dev ", ifname,
          "` and remove it with `ip link set dev ", ifname, " xdp off`"));
    case EOPNOTSUPP:
      return absl::UnimplementedError(absl::StrCat(
          what, ": the driver has no native XDP; use XdpMode::kGeneric (or kAuto)", LogTail(log)));
    case ENOSPC:
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": ", strerror(err),
          ": on veth this end needs at least as many rx queues as the peer has tx queues "
          "(ip link add ... numrxqueues N numtxqueues N)", LogTail(log)));
    case ENOTCONN:
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": ", strerror(err), ": on veth the peer must exist (and be up)", LogTail(log)));
    case ERANGE:
    case EINVAL:
    case E2BIG:
      if (!frags) {
        return absl::FailedPreconditionError(absl::StrCat(
            what, ": ", strerror(err), ": MTU of ", ifname, " is ", InterfaceMtu(ifname),
            "; XDP without frags takes at most one page per frame (veth: MTU <= 3506): set "
            "Options::frags (SEC(\"xdp.frags\"), XDP_USE_SG sockets) or lower the MTU",
            LogTail(log)));
      }
      [[fallthrough]];
    default:
      return absl::ErrnoToStatus(err, absl::StrCat(what, LogTail(log)));
  }
}

}  // namespace

std::string_view XdpModeName(XdpMode mode) {
  switch (mode) {
    case XdpMode::kAuto: return "auto";
    case XdpMode::kNative: return "native";
    case XdpMode::kGeneric: return "generic";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<XdpSteering>> XdpSteering::Load(const Options& options) {
  std::unique_ptr<XdpSteering> self(new XdpSteering());

  // The interface.
  if (!options.ifname.empty()) {
    self->ifname_ = options.ifname;
    self->ifindex_ = static_cast<int>(if_nametoindex(options.ifname.c_str()));
    if (self->ifindex_ == 0) {
      return absl::NotFoundError(absl::StrCat(
          "network interface '", options.ifname,
          "' not found in this network namespace (check `ip link show`; for a namespace, run "
          "inside `ip netns exec NAME`)"));
    }
  } else {
    char name[IF_NAMESIZE] = {};
    if (options.ifindex <= 0 || if_indextoname(static_cast<unsigned>(options.ifindex), name) == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "network interface with index ", options.ifindex,
          " not found in this network namespace (check `ip link show`)"));
    }
    self->ifindex_ = options.ifindex;
    self->ifname_ = name;
  }
  if (options.port == 0) return absl::InvalidArgumentError("XdpSteering: UDP port 0");
  if (options.max_queues == 0) return absl::InvalidArgumentError("XdpSteering: max_queues 0");
  self->frags_ = options.frags;
  self->max_queues_ = options.max_queues;

  if (absl::Status s = CheckNoProgramAttached(self->ifindex_, self->ifname_); !s.ok()) return s;

  std::string log;
  ScopedLibbpfCapture capture(&log);

  // Open, configure the rodata, load.
  self->skel_ = xdp_steer__open();
  if (self->skel_ == nullptr) {
    int err = errno;
    return absl::ErrnoToStatus(err, absl::StrCat("opening the XDP steering object", LogTail(log)));
  }
  xdp_steer& skel = *self->skel_;
  skel.rodata->metaroce_port = htons(options.port);
  skel.rodata->no_socket_verdict =
      options.no_socket == NoSocket::kDrop ? MR_XDP_NO_SOCKET_DROP : MR_XDP_NO_SOCKET_PASS;
  bpf_program* prog = options.frags ? skel.progs.mr_xdp_steer_fr : skel.progs.mr_xdp_steer;
  bpf_program* unused = options.frags ? skel.progs.mr_xdp_steer : skel.progs.mr_xdp_steer_fr;
  bpf_program__set_autoload(unused, false);
  if (int rc = bpf_map__set_max_entries(skel.maps.xsks_map, options.max_queues); rc != 0) {
    return absl::ErrnoToStatus(-rc, "sizing the XSKMAP");
  }
  if (int rc = xdp_steer__load(&skel); rc != 0) {
    int err = -rc;
    if (err == EPERM || err == EACCES) {
      return PrivilegeError(err, absl::StrCat("loading the XDP steering program", LogTail(log)));
    }
    return absl::ErrnoToStatus(err, absl::StrCat("loading the XDP steering program (verifier "
                                                 "or kernel refused it)", LogTail(log)));
  }
  self->prog_fd_ = bpf_program__fd(prog);
  self->xsks_map_fd_ = bpf_map__fd(skel.maps.xsks_map);
  self->counters_map_fd_ = bpf_map__fd(skel.maps.mr_xdp_counters);
  bpf_prog_info info = {};
  uint32_t info_len = sizeof(info);
  if (bpf_obj_get_info_by_fd(self->prog_fd_, &info, &info_len) == 0) self->prog_id_ = info.id;

  // Attach. UPDATE_IF_NOEXIST: never replace a program someone else attached.
  XdpMode mode = options.mode == XdpMode::kAuto ? XdpMode::kNative : options.mode;
  int rc = bpf_xdp_attach(self->ifindex_, self->prog_fd_,
                          XDP_FLAGS_UPDATE_IF_NOEXIST | ModeFlag(mode), nullptr);
  if (rc == -EOPNOTSUPP && options.mode == XdpMode::kAuto) {
    mode = XdpMode::kGeneric;
    rc = bpf_xdp_attach(self->ifindex_, self->prog_fd_,
                        XDP_FLAGS_UPDATE_IF_NOEXIST | ModeFlag(mode), nullptr);
  }
  if (rc != 0) return AttachError(-rc, self->ifname_, mode, options.frags, log);
  self->attached_ = true;
  self->attached_mode_ = mode;
  return self;
}

XdpSteering::~XdpSteering() {
  std::string discarded;  // a failed detach has no one to tell; keep libbpf off stderr
  ScopedLibbpfCapture capture(&discarded);
  if (attached_) {
    // Only if ours is still the attached program (libbpf adds XDP_FLAGS_REPLACE for
    // old_prog_fd). Failure (interface gone, replaced) leaves nothing of ours to detach.
    bpf_xdp_attach_opts opts = {};
    opts.sz = sizeof(opts);
    opts.old_prog_fd = prog_fd_;
    bpf_xdp_detach(ifindex_, ModeFlag(attached_mode_), &opts);
  }
  if (skel_ != nullptr) xdp_steer__destroy(skel_);
}

absl::Status XdpSteering::RegisterSocket(uint32_t queue_id, int xsk_fd) {
  if (queue_id >= max_queues_) {
    return absl::OutOfRangeError(absl::StrFormat(
        "queue %u is beyond the XSKMAP's %u entries: raise XdpSteering::Options::max_queues",
        queue_id, max_queues_));
  }
  uint32_t value = static_cast<uint32_t>(xsk_fd);
  if (bpf_map_update_elem(xsks_map_fd_, &queue_id, &value, BPF_ANY) != 0) {
    int err = errno;
    switch (err) {
      case EOPNOTSUPP:
      case EINVAL:
      case ENOTSOCK:
        return absl::InvalidArgumentError(absl::StrFormat(
            "registering fd %d for queue %u of %s: %s: the fd must be an AF_XDP socket with its "
            "UMEM, fill and RX rings set up, bound to this interface and queue",
            xsk_fd, queue_id, ifname_, strerror(err)));
      case EPERM:
      case EACCES:
        return PrivilegeError(err, "updating the XSKMAP");
      default:
        return absl::ErrnoToStatus(
            err, absl::StrFormat("registering AF_XDP socket for queue %u of %s", queue_id,
                                 ifname_));
    }
  }
  return absl::OkStatus();
}

absl::Status XdpSteering::UnregisterSocket(uint32_t queue_id) {
  if (queue_id >= max_queues_) {
    return absl::OutOfRangeError(absl::StrFormat(
        "queue %u is beyond the XSKMAP's %u entries", queue_id, max_queues_));
  }
  if (bpf_map_delete_elem(xsks_map_fd_, &queue_id) != 0) {
    int err = errno;
    return absl::ErrnoToStatus(
        err, absl::StrFormat("unregistering the AF_XDP socket of queue %u of %s", queue_id,
                             ifname_));
  }
  return absl::OkStatus();
}

absl::StatusOr<XdpSteeringCounters> XdpSteering::Counters() const {
  int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return absl::ErrnoToStatus(-ncpu, "counting possible CPUs");
  // A per-CPU lookup fills one value per possible CPU, each rounded up to 8 bytes (ours: 80).
  std::vector<mr_xdp_counters> per_cpu(static_cast<size_t>(ncpu));
  uint32_t key = 0;
  if (bpf_map_lookup_elem(counters_map_fd_, &key, per_cpu.data()) != 0) {
    int err = errno;
    return absl::ErrnoToStatus(err, "reading the XDP steering counters");
  }
  XdpSteeringCounters sum;
  for (const mr_xdp_counters& c : per_cpu) {
    sum.redirected += c.redirected;
    sum.pass_no_socket += c.pass_no_socket;
    sum.drop_no_socket += c.drop_no_socket;
    sum.drop_truncated += c.drop_truncated;
    sum.drop_bad_version += c.drop_bad_version;
    sum.pass_not_ip += c.pass_not_ip;
    sum.pass_not_udp += c.pass_not_udp;
    sum.pass_other_port += c.pass_other_port;
    sum.pass_fragment += c.pass_fragment;
    sum.pass_malformed += c.pass_malformed;
  }
  return sum;
}

}  // namespace metaroce::io
