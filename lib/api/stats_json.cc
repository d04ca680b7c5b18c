#include "lib/api/stats_json.h"

#include <chrono>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/core/counter_fields.h"
#include "lib/core/types.h"

namespace metaroce::api {
namespace {

using control::Json;

double Micros(core::Duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

core::Duration FromMicros(double us) {
  using Nanos = std::chrono::duration<double, std::nano>;
  const Nanos ns = std::chrono::duration<double, std::micro>(us);
  return std::chrono::duration_cast<core::Duration>(ns + Nanos(0.5));  // rounded, not truncated
}

absl::Status Missing(std::string_view where, std::string_view key, std::string_view what) {
  // absl::StrCat takes absl::string_view, which is not std::string_view in this Abseil.
  return absl::InvalidArgumentError(absl::StrCat(std::string(where), ": '", std::string(key),
                                                 "' is missing or not ", std::string(what)));
}

// Reads member `key` of `j` as an unsigned integer that fits T.
template <typename T>
absl::Status ReadUint(const Json& j, std::string_view key, std::string_view where, T& out) {
  const Json* v = j.Find(key);
  std::optional<uint64_t> u = v != nullptr ? v->AsUint() : std::nullopt;
  if (!u || *u > std::numeric_limits<T>::max()) {
    return Missing(where, key, "an unsigned integer in range");
  }
  out = static_cast<T>(*u);
  return absl::OkStatus();
}

absl::Status ReadDouble(const Json& j, std::string_view key, std::string_view where,
                        double& out) {
  const Json* v = j.Find(key);
  std::optional<double> d = v != nullptr ? v->AsDouble() : std::nullopt;
  if (!d) return Missing(where, key, "a number");
  out = *d;
  return absl::OkStatus();
}

absl::StatusOr<core::PathState> PathStateFromName(std::string_view name) {
  for (core::PathState s : {core::PathState::kActive, core::PathState::kSuspect,
                            core::PathState::kFailed, core::PathState::kProbing}) {
    if (core::PathStateName(s) == name) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("path state '", std::string(name), "' is unknown"));
}

absl::StatusOr<core::PathStats> PathStatsFromJson(const Json& q) {
  constexpr std::string_view kWhere = "path";
  core::PathStats p;
  absl::Status s = ReadUint(q, "path_id", kWhere, p.path_id);
  if (s.ok()) s = ReadUint(q, "src_port", kWhere, p.src_port);
  if (s.ok()) s = ReadUint(q, "plane", kWhere, p.plane);
  double srtt = 0, rttvar = 0, min_rtt = 0;
  if (s.ok()) s = ReadDouble(q, "srtt_us", kWhere, srtt);
  if (s.ok()) s = ReadDouble(q, "rttvar_us", kWhere, rttvar);
  if (s.ok()) s = ReadDouble(q, "min_rtt_us", kWhere, min_rtt);
  if (s.ok()) s = ReadDouble(q, "ecn_fraction", kWhere, p.ecn_fraction);
  if (s.ok()) s = ReadDouble(q, "utilization", kWhere, p.utilization);
  if (s.ok()) s = ReadUint(q, "cwnd_bytes", kWhere, p.cwnd_bytes);
  if (s.ok()) s = ReadUint(q, "inflight_bytes", kWhere, p.inflight_bytes);
  if (s.ok()) s = ReadUint(q, "window_hint_bytes", kWhere, p.window_hint_bytes);
  if (s.ok()) s = ReadUint(q, "tx_packets", kWhere, p.tx_packets);
  if (s.ok()) s = ReadUint(q, "tx_bytes", kWhere, p.tx_bytes);
  if (s.ok()) s = ReadUint(q, "acked_packets", kWhere, p.acked_packets);
  if (s.ok()) s = ReadUint(q, "retransmits", kWhere, p.retransmits);
  if (s.ok()) s = ReadUint(q, "timeouts", kWhere, p.timeouts);
  if (s.ok()) s = ReadUint(q, "rotations", kWhere, p.rotations);
  if (s.ok()) s = ReadUint(q, "ce_marks", kWhere, p.ce_marks);
  if (s.ok()) s = ReadUint(q, "rx_packets", kWhere, p.rx_packets);
  if (!s.ok()) return s;
  const Json* state = q.Find("state");
  std::optional<std::string_view> name = state != nullptr ? state->AsString() : std::nullopt;
  if (!name) return Missing(kWhere, "state", "a string");
  absl::StatusOr<core::PathState> ps = PathStateFromName(*name);
  if (!ps.ok()) return ps.status();
  p.state = *ps;
  p.srtt = FromMicros(srtt);
  p.rttvar = FromMicros(rttvar);
  p.min_rtt = FromMicros(min_rtt);
  return p;
}

}  // namespace

Json CountersJson(const core::ConnectionCounters& c) {
  Json j = Json::MakeObject();
  for (const auto& f : core::kConnectionCounterFields) j[f.name] = c.*f.member;
  return j;
}

void AddCounters(const core::ConnectionCounters& c, Json& sum) {
  for (const auto& f : core::kConnectionCounterFields) {
    Json& v = sum[f.name];
    v = v.AsUint().value_or(0) + c.*f.member;
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

absl::StatusOr<ConnectionStats> ConnectionStatsFromJson(const Json& j) {
  constexpr std::string_view kWhere = "connection stats";
  ConnectionStats s;
  uint8_t error_status = 0;
  uint16_t owner = 0;
  absl::Status st = ReadUint(j, "conn_id", kWhere, s.conn_id);
  if (st.ok()) st = ReadUint(j, "owner_worker", kWhere, owner);
  if (st.ok()) st = ReadUint(j, "error_status", kWhere, error_status);
  if (st.ok()) st = ReadUint(j, "outstanding_sends", kWhere, s.outstanding_sends);
  if (st.ok()) st = ReadUint(j, "posted_receives", kWhere, s.posted_receives);
  if (st.ok()) st = ReadUint(j, "events_dropped", kWhere, s.events_dropped);
  if (!st.ok()) return st;
  s.owner = owner;
  s.error_status = static_cast<core::WcStatus>(error_status);
  const Json* state = j.Find("state");
  std::optional<std::string_view> name = state != nullptr ? state->AsString() : std::nullopt;
  if (!name || (*name != "ready" && *name != "error")) {
    return Missing(kWhere, "state", "\"ready\" or \"error\"");
  }
  s.state = *name == "ready" ? core::Connection::State::kReady : core::Connection::State::kError;
  const Json* counters = j.Find("counters");
  if (counters == nullptr || !counters->is_object()) {
    return Missing(kWhere, "counters", "an object");
  }
  for (const auto& f : core::kConnectionCounterFields) {
    if (absl::Status c = ReadUint(*counters, f.name, "counters", s.counters.*f.member); !c.ok()) {
      return c;
    }
  }
  const Json* paths = j.Find("paths");
  if (paths == nullptr || !paths->is_array()) return Missing(kWhere, "paths", "an array");
  for (const Json& q : paths->array()) {
    absl::StatusOr<core::PathStats> p = PathStatsFromJson(q);
    if (!p.ok()) return p.status();
    s.paths.push_back(*p);
  }
  return s;
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
  j["tx_segmented_messages"] = s.tx_segmented_messages;
  return j;
}

}  // namespace metaroce::api
