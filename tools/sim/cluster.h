// A cluster run: the real core on every host of a leaf-spine fabric (leaf_spine.h), driven by a
// collective-style workload in barrier steps. This is mrsim's `--topology leaf-spine`.
//
// Workloads (each step, every flow sends message_bytes, split over connections_per_pair
// connections; a step ends when every message of it has completed at its requester):
//   pair           host 0 -> host 1
//   permutation    host h -> pi(h), pi a random derangement drawn from the seed, the same each step
//   incast         hosts 1..incast_degree -> host 0
//   alltoall       every host -> every other host
//   (with background_incast = N: besides the workload, the last N hosts keep writing
//   message_bytes to host 0 without pause until the workload ends; their messages are not part
//   of the steps, the ideal or the flows' figures: the workload's flows are the victims)
//   allreduce-ring a ring all-reduce of message_bytes per host: 2(H-1) steps in which host h sends
//                  message_bytes / H to host h+1 (reduce-scatter, then all-gather); `steps` counts
//                  whole all-reduces
//
// Verification without buffers: every host registers the same read-only pattern region (the
// source of every message, at an offset drawn per message) and the same scratch region (the
// destination of every Write). The core's placement hook (Endpoint::set_placement_check) checks
// each placed range against the pattern as it lands, so every byte is verified at any scale with
// memory that does not grow with hosts or messages. A message must complete at its requester with
// exactly its bytes placed once.
//
// Ideal completion time of a step, from link capacities: the busiest of every host's NIC (bytes
// sent and received) and every leaf's uplinks and downlinks (bytes crossing it), at the line rate
// of the planes together, counting each packet's headers, plus the one-way latency of the longest
// route. vs_ideal = ideal_us / completion_us (1.0 is ideal).
//
// What a congestion evaluation of incast needs (issue 13), besides the above:
//   data_packets_sent     data packets the hosts handed to the fabric (first sends and resends;
//                         fillers too: they carry a data opcode), not ACKs or probes
//   data_packets_dropped  ... of them dropped by the fabric for any reason (data_drops: by cause;
//                         `drops` counts every packet, ACKs and probes too); data_drop_fraction
//                         = dropped / sent
//   message_completion_us {count, p50, p99, max} over the workload's messages that completed
//                         successfully: posted to completed at the requester, simulated time
//   p99_vs_ideal          message_completion_us.p99 / the step's ideal (ideal_us / steps). Note
//                         the direction: 1.0 is ideal, larger is worse (vs_ideal is the other way
//                         round). Against the step's ideal because under incast every message
//                         shares the receiver's link: none can beat the step's fair-share time,
//                         so this is the honest yardstick (a message alone on the link would be
//                         N times faster, and no transport can give every message that)
//   paths_failed          path state changes into Failed, any reason, any host (port_rotations:
//                         as before)
//   pulls                 every host's pull pacer together (lib/core/pull_pacer.h): with_ack
//                         (released at once, in the asking packet's ACK), deferred (queued, then
//                         released on their own), unsolicited_bytes (wire bytes of data packets
//                         that arrived without a pull: first packets, retransmissions, hedges,
//                         requesters not paced), pulled_pkts (new data packets sent on a pull)
//   goodput_vs_receiver_link  incast: payload bytes the workload placed at host 0 / (completion_us
//                         x host 0's links of all planes); null for other workloads or a run
//                         that did not finish. Payload only, so headers keep it below 1
//   jain_over_senders     Jain's fairness of per-sender-host goodput (bytes / time from step
//                         start to its last completion, summed over steps), over the senders
//                         into host 0 for incast; other workloads: per flow, as
//                         flow_goodput_gbps.jain_fairness
//   timeline              (timeline_bin > 0, `--timeline-us`) arrays, one element per bin of
//                         simulated time, element i describing the bin that ends at t_us[i]:
//                         rx_gbps (payload the workload placed in the bin: at host 0 for incast,
//                         at every host otherwise), and at t_us: queue_kb_max (deepest switch
//                         output queue), receiver_queue_kb (host 0's leaf downlinks, summed over
//                         the planes), cwnd_kb_mean and window_kb_mean (mean over a fixed sample
//                         of at most 64 of the workload's requester connections, evenly spaced,
//                         of the sum over their paths of cwnd, and of the window the sender uses:
//                         min(cwnd, max(window_hint, mtu)), cwnd without a hint),
//                         inflight_kb_total (every requester connection of the workload). At most
//                         timeline_max_samples elements: a longer run doubles the bin as often as
//                         needed (bin_us says what it became, requested_bin_us what was asked).
//                         The last element's bin ends at or after the run's end.
//                         Sampling adds no event: after an event, the bins whose end the next
//                         event reaches or passes are sampled (the state between the two events),
//                         so the run, `events` included, is the same with and without it.
//
// Determinism: same config, same JSON (except `measured`).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/core/path_state.h"
#include "tools/sim/leaf_spine.h"
#include "tools/sim/scenario.h"

namespace metaroce::sim {

enum class Workload : uint8_t { kPair, kPermutation, kIncast, kAllToAll, kAllReduceRing };
std::string_view WorkloadName(Workload w);
absl::StatusOr<Workload> ParseWorkload(std::string_view name);

// The connections' congestion control (`--cc`):
//   window  the core's per-path window (docs/spec/congestion.md), whatever the profile, with every
//           host's receive budget hints
//   none    no congestion control: the window pinned at its largest (the SACK window's 256 packets
//           bind first) and no receive budget hints, so each connection sends at line rate and
//           only PFC (or drops) hold it back
//   dcqcn   none plus DCQCN's rate (lib/core/dcqcn.h; go-back-N only): RoCE as deployed
//           (docs/spec/baselines.md §3). Unless --ecn-kb or --ecn-red says otherwise, switches
//           mark RED-like with the paper's Kmin 5 KiB, Kmax 200 KiB, Pmax 1 % (tools/sim/README.md)
enum class CongestionKind : uint8_t { kWindow, kNone, kDcqcn };
std::string_view CongestionName(CongestionKind k);

struct ClusterConfig {
  LeafSpineConfig fabric;
  std::vector<FabricFault> faults;

  TransportKind transport = TransportKind::kMetaRoce;
  CongestionKind cc = CongestionKind::kWindow;
  uint16_t paths = 8;  // logical paths per connection (go-back-N: 1)
  uint32_t connections_per_pair = 1;
  uint32_t mtu = 4096;
  uint32_t reorder_buffer_kb = 1024;
  // The responder's in-order packets per ACK (>= 1): the core's default unless set.
  uint32_t ack_every = core::ConnectionConfig{}.ack_every;

  Workload workload = Workload::kPermutation;
  uint64_t message_bytes = 1u << 20;
  uint32_t steps = 1;
  uint32_t incast_degree = 8;
  uint32_t background_incast = 0;  // senders of a background incast into host 0 (0: none)
  // Every host's receive budget (lib/core/receive_budget.h); unset: the host's bandwidth-delay
  // product, its links of every plane x the RTT of a route through a spine. 0: no hints.
  std::optional<uint64_t> receive_budget_bytes;
  // Every host's pull pacer rate (lib/core/pull_pacer.h); unset: the host's receive rate, its
  // links of every plane together. 0: no pulls.
  std::optional<double> pull_rate_gbps;

  uint64_t seed = 1;
  Duration duration_cap = std::chrono::seconds(10);  // simulated
  uint64_t max_events = 2'000'000'000;
  bool measure = false;   // wall-clock figures in `measured`
  bool progress = false;  // progress lines on stderr for long runs
  Duration timeline_bin{0};              // > 0: ClusterResult::timeline, a sample per bin
  uint32_t timeline_max_samples = 4000;  // even; a longer run doubles the bin
  // Test seam: sees every packet as it reaches its host, before the core does, and may change
  // it (a fabric that corrupts data undetected). The verifier's tests use it; empty otherwise.
  std::function<void(FabricPacket&)> on_delivery;
  // Diagnosis seam: every path event of every connection, with the host that reported it.
  std::function<void(uint32_t host, const core::PathEvent&)> on_path_event;

  absl::Status Validate() const;
  uint16_t EffectivePaths() const { return transport == TransportKind::kGoBackN ? 1 : paths; }
  uint64_t ReceiveBudgetBytes() const;
  double PullRateGbps() const;
  // A host's receive budget and pull pacer as the core takes them.
  core::ReceiveBudgetConfig HostBudget() const;
};

// Per-bin figures of a run (cluster.h's header: `timeline`); every vector has `samples()`
// elements.
struct ClusterTimeline {
  double requested_bin_us = 0;
  double bin_us = 0;  // requested_bin_us x a power of two
  uint32_t connections_sampled = 0;  // for cwnd_kb_mean and window_kb_mean
  std::vector<double> t_us;            // end of the bin
  std::vector<uint64_t> rx_bytes;      // payload placed by the workload in the bin
  std::vector<double> rx_gbps;
  std::vector<double> queue_kb_max;
  std::vector<double> receiver_queue_kb;
  std::vector<double> cwnd_kb_mean;
  std::vector<double> window_kb_mean;
  std::vector<double> inflight_kb_total;
  size_t samples() const { return t_us.size(); }
};

struct ClusterResult {
  ClusterConfig config;
  std::string stop_reason;  // "done", "duration_cap", "event_cap", "idle"
  uint64_t events = 0;
  double sim_time_us = 0;
  uint32_t hosts = 0;
  uint64_t flows = 0;
  uint64_t connections = 0;  // per side
  uint64_t messages_posted = 0;
  uint64_t messages_completed = 0;
  uint64_t messages_failed = 0;
  std::map<std::string, uint64_t> failed_by_status;
  uint64_t background_messages_completed = 0;
  uint64_t bytes_verified = 0;
  uint64_t data_errors = 0;
  std::map<std::string, uint64_t> data_errors_by_kind;
  // Steps.
  uint32_t steps_completed = 0;
  std::vector<double> step_us;
  double step_p50_us = 0, step_p99_us = 0, step_max_us = 0;
  double ideal_us = 0;       // sum over steps of each step's ideal time
  double completion_us = 0;  // the last step's end
  double vs_ideal = 0;
  // Flows: goodput over the steps they took part in (bytes / time from step start to their
  // last completion, summed over steps).
  double flow_goodput_gbps_min = 0, flow_goodput_gbps_mean = 0, flow_goodput_gbps_max = 0;
  double jain_fairness = 0;
  // Fabric.
  FabricTotals fabric;
  // Paths.
  uint64_t path_state_changes = 0;
  uint64_t port_rotations = 0;
  std::map<std::string, uint64_t> path_events_by_reason;
  uint64_t retransmits = 0;
  // ... by cause (core counters): a SACK gap, a probe timeout (tail-loss probe), moved off a
  // failed path, copied off an overtaken one. Gap + timeout + reroute + hedge <= retransmits
  // (go-back-N resends and RNR retries are the rest).
  uint64_t gap_retransmits = 0;
  uint64_t timeout_retransmits = 0;
  uint64_t tail_probes = 0;
  uint64_t rerouted_packets = 0;
  uint64_t hedged_packets = 0;
  uint64_t timeouts = 0;
  uint64_t loss_queries = 0;  // PROBEs asking whether overdue packets arrived (not data)
  uint64_t cnps = 0;  // --cc dcqcn: ACKs the responders sent as CNPs (wire::flags::kCnp)
  // Incast figures (cluster.h's header).
  uint64_t workload_bytes_placed = 0;  // payload of the workload's messages (not background)
  uint64_t paths_failed = 0;
  core::PullPacerCounters pulls;
  uint64_t pulled_pkts = 0;
  double message_p50_us = 0, message_p99_us = 0, message_max_us = 0;
  uint64_t messages_timed = 0;  // messages in message_completion_us
  double p99_vs_ideal = 0;
  double goodput_vs_receiver_link = 0;  // NaN (null): not incast or not done
  double jain_over_senders = 0;
  bool has_timeline = false;
  ClusterTimeline timeline;
  // measure only.
  double setup_wall_s = 0, run_wall_s = 0;
  double run_cpu_s = 0;  // CPU seconds of the run (ProcessCpuSeconds)
  uint64_t core_heap_bytes_per_connection = 0;
};

absl::StatusOr<ClusterResult> RunCluster(const ClusterConfig& config);
std::string ClusterResultToJson(const ClusterResult& r);
std::string ClusterResultSummary(const ClusterResult& r);

}  // namespace metaroce::sim
