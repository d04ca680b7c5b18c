#include "tools/perf/port_factory.h"

#include "absl/strings/str_cat.h"
#include "lib/io/af_xdp_port.h"
#include "lib/io/frame.h"
#include "lib/io/interface_info.h"
#include "lib/io/udp_uring_port.h"
#include "lib/wire/packet.h"

namespace metaroce::perf {
namespace {

// Above this L3 MTU a veth needs a frags XDP program (ENVIRONMENT.md), which needs XDP_USE_SG
// sockets; AfXdpPort does not bind those.
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

absl::StatusOr<std::unique_ptr<Datapath>> Datapath::Create(
    const PerfOptions& options, std::shared_ptr<MemoryPairBroker> broker, int side) {
  std::unique_ptr<Datapath> d(new Datapath);
  d->options_ = options;
  d->broker_ = std::move(broker);
  d->side_ = side;
  if (options.port_kind == PortKindFlag::kMemory) {
    for (int p = 0; p < options.planes; ++p) {
      PlaneConfig pc;
      // Benchmarking range (RFC 2544), never routed: memory ports only print it.
      absl::StatusOr<io::IpAddress> ip =
          io::IpAddress::Parse(absl::StrCat("198.19.", 250 + p, ".", 1 + side));
      pc.local_ip = *ip;
      d->planes_.push_back(pc);
    }
    return d;
  }
  uint32_t max_mtu = 0;
  for (size_t p = 0; p < options.interfaces.size(); ++p) {
    PlaneConfig pc;
    pc.ifname = options.interfaces[p];
    absl::StatusOr<io::InterfaceInfo> info = io::ReadInterfaceInfo(pc.ifname);
    if (!info.ok()) {
      return absl::Status(info.status().code(),
                          absl::StrCat("plane ", p, ": ", info.status().message()));
    }
    pc.if_mtu = info->mtu;
    if (options.port_kind == PortKindFlag::kXdp &&
        info->rx_queue_count > static_cast<uint32_t>(options.workers)) {
      // The steering program passes our packets on a queue without a socket to the kernel,
      // where nothing listens: they would all be lost.
      return absl::FailedPreconditionError(absl::StrCat(
          pc.ifname, " has ", info->rx_queue_count, " receive queues and mrperf opens AF_XDP "
          "sockets on ", options.workers, ": give --workers ", info->rx_queue_count,
          " (one socket per queue), or reduce the queues (`ethtool -L ", pc.ifname,
          " combined ", options.workers, "`)"));
    }
    max_mtu = std::max(max_mtu, info->mtu);
    if (!options.local_ips.empty()) {
      absl::StatusOr<io::IpAddress> ip = io::IpAddress::Parse(options.local_ips[p]);
      if (!ip.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("--local-ip ", options.local_ips[p], ": ",
                                                       ip.status().message()));
      }
      pc.local_ip = *ip;
    } else if (!info->ipv4.empty()) {
      pc.local_ip = info->ipv4.front().address;
    } else {
      return absl::FailedPreconditionError(absl::StrCat(
          pc.ifname, " has no IPv4 address: give its address with --local-ip (plane ", p, ")"));
    }
    d->planes_.push_back(pc);
  }
  if (options.port_kind != PortKindFlag::kXdp) return d;

  if (max_mtu > kMaxLinearXdpMtu) {
    return absl::FailedPreconditionError(absl::StrCat(
        "interface MTU ", max_mtu, " is above ", kMaxLinearXdpMtu,
        ": native XDP on veth needs a frags program and XDP_USE_SG sockets, which mrperf does "
        "not open; lower the MTU (`ip link set DEV mtu 3500`) or use --port-kind udp"));
  }
  d->frame_size_ = max_mtu + io::kEthernetHeaderBytes + io::kVlanTagBytes <= 2048 ? 2048 : 4096;
  absl::StatusOr<uint64_t> memlock = io::AfXdpPort::RaiseMemlockLimit();
  if (!memlock.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot raise RLIMIT_MEMLOCK for the AF_XDP UMEM (", memlock.status().message(),
        "): run as root, grant CAP_IPC_LOCK, or `ulimit -l unlimited`"));
  }
  for (const PlaneConfig& pc : d->planes_) {
    io::XdpSteering::Options so;
    so.ifname = pc.ifname;
    so.port = options.udp_port;
    so.no_socket = io::XdpSteering::NoSocket::kPass;
    absl::StatusOr<std::unique_ptr<io::XdpSteering>> s = io::XdpSteering::Load(so);
    if (!s.ok()) {
      return absl::Status(s.status().code(), absl::StrCat("loading the XDP steering program on ",
                                                          pc.ifname, ": ", s.status().message()));
    }
    d->steering_.push_back(*std::move(s));
  }
  return d;
}

Datapath::~Datapath() = default;

api::PortKind Datapath::api_kind() const {
  switch (options_.port_kind) {
    case PortKindFlag::kXdp: return api::PortKind::kAfXdp;
    case PortKindFlag::kUdp: return api::PortKind::kUdpUring;
    case PortKindFlag::kMemory: return api::PortKind::kMemory;
  }
  return api::PortKind::kMemory;
}

uint32_t Datapath::DefaultMtu() const {
  if (options_.port_kind == PortKindFlag::kMemory) return 4096;
  uint32_t mtu = UINT32_MAX;
  for (const PlaneConfig& pc : planes_) {
    uint32_t m = pc.if_mtu - IpUdpBytes(pc.local_ip) - wire::kDataHeadersSize;
    if (options_.port_kind == PortKindFlag::kXdp) {
      const uint32_t frame_room = frame_size_ - io::kEthernetHeaderBytes - IpUdpBytes(pc.local_ip) -
                                  wire::kDataHeadersSize;
      m = std::min(m, frame_room);
    }
    mtu = std::min(mtu, m);
  }
  return mtu;
}

absl::StatusOr<std::unique_ptr<io::PacketPort>> Datapath::Open(const api::PortSpec& spec) {
  const PlaneConfig& pc = planes_.at(spec.plane);
  switch (options_.port_kind) {
    case PortKindFlag::kMemory:
      if (broker_ == nullptr) return absl::InternalError("memory ports without a broker (bug)");
      return broker_->Open(side_, spec.worker, spec.plane, pc.local_ip);
    case PortKindFlag::kUdp: {
      io::UdpUringPort::Options o;
      o.local_ip = pc.local_ip;
      o.udp_port = spec.udp_port;
      o.buffer_bytes = std::max<uint32_t>(4096, spec.mtu + wire::kMaxHeadersSize + 64);
      absl::StatusOr<std::unique_ptr<io::UdpUringPort>> p = io::UdpUringPort::Open(o);
      if (!p.ok()) return p.status();
      return std::unique_ptr<io::PacketPort>(*std::move(p));
    }
    case PortKindFlag::kXdp: {
      io::AfXdpPort::Options o;
      o.ifname = pc.ifname;
      o.queue_id = spec.queue;
      o.frame_size = frame_size_;
      o.local_ip = pc.local_ip;
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
                                                   pc.ifname, " queue ", spec.queue, ": ",
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
                               std::string(io::XdpModeName(s->attached_mode())), " prog id ", s->prog_id()));
  }
  return out;
}

}  // namespace metaroce::perf
