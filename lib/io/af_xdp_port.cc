#include "lib/io/af_xdp_port.h"

#include <linux/if_xdp.h>
#include <net/if.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xdp/xsk.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "lib/io/interface_info.h"
#include "lib/io/neighbor.h"

// The ring-drop probe gathers its arguments with a syscall, so it runs only while traced: this
// unit's probes have semaphores (lib/core/probes.h), defined here.
#define MR_PROBES_WITH_SEMAPHORES 1
#include "lib/core/probes.h"
MR_PROBE_SEMAPHORE(xsk_tx_ring_full)
MR_PROBE_SEMAPHORE(xsk_rx_dropped)
MR_PROBE_SEMAPHORE(xsk_ring_drops)

// Multi-buffer AF_XDP (Linux 6.6); Debian 12's uapi headers are 6.1's.
#ifndef XDP_USE_SG
#define XDP_USE_SG (1 << 4)
#endif
#ifndef XDP_PKT_CONTD
#define XDP_PKT_CONTD (1 << 0)
#endif

#ifndef SO_PREFER_BUSY_POLL
#define SO_PREFER_BUSY_POLL 69
#endif
#ifndef SO_BUSY_POLL_BUDGET
#define SO_BUSY_POLL_BUDGET 70
#endif

namespace metaroce::io {

struct AfXdpPort::Rings {
  xsk_ring_prod fill{};
  xsk_ring_cons completion{};
  xsk_ring_cons rx{};
  xsk_ring_prod tx{};
};

namespace {

std::string MemlockFix() {
  return "UMEM pages are pinned against RLIMIT_MEMLOCK: raise it (`ulimit -l unlimited`, "
         "LimitMEMLOCK=infinity, or AfXdpPort::RaiseMemlockLimit()) or grant CAP_IPC_LOCK";
}

uint32_t NextPowerOfTwo(uint32_t v) { return std::bit_ceil(std::max(v, 1u)); }

// The kernel chains at most MAX_SKB_FRAGS (17) + 1 buffers per packet.
constexpr uint32_t kMaxChain = 18;

}  // namespace

absl::StatusOr<uint64_t> AfXdpPort::RaiseMemlockLimit() {
  rlimit limit{RLIM_INFINITY, RLIM_INFINITY};
  if (setrlimit(RLIMIT_MEMLOCK, &limit) == 0) return UINT64_MAX;
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return absl::ErrnoToStatus(errno, "getrlimit");
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_MEMLOCK, &limit) != 0) {
    return absl::ErrnoToStatus(errno, "setrlimit(RLIMIT_MEMLOCK) to the hard limit");
  }
  return limit.rlim_cur == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(limit.rlim_cur);
}

AfXdpPort::AfXdpPort(Options options) : options_(std::move(options)), rings_(new Rings) {}

AfXdpPort::~AfXdpPort() {
  if (xsk_ != nullptr) xsk_socket__delete(xsk_);
  if (umem_ != nullptr) xsk_umem__delete(umem_);
  if (umem_area_ != nullptr) munmap(umem_area_, umem_bytes_);
}

absl::StatusOr<std::unique_ptr<AfXdpPort>> AfXdpPort::Open(Options options) {
  std::unique_ptr<AfXdpPort> port(new AfXdpPort(std::move(options)));
  absl::Status status = port->Init();
  if (!status.ok()) return status;
  return port;
}

absl::Status AfXdpPort::Init() {
  const Options& o = options_;
  if (o.frame_size != 2048 && o.frame_size != 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame_size must be 2048 or 4096 bytes, not ", o.frame_size));
  }
  if (o.frame_count < 4 || o.ring_size == 0 || !std::has_single_bit(o.ring_size) ||
      o.batch_size == 0) {
    return absl::InvalidArgumentError(
        "frame_count must be >= 4, ring_size a power of two, batch_size > 0");
  }
  if (o.multi_buffer) {
    if (o.max_frame_bytes < 64 || o.max_frame_bytes > 65535 + 18 ||
        o.max_frame_bytes > o.frame_size * kMaxChain) {
      return absl::InvalidArgumentError(absl::StrCat(
          "multi_buffer needs max_frame_bytes in 64..65553 and at most ", kMaxChain,
          " frames of ", o.frame_size, " bytes, not ", o.max_frame_bytes));
    }
    if (o.frame_count - o.frame_count / 2 < (o.max_frame_bytes + o.frame_size - 1) / o.frame_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "frame_count ", o.frame_count, ": half of it transmits, fewer frames than one ",
          o.max_frame_bytes, "-byte frame needs"));
    }
  }
  absl::StatusOr<InterfaceInfo> info = ReadInterfaceInfo(o.ifname);
  if (!info.ok()) return info.status();
  ifindex_ = info->index;
  if (o.queue_id >= info->rx_queue_count) {
    return absl::NotFoundError(absl::StrCat(
        o.ifname, " has ", info->rx_queue_count, " receive queue(s); queue ", o.queue_id,
        " does not exist (add channels with `ethtool -L`, or veth numrxqueues/numtxqueues)"));
  }
  local_mac_ = o.local_mac.is_zero() ? info->mac : o.local_mac;
  if (o.local_ip) {
    local_ip_ = *o.local_ip;
  } else if (!info->ipv4.empty()) {
    local_ip_ = info->ipv4.front().address;
  } else if (!info->ipv6.empty()) {
    local_ip_ = info->ipv6.front().address;
  } else {
    return absl::FailedPreconditionError(
        absl::StrCat(o.ifname, " has no IP address: add one (`ip addr add`) or set local_ip"));
  }
  if (o.resolve_next_hop) {
    resolver_ = o.resolve_next_hop;
  } else {
    auto table = std::make_shared<NeighborTable>(NeighborTable::Options{.ifindex = ifindex_});
    resolver_ = [table](const IpAddress& ip) { return table->Resolve(ip); };
  }

  if (absl::Status s = MapUmem(); !s.ok()) return s;
  if (absl::Status s = CreateSocket(); !s.ok()) return s;

  // Half the frames receive (all in the fill ring now), half transmit.
  const uint32_t rx_frames = o.frame_count / 2;
  for (uint32_t i = rx_frames; i < o.frame_count; ++i) {
    free_tx_frames_.push_back(static_cast<uint64_t>(i) * o.frame_size);
  }
  fill_backlog_.reserve(rx_frames);
  for (uint32_t i = 0; i < rx_frames; ++i) {
    fill_backlog_.push_back(static_cast<uint64_t>(i) * o.frame_size);
  }
  RefillFillRing();
  if (!fill_backlog_.empty()) {
    return absl::InternalError("fill ring smaller than the receive frames (bug)");
  }

  if (!zero_copy_) SetTxBudget();
  if (o.busy_poll) {
    const int one = 1;
    const int usecs = static_cast<int>(o.busy_poll_usecs);
    const int budget = static_cast<int>(o.batch_size);
    std::string failed;
    if (setsockopt(xsk_fd_, SOL_SOCKET, SO_PREFER_BUSY_POLL, &one, sizeof one) != 0) {
      failed = absl::StrCat("SO_PREFER_BUSY_POLL: ", std::strerror(errno));
    } else if (setsockopt(xsk_fd_, SOL_SOCKET, SO_BUSY_POLL, &usecs, sizeof usecs) != 0) {
      failed = absl::StrCat("SO_BUSY_POLL: ", std::strerror(errno));
    } else if (setsockopt(xsk_fd_, SOL_SOCKET, SO_BUSY_POLL_BUDGET, &budget, sizeof budget) !=
               0) {
      failed = absl::StrCat("SO_BUSY_POLL_BUDGET: ", std::strerror(errno));
    }
    busy_poll_ = failed.empty();
    busy_poll_state_ = busy_poll_ ? "busy_poll" : "busy_poll unsupported (" + failed + ")";
  }
  return absl::OkStatus();
}

void AfXdpPort::SetTxBudget() {
  // Each copy-mode sendto() pays a system call, the socket's TX lock and a softirq run; with
  // the kernel's 32 descriptors a call, a jumbo frame of three UMEM frames moved ~10 packets a
  // call (docs/performance.md: "Datapath decisions").
#ifdef XDP_MAX_TX_SKB_BUDGET
  constexpr int kOption = XDP_MAX_TX_SKB_BUDGET;
#else
  constexpr int kOption = 9;  // <linux/if_xdp.h> since Linux 6.17; Debian 12's headers predate it
#endif
  const uint32_t want = options_.tx_budget == 0 ? options_.ring_size : options_.tx_budget;
  if (setsockopt(xsk_fd_, SOL_XDP, kOption, &want, sizeof want) == 0) {
    tx_budget_ = want;
    return;
  }
  // ENOPROTOOPT: a kernel before 6.17; EACCES: outside 32..the TX ring's size.
  tx_budget_refusal_ = absl::StrCat("XDP_MAX_TX_SKB_BUDGET ", want, ": ", std::strerror(errno));
}

absl::Status AfXdpPort::MapUmem() {
  umem_bytes_ = static_cast<size_t>(options_.frame_count) * options_.frame_size;
  constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE;
  if (options_.huge_pages) {
    constexpr size_t kHugePage = 2u << 20;
    const size_t rounded = (umem_bytes_ + kHugePage - 1) / kHugePage * kHugePage;
    void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, kFlags | MAP_HUGETLB, -1, 0);
    if (p != MAP_FAILED) {
      umem_area_ = p;
      umem_bytes_ = rounded;
      umem_huge_pages_ = true;
      return absl::OkStatus();
    }
  }
  void* p = mmap(nullptr, umem_bytes_, PROT_READ | PROT_WRITE, kFlags, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mmap of a ", umem_bytes_, "-byte UMEM"));
  }
  umem_area_ = p;
  return absl::OkStatus();
}

absl::Status AfXdpPort::CreateSocket() {
  const Options& o = options_;
  const uint32_t rx_frames = o.frame_count / 2;
  const uint32_t tx_frames = o.frame_count - rx_frames;
  xsk_umem_config umem_config{};
  umem_config.fill_size = NextPowerOfTwo(rx_frames);
  umem_config.comp_size = NextPowerOfTwo(tx_frames);
  umem_config.frame_size = o.frame_size;
  umem_config.frame_headroom = 0;
  umem_config.flags = 0;

  xsk_socket_config socket_config{};
  socket_config.rx_size = o.ring_size;
  socket_config.tx_size = o.ring_size;
  socket_config.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
  socket_config.xdp_flags = 0;

  std::vector<uint16_t> modes;
  if (o.zero_copy != ZeroCopy::kOff) modes.push_back(XDP_ZEROCOPY);
  if (o.zero_copy != ZeroCopy::kOn) modes.push_back(XDP_COPY);

  const auto deadline = std::chrono::steady_clock::now() + o.busy_retry_budget;
  for (size_t mode_index = 0; mode_index < modes.size();) {
    // A fresh UMEM per attempt: a failed xsk_socket__create leaves the UMEM's rings in a state
    // libxdp does not promise to reuse.
    int err = xsk_umem__create(&umem_, umem_area_, umem_bytes_, &rings_->fill,
                               &rings_->completion, &umem_config);
    if (err != 0) {
      umem_ = nullptr;
      if (err == -ENOMEM || err == -EPERM || err == -EAGAIN) {
        return absl::ResourceExhaustedError(
            absl::StrCat("registering a ", umem_bytes_, "-byte UMEM failed (",
                         std::strerror(-err), "): ", MemlockFix()));
      }
      return absl::ErrnoToStatus(-err, "xsk_umem__create");
    }
    socket_config.bind_flags = static_cast<uint16_t>(
        modes[mode_index] | (o.need_wakeup ? XDP_USE_NEED_WAKEUP : 0) |
        (o.multi_buffer ? XDP_USE_SG : 0));
    err = xsk_socket__create(&xsk_, o.ifname.c_str(), o.queue_id, umem_, &rings_->rx,
                             &rings_->tx, &socket_config);
    if (err == 0) {
      zero_copy_ = modes[mode_index] == XDP_ZEROCOPY;
      xsk_fd_ = xsk_socket__fd(xsk_);
      return absl::OkStatus();
    }
    xsk_ = nullptr;
    xsk_umem__delete(umem_);
    umem_ = nullptr;
    if (err == -EBUSY && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (err == -EBUSY) {
      return absl::UnavailableError(absl::StrCat(
          "queue ", o.queue_id, " of ", o.ifname,
          " is busy: another AF_XDP socket is bound to it (close it, or use another queue); "
          "still busy after retrying for ",
          std::chrono::duration_cast<std::chrono::milliseconds>(o.busy_retry_budget).count(),
          " ms"));
    }
    if (modes[mode_index] == XDP_ZEROCOPY && (err == -EOPNOTSUPP || err == -EINVAL)) {
      zero_copy_refusal_ = std::strerror(-err);
      if (mode_index + 1 < modes.size()) {
        ++mode_index;  // kAuto: fall back to copy mode
        continue;
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "the driver of ", o.ifname, " refuses AF_XDP zero-copy (", zero_copy_refusal_,
          "): use zero_copy auto or off (copy mode)"));
    }
    if (o.multi_buffer && (err == -EINVAL || err == -EOPNOTSUPP)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "AF_XDP socket on ", o.ifname, " queue ", o.queue_id, " with XDP_USE_SG: ",
          std::strerror(-err), ": multi-buffer AF_XDP needs Linux 6.6 or later (and, in "
          "zero-copy mode, a driver that supports it); lower the MTU to one UMEM frame"));
    }
    if (err == -ENOMEM || err == -EPERM) {
      return absl::ResourceExhaustedError(absl::StrCat("AF_XDP socket on ", o.ifname, " queue ",
                                                       o.queue_id, ": ", std::strerror(-err),
                                                       ". ", MemlockFix(),
                                                       "; opening XSKs needs CAP_NET_RAW"));
    }
    return absl::ErrnoToStatus(-err, absl::StrCat("xsk_socket__create on ", o.ifname, " queue ",
                                                  o.queue_id));
  }
  return absl::InternalError("no AF_XDP bind mode to try (bug)");
}

void AfXdpPort::RefillFillRing() {
  if (fill_backlog_.empty()) return;
  uint32_t index = 0;
  uint32_t n = static_cast<uint32_t>(fill_backlog_.size());
  const uint32_t free_slots = xsk_prod_nb_free(&rings_->fill, n);
  n = std::min(n, free_slots);
  if (n == 0 || xsk_ring_prod__reserve(&rings_->fill, n, &index) != n) return;
  const size_t first = fill_backlog_.size() - n;
  for (uint32_t i = 0; i < n; ++i) {
    *xsk_ring_prod__fill_addr(&rings_->fill, index + i) = fill_backlog_[first + i];
  }
  xsk_ring_prod__submit(&rings_->fill, n);
  fill_backlog_.resize(first);
  KickFillRing();
}

void AfXdpPort::KickFillRing() {
  // With need_wakeup the kernel sets the flag when it ran out of fill entries and stopped; a
  // receive-side syscall restarts it (zero-copy drivers; harmless in copy mode).
  if (options_.need_wakeup && xsk_ring_prod__needs_wakeup(&rings_->fill)) {
    recvfrom(xsk_fd_, nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
  }
}

void AfXdpPort::ReclaimCompletions() {
  uint32_t index = 0;
  const uint32_t done = xsk_ring_cons__peek(&rings_->completion, options_.frame_count, &index);
  if (done == 0) return;
  for (uint32_t i = 0; i < done; ++i) {
    free_tx_frames_.push_back(*xsk_ring_cons__comp_addr(&rings_->completion, index + i));
  }
  xsk_ring_cons__release(&rings_->completion, done);
  tx_in_flight_ -= std::min(tx_in_flight_, done);
}

absl::StatusOr<MacAddress> AfXdpPort::NextHop(const IpAddress& destination) {
  if (last_next_hop_uses_ > 0 && destination == last_destination_) {
    --last_next_hop_uses_;
    return last_next_hop_;
  }
  absl::StatusOr<MacAddress> mac = resolver_(destination);
  last_next_hop_uses_ = 0;
  if (mac.ok()) {
    last_destination_ = destination;
    last_next_hop_ = *mac;
    last_next_hop_uses_ = kResolveEvery - 1;
  }
  return mac;
}

bool AfXdpPort::Send(const TxPacket& packet) {
  if (free_tx_frames_.empty()) ReclaimCompletions();
  if (free_tx_frames_.empty()) {
    ++stats_.tx_ring_full;
    MR_PROBE4(xsk_tx_ring_full, ifindex_, options_.queue_id, 0, tx_in_flight_);
    return false;
  }
  absl::StatusOr<MacAddress> next_hop = NextHop(packet.dst);
  if (!next_hop.ok()) {
    ++stats_.tx_unroutable;
    return true;
  }
  FrameAddresses a;
  a.src_mac = local_mac_;
  a.dst_mac = *next_hop;
  a.vlan_tci = options_.vlan_tci;
  a.src_ip = local_ip_;
  a.dst_ip = packet.dst;
  a.src_port = packet.src_port;
  a.dst_port = packet.dst_port;
  a.ect = packet.ect;
  a.ttl = options_.ttl;
  if (options_.multi_buffer &&
      FrameHeaderBytes(a) + packet.headers.size() + packet.payload.size() > options_.frame_size) {
    return SendChain(a, packet);
  }
  const uint64_t addr = free_tx_frames_.back();
  std::span<std::byte> frame(static_cast<std::byte*>(xsk_umem__get_data(umem_area_, addr)),
                             options_.frame_size);
  absl::StatusOr<size_t> length = BuildFrame(frame, a, packet.headers, packet.payload);
  if (!length.ok()) {
    // Larger than a frame, or another address family than the port's: never sendable as is.
    ++stats_.tx_unroutable;
    return true;
  }
  uint32_t index = 0;
  if (xsk_ring_prod__reserve(&rings_->tx, 1, &index) != 1) {
    ++stats_.tx_ring_full;
    MR_PROBE4(xsk_tx_ring_full, ifindex_, options_.queue_id, 1, tx_in_flight_);
    return false;
  }
  free_tx_frames_.pop_back();
  xdp_desc* desc = xsk_ring_prod__tx_desc(&rings_->tx, index);
  desc->addr = addr;
  desc->len = static_cast<uint32_t>(*length);
  desc->options = 0;
  ++tx_reserved_unsubmitted_;
  ++stats_.tx_packets;
  stats_.tx_bytes += packet.headers.size() + packet.payload.size();
  return true;
}

bool AfXdpPort::SendChain(const FrameAddresses& a, const TxPacket& packet) {
  // The headers go into the first frame, the payload straight from the caller's buffer into the
  // frames after them, copied and summed (UDP checksum) in one pass.
  const uint32_t fs = options_.frame_size;
  const size_t head = FrameHeaderBytes(a) + packet.headers.size();
  const size_t length = head + packet.payload.size();
  if (length > options_.max_frame_bytes) {
    ++stats_.tx_unroutable;  // never sendable as is
    return true;
  }
  const uint32_t frames = static_cast<uint32_t>((length + fs - 1) / fs);
  if (free_tx_frames_.size() < frames) ReclaimCompletions();
  if (free_tx_frames_.size() < frames) {
    ++stats_.tx_ring_full;
    MR_PROBE4(xsk_tx_ring_full, ifindex_, options_.queue_id, frames, tx_in_flight_);
    return false;
  }
  // Everything is written into free frames before any is taken or any ring slot reserved: a
  // refusal leaves nothing to undo (the frames stay free). Frame i is the i-th from the back.
  const auto frame_at = [&](uint32_t i) {
    return static_cast<std::byte*>(
        xsk_umem__get_data(umem_area_, free_tx_frames_[free_tx_frames_.size() - 1 - i]));
  };
  std::array<uint32_t, kMaxChain> lengths{};  // frames <= kMaxChain (Validate)
  uint16_t sum = 0;
  size_t from = 0;  // payload bytes copied
  for (uint32_t i = 0; i < frames; ++i) {
    const size_t at = i == 0 ? head : 0;
    const size_t n = std::min<size_t>(fs - at, packet.payload.size() - from);
    sum = CombineSums(sum, from, CopyAndSum(frame_at(i) + at, packet.payload.subspan(from, n)));
    from += n;
    lengths[i] = static_cast<uint32_t>(at + n);
  }
  if (!BuildFrameHead(std::span<std::byte>(frame_at(0), fs), a, packet.headers,
                      packet.payload.size(), sum)
           .ok()) {
    ++stats_.tx_unroutable;  // another address family, or headers beyond a frame
    return true;
  }
  uint32_t index = 0;
  if (xsk_ring_prod__reserve(&rings_->tx, frames, &index) != frames) {
    ++stats_.tx_ring_full;
    MR_PROBE4(xsk_tx_ring_full, ifindex_, options_.queue_id, frames, tx_in_flight_);
    return false;
  }
  for (uint32_t i = 0; i < frames; ++i) {
    const uint64_t addr = free_tx_frames_.back();
    free_tx_frames_.pop_back();
    xdp_desc* desc = xsk_ring_prod__tx_desc(&rings_->tx, index + i);
    desc->addr = addr;
    desc->len = lengths[i];
    desc->options = i + 1 < frames ? XDP_PKT_CONTD : 0;
  }
  tx_reserved_unsubmitted_ += frames;
  ++stats_.tx_packets;
  stats_.tx_bytes += packet.headers.size() + packet.payload.size();
  return true;
}

void AfXdpPort::Flush() {
  if (tx_reserved_unsubmitted_ > 0) {
    xsk_ring_prod__submit(&rings_->tx, tx_reserved_unsubmitted_);
    tx_in_flight_ += tx_reserved_unsubmitted_;
    tx_reserved_unsubmitted_ = 0;
  }
  KickTx();
  ReclaimCompletions();
}

void AfXdpPort::KickTx() {
  // Descriptors the kernel has not consumed yet: producer - consumer of the TX ring.
  auto unconsumed = [this] {
    return *rings_->tx.producer - __atomic_load_n(rings_->tx.consumer, __ATOMIC_ACQUIRE);
  };
  // Copy mode transmits only inside sendto() and at most tx_budget_ frames per call (EAGAIN:
  // more remain), so kick until drained. Zero-copy with need_wakeup: only when the driver asks.
  const bool must_kick = !zero_copy_ || !options_.need_wakeup ||
                         xsk_ring_prod__needs_wakeup(&rings_->tx);
  if (!must_kick) return;
  uint32_t left = unconsumed();
  // Bounded: one kick per budget of descriptors plus slack; a kernel making no progress
  // (ENOBUFS, device busy) is retried by the next Flush().
  int kicks_left = static_cast<int>(left / tx_budget_) + 4;
  while (left > 0 && kicks_left-- > 0) {
    const ssize_t r = sendto(xsk_fd_, nullptr, 0, MSG_DONTWAIT, nullptr, 0);
    if (r < 0 && errno != EAGAIN && errno != EBUSY && errno != ENOBUFS && errno != EINTR) {
      break;  // ENETDOWN, ENXIO: the descriptors wait in the ring for the next Flush()
    }
    const uint32_t now_left = unconsumed();
    if (now_left == left && r < 0 && errno != EAGAIN) break;
    left = now_left;
    if (left > 0) ReclaimCompletions();
  }
}

size_t AfXdpPort::Receive(std::span<RxPacket> out) {
  if (MR_PROBE_ENABLED(xsk_ring_drops)) {
    if (!probe_baseline_ || (++probe_polls_ & 255) == 0) ProbeRingDrops();
  } else {
    probe_baseline_ = false;
  }
  if (!fill_backlog_.empty()) RefillFillRing();
  uint32_t want = static_cast<uint32_t>(std::min<size_t>(out.size(), options_.batch_size));
  if (options_.multi_buffer) want = std::max(want, kMaxChain);  // a whole chain fits a peek
  uint32_t index = 0;
  const uint32_t got = xsk_ring_cons__peek(&rings_->rx, want, &index);
  if (got == 0) {
    KickFillRing();
    if (busy_poll_) {
      recvfrom(xsk_fd_, nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);  // drives the busy poll
    }
    return 0;
  }
  // The kernel wrote these descriptors and frames on another CPU: each first touch brings a
  // cache line over, and one after the other they were most of the port's receive time (perf
  // annotate at 64-byte messages: 60 % of Receive's samples on the first descriptor field read,
  // 91 % of ParseFrame's on the frame's first load). Asked for all at once, they overlap.
  for (uint32_t k = 0; k < got; ++k) {
    const xdp_desc* desc = xsk_ring_cons__rx_desc(&rings_->rx, index + k);
    const auto* data = static_cast<const char*>(
        xsk_umem__get_data(umem_area_, xsk_umem__add_offset_to_addr(desc->addr)));
    __builtin_prefetch(data);
    __builtin_prefetch(data + 64);  // the MetaRoCE header after the 42 bytes of Ethernet/IP/UDP
  }
  const FrameFilter filter{.port = options_.udp_port,
                           .verify_udp_checksum = options_.verify_udp_checksum};
  size_t accepted = 0;
  uint32_t consumed = 0;
  ParsedFrame parsed;
  while (consumed < got && accepted < out.size()) {
    const xdp_desc* desc = xsk_ring_cons__rx_desc(&rings_->rx, index + consumed);
    if (desc->options & XDP_PKT_CONTD) {
      // A chain (multi-buffer): its descriptors up to the one without XDP_PKT_CONTD.
      const xdp_desc* chain[kMaxChain];
      uint32_t n = 0;
      bool complete = false;
      while (consumed + n < got && n < kMaxChain) {
        chain[n] = xsk_ring_cons__rx_desc(&rings_->rx, index + consumed + n);
        if (!(chain[n++]->options & XDP_PKT_CONTD)) {
          complete = true;
          break;
        }
      }
      if (!complete && n < kMaxChain) break;  // its end is not in the ring yet: next time
      consumed += n;  // a chain longer than the kernel makes is dropped by ReceiveChain
      if (ReceiveChain(std::span<const xdp_desc* const>(chain, n), &out[accepted])) ++accepted;
      continue;
    }
    ++consumed;
    const uint64_t addr = xsk_umem__add_offset_to_addr(desc->addr);
    const uint64_t frame_base = addr - addr % options_.frame_size;
    std::span<const std::byte> frame(
        static_cast<const std::byte*>(xsk_umem__get_data(umem_area_, addr)), desc->len);
    if (const FrameVerdict v = ParseFrame(frame, filter, &parsed); v != FrameVerdict::kOk) {
      MR_PROBE4(xsk_rx_dropped, ifindex_, options_.queue_id, desc->len, static_cast<uint8_t>(v));
      ++stats_.rx_dropped;
      fill_backlog_.push_back(frame_base);
      continue;
    }
    RxPacket& p = out[accepted++];
    p.payload = parsed.payload;
    p.src = parsed.src_ip;
    p.src_port = parsed.src_port;
    p.dst_port = parsed.dst_port;
    p.ce = parsed.ce();
    p.cookie = frame_base;
    ++stats_.rx_packets;
    stats_.rx_bytes += parsed.payload.size();
  }
  if (consumed < got) xsk_ring_cons__cancel(&rings_->rx, got - consumed);
  if (consumed > 0) xsk_ring_cons__release(&rings_->rx, consumed);
  if (!fill_backlog_.empty()) RefillFillRing();
  return accepted;
}

bool AfXdpPort::ReceiveChain(std::span<const xdp_desc* const> chain, RxPacket* out) {
  // Every frame of the chain goes back to the fill ring at once: the packet is copied out.
  uint32_t slot = 0;
  if (free_assembled_.empty()) {
    slot = static_cast<uint32_t>(assembled_.size());
    assembled_.push_back(std::make_unique<std::byte[]>(options_.max_frame_bytes));
  } else {
    slot = free_assembled_.back();
    free_assembled_.pop_back();
  }
  std::byte* buffer = assembled_[slot].get();
  size_t length = 0;
  bool fits = !(chain.back()->options & XDP_PKT_CONTD);  // else longer than the kernel makes
  for (const xdp_desc* d : chain) {
    const uint64_t addr = xsk_umem__add_offset_to_addr(d->addr);
    if (fits && length + d->len <= options_.max_frame_bytes) {
      std::memcpy(buffer + length, xsk_umem__get_data(umem_area_, addr), d->len);
      length += d->len;
    } else {
      fits = false;
    }
    fill_backlog_.push_back(addr - addr % options_.frame_size);
  }
  ParsedFrame parsed;
  const FrameFilter filter{.port = options_.udp_port,
                           .verify_udp_checksum = options_.verify_udp_checksum};
  const FrameVerdict v =
      fits ? ParseFrame(std::span<const std::byte>(buffer, length), filter, &parsed)
           : FrameVerdict::kTruncated;
  if (v != FrameVerdict::kOk) {
    MR_PROBE4(xsk_rx_dropped, ifindex_, options_.queue_id, static_cast<uint32_t>(length),
              static_cast<uint8_t>(v));
    ++stats_.rx_dropped;
    free_assembled_.push_back(slot);
    return false;
  }
  out->payload = parsed.payload;
  out->src = parsed.src_ip;
  out->src_port = parsed.src_port;
  out->dst_port = parsed.dst_port;
  out->ce = parsed.ce();
  out->cookie = kAssembledCookie | slot;
  ++stats_.rx_packets;
  stats_.rx_bytes += parsed.payload.size();
  return true;
}

void AfXdpPort::Release(std::span<const RxPacket> packets) {
  for (const RxPacket& p : packets) {
    if (p.cookie & kAssembledCookie) {
      free_assembled_.push_back(static_cast<uint32_t>(p.cookie & ~kAssembledCookie));
    } else {
      fill_backlog_.push_back(p.cookie);
    }
  }
  RefillFillRing();
}

void AfXdpPort::ProbeRingDrops() {
  xdp_statistics xdp{};
  socklen_t length = sizeof xdp;
  if (getsockopt(xsk_fd_, SOL_XDP, XDP_STATISTICS, &xdp, &length) != 0) return;
  const uint64_t now[5] = {xdp.rx_dropped, xdp.rx_ring_full, xdp.rx_fill_ring_empty_descs,
                           xdp.rx_invalid_descs, xdp.tx_invalid_descs};
  uint64_t delta[5];
  bool grew = false;
  for (int i = 0; i < 5; ++i) {
    delta[i] = now[i] - probe_last_[i];
    grew = grew || delta[i] != 0;
    probe_last_[i] = now[i];
  }
  // The first reading of a tracing session is the baseline: drops before it are not reported.
  if (probe_baseline_ && grew) {
    // Six arguments: bpftrace 0.17 reads arg0..arg5 only (docs/tracing.md).
    MR_PROBE6(xsk_ring_drops, ifindex_, options_.queue_id, delta[0], delta[1], delta[2],
              delta[3] + delta[4]);
  }
  probe_baseline_ = true;
}

PortStats AfXdpPort::stats() const {
  PortStats s = stats_;
  xdp_statistics xdp{};
  socklen_t length = sizeof xdp;
  if (getsockopt(xsk_fd_, SOL_XDP, XDP_STATISTICS, &xdp, &length) == 0) {
    s.rx_ring_full = xdp.rx_ring_full;
    s.fill_ring_empty = xdp.rx_fill_ring_empty_descs;
    s.rx_invalid_descs = xdp.rx_invalid_descs;
    s.tx_invalid_descs = xdp.tx_invalid_descs;
    s.rx_kernel_dropped = xdp.rx_dropped;
  }
  return s;
}

PortFeatures AfXdpPort::features() const {
  return {.af_xdp = true,
          .zero_copy = zero_copy_,
          .need_wakeup = options_.need_wakeup,
          .busy_poll = busy_poll_,
          .multi_buffer = options_.multi_buffer};
}

std::string AfXdpPort::description() const {
  std::string d = absl::StrCat("af_xdp ", options_.ifname, " queue ", options_.queue_id,
                               zero_copy_ ? " zero-copy" : " copy-mode");
  if (!zero_copy_refusal_.empty()) {
    absl::StrAppend(&d, " (zero-copy refused: ", zero_copy_refusal_, ")");
  }
  if (options_.need_wakeup) absl::StrAppend(&d, " need_wakeup");
  if (!busy_poll_state_.empty()) absl::StrAppend(&d, " ", busy_poll_state_);
  if (umem_huge_pages_) absl::StrAppend(&d, " hugepages");
  if (options_.huge_pages && !umem_huge_pages_) absl::StrAppend(&d, " (no hugepages available)");
  if (!zero_copy_) {
    absl::StrAppend(&d, " tx_budget ", tx_budget_);
    if (!tx_budget_refusal_.empty()) absl::StrAppend(&d, " (", tx_budget_refusal_, ")");
  }
  absl::StrAppend(&d, " frame ", options_.frame_size);
  if (options_.multi_buffer) absl::StrAppend(&d, " multi-buffer ", options_.max_frame_bytes);
  return d;
}

}  // namespace metaroce::io
