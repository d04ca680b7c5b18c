#include "lib/api/port_factory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lib/api/exchange.h"
#include "lib/io/af_xdp_port.h"
#include "lib/io/frame.h"
#include "lib/io/interface_info.h"
#include "lib/io/udp_port.h"

namespace metaroce::api {
namespace {

// Above this L3 MTU a veth needs a frags XDP program (ENVIRONMENT.md), and that one XDP_USE_SG
// sockets: multi-buffer ports.
constexpr uint32_t kMaxLinearXdpMtu = 3506;

uint32_t IpUdpBytes(const io::IpAddress& a) {
  return (a.v6 ? io::kIpv6HeaderBytes : io::kIpv4HeaderBytes) + io::kUdpHeaderBytes;
}

}  // namespace

std::unique_ptr<io::PacketPort> MemoryPairBroker::Open(int side, int worker, int plane,
                                                       const io::IpAddress& local_ip) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto key = std::make_pair(worker, plane);
  auto& mine = pending_[side];
  if (auto it = mine.find(key); it != mine.end()) {
    std::unique_ptr<io::MemoryPort> p = std::move(it->second);
    mine.erase(it);
    return p;
  }
  io::MemoryPort::Options a{.local_ip = local_ip, .ring_capacity = 4096};
  io::MemoryPort::Options b{.local_ip = local_ip, .ring_capacity = 4096};
  auto [ours, theirs] = io::MemoryPort::CreatePair(a, b);
  pending_[1 - side][key] = std::move(theirs);
  return std::move(ours);
}

absl::StatusOr<std::unique_ptr<Datapath>> Datapath::Create(const DatapathOptions& options) {
  if (options.planes.empty()) return absl::InvalidArgumentError("a datapath needs 1+ planes");
  std::unique_ptr<Datapath> d(new Datapath);
  d->options_ = options;
  if (options.kind == PortKind::kMemory) {
    if (options.memory_broker == nullptr || options.memory_side < 0 || options.memory_side > 1) {
      return absl::InvalidArgumentError(
          "memory ports need DatapathOptions::memory_broker and memory_side 0 or 1 (or give "
          "Context::Create a PortFactory)");
    }
    for (size_t p = 0; p < options.planes.size(); ++p) {
      PlaneInfo pi;
      // Benchmarking range (RFC 2544), never routed: memory ports only print it.
      const std::string ip = options.planes[p].local_ip.empty()
                                 ? absl::StrCat("198.19.", 250 + p, ".", 1 + options.memory_side)
                                 : options.planes[p].local_ip;
      absl::StatusOr<io::IpAddress> a = io::IpAddress::Parse(ip);
      if (!a.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("plane ", p, " local_ip '", ip, "': ", a.status().message()));
      }
      pi.local_ip = *a;
      d->planes_.push_back(pi);
    }
    return d;
  }
  const uint32_t queues = std::max<uint32_t>(options.queues, 1);
  uint32_t max_mtu = 0;
  for (size_t p = 0; p < options.planes.size(); ++p) {
    PlaneInfo pi;
    pi.ifname = options.planes[p].ifname;
    absl::StatusOr<io::InterfaceInfo> info = io::ReadInterfaceInfo(pi.ifname);
    if (!info.ok()) {
      return absl::Status(info.status().code(),
                          absl::StrCat("plane ", p, ": ", info.status().message()));
    }
    pi.if_mtu = info->mtu;
    if (options.kind == PortKind::kAfXdp) {
      if (options.first_queue == 0 && info->rx_queue_count > queues) {
        // The steering program passes our packets on a queue without a socket to the kernel,
        // where nothing listens: they would all be lost.
        return absl::FailedPreconditionError(absl::StrCat(
            pi.ifname, " has ", info->rx_queue_count, " receive queues and AF_XDP sockets are "
            "opened on ", queues, " (one per worker): use ", info->rx_queue_count,
            " workers (one socket per queue), or reduce the queues (`ethtool -L ", pi.ifname,
            " combined ", queues, "`)"));
      }
    }
    max_mtu = std::max(max_mtu, info->mtu);
    if (!options.planes[p].local_ip.empty()) {
      absl::StatusOr<io::IpAddress> ip = io::IpAddress::Parse(options.planes[p].local_ip);
      if (!ip.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("plane ", p, " local_ip '",
                                                       options.planes[p].local_ip, "': ",
                                                       ip.status().message()));
      }
      pi.local_ip = *ip;
    } else if (!info->ipv4.empty()) {
      pi.local_ip = info->ipv4.front().address;
    } else {
      return absl::FailedPreconditionError(absl::StrCat(
          pi.ifname, " has no IPv4 address: give this host's address on plane ", p,
          " (PlaneOptions::local_ip)"));
    }
    d->planes_.push_back(pi);
  }
  if (options.kind != PortKind::kAfXdp) return d;

  const uint32_t max_frame = max_mtu + io::kEthernetHeaderBytes + io::kVlanTagBytes;
  d->multi_buffer_ = max_mtu > kMaxLinearXdpMtu;
  d->max_frame_bytes_ = max_frame;
  d->frame_size_ = max_frame <= 2048 ? 2048 : 4096;
  absl::StatusOr<uint64_t> memlock = io::AfXdpPort::RaiseMemlockLimit();
  if (!memlock.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot raise RLIMIT_MEMLOCK for the AF_XDP UMEM (", memlock.status().message(),
        "): run as root, grant CAP_IPC_LOCK, or `ulimit -l unlimited`"));
  }
  for (const PlaneInfo& pi : d->planes_) {
    io::XdpSteering::Options so;
    so.ifname = pi.ifname;
    so.port = options.udp_port;
    so.no_socket = io::XdpSteering::NoSocket::kPass;
    so.frags = d->multi_buffer_;
    absl::StatusOr<std::unique_ptr<io::XdpSteering>> s = io::XdpSteering::Load(so);
    if (!s.ok()) {
      return absl::Status(s.status().code(), absl::StrCat("loading the XDP steering program on ",
                                                          pi.ifname, ": ", s.status().message()));
    }
    d->steering_.push_back(*std::move(s));
  }
  return d;
}

Datapath::~Datapath() = default;

uint32_t Datapath::DefaultMtu() const {
  if (options_.kind == PortKind::kMemory) return 4096;
  uint32_t mtu = UINT32_MAX;
  for (const PlaneInfo& pi : planes_) {
    uint32_t m = pi.if_mtu - IpUdpBytes(pi.local_ip) - wire::kDataHeadersSize;
    // A datagram holds at most 65,535 bytes of IP packet whatever the link carries (lo: 65,536).
    m = std::min(m, pi.local_ip.v6 ? kMaxMtuIpv6 : kMaxMtuIpv4);
    if (options_.kind == PortKind::kAfXdp && !multi_buffer_) {
      const uint32_t frame_room = frame_size_ - io::kEthernetHeaderBytes - IpUdpBytes(pi.local_ip) -
                                  wire::kDataHeadersSize;
      m = std::min(m, frame_room);
    }
    mtu = std::min(mtu, m);
  }
  return mtu;
}

absl::StatusOr<std::unique_ptr<io::PacketPort>> Datapath::Open(const PortSpec& spec) {
  if (spec.plane < 0 || static_cast<size_t>(spec.plane) >= planes_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("plane ", spec.plane, " of a datapath with ",
                                                   planes_.size()));
  }
  const PlaneInfo& pi = planes_[spec.plane];
  switch (options_.kind) {
    case PortKind::kMemory:
      return options_.memory_broker->Open(options_.memory_side, spec.worker, spec.plane,
                                          pi.local_ip);
    case PortKind::kUdp: {
      io::UdpPort::Options o;
      o.local_ip = pi.local_ip;
      o.udp_port = spec.udp_port;
      o.buffer_bytes = std::max<uint32_t>(4096, spec.mtu + wire::kMaxHeadersSize + 64);
      absl::StatusOr<std::unique_ptr<io::UdpPort>> p = io::UdpPort::Open(o);
      if (!p.ok()) return p.status();
      return std::unique_ptr<io::PacketPort>(*std::move(p));
    }
    case PortKind::kAfXdp: {
      io::AfXdpPort::Options o;
      o.ifname = pi.ifname;
      o.queue_id = spec.queue;
      o.frame_size = frame_size_;
      o.multi_buffer = multi_buffer_;
      o.max_frame_bytes = max_frame_bytes_;
      o.local_ip = pi.local_ip;
      o.udp_port = spec.udp_port;
      absl::StatusOr<std::unique_ptr<io::AfXdpPort>> p = io::AfXdpPort::Open(o);
      if (!p.ok()) {
        return absl::Status(p.status().code(),
                            absl::StrCat("worker ", spec.worker, " plane ", spec.plane, ": ",
                                         p.status().message()));
      }
      if (absl::Status s = steering_.at(spec.plane)->RegisterSocket((*p)->queue_id(),
                                                                    (*p)->xsk_fd());
          !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("registering the AF_XDP socket of ",
                                                   pi.ifname, " queue ", spec.queue, ": ",
                                                   s.message()));
      }
      return std::unique_ptr<io::PacketPort>(*std::move(p));
    }
  }
  return absl::InternalError("unknown port kind");
}

std::vector<std::pair<std::string, io::XdpSteeringCounters>> Datapath::SteeringCounters() const {
  std::vector<std::pair<std::string, io::XdpSteeringCounters>> out;
  for (const auto& s : steering_) {
    absl::StatusOr<io::XdpSteeringCounters> c = s->Counters();
    out.emplace_back(s->ifname(), c.ok() ? *c : io::XdpSteeringCounters{});
  }
  return out;
}

std::vector<std::string> Datapath::SteeringDescriptions() const {
  std::vector<std::string> out;
  for (const auto& s : steering_) {
    out.push_back(absl::StrCat("xdp_steer on ", s->ifname(), " ",
                               std::string(io::XdpModeName(s->attached_mode())), " prog id ",
                               s->prog_id()));
  }
  return out;
}

}  // namespace metaroce::api
