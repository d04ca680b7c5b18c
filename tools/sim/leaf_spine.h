// A multiplane leaf-spine fabric of many hosts, packet by packet and hop by hop: the network that
// mrsim's `--topology leaf-spine` runs the real core over (issue 12, sections 2 and 3).
//
// Topology. H hosts, K per leaf (ceil(H/K) leaves), S spines, P planes. Each plane is a leaf-spine
// network of its own; each host has one NIC port per plane, joined to its leaf of that plane.
// Host links run at host_gbps, leaf-spine links at fabric_gbps (oversubscription follows from K,
// S and the rates). Every link is two one-way links with a propagation delay of hop_delay.
//
// Forwarding. A packet from host a to host b on plane p goes a -> leaf(a) [-> spine -> leaf(b)]
// -> b. A leaf picks the spine by ECMP: a hash of the 5-tuple (source and destination host,
// source and destination UDP port, UDP) with a seed of its own, modulo the spines its routing
// table holds for the destination leaf. So a path's source port picks its route, and rotating
// the port really moves it.
//
// Ports. Every device has an output queue per link, served FIFO at the link's rate (serialization
// tracked in picoseconds, so it does not drift). A packet finds its queue's backlog at enqueue:
// CE-marked above ecn_threshold_bytes (or, with ecn_pmax > 0, RED-like: above it with a
// probability rising linearly to ecn_pmax at ecn_kmax_bytes, always above that, drawn from a
// random stream of the fabric's own); in a lossy fabric, tail-dropped when backlog + packet
// exceeds queue_bytes (hosts' NIC queues never drop: the transport's window is their bound).
// A host's NIC has two transmit queues, as NICs have per traffic class: packets without data
// (ACKs, probes and their replies) go ahead of data queued there (nic_control_first), so that a
// host sending a window of its own does not hold back the ACKs of what it receives. Switches
// keep one FIFO: the fabric's classes are not the transport's to choose.
//
// Lossless fabric (PFC, one lossless class). Each device counts, per ingress link, the bytes that
// arrived through it and have not left the device yet. Above pfc_xoff_bytes it pauses the upstream
// sender of that link (a PAUSE that takes one hop delay to arrive); below pfc_xon_bytes it resumes
// it. A paused output queue finishes the packet on the wire and starts no other, so pause spreads
// hop by hop toward the sources: head-of-line blocking and congestion spreading emerge from the
// model. Nothing is tail-dropped (headroom is assumed; the peak occupancy per device is reported).
// Faults still drop: a dead link is dead.
//
// Faults, on one link (both directions) or on every link of a spine, in a window of simulated
// time: random loss, blackhole (the link drops everything: what starts serializing, what arrives),
// a rate cut, a flap (down and up with a period). With reconvergence > 0, a link down for that long
// leaves the ECMP groups that use it (and rejoins them that long after it came back): that is how
// fabrics heal, and it is what MetaRoCE's path rotation races.
//
// Determinism: a function of the config, the faults and the packets offered, in order.
// Thread-safety: none. Events go on the EventQueue given at construction.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "lib/core/types.h"
#include "tools/sim/event_queue.h"
#include "tools/sim/packet_buffer_pool.h"
#include "tools/sim/fabric.h"
#include "tools/sim/rng.h"

namespace metaroce::sim {

struct LeafSpineConfig {
  uint32_t hosts = 16;
  uint32_t hosts_per_leaf = 4;
  uint32_t spines = 4;  // per plane
  uint8_t planes = 1;
  double host_gbps = 100;
  double fabric_gbps = 100;
  Duration hop_delay = std::chrono::microseconds(1);
  uint64_t queue_bytes = 512 * 1024;  // per output queue (lossy fabric)
  uint64_t ecn_threshold_bytes = 64 * 1024;  // RED: kmin
  uint64_t ecn_kmax_bytes = 0;  // RED (ecn_pmax > 0): the backlog marked with ecn_pmax, above: all
  double ecn_pmax = 0;          // 0: every packet above ecn_threshold_bytes is marked
  bool lossless = false;
  uint64_t pfc_xoff_bytes = 96 * 1024;  // per ingress link
  uint64_t pfc_xon_bytes = 48 * 1024;
  Duration reconvergence{0};  // 0: routing never drops a dead link
  bool nic_control_first = true;  // hosts' NICs send packets without data before queued data
  // Random loss of every packet on every link (both directions), from the start: the pair
  // model's --loss on every link of the cluster. A loss fault on a link replaces it there for
  // the fault's window.
  double loss_probability = 0;
  uint64_t seed = 1;

  uint32_t leaves() const { return (hosts + hosts_per_leaf - 1) / hosts_per_leaf; }
  absl::Status Validate() const;
};

// A link of the fabric, both directions: host `a`'s link to its leaf, or the link between leaf
// `a` and spine `b`.
struct FabricLink {
  enum class Tier : uint8_t { kHost, kSpine };
  uint8_t plane = 0;
  Tier tier = Tier::kSpine;
  uint32_t a = 0;
  uint32_t b = 0;
};

struct FabricFault {
  enum class Kind : uint8_t { kLoss, kBlackhole, kRateCut, kFlap };
  Kind kind = Kind::kBlackhole;
  // Where: one link, or (whole_spine) every link of spine `spine` on plane `plane`.
  FabricLink link;
  bool whole_spine = false;
  uint8_t plane = 0;
  uint32_t spine = 0;
  TimeWindow window{Instant{0}, core::kNever};
  double loss_probability = 0;  // kLoss
  double rate_factor = 1;       // kRateCut: the link runs at rate x factor
  Duration flap_period{0};      // kFlap: down for half, up for half, starting down
};

// A packet in the fabric.
struct FabricPacket {
  uint32_t src_host = 0;
  uint32_t dst_host = 0;
  uint8_t plane = 0;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  bool ce = false;
  // A data packet (its sender says so; the cluster sets it from the opcode): counted apart from
  // ACKs and probes in data_sent and data_dropped.
  bool data = false;
  std::vector<std::byte> bytes;  // the UDP payload (wire size adds kWireOverheadBytes)
  // More of it, by reference: bytes in memory that outlives the packet and never changes while
  // the fabric runs (the simulator's source pattern). Counted in the wire size, and appended to
  // `bytes` when the packet is delivered, so that packets in flight hold only their headers (at
  // 65,536 hosts the first burst alone was 32 GiB of payload copies).
  std::span<const std::byte> payload;
};

enum class FabricDrop : uint8_t { kTail, kLoss, kDown, kNoRoute, kCount };

// Counters of one output queue (one direction of one link).
struct PortCounters {
  uint64_t tx_packets = 0;
  uint64_t tx_bytes = 0;  // wire bytes
  uint64_t ce_marked = 0;
  uint64_t dropped[static_cast<size_t>(FabricDrop::kCount)] = {};
  uint64_t pauses = 0;      // PAUSE frames that stopped this queue (lossless)
  int64_t paused_ns = 0;    // time this queue spent paused
  uint64_t max_backlog_bytes = 0;
};

struct FabricTotals {
  uint64_t delivered = 0;
  uint64_t dropped[static_cast<size_t>(FabricDrop::kCount)] = {};  // every packet
  // Data packets only (FabricPacket::data): offered at the hosts' NICs (first sends and
  // resends alike), and dropped, by cause (a part of `dropped`).
  uint64_t data_sent = 0;
  uint64_t data_dropped[static_cast<size_t>(FabricDrop::kCount)] = {};
  uint64_t ce_marked = 0;
  uint64_t pauses = 0;
  int64_t paused_ns = 0;
  uint64_t max_switch_buffer_bytes = 0;  // peak bytes held by one switch (lossless: headroom)
  uint64_t route_changes = 0;            // links leaving or rejoining ECMP groups
};

class LeafSpineFabric {
 public:
  using DeliverFn = std::function<void(FabricPacket&)>;

  // `queue` must outlive the fabric; `config` must pass Validate().
  LeafSpineFabric(const LeafSpineConfig& config, EventQueue& queue, DeliverFn deliver);

  // Schedules a fault's state changes. Call before the events it concerns run.
  absl::Status AddFault(const FabricFault& fault);

  // Offers a packet at the source host's NIC on its plane, at queue.now().
  void Send(FabricPacket packet);
  // An empty byte buffer for the next packet, recycled from packets delivered or dropped: a
  // cluster moves millions of packets, and allocating each one's bytes costs more than the
  // rest of its journey.
  std::vector<std::byte> TakeBuffer() { return buffers_.Take(); }

  // The spine a leaf's ECMP picks for this packet's 5-tuple now (routing as it stands), or -1
  // when the packet stays under its leaf or no spine leads to the destination.
  int SpineFor(const FabricPacket& p) const;
  uint32_t LeafOf(uint32_t host) const { return host / config_.hosts_per_leaf; }

  // Counters of the output queue from `from` toward `to` on a link (a host's NIC, a leaf's port
  // toward a host or a spine, a spine's port toward a leaf).
  const PortCounters& counters(const FabricLink& link, bool upward) const;
  FabricTotals Totals() const;
  // Queue depths now (bytes queued, the packet on the wire included), for timelines: the deepest
  // output queue of any switch (leaf or spine; hosts' NIC queues are the transport's, not the
  // fabric's), and the queue of one port (a leaf's port toward a host: upward = false).
  uint64_t MaxSwitchBacklogBytes() const;
  uint64_t BacklogBytes(const FabricLink& link, bool upward) const {
    return ports_[PortIndex(link, upward)].backlog_bytes;
  }
  const LeafSpineConfig& config() const { return config_; }

 private:
  // A queue of packet slots: a vector read from `head`, cleared when drained and compacted
  // when the part already read is large, so that a long busy period does not grow it forever.
  struct SlotFifo {
    std::vector<uint32_t> slots;
    size_t head = 0;
    bool empty() const { return head == slots.size(); }
    void push(uint32_t slot) { slots.push_back(slot); }
    uint32_t pop() {
      const uint32_t slot = slots[head++];
      if (head == slots.size()) {
        slots.clear();
        head = 0;
      } else if (head >= 1024 && 2 * head >= slots.size()) {
        slots.erase(slots.begin(), slots.begin() + static_cast<ptrdiff_t>(head));
        head = 0;
      }
      return slot;
    }
  };
  struct Port {
    uint32_t peer = 0;       // node at the far end
    uint32_t peer_port = 0;  // index of the far end's port back to us (our ingress index there)
    double gbps = 0;
    double rate_factor = 1;
    double loss = 0;
    bool down = false;        // physically (faults)
    bool routed_down = false; // in the routing tables (after reconvergence)
    uint32_t down_epoch = 0;  // changes of `down`: a reconvergence timer checks it still holds
    bool busy = false;
    bool paused = false;
    Instant paused_since;
    int64_t free_at_ps = 0;   // end of the latest serialization
    SlotFifo fifo;
    SlotFifo control;      // hosts' NICs: packets without data, served before `fifo`
    uint32_t on_wire = 0;  // the slot being serialized (valid while busy)
    uint64_t backlog_bytes = 0;  // queued, the packet on the wire included
    // Lossless: bytes that came in through this link and are still in this device.
    uint64_t ingress_bytes = 0;
    bool pause_sent = false;
    PortCounters counters;
    Xoshiro256 rng{1};
  };
  struct Node {
    uint32_t first_port = 0;  // into ports_
    uint32_t port_count = 0;
    uint64_t buffer_bytes = 0;  // switches: bytes held
  };
  struct Slot {
    FabricPacket packet;
    uint32_t ingress = UINT32_MAX;  // port index (global) it came in through, at its node
    uint64_t wire_bytes = 0;
  };

  uint32_t NodesPerPlane() const { return config_.hosts + config_.leaves() + config_.spines; }
  uint32_t HostNode(uint8_t plane, uint32_t h) const { return plane * NodesPerPlane() + h; }
  uint32_t LeafNode(uint8_t plane, uint32_t l) const {
    return plane * NodesPerPlane() + config_.hosts + l;
  }
  uint32_t SpineNode(uint8_t plane, uint32_t s) const {
    return plane * NodesPerPlane() + config_.hosts + config_.leaves() + s;
  }
  uint32_t PortIndex(const FabricLink& link, bool upward) const;
  // The output port of `node` for this packet, or UINT32_MAX (no route).
  uint32_t Route(uint32_t node, const FabricPacket& p) const;
  bool SpineUsable(uint8_t plane, uint32_t leaf, uint32_t spine, uint32_t dst_leaf) const;
  void Enqueue(uint32_t node, uint32_t port, uint32_t slot);
  void StartNext(uint32_t port);
  void OnSerialized(uint32_t port);
  void OnArrival(uint32_t node, uint32_t from_port, uint32_t slot);
  void Leave(uint32_t node, uint32_t slot);  // the packet left `node` (sent on or dropped)
  void Drop(uint32_t port, uint32_t slot, FabricDrop why);
  void SetPaused(uint32_t port, bool paused);
  void SetDown(uint32_t port, bool down);
  void ApplyToLinks(const FabricFault& f, const std::function<void(uint32_t port)>& fn);
  uint32_t NewSlot(FabricPacket packet);
  void FreeSlot(uint32_t slot);
  bool IsSwitch(uint32_t node) const { return node % NodesPerPlane() >= config_.hosts; }
  // A packet that finds `backlog` bytes queued is CE-marked (step or RED, LeafSpineConfig).
  bool EcnMarks(uint64_t backlog);

  LeafSpineConfig config_;
  EventQueue& queue_;
  DeliverFn deliver_;
  std::vector<Node> nodes_;
  std::vector<Port> ports_;
  std::vector<uint32_t> port_node_;  // owner of each port
  std::vector<uint64_t> leaf_seed_;  // ECMP seed per leaf node (indexed by node)
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  PacketBufferPool buffers_;
  uint64_t delivered_ = 0;
  uint64_t unrouted_ = 0;  // dropped by a leaf with no spine toward the destination
  uint64_t data_sent_ = 0;
  uint64_t data_dropped_[static_cast<size_t>(FabricDrop::kCount)] = {};
  uint64_t max_switch_buffer_ = 0;
  uint64_t route_changes_ = 0;
  uint32_t routed_down_links_ = 0;  // fast path: no routing exceptions at all
  Xoshiro256 red_rng_{1};  // RED marking's draws
};

}  // namespace metaroce::sim
