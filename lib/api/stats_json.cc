#include "lib/api/stats_json.h"

#include <chrono>
#include <utility>

#include "lib/core/types.h"

namespace metaroce::api {
namespace {

using control::Json;
using Counter = uint64_t core::ConnectionCounters::*;

// Every counter, in the order the documents list them.
constexpr std::pair<std::string_view, Counter> kCounters[] = {
    {"sent_pkts", &core::ConnectionCounters::sent_pkts},
    {"rcvd_pkts", &core::ConnectionCounters::rcvd_pkts},
    {"retransmits", &core::ConnectionCounters::retransmits},
    {"gap_retransmits", &core::ConnectionCounters::gap_retransmits},
    {"timeout_retransmits", &core::ConnectionCounters::timeout_retransmits},
    {"rerouted_packets", &core::ConnectionCounters::rerouted_packets},
    {"duplicate_request", &core::ConnectionCounters::duplicate_request},
    {"out_of_window", &core::ConnectionCounters::out_of_window},
    {"bad_token", &core::ConnectionCounters::bad_token},
    {"bad_path", &core::ConnectionCounters::bad_path},
    {"reorder_drops", &core::ConnectionCounters::reorder_drops},
    {"seq_err_naks_sent", &core::ConnectionCounters::seq_err_naks_sent},
    {"rcvd_rnr_err", &core::ConnectionCounters::rcvd_rnr_err},
    {"rnr_naks_sent", &core::ConnectionCounters::rnr_naks_sent},
    {"access_naks_sent", &core::ConnectionCounters::access_naks_sent},
    {"acks_sent", &core::ConnectionCounters::acks_sent},
    {"acks_rcvd", &core::ConnectionCounters::acks_rcvd},
    {"probes_sent", &core::ConnectionCounters::probes_sent},
    {"retry_exceeded_err", &core::ConnectionCounters::retry_exceeded_err},
    {"messages_completed", &core::ConnectionCounters::messages_completed},
    {"messages_received", &core::ConnectionCounters::messages_received},
};

double Micros(core::Duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

}  // namespace

Json CountersJson(const core::ConnectionCounters& c) {
  Json j = Json::MakeObject();
  for (const auto& [name, member] : kCounters) j[name] = c.*member;
  return j;
}

void AddCounters(const core::ConnectionCounters& c, Json& sum) {
  for (const auto& [name, member] : kCounters) {
    Json& v = sum[name];
    v = v.AsUint().value_or(0) + c.*member;
  }
}

Json PathStatsJson(const core::PathStats& p) {
  Json q = Json::MakeObject();
  q["path_id"] = p.path_id;
  q["src_port"] = p.src_port;
  q["plane"] = p.plane;
  q["state"] = core::PathStateName(p.state);
  q["srtt_us"] = Micros(p.srtt);
  q["rttvar_us"] = Micros(p.rttvar);
  q["min_rtt_us"] = Micros(p.min_rtt);
  q["ecn_fraction"] = p.ecn_fraction;
  q["utilization"] = p.utilization;
  q["cwnd_bytes"] = p.cwnd_bytes;
  q["inflight_bytes"] = p.inflight_bytes;
  q["window_hint_bytes"] = p.window_hint_bytes;
  q["tx_packets"] = p.tx_packets;
  q["tx_bytes"] = p.tx_bytes;
  q["acked_packets"] = p.acked_packets;
  q["retransmits"] = p.retransmits;
  q["timeouts"] = p.timeouts;
  q["rotations"] = p.rotations;
  q["ce_marks"] = p.ce_marks;
  q["rx_packets"] = p.rx_packets;
  return q;
}

Json ConnectionStatsJson(const ConnectionStats& s) {
  Json j = Json::MakeObject();
  j["conn_id"] = s.conn_id;
  j["owner_worker"] = s.owner;
  j["state"] = s.state == core::Connection::State::kReady ? "ready" : "error";
  j["error_status"] = static_cast<int>(s.error_status);
  j["error_status_name"] = core::StatusName(s.error_status);
  j["counters"] = CountersJson(s.counters);
  j["outstanding_sends"] = s.outstanding_sends;
  j["posted_receives"] = s.posted_receives;
  j["events_dropped"] = s.events_dropped;
  Json& paths = j["paths"] = Json::MakeArray();
  for (const core::PathStats& p : s.paths) paths.Push(PathStatsJson(p));
  return j;
}

Json PortStatsJson(const io::PortStats& s, std::string_view description) {
  Json j = Json::MakeObject();
  j["description"] = description;
  j["tx_packets"] = s.tx_packets;
  j["tx_bytes"] = s.tx_bytes;
  j["rx_packets"] = s.rx_packets;
  j["rx_bytes"] = s.rx_bytes;
  j["tx_ring_full"] = s.tx_ring_full;
  j["tx_unroutable"] = s.tx_unroutable;
  j["rx_dropped"] = s.rx_dropped;
  j["rx_ring_full"] = s.rx_ring_full;
  j["fill_ring_empty"] = s.fill_ring_empty;
  j["rx_invalid_descs"] = s.rx_invalid_descs;
  j["tx_invalid_descs"] = s.tx_invalid_descs;
  j["rx_kernel_dropped"] = s.rx_kernel_dropped;
  return j;
}

}  // namespace metaroce::api
