#include "tools/sim/report.h"

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/core/path_state.h"
#include "lib/core/counter_fields.h"
#include "tools/sim/json_writer.h"

namespace metaroce::sim {
namespace {

double Us(Duration d) { return static_cast<double>(d.count()) / 1000.0; }
double Us(Instant t) { return static_cast<double>(t.ns) / 1000.0; }


void WriteCountMap(JsonWriter& w, std::string_view key, const std::map<std::string, uint64_t>& m) {
  w.BeginObject(key);
  for (const auto& [name, count] : m) w.Field(name, count);
  w.EndObject();
}

void WriteCounters(JsonWriter& w, std::string_view key, const core::ConnectionCounters& c) {
  w.BeginObject(key);
  for (const auto& f : core::kConnectionCounterFields) w.Field(f.name, c.*f.member);
  w.EndObject();
}

void WriteConfig(JsonWriter& w, const ScenarioConfig& c) {
  w.BeginObject("config");
  w.Field("transport", TransportName(c.transport));
  w.Field("op", OperationName(c.op));
  w.Field("paths", c.physical_paths);
  w.Field("logical_paths", c.EffectiveLogicalPaths());
  w.Field("connections", c.connections);
  w.Field("messages", c.messages);
  w.Field("steps", c.steps);
  w.Field("size", c.message_bytes);
  w.Field("depth", c.depth);
  w.Field("mtu", c.mtu);
  w.Field("ack_every", c.ack_every);
  w.Field("ordered", c.ordered_completion);
  w.Field("seed", c.seed);
  w.Field("rate_gbps", c.rate_gbps);
  w.BeginArray("slow");
  for (const SlowPath& s : c.slow_paths) {
    w.BeginObject().Field("path", s.path).Field("rate_gbps", s.rate_gbps).EndObject();
  }
  w.EndArray();
  w.Field("delay_us", Us(c.delay));
  w.Field("queue_bytes", c.queue_bytes);
  w.Field("receive_budget_bytes", c.ReceiveBudgetBytes());
  w.Field("pull_rate_gbps", c.PullRateGbps());
  w.Field("ecn_threshold_bytes", c.ecn_threshold_bytes);
  w.Field("loss", c.loss);
  w.Field("ack_loss", c.ack_loss.value_or(c.loss));
  w.BeginArray("blackholes");
  for (const Blackhole& b : c.blackholes) {
    w.BeginObject()
        .Field("path", b.path)
        .Field("begin_us", Us(b.window.begin))
        .Field("end_us", Us(b.window.end))
        .EndObject();
  }
  w.EndArray();
  w.BeginArray("path_loss");
  for (const PathLoss& l : c.path_losses) {
    w.BeginObject().Field("path", l.path).Field("probability", l.probability).EndObject();
  }
  w.EndArray();
  w.BeginArray("ce_marks");
  for (const CeMarking& m : c.ce_marks) {
    w.BeginObject().Field("path", m.path).Field("probability", m.probability);
    if (m.window) {
      w.Field("begin_us", Us(m.window->begin)).Field("end_us", Us(m.window->end));
    } else {
      w.Field("begin_us", std::optional<double>()).Field("end_us", std::optional<double>());
    }
    w.EndObject();
  }
  w.EndArray();
  w.Field("recv_delay_us", Us(c.recv_delay));
  w.Field("duration_cap_us", Us(c.duration_cap));
  w.Field("max_events", c.max_events);
  w.Field("bin_us", Us(c.EffectiveBin()));
  w.Field("sample_us", Us(c.sample_interval));
  w.Field("max_path_events", c.max_path_events);
  w.Field("wire_overhead_bytes", kWireOverheadBytes);
  w.EndObject();
}

void WriteLink(JsonWriter& w, const LinkCounters& l, double utilization) {
  w.Field("tx_packets", l.tx_packets);
  w.Field("tx_bytes", l.tx_bytes);
  w.Field("dropped", l.dropped());
  w.Field("dropped_random", l.dropped_random);
  w.Field("dropped_tail", l.dropped_tail);
  w.Field("dropped_blackhole", l.dropped_blackhole);
  w.Field("ce_marked", l.ce_marked);
  w.Field("ce_injected", l.ce_injected);
  w.Field("max_backlog_bytes", l.max_backlog_bytes);
  w.Field("utilization", utilization);
}

std::string_view PathEventKindName(core::PathEvent::Kind k) {
  return k == core::PathEvent::Kind::kPortRotated ? "port_rotated" : "state_change";
}

}  // namespace

std::string ResultToJson(const ScenarioResult& r) {
  JsonWriter w;
  w.BeginObject();
  w.Field("schema", "mrsim.result.v1");
  WriteConfig(w, r.config);
  w.Field("stop_reason", r.stop_reason);
  w.Field("sim_time_us", r.sim_time_us);
  w.Field("last_post_us", r.last_post_us);
  w.Field("events", r.events);
  if (r.config.measure) {
    w.BeginObject("measured");
    w.Field("setup_wall_s", r.setup_wall_s);
    w.Field("run_wall_s", r.run_wall_s);
    w.Field("events_per_wall_s", r.run_wall_s > 0 ? r.events / r.run_wall_s : 0.0);
    w.Field("run_cpu_s", r.run_cpu_s);
    w.Field("events_per_cpu_s", r.run_cpu_s > 0 ? r.events / r.run_cpu_s : 0.0);
    w.Field("core_heap_bytes_per_connection", r.core_heap_bytes_per_connection);
    w.EndObject();
  }
  w.Field("messages_posted", r.messages_posted);
  w.Field("messages_completed", r.messages_completed);
  w.Field("messages_failed", r.messages_failed);
  WriteCountMap(w, "failed_by_status", r.failed_by_status);
  w.Field("messages_outstanding", r.messages_outstanding);
  w.Field("messages_not_posted", r.messages_not_posted);
  w.Field("post_refusals", r.post_refusals);
  w.Field("first_post_refusal", r.first_post_refusal);
  w.Field("receives_completed", r.receives_completed);
  w.Field("receives_failed", r.receives_failed);
  w.Field("data_errors", r.data_errors);
  WriteCountMap(w, "data_errors_by_kind", r.data_errors_by_kind);
  w.Field("goodput_gbps", r.goodput_gbps);
  w.Field("capacity_gbps", r.capacity_gbps);
  w.Field("payload_capacity_gbps", r.payload_capacity_gbps);
  w.Field("goodput_vs_capacity", r.capacity_gbps > 0 ? r.goodput_gbps / r.capacity_gbps : 0.0);
  w.BeginObject("completion_us")
      .Field("p50", r.completion_us.p50_us)
      .Field("p99", r.completion_us.p99_us)
      .Field("max", r.completion_us.max_us)
      .EndObject();
  if (r.config.steps == 0) {
    w.Field("step_us", std::optional<double>());
  } else {
    w.BeginObject("step_us")
        .Field("count", r.steps.count)
        .Field("with_failures", r.steps.with_failures)
        .Field("p50", r.steps.p50_us)
        .Field("p99", r.steps.p99_us)
        .Field("max", r.steps.max_us)
        .Field("mean", r.steps.mean_us)
        .EndObject();
  }
  w.BeginArray("step_times_us");
  for (double t : r.steps.times_us) w.Element(t);
  w.EndArray();
  w.Field("packets_lost", r.packets_lost);
  w.BeginObject("lost_by_cause")
      .Field("random", r.lost_random)
      .Field("tail_drop", r.lost_tail_drop)
      .Field("blackhole", r.lost_blackhole)
      .EndObject();
  w.Field("data_packets_sent", r.data_packets_sent);
  w.Field("data_packets_lost", r.data_packets_lost);
  w.Field("retransmits", r.retransmits);
  w.Field("resent_data_packets", r.resent_data_packets);
  w.Field("spurious_retransmits", r.spurious_retransmits);
  w.Field("unflagged_resends", r.unflagged_resends);
  w.Field("flagged_first_sends", r.flagged_first_sends);
  w.BeginArray("paths");
  for (const PathReport& p : r.paths) {
    w.BeginObject();
    w.Field("path", p.path);
    w.Field("rate_gbps", p.rate_gbps);
    WriteLink(w, p.a_to_b, p.utilization_a_to_b);
    w.BeginObject("reverse");
    WriteLink(w, p.b_to_a, p.utilization_b_to_a);
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
  WriteCounters(w, "requester_counters", r.requester_counters);
  WriteCounters(w, "responder_counters", r.responder_counters);
  w.Field("malformed_datagrams", r.malformed_datagrams);
  w.Field("unknown_connection_datagrams", r.unknown_connection_datagrams);
  w.BeginObject("path_events");
  w.Field("state_changes", r.path_state_changes);
  w.Field("port_rotations", r.port_rotations);
  w.Field("paths_failed", r.paths_failed);
  WriteCountMap(w, "by_reason", r.path_events_by_reason);
  w.BeginArray("first");
  for (const RecordedPathEvent& re : r.first_path_events) {
    const core::PathEvent& e = re.event;
    w.BeginObject();
    w.Field("host", std::string_view(&re.host, 1));
    w.Field("at_us", Us(e.at));
    w.Field("conn", e.conn_id);
    w.Field("path", e.path_id);
    w.Field("kind", PathEventKindName(e.kind));
    if (e.kind == core::PathEvent::Kind::kPortRotated) {
      w.Field("old_port", e.old_port);
      w.Field("new_port", e.new_port);
    } else {
      w.Field("from", core::PathStateName(e.from));
      w.Field("to", core::PathStateName(e.to));
    }
    w.Field("reason", core::PathEventReasonName(e.reason));
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  w.Field("base_rtt_us", r.base_rtt_us);
  w.Field("recovery_us", r.recovery_us);
  w.BeginObject("timeline");
  w.Field("bin_us", Us(r.config.EffectiveBin()));
  w.BeginArray("delivered_gbps");
  for (double g : r.delivered_gbps) w.Element(g);
  w.EndArray();
  w.BeginArray("completed_gbps");
  for (double g : r.completed_gbps) w.Element(g);
  w.EndArray();
  w.EndObject();
  w.BeginObject("path_samples");
  w.Field("interval_us", Us(r.config.sample_interval));
  w.Field("conn", uint64_t{1});
  w.BeginArray("t_us");
  for (double t : r.path_samples.t_us) w.Element(t);
  w.EndArray();
  w.BeginArray("paths");
  for (const PathSamples::Series& p : r.path_samples.paths) {
    w.BeginObject();
    w.Field("path", p.path);
    w.BeginArray("physical");
    for (uint16_t x : p.physical) w.Element(x);
    w.EndArray();
    w.BeginArray("state");
    for (const std::string& x : p.state) w.Element(std::string_view(x));
    w.EndArray();
    const std::pair<std::string_view, const std::vector<double>*> series[] = {
        {"srtt_us", &p.srtt_us},         {"min_rtt_us", &p.min_rtt_us},
        {"ecn_alpha", &p.ecn_alpha},     {"cwnd_kb", &p.cwnd_kb},
        {"inflight_kb", &p.inflight_kb}, {"window_hint_kb", &p.window_hint_kb},
        {"utilization", &p.utilization}};
    for (const auto& [name, values] : series) {
      w.BeginArray(name);
      for (double x : *values) w.Element(x);
      w.EndArray();
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  w.Field("timer_deadline_not_advanced", r.timer_deadline_not_advanced);
  w.EndObject();
  std::string out = w.Take();
  out += '\n';
  return out;
}

std::string ResultSummary(const ScenarioResult& r, std::optional<double> wall_seconds) {
  const ScenarioConfig& c = r.config;
  std::string s;
  absl::StrAppendFormat(&s, "mrsim: %s %s, %u x %u B, %u paths (%u logical), %u connection(s), "
                            "depth %u, seed %u\n",
                        TransportName(c.transport), OperationName(c.op), c.messages,
                        c.message_bytes, c.physical_paths, c.EffectiveLogicalPaths(),
                        c.connections, c.depth, c.seed);
  absl::StrAppendFormat(&s, "  fabric      %.1f Gb/s per path, delay %.2f us, loss %.4g%%, "
                            "queue %u KiB, ECN %u KiB\n",
                        c.rate_gbps, Us(c.delay), c.loss * 100, c.queue_bytes / 1024,
                        c.ecn_threshold_bytes / 1024);
  absl::StrAppendFormat(&s, "  stop        %s after %.1f us simulated, %u events%s\n",
                        r.stop_reason, r.sim_time_us, r.events,
                        wall_seconds ? absl::StrFormat(", %.2f s wall", *wall_seconds) : "");
  absl::StrAppendFormat(&s, "  messages    %u completed, %u failed, %u outstanding, %u not posted\n",
                        r.messages_completed, r.messages_failed, r.messages_outstanding,
                        r.messages_not_posted);
  for (const auto& [status, count] : r.failed_by_status) {
    absl::StrAppendFormat(&s, "                %s: %u\n", status, count);
  }
  absl::StrAppendFormat(&s, "  data errors %u%s\n", r.data_errors,
                        r.data_errors == 0 ? " (every placed byte verified)" : "");
  for (const auto& [kind, count] : r.data_errors_by_kind) {
    absl::StrAppendFormat(&s, "                %s: %u\n", kind, count);
  }
  absl::StrAppendFormat(&s, "  goodput     %.2f Gb/s of %.1f Gb/s line (%.1f%%; payload ceiling "
                            "%.2f Gb/s)\n",
                        r.goodput_gbps, r.capacity_gbps,
                        r.capacity_gbps > 0 ? 100 * r.goodput_gbps / r.capacity_gbps : 0.0,
                        r.payload_capacity_gbps);
  absl::StrAppendFormat(&s, "  completion  p50 %.1f us, p99 %.1f us, max %.1f us\n",
                        r.completion_us.p50_us, r.completion_us.p99_us, r.completion_us.max_us);
  if (c.steps > 0) {
    absl::StrAppendFormat(&s, "  steps       %u of %u completed (%u with failures): p50 %.1f us, "
                              "p99 %.1f us, max %.1f us, mean %.1f us\n",
                          r.steps.count, c.steps, r.steps.with_failures, r.steps.p50_us,
                          r.steps.p99_us, r.steps.max_us, r.steps.mean_us);
  }
  absl::StrAppendFormat(&s, "  loss        %u packets lost (random %u, tail %u, blackhole %u); "
                            "%u of %u data packets\n",
                        r.packets_lost, r.lost_random, r.lost_tail_drop, r.lost_blackhole,
                        r.data_packets_lost, r.data_packets_sent);
  absl::StrAppendFormat(&s, "  retransmit  %u flagged, %u resent (spurious %u", r.retransmits,
                        r.resent_data_packets, r.spurious_retransmits);
  if (r.unflagged_resends > 0) absl::StrAppendFormat(&s, ", %u without the flag", r.unflagged_resends);
  if (r.flagged_first_sends > 0) {
    absl::StrAppendFormat(&s, ", %u flagged first sends", r.flagged_first_sends);
  }
  s += ")\n";
  absl::StrAppendFormat(&s, "  paths       %u state changes, %u port rotations\n",
                        r.path_state_changes, r.port_rotations);
  if (!c.blackholes.empty()) {
    absl::StrAppendFormat(&s, "  recovery    %s (base RTT %.2f us)\n",
                          r.recovery_us ? absl::StrFormat("%.1f us", *r.recovery_us)
                                        : std::string("not reached"),
                          r.base_rtt_us);
  }
  s += "  path  rate    tx_pkts     drops  ce_marks  util\n";
  for (const PathReport& p : r.paths) {
    absl::StrAppendFormat(&s, "  %4u  %5.1f  %9u  %8u  %8u  %4.2f\n", p.path, p.rate_gbps,
                          p.a_to_b.tx_packets, p.a_to_b.dropped(), p.a_to_b.ce_marked,
                          p.utilization_a_to_b);
  }
  return s;
}

}  // namespace metaroce::sim
