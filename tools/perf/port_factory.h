// The datapath mrperf runs on: the per-plane interfaces, the XDP steering program on each of
// them (AF_XDP), and the ports of every worker on every plane.
//
//   xdp     XdpSteering loaded on every plane's interface (one owner each, detached when this
//           object goes); AfXdpPort per (worker, plane) on queue = worker, registered in that
//           interface's XSKMAP. RLIMIT_MEMLOCK is raised before the first UMEM.
//   udp     UdpUringPort per (worker, plane) bound to the plane's address.
//   memory  MemoryPort pairs shared by two Datapaths of this process (side 0 and side 1 of one
//           MemoryPairBroker): the in-process loopback.
//
// Should move to lib/api (a PortFactory for ContextOptions, with the steering owned by the
// Context), so that every application does not rewrite it.
//
// Threading: not thread-safe; Open() is called from Context::Create's thread (or a raw test's).
// Errors: absl::Status naming the fix (root/capabilities, another XDP program, missing queue).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/api/context.h"
#include "lib/io/ip_address.h"
#include "lib/io/memory_port.h"
#include "lib/io/packet_port.h"
#include "lib/io/xdp_steering.h"
#include "tools/perf/options.h"

namespace metaroce::perf {

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

struct PlaneConfig {
  std::string ifname;      // empty for memory ports
  io::IpAddress local_ip;
  uint32_t if_mtu = 0;     // L3 MTU of the interface (0: memory)
};

class Datapath {
 public:
  // Resolves the planes (interface addresses and MTUs) and, for xdp, raises memlock and loads
  // the steering program on every interface. `broker`/`side`: memory ports only.
  static absl::StatusOr<std::unique_ptr<Datapath>> Create(
      const PerfOptions& options, std::shared_ptr<MemoryPairBroker> broker = nullptr,
      int side = 0);
  ~Datapath();

  // The port of `worker` on `plane` (PortSpec::queue is the AF_XDP queue).
  absl::StatusOr<std::unique_ptr<io::PacketPort>> Open(const api::PortSpec& spec);
  api::PortFactory Factory() {
    return [this](const api::PortSpec& spec) { return Open(spec); };
  }

  const std::vector<PlaneConfig>& planes() const { return planes_; }
  api::PortKind api_kind() const;
  // MetaRoCE payload bytes per packet that fit the planes' MTU (and an AF_XDP frame).
  uint32_t DefaultMtu() const;
  // Steering counters per plane (xdp), for the JSON report.
  std::vector<std::pair<std::string, io::XdpSteeringCounters>> SteeringCounters() const;
  std::vector<std::string> SteeringDescriptions() const;
  // Detaches the steering programs now (also done by the destructor).
  void Detach() { steering_.clear(); }

 private:
  Datapath() = default;
  PerfOptions options_;
  std::vector<PlaneConfig> planes_;
  std::vector<std::unique_ptr<io::XdpSteering>> steering_;  // per plane (xdp)
  std::shared_ptr<MemoryPairBroker> broker_;
  int side_ = 0;
  uint32_t frame_size_ = 2048;
};

}  // namespace metaroce::perf
