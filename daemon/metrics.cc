#include "daemon/metrics.h"

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/prometheus_text.h"
#include "lib/core/counter_fields.h"
#include "lib/core/path_state.h"
#include "lib/wire/packet.h"

namespace metaroce::daemon {
namespace {

constexpr MetricType kCounter = MetricType::kCounter;
constexpr MetricType kGauge = MetricType::kGauge;

double Seconds(core::Duration d) { return std::chrono::duration<double>(d).count(); }

using Family = PrometheusText::Family;

void BuildAndDaemon(const MetricsSnapshot& s, PrometheusText& t) {
  t.Declare("metaroce_build_info", kGauge,
            "Versions of metaroced and of what it runs on (value 1).")
      .Add({{"version", s.build.version},
            {"kernel", s.build.kernel},
            {"libbpf", s.build.libbpf},
            {"libxdp", s.build.libxdp},
            {"liburing", s.build.liburing}},
           uint64_t{1});
  t.Declare("metaroce_daemon_start_time_seconds", kGauge,
            "When metaroced started, in seconds since the Unix epoch.")
      .Add({}, s.start_time_seconds);
  t.Declare("metaroce_daemon_uptime_seconds", kGauge, "Seconds since metaroced started.")
      .Add({}, s.uptime_seconds);
  t.Declare("metaroce_daemon_heap_in_use_bytes", kGauge,
            "Bytes the daemon's heap holds (malloc's count, daemon.show heap_in_use_bytes).")
      .Add({}, s.heap_in_use_bytes);
  uint64_t own = 0, apps = 0;
  for (const ConnectionMetrics& c : s.connections) ++(c.application ? apps : own);
  Family& conns = t.Declare(
      "metaroce_daemon_connections", kGauge,
      "Connections held, by owner: the daemon's own (conn.add) or attached applications'.");
  conns.Add({{"owner", "daemon"}}, own);
  conns.Add({{"owner", "application"}}, apps);
  t.Declare("metaroce_daemon_app_sessions", kGauge, "Applications attached (control sessions).")
      .Add({}, s.app_sessions);
  t.Declare("metaroce_daemon_app_memory_bytes", kGauge,
            "Shared memory made for applications, counted against max_memory.")
      .Add({}, s.app_memory_bytes);
}

void Links(const MetricsSnapshot& s, PrometheusText& t) {
  Family& info = t.Declare(
      "metaroce_link_info", kGauge,
      "One per plane (value 1): its interface, this host's address on it, the port kind and the "
      "XDP attach mode.");
  Family& prog = t.Declare("metaroce_link_xdp_program_id", kGauge,
                           "Id of the XDP program attached to the interface now (0: none).");
  Family& xdp = t.Declare(
      "metaroce_xdp_packets_total", kCounter,
      "Packets the XDP steering program handled, by outcome; each packet counts once "
      "(redirected: to an AF_XDP socket; pass_*: to the kernel; drop_*: dropped).");
  for (const LinkMetrics& l : s.links) {
    info.Add({{"interface", l.interface},
              {"plane", absl::StrCat(l.plane)},
              {"address", l.address},
              {"port_kind", s.port_kind},
              {"xdp_mode", l.xdp_mode}},
             uint64_t{1});
    prog.Add({{"interface", l.interface}}, uint64_t{l.xdp_prog_id});
    for (const auto& [outcome, n] : l.xdp_packets) {
      xdp.Add({{"interface", l.interface}, {"outcome", outcome}}, n);
    }
  }
}

struct PortField {
  absl::string_view name;
  uint64_t io::PortStats::*member;
  absl::string_view help;
};
constexpr PortField kPortFields[] = {
    {"metaroce_port_tx_packets_total", &io::PortStats::tx_packets, "Packets sent by the port."},
    {"metaroce_port_tx_bytes_total", &io::PortStats::tx_bytes, "Bytes sent by the port."},
    {"metaroce_port_rx_packets_total", &io::PortStats::rx_packets,
     "Packets received by the port."},
    {"metaroce_port_rx_bytes_total", &io::PortStats::rx_bytes, "Bytes received by the port."},
    {"metaroce_port_tx_ring_full_total", &io::PortStats::tx_ring_full,
     "Sends refused: no free frame or the TX ring full (retried by the worker)."},
    {"metaroce_port_tx_unroutable_total", &io::PortStats::tx_unroutable,
     "Sends dropped: no route, neighbour or socket for the destination, or a send error."},
    {"metaroce_port_rx_dropped_total", &io::PortStats::rx_dropped,
     "Received frames not ours or malformed below UDP (released)."},
};
// XDP_STATISTICS of an AF_XDP socket: exported for AF_XDP ports only.
constexpr PortField kAfXdpFields[] = {
    {"metaroce_af_xdp_rx_ring_full_total", &io::PortStats::rx_ring_full,
     "Packets the kernel dropped because the AF_XDP RX ring was full (XDP_STATISTICS)."},
    {"metaroce_af_xdp_fill_ring_empty_total", &io::PortStats::fill_ring_empty,
     "Times the kernel found the AF_XDP fill ring empty (XDP_STATISTICS)."},
    {"metaroce_af_xdp_rx_invalid_descriptors_total", &io::PortStats::rx_invalid_descs,
     "Invalid descriptors on the AF_XDP RX side (XDP_STATISTICS)."},
    {"metaroce_af_xdp_tx_invalid_descriptors_total", &io::PortStats::tx_invalid_descs,
     "Invalid descriptors on the AF_XDP TX ring (XDP_STATISTICS)."},
    {"metaroce_af_xdp_rx_dropped_total", &io::PortStats::rx_kernel_dropped,
     "Packets the kernel dropped on the AF_XDP socket for other reasons, e.g. larger than a "
     "frame (XDP_STATISTICS rx_dropped)."},
};

void Ports(const MetricsSnapshot& s, PrometheusText& t) {
  Family& info = t.Declare(
      "metaroce_port_info", kGauge,
      "One per packet port (value 1): the worker that owns it, what it really is, and the "
      "features it opened with.");
  std::vector<Family*> port, xsk;
  for (const PortField& f : kPortFields) port.push_back(&t.Declare(f.name, kCounter, f.help));
  for (const PortField& f : kAfXdpFields) xsk.push_back(&t.Declare(f.name, kCounter, f.help));
  for (const engine::WorkerStats& w : s.workers) {
    for (size_t p = 0; p < w.ports.size(); ++p) {
      const std::string interface =
          p < s.links.size() ? s.links[p].interface : absl::StrCat("plane", p);
      const std::string description = p < w.port_descriptions.size() ? w.port_descriptions[p]
                                                                      : std::string();
      const io::PortFeatures features =
          p < w.port_features.size() ? w.port_features[p] : io::PortFeatures{};
      const bool af_xdp = features.af_xdp;
      const uint32_t queue =
          af_xdp ? s.first_queue + static_cast<uint32_t>(w.worker) : static_cast<uint32_t>(w.worker);
      const Labels id = {{"interface", interface}, {"queue", absl::StrCat(queue)}};
      const auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
      info.Add({{"interface", interface},
                {"queue", absl::StrCat(queue)},
                {"worker", absl::StrCat(w.worker)},
                {"description", description},
                {"af_xdp", flag(features.af_xdp)},
                {"zero_copy", flag(features.zero_copy)},
                {"need_wakeup", flag(features.need_wakeup)},
                {"busy_poll", flag(features.busy_poll)},
                {"multi_buffer", flag(features.multi_buffer)}},
               uint64_t{1});
      for (size_t i = 0; i < port.size(); ++i) port[i]->Add(id, w.ports[p].*kPortFields[i].member);
      if (!af_xdp) continue;
      for (size_t i = 0; i < xsk.size(); ++i) xsk[i]->Add(id, w.ports[p].*kAfXdpFields[i].member);
    }
  }
}

struct WorkerField {
  absl::string_view name;
  uint64_t engine::WorkerStats::*member;
  MetricType type;
  absl::string_view help;
};
constexpr WorkerField kWorkerFields[] = {
    {"metaroce_worker_loops_total", &engine::WorkerStats::loops, kCounter,
     "Iterations of the worker's loop."},
    {"metaroce_worker_sleeps_total", &engine::WorkerStats::sleeps, kCounter,
     "Times the worker slept (idle)."},
    {"metaroce_worker_rx_packets_total", &engine::WorkerStats::rx_packets, kCounter,
     "Packets received from the worker's ports."},
    {"metaroce_worker_tx_packets_total", &engine::WorkerStats::tx_packets, kCounter,
     "Packets accepted by the worker's ports."},
    {"metaroce_worker_handoff_sent_total", &engine::WorkerStats::handoff_sent, kCounter,
     "Datagrams received here for a connection another worker owns, handed to it."},
    {"metaroce_worker_handoff_received_total", &engine::WorkerStats::handoff_received, kCounter,
     "Datagrams handed to this worker by the others."},
    {"metaroce_worker_handoff_dropped_total", &engine::WorkerStats::handoff_dropped, kCounter,
     "Datagrams dropped: the owner's handoff ring was full."},
    {"metaroce_worker_handoff_too_large_total", &engine::WorkerStats::handoff_too_large,
     kCounter, "Datagrams dropped: larger than a handoff slot."},
    {"metaroce_worker_tx_backlogged_total", &engine::WorkerStats::tx_backlogged, kCounter,
     "Packets kept for the next loop: the port was full after retries."},
    {"metaroce_worker_tx_backlog_dropped_total", &engine::WorkerStats::tx_backlog_dropped,
     kCounter, "Packets dropped: the transmit backlog was full too (loss recovery resends)."},
    {"metaroce_worker_tx_no_route_total", &engine::WorkerStats::tx_no_route, kCounter,
     "Packets with no route for their connection and plane (a bug if not 0)."},
    {"metaroce_worker_commands_refused_total", &engine::WorkerStats::commands_refused, kCounter,
     "Work requests the core refused (completed with an error)."},
    {"metaroce_worker_completions_total", &engine::WorkerStats::completions, kCounter,
     "Completions delivered to completion rings."},
    {"metaroce_worker_doorbell_wakeups_total", &engine::WorkerStats::doorbell_wakeups, kCounter,
     "Sleeps ended by an application's doorbell."},
    {"metaroce_worker_observed_events_dropped_total",
     &engine::WorkerStats::observed_events_dropped, kCounter,
     "Path event copies for the daemon dropped: the observer ring was full."},
    {"metaroce_worker_doorbells", &engine::WorkerStats::doorbells, kGauge,
     "Application doorbells attached to the worker."},
    {"metaroce_worker_connections", &engine::WorkerStats::connections, kGauge,
     "Connections the worker owns."},
};

void Workers(const MetricsSnapshot& s, PrometheusText& t) {
  std::vector<Family*> fields;
  for (const WorkerField& f : kWorkerFields) fields.push_back(&t.Declare(f.name, f.type, f.help));
  Family& rx = t.Declare("metaroce_worker_rx_datagrams_total", kCounter,
                         "MetaRoCE datagrams the worker's endpoint parsed.");
  Family& malformed = t.Declare("metaroce_worker_malformed_datagrams_total", kCounter,
                                "Datagrams dropped as malformed, by the parser's reason.");
  Family& unknown = t.Declare("metaroce_worker_unknown_connection_datagrams_total", kCounter,
                              "Datagrams dropped: no such connection.");
  for (const engine::WorkerStats& w : s.workers) {
    const Labels id = {{"worker", absl::StrCat(w.worker)}};
    for (size_t i = 0; i < fields.size(); ++i) fields[i]->Add(id, w.*kWorkerFields[i].member);
    rx.Add(id, w.endpoint.rx_datagrams);
    for (size_t r = 0; r < w.endpoint.malformed_by_reason.size(); ++r) {
      if (static_cast<wire::ParseError>(r) == wire::ParseError::kNone) continue;  // not a reason
      const std::string_view reason = wire::ParseErrorName(static_cast<wire::ParseError>(r));
      malformed.Add({{"worker", absl::StrCat(w.worker)},
                     {"reason", std::string(reason.data(), reason.size())}},
                    w.endpoint.malformed_by_reason[r]);
    }
    unknown.Add(id, w.endpoint.unknown_connection);
  }
}

struct PathCounter {
  absl::string_view name;
  uint64_t core::PathStats::*member;
  absl::string_view help;
};
constexpr PathCounter kPathCounters[] = {
    {"metaroce_path_tx_packets_total", &core::PathStats::tx_packets,
     "Data packets sent on the path, retransmissions included."},
    {"metaroce_path_tx_bytes_total", &core::PathStats::tx_bytes, "Bytes sent on the path."},
    {"metaroce_path_acked_packets_total", &core::PathStats::acked_packets,
     "Packets sent on the path and acknowledged."},
    {"metaroce_path_retransmits_total", &core::PathStats::retransmits,
     "Retransmissions on the path (gap- and timeout-triggered)."},
    {"metaroce_path_timeouts_total", &core::PathStats::timeouts,
     "Probe timeouts on the path."},
    {"metaroce_path_rotations_total", &core::PathStats::rotations,
     "Source port rotations of the path."},
    {"metaroce_path_ce_marks_total", &core::PathStats::ce_marks,
     "ECN CE marks reported on the path."},
    {"metaroce_path_rx_packets_total", &core::PathStats::rx_packets,
     "Receiver side: data packets accepted on the path."},
};

constexpr core::PathState kPathStates[] = {core::PathState::kActive, core::PathState::kSuspect,
                                           core::PathState::kFailed, core::PathState::kProbing};

void Connections(const MetricsSnapshot& s, PrometheusText& t) {
  Family& info = t.Declare(
      "metaroce_connection_info", kGauge,
      "One per connection (value 1): its peer, owner (daemon or application, with the "
      "application's name and pid) and transport profile.");
  Family& state = t.Declare("metaroce_connection_state", kGauge,
                            "1 for the connection's state (ready or error), 0 for the other.");
  std::vector<Family*> counters;
  for (const core::ConnectionCounterField& f : core::kConnectionCounterFields) {
    const absl::string_view name(f.name.data(), f.name.size());
    const absl::string_view meaning(f.meaning.data(), f.meaning.size());
    counters.push_back(
        &t.Declare(absl::StrCat("metaroce_connection_", name, "_total"), kCounter, meaning));
  }
  Family& outstanding = t.Declare("metaroce_connection_outstanding_sends", kGauge,
                                  "Send work requests posted and not yet completed.");
  Family& receives = t.Declare("metaroce_connection_posted_receives", kGauge,
                               "Receive work requests posted and not yet consumed.");
  Family& events_dropped =
      t.Declare("metaroce_connection_path_events_dropped_total", kCounter,
                "Path events the connection's event ring had no room for.");

  Family& path_info = t.Declare("metaroce_path_info", kGauge,
                                "One per path (value 1): its plane and that plane's interface.");
  Family& path_state = t.Declare(
      "metaroce_path_state", kGauge,
      "1 for the path's health state (active, suspect, failed, probing), 0 for the others.");
  Family& port = t.Declare("metaroce_path_source_port", kGauge,
                           "The path's current UDP source port (it changes on rotation).");
  Family& srtt = t.Declare("metaroce_path_srtt_seconds", kGauge, "Smoothed round-trip time.");
  Family& rttvar = t.Declare("metaroce_path_rttvar_seconds", kGauge, "Round-trip time variation.");
  Family& min_rtt = t.Declare("metaroce_path_min_rtt_seconds", kGauge,
                              "Least round-trip time seen on the path.");
  Family& cwnd = t.Declare("metaroce_path_cwnd_bytes", kGauge, "Congestion window.");
  Family& inflight = t.Declare("metaroce_path_inflight_bytes", kGauge,
                               "Bytes sent on the path and not yet acknowledged.");
  Family& hint = t.Declare("metaroce_path_window_hint_bytes", kGauge,
                           "The receiver's last fair-share window hint (0: none).");
  Family& ecn = t.Declare("metaroce_path_ecn_marked_ratio", kGauge,
                          "Moving average of the fraction of packets marked CE, 0..1.");
  Family& utilization = t.Declare("metaroce_path_utilization_ratio", kGauge,
                                  "Inflight over congestion window over the last RTT, 0..1.");
  std::vector<Family*> path_counters;
  for (const PathCounter& c : kPathCounters) {
    path_counters.push_back(&t.Declare(c.name, kCounter, c.help));
  }

  for (const ConnectionMetrics& c : s.connections) {
    const std::string conn = absl::StrCat(c.id);
    Labels described = {{"conn", conn},
                        {"peer", c.peer},
                        {"owner", c.application ? "application" : "daemon"},
                        {"profile", c.profile}};
    if (c.application) {
      described.emplace_back("application", c.application_name);
      described.emplace_back("pid", absl::StrCat(c.application_pid));
    }
    info.Add(described, uint64_t{1});
    const bool ready = c.stats.state == core::Connection::State::kReady;
    state.Add({{"conn", conn}, {"state", "ready"}}, uint64_t{ready ? 1u : 0u});
    state.Add({{"conn", conn}, {"state", "error"}}, uint64_t{ready ? 0u : 1u});
    const Labels id = {{"conn", conn}};
    for (size_t i = 0; i < counters.size(); ++i) {
      counters[i]->Add(id, c.stats.counters.*core::kConnectionCounterFields[i].member);
    }
    outstanding.Add(id, static_cast<uint64_t>(c.stats.outstanding_sends));
    receives.Add(id, static_cast<uint64_t>(c.stats.posted_receives));
    events_dropped.Add(id, c.stats.events_dropped);

    for (const core::PathStats& p : c.stats.paths) {
      const Labels pid = {{"conn", conn}, {"path", absl::StrCat(p.path_id)}};
      path_info.Add({{"conn", conn},
                     {"path", absl::StrCat(p.path_id)},
                     {"plane", absl::StrCat(p.plane)},
                     {"interface", p.plane < s.links.size() ? s.links[p.plane].interface
                                                            : std::string()}},
                    uint64_t{1});
      for (core::PathState st : kPathStates) {
        const std::string_view name = core::PathStateName(st);
        path_state.Add({{"conn", conn},
                        {"path", absl::StrCat(p.path_id)},
                        {"state", std::string(name.data(), name.size())}},
                       uint64_t{p.state == st ? 1u : 0u});
      }
      port.Add(pid, uint64_t{p.src_port});
      srtt.Add(pid, Seconds(p.srtt));
      rttvar.Add(pid, Seconds(p.rttvar));
      min_rtt.Add(pid, Seconds(p.min_rtt));
      cwnd.Add(pid, uint64_t{p.cwnd_bytes});
      inflight.Add(pid, uint64_t{p.inflight_bytes});
      hint.Add(pid, uint64_t{p.window_hint_bytes});
      ecn.Add(pid, p.ecn_fraction);
      utilization.Add(pid, p.utilization);
      for (size_t i = 0; i < path_counters.size(); ++i) {
        path_counters[i]->Add(pid, p.*kPathCounters[i].member);
      }
    }
  }
}

}  // namespace

std::string RenderMetrics(const MetricsSnapshot& snapshot, std::vector<std::string>* problems) {
  PrometheusText t;
  BuildAndDaemon(snapshot, t);
  Links(snapshot, t);
  Ports(snapshot, t);
  Workers(snapshot, t);
  Connections(snapshot, t);
  if (problems != nullptr) *problems = t.problems();
  return t.Render();
}

}  // namespace metaroce::daemon
