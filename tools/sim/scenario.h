// A simulation scenario: what to run (fabric, transport, workload) and what came out of it.
//
// RunScenario() builds two hosts, A (requester) and B (responder), each a real core::Endpoint
// whose PacketSink is the simulated Fabric, opens `connections` connections A->B, drives a
// workload of `messages` messages of `message_bytes` and verifies every byte placed:
//  - Write / Write-with-immediate: when A's completion for message k arrives with SUCCESS, B's
//    destination slot must hold exactly message k's bytes (RC: placed before acknowledged).
//  - Send / Write-with-immediate: every receive completion must report the message's length
//    (and immediate), and a Send's receive buffer must hold the message's bytes; every message A
//    saw succeed must have produced exactly one receive completion by the end.
//  - Every buffer sits between guard bytes outside its registered region; any change to a guard
//    ("the core touched memory outside a registered region") is a data error.
//  - A second completion for the same work request is a data error.
//
// Connection layout: connection c (0-based) has local id c+1 and remote id c+1 on both hosts;
// tokens and ConnectionConfig.seed are derived from the scenario seed and c. Logical path i of
// connection c starts on source port port_base + c*L + i, where port_base makes
// (port_base + udp_port) % P == 0, so with the fabric's ECMP hash it starts on physical path
// (c*L + i) % P. Go-back-N connections have one path (L = 1); bench runs them with
// connections = paths so that the flows cover every path.
//
// Loss: `loss` applies to the A->B (data) links and `ack_loss` (default: the same value) to the
// B->A (acknowledgement) links. `path_losses` overrides both for one physical path (both of its
// directions): a lossy spine among clean ones. `ce_marks` CE-marks data packets (A->B) of one path
// with a probability, optionally only inside a time window, on top of the queue's own marking: a
// persistently marking spine.
//
// Steps (`steps` > 0): the workload is `steps` synchronized steps of `messages` messages each (as
// at a collective's barrier). A step posts its messages (round-robin over the connections, at most
// `depth` outstanding per connection) and ends when every one of them has completed at A (and,
// for send/write_imm, at B); the next step starts at that instant. Step time = end - start.
//
// Path telemetry samples (`sample_interval` > 0): every interval, the requester's view of each
// logical path of connection 1 (state, srtt, min_rtt, ECN alpha, cwnd, inflight, utilization and
// the physical path its current source port hashes to), as the core exposes it (PathStats).
//
// Determinism: the result is a function of the config alone (no clock, no addresses in results).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/core/config.h"
#include "lib/core/connection.h"
#include "lib/core/path_state.h"
#include "lib/core/types.h"
#include "tools/sim/fabric.h"

namespace metaroce::sim {

enum class TransportKind : uint8_t { kMetaRoce, kGoBackN, kReorderBuffer };
enum class Operation : uint8_t { kWrite, kSend, kWriteImm };

std::string_view TransportName(TransportKind t);  // "metaroce", "gbn", "reorder"
// The core's profile for a transport (the reorder buffer sized reorder_buffer_kb KiB).
core::TransportProfile ProfileOf(TransportKind t, uint32_t reorder_buffer_kb);
// Bytes of heap in use by glibc's count (small blocks and mmapped ones): what `measure` reports.
size_t HeapInUseBytes();
// CPU seconds this process has run (user + system): what `measure` reports next to wall time, since
// on a shared machine wall time also counts the time other processes held the CPU.
double ProcessCpuSeconds();
std::string_view OperationName(Operation op);     // "write", "send", "write_imm"

struct SlowPath {
  uint16_t path = 0;
  double rate_gbps = 0;
};
struct Blackhole {
  uint16_t path = 0;
  TimeWindow window;
};
struct PathLoss {
  uint16_t path = 0;
  double probability = 0;  // both directions of the path
};
// CE-marking injected on a path's A->B link: each data packet delivered while `window` contains
// its offer time is marked with `probability` (window unset: the whole run).
struct CeMarking {
  uint16_t path = 0;
  double probability = 0;
  std::optional<TimeWindow> window;
};

struct ScenarioConfig {
  // Fabric.
  uint16_t physical_paths = 8;
  double rate_gbps = 100;
  std::vector<SlowPath> slow_paths;
  Duration delay = std::chrono::microseconds(2);
  uint64_t queue_bytes = 512 * 1024;
  uint64_t ecn_threshold_bytes = 64 * 1024;
  // Each host's receive budget (lib/core/receive_budget.h); unset: the host's bandwidth-delay
  // product, all paths' rate x BaseRtt(), as a host would configure it from its NIC's speed and
  // its fabric's base RTT. 0: no hint.
  std::optional<uint64_t> receive_budget_bytes;
  // Each host's pull pacer rate (lib/core/pull_pacer.h); unset: the host's receive rate, all
  // paths' rates together. 0: no pulls.
  std::optional<double> pull_rate_gbps;
  double loss = 0;
  std::optional<double> ack_loss;  // unset: same as `loss`
  std::vector<Blackhole> blackholes;
  std::vector<PathLoss> path_losses;  // override loss and ack_loss of one physical path
  std::vector<CeMarking> ce_marks;

  // Transport.
  TransportKind transport = TransportKind::kMetaRoce;
  uint16_t logical_paths = 0;  // 0: physical_paths (forced to 1 for go-back-N)
  uint32_t connections = 1;
  bool ordered_completion = false;
  uint32_t mtu = 4096;
  uint32_t reorder_buffer_kb = 1024;  // kReorderBuffer: the responder's buffer
  // The responder's in-order packets per ACK (>= 1): the core's default unless set.
  uint32_t ack_every = core::ConnectionConfig{}.ack_every;

  // Workload.
  Operation op = Operation::kWrite;
  uint64_t messages = 64;  // per step when steps > 0
  uint64_t steps = 0;      // 0: one batch of `messages`, posted as the depth allows
  uint32_t message_bytes = 1u << 20;
  uint32_t depth = 8;    // outstanding messages per connection
  Duration recv_delay{0};  // send/write_imm: the first receives are posted at this time

  uint64_t seed = 1;
  // Adds measurements of the run itself to the result (`measured`: wall-clock seconds of setup
  // and run, events per second, heap per connection). Off by default: they differ from run to
  // run (and from one process's history to another), and the rest of the JSON does not.
  bool measure = false;

  // Safety caps and measurement.
  Duration duration_cap = std::chrono::seconds(10);  // simulated time
  uint64_t max_events = 200'000'000;
  Duration bin{0};  // goodput timeline bin; 0: 2 x BaseRtt()
  Duration sample_interval{0};  // path telemetry samples of connection 1; 0: none
  uint32_t max_path_events = 64;  // path events recorded with their details (all are counted)

  // Test seam: sees every datagram as it reaches its host, before that host's core does, and
  // may change its bytes (a fabric that corrupts data undetected). The verifier's own tests use
  // it to show that a wrong byte is caught; empty in every real run.
  std::function<void(Datagram&)> on_arrival;

  // Refuses inconsistent settings with a reason that names the flag to fix.
  absl::Status Validate() const;
  uint16_t EffectiveLogicalPaths() const;
  double PathRateGbps(uint16_t path) const;
  double PathLossProbability(uint16_t path, bool ack_direction) const;
  uint64_t TotalMessages() const { return steps == 0 ? messages : steps * messages; }
  // Unloaded round trip: MTU data packet out and ACK back at the nominal rate.
  Duration BaseRtt() const;
  uint64_t ReceiveBudgetBytes() const;
  double PullRateGbps() const;
  // A host's receive budget and pull pacer as the core takes them.
  core::ReceiveBudgetConfig HostBudget() const;
  Duration EffectiveBin() const;
  bool UsesReceives() const { return op != Operation::kWrite; }
};

// Nearest-rank percentiles, in microseconds.
struct LatencySummary {
  double p50_us = 0;
  double p99_us = 0;
  double max_us = 0;
};

struct PathReport {
  uint16_t path = 0;
  double rate_gbps = 0;
  LinkCounters a_to_b;
  LinkCounters b_to_a;
  double utilization_a_to_b = 0;  // busy time / simulated time
  double utilization_b_to_a = 0;
};

struct RecordedPathEvent {
  char host = 'A';  // 'A' (requester) or 'B' (responder)
  core::PathEvent event;
};

// Step times (steps > 0), in microseconds; nearest-rank percentiles over completed steps.
struct StepSummary {
  uint64_t count = 0;            // steps completed
  uint64_t with_failures = 0;    // completed steps in which a message failed or was refused
  double p50_us = 0, p99_us = 0, max_us = 0, mean_us = 0;
  std::vector<double> times_us;  // every completed step, in order
};

// Requester-side telemetry of connection 1's logical paths, sampled every sample_interval.
struct PathSamples {
  std::vector<double> t_us;
  struct Series {
    uint16_t path = 0;
    std::vector<uint16_t> physical;  // physical path of the current source port
    std::vector<std::string> state;
    std::vector<double> srtt_us, min_rtt_us, ecn_alpha, cwnd_kb, inflight_kb, window_hint_kb,
        utilization;
  };
  std::vector<Series> paths;
};

struct ScenarioResult {
  ScenarioConfig config;

  // Outcome of the workload.
  uint64_t messages_posted = 0;
  uint64_t messages_completed = 0;  // requester completions with SUCCESS
  uint64_t messages_failed = 0;     // requester completions with another status
  std::map<std::string, uint64_t> failed_by_status;  // StatusName -> count
  uint64_t messages_outstanding = 0;  // posted, no completion when the run stopped (caps, idle)
  uint64_t messages_not_posted = 0;  // refused by PostSend or never reached (connection failed)
  uint64_t post_refusals = 0;
  std::string first_post_refusal;    // the core's reason, if any
  uint64_t receives_completed = 0;
  uint64_t receives_failed = 0;
  uint64_t data_errors = 0;
  std::map<std::string, uint64_t> data_errors_by_kind;

  // Throughput. goodput = payload of successful messages * 8 / (last completion - first post).
  double goodput_gbps = 0;
  double capacity_gbps = 0;          // sum of A->B line rates
  double payload_capacity_gbps = 0;  // capacity * mtu / (mtu + data headers + wire overhead)
  LatencySummary completion_us;      // post -> requester completion, successful messages

  // Fabric ground truth.
  uint64_t packets_lost = 0;  // both directions, every cause
  uint64_t lost_random = 0;
  uint64_t lost_tail_drop = 0;
  uint64_t lost_blackhole = 0;
  uint64_t data_packets_sent = 0;
  uint64_t data_packets_lost = 0;
  // A data packet's identity is (destination connection, msg_seq, offset). Ground truth counts a
  // packet as resent when its identity was sent before, whatever its flags say, and as spurious
  // when B had already accepted that identity (the core at B took it: rcvd_pkts advanced) before
  // the resend left A. Packets B refused (RNR, go-back-N out of order) are not "had".
  uint64_t retransmits = 0;           // data packets sent with the wire RETRANSMIT flag
  uint64_t resent_data_packets = 0;   // data packets whose identity had been sent before
  uint64_t spurious_retransmits = 0;  // resent packets whose identity B had already accepted
  uint64_t unflagged_resends = 0;     // resent without the RETRANSMIT flag
  uint64_t flagged_first_sends = 0;   // RETRANSMIT flag on an identity never sent before
  std::vector<PathReport> paths;

  // Core view.
  core::ConnectionCounters requester_counters;  // summed over A's connections
  core::ConnectionCounters responder_counters;  // summed over B's connections
  uint64_t malformed_datagrams = 0;
  uint64_t unknown_connection_datagrams = 0;
  uint64_t path_state_changes = 0;
  uint64_t port_rotations = 0;
  uint64_t paths_failed = 0;  // state changes into Failed (any reason: failed, silence, ...)
  std::map<std::string, uint64_t> path_events_by_reason;
  std::vector<RecordedPathEvent> first_path_events;  // at most config.max_path_events

  StepSummary steps;
  PathSamples path_samples;

  // Timelines (bin = config.EffectiveBin()).
  std::vector<double> delivered_gbps;  // payload bytes B accepted for the first time, per bin
  std::vector<double> completed_gbps;  // payload of successful messages, by completion time
  // Blackhole runs: from the start of the first blackhole to the end of the last bin before the
  // workload's last post (or the blackhole's end) whose delivered goodput is below 85 % of the
  // capacity that remains (capacity minus the blackholed path). 0 when no bin dips; unset when the
  // run never got back above the threshold or there is no such window.
  std::optional<double> recovery_us;
  double base_rtt_us = 0;

  // Run.
  double sim_time_us = 0;
  double last_post_us = 0;
  uint64_t events = 0;
  std::string stop_reason;  // "done", "idle", "duration_cap", "event_cap"
  // `measure` only. Heap the core's connections took when they were created (both hosts), per
  // connection (requester and responder count as one each), by the allocator's count; and
  // wall-clock seconds of the setup (connections, buffers) and of the run.
  uint64_t core_heap_bytes_per_connection = 0;
  double setup_wall_s = 0;
  double run_wall_s = 0;
  double run_cpu_s = 0;  // CPU seconds of the run (ProcessCpuSeconds)
  uint64_t timer_deadline_not_advanced = 0;  // core contract check: NextDeadline() <= now after OnTimer
};

absl::StatusOr<ScenarioResult> RunScenario(const ScenarioConfig& config);

}  // namespace metaroce::sim
