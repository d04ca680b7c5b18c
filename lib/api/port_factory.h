// Where a Context's packet ports come from: the port factory type (what the engine asks for: the
// port of one worker on one plane) and Datapath, the factory over this host's interfaces that
// every application would otherwise rewrite:
//
//   kAfXdp     XdpSteering loaded on every plane's interface (one owner each, detached when the
//              Datapath goes); one AfXdpPort per (worker, plane) on queue first_queue + worker,
//              registered in that interface's XSKMAP. RLIMIT_MEMLOCK is raised before the first
//              UMEM.
//   kUdp  one UdpPort per (worker, plane) bound to the plane's address (kernel UDP
//              through io_uring: no privileges; one worker, since every port binds udp_port).
//   kMemory    MemoryPort pairs shared by two Datapaths of this process (side 0 and side 1 of one
//              MemoryPairBroker): the in-process loopback of tests and benchmarks.
//
// Context::Create(options) builds and owns a Datapath; an application that wants the interface
// facts first (address, MTU) creates one itself and hands it to Context::Create(options, datapath).
// A Datapath also serves ports to code that uses them without an engine (raw benchmarks).
//
// Threading: Datapath is not thread-safe: Create and Open from one thread at a time (Open is
// called from Context::Create's thread); the counters from any thread once set up.
// MemoryPairBroker is thread-safe. Errors: absl::Status naming the fix (root or capabilities,
// memlock, another XDP program, missing queue, MTU too large for a linear XDP program).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/io/ip_address.h"
#include "lib/io/memory_port.h"
#include "lib/io/packet_port.h"
#include "lib/io/xdp_steering.h"
#include "lib/wire/packet.h"

namespace metaroce::api {

enum class PortKind : uint8_t {
  kAfXdp,     // kernel bypass (lib/io/af_xdp_port.h)
  kUdp,  // kernel UDP through io_uring (lib/io/udp_port.h)
  kMemory,    // in-process (lib/io/memory_port.h): tests and benchmarks
};

struct PlaneOptions {
  std::string ifname;    // interface of this plane (unused by memory ports)
  // This host's address on the plane, IPv4 or IPv6 literal. Datapath and Context::Create(options)
  // accept it empty: the interface's first IPv4 address.
  std::string local_ip;
};

// What the port factory is asked for: the port of one worker on one plane.
struct PortSpec {
  int worker = 0;
  int plane = 0;
  uint32_t queue = 0;  // first_queue + worker
  std::string ifname;
  io::IpAddress local_ip;
  PortKind kind = PortKind::kAfXdp;
  uint16_t udp_port = 0;
  uint32_t mtu = 0;  // MetaRoCE payload bytes per packet
};
using PortFactory =
    std::function<absl::StatusOr<std::unique_ptr<io::PacketPort>>(const PortSpec& spec)>;

// Joins the memory ports of two in-process Datapaths: the first Open(side, worker, plane)
// creates the pair and keeps the other side's half for the matching Open.
class MemoryPairBroker {
 public:
  std::unique_ptr<io::PacketPort> Open(int side, int worker, int plane,
                                       const io::IpAddress& local_ip);

 private:
  std::mutex mu_;
  std::map<std::pair<int, int>, std::unique_ptr<io::MemoryPort>> pending_[2];
};

struct DatapathOptions {
  PortKind kind = PortKind::kAfXdp;
  // One per plane. kAfXdp/kUdp: ifname required, local_ip optional (see PlaneOptions).
  // kMemory: ifname unused; local_ip optional (default 198.19.250+plane.1+side, never routed).
  std::vector<PlaneOptions> planes;
  uint16_t udp_port = wire::kDefaultUdpPort;  // what the steering program redirects
  // kAfXdp: sockets per interface, on queues first_queue .. first_queue + queues - 1 (one per
  // engine worker: max(workers, 1)). An interface with receive queues outside that range is
  // refused when first_queue is 0: the steering program would pass our packets arriving there to
  // the kernel, where nothing listens.
  uint32_t queues = 1;
  uint32_t first_queue = 0;
  // kMemory only: the broker shared with the other in-process Datapath, and this one's side (0/1).
  std::shared_ptr<MemoryPairBroker> memory_broker;
  int memory_side = 0;
};

// Interface facts of one plane, as resolved by Datapath::Create.
struct PlaneInfo {
  std::string ifname;      // empty for memory ports
  io::IpAddress local_ip;
  uint32_t if_mtu = 0;     // L3 MTU of the interface (0: memory)
};

class Datapath {
 public:
  // Resolves the planes (interface addresses and MTUs) and, for kAfXdp, raises memlock and loads
  // the steering program on every interface.
  static absl::StatusOr<std::unique_ptr<Datapath>> Create(const DatapathOptions& options);
  // Detaches the steering programs (after the ports are gone, if they were closed first).
  ~Datapath();
  Datapath(const Datapath&) = delete;
  Datapath& operator=(const Datapath&) = delete;

  // The port of `spec.worker` on `spec.plane` (spec.queue is the AF_XDP queue).
  absl::StatusOr<std::unique_ptr<io::PacketPort>> Open(const PortSpec& spec);
  // Open() as a PortFactory; the Datapath must outlive the engine that calls it.
  PortFactory Factory() {
    return [this](const PortSpec& spec) { return Open(spec); };
  }

  PortKind kind() const { return options_.kind; }
  const std::vector<PlaneInfo>& planes() const { return planes_; }
  // MetaRoCE payload bytes per packet that fit every plane's MTU (and, without multi-buffer, an
  // AF_XDP frame); 4096 for memory ports.
  uint32_t DefaultMtu() const;
  // Steering counters per plane (kAfXdp; empty otherwise).
  std::vector<std::pair<std::string, io::XdpSteeringCounters>> SteeringCounters() const;
  // "xdp_steer on IF MODE prog id N" per plane (kAfXdp; empty otherwise).
  std::vector<std::string> SteeringDescriptions() const;
  // kAfXdp: frames span UMEM frames (jumbo MTUs; AfXdpPort::Options::multi_buffer).
  bool multi_buffer() const { return multi_buffer_; }
  // Detaches the steering programs now (also done by the destructor).
  void Detach() { steering_.clear(); }

 private:
  Datapath() = default;
  DatapathOptions options_;
  std::vector<PlaneInfo> planes_;
  std::vector<std::unique_ptr<io::XdpSteering>> steering_;  // per plane (kAfXdp)
  uint32_t frame_size_ = 2048;
  // kAfXdp above one page of MTU (veth: > 3506): the frags steering program and XDP_USE_SG
  // ports whose frames of up to max_frame_bytes_ span UMEM frames.
  bool multi_buffer_ = false;
  uint32_t max_frame_bytes_ = 0;
};

}  // namespace metaroce::api
