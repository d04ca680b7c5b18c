#include "daemon/path_manager.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/listing.h"
#include "daemon/params.h"
#include "lib/api/stats_json.h"
#include "lib/engine/worker.h"

namespace metaroce::daemon {
namespace {

using control::Json;

std::chrono::nanoseconds ToChrono(absl::Duration d) { return absl::ToChronoNanoseconds(d); }

absl::StatusOr<uint32_t> ConnId(const Json& params, std::string_view key) {
  absl::StatusOr<uint64_t> id = params.GetUint(key);
  if (!id.ok()) return id.status();
  if (*id > UINT32_MAX) return absl::NotFoundError(absl::StrCat("no connection ", *id));
  return static_cast<uint32_t>(*id);
}


}  // namespace

core::ConnectionConfig PathPolicy::Apply(core::ConnectionConfig base) const {
  base.rotation_holddown = ToChrono(rotation_holddown);
  base.degraded_hold = ToChrono(degraded_hold);
  base.rotation_rate = rotations_per_second;
  base.rotation_burst = rotation_burst;
  return base;
}

namespace {

PathEventRecord::Limits RecordLimits(const PathPolicy& policy) {
  return {.per_connection = policy.events_kept, .max_bytes = policy.events_bytes};
}

}  // namespace

PathManager::PathManager(ConnectionManager& connections, AppSessions& apps, PathPolicy policy,
                         absl::Time started)
    : connections_(connections),
      apps_(apps),
      policy_(std::move(policy)),
      started_(started),
      record_(RecordLimits(policy_)) {}

void PathManager::SetPolicy(const PathPolicy& policy) {
  absl::MutexLock lock(&mu_);
  policy_ = policy;
  record_.SetLimits(RecordLimits(policy_));
}

void PathManager::Tick() {
  // Every connection's events from the engine's observer rings (header): the daemon's own and
  // copies of the applications'. Nothing here visits the connections.
  std::vector<core::PathEvent> drained;
  core::PathEvent buf[64];
  size_t n = 0;
  while ((n = apps_.PollPathEvents(std::span<core::PathEvent>(buf))) > 0) {
    drained.insert(drained.end(), buf, buf + n);
  }
  // The rings are drained one worker after another: recorded in the order of their instants,
  // the events get sequence numbers (path.events' order and cursor) in that order too.
  std::stable_sort(drained.begin(), drained.end(),
                   [](const core::PathEvent& a, const core::PathEvent& b) { return a.at < b.at; });
  const absl::Time now = absl::Now();
  const int64_t now_mono_ns = engine::MonotonicNow().ns;
  std::vector<uint32_t> recorded;
  {
    absl::MutexLock lock(&mu_);
    for (const core::PathEvent& e : drained) {
      // Event instants are CLOCK_MONOTONIC (lib/engine); the record keeps daemon time.
      const absl::Duration since_event = absl::Nanoseconds(now_mono_ns - e.at.ns);
      record_.Record(e, absl::ToInt64Nanoseconds(now - since_event - started_));
    }
    if (now < next_prune_ || record_.events() == 0) return;
    next_prune_ = now + kPruneEvery;
    recorded = record_.Connections();
  }
  // The record of a deleted connection goes with it, looked for among the connections that have
  // a record (ids are never reused: one deleted now is not recorded again).
  std::vector<uint32_t> deleted;
  for (uint32_t id : recorded) {
    if (!Exists(id)) deleted.push_back(id);
  }
  absl::MutexLock lock(&mu_);
  for (uint32_t id : deleted) record_.Erase(id);
}

absl::StatusOr<api::ConnectionStats> PathManager::StatsOf(uint32_t id) {
  if (api::Connection* conn = connections_.Find(id); conn != nullptr) return conn->Stats();
  return apps_.Snapshot(id);  // NotFound for an id that is no one's
}

absl::Status PathManager::RotateOne(uint32_t id, uint16_t path_id) {
  if (api::Connection* conn = connections_.Find(id); conn != nullptr) {
    return conn->RequestRotation(path_id);
  }
  return apps_.RequestRotation(id, path_id);
}

bool PathManager::Exists(uint32_t id) {
  return connections_.Find(id) != nullptr || apps_.HasConnection(id);
}

absl::StatusOr<Json> PathManager::Show(const Json& params) {
  if (absl::Status s = OnlyKeys(params, {"conn", "path"}); !s.ok()) return s;
  absl::StatusOr<uint32_t> id = ConnId(params, "conn");
  if (!id.ok()) return id.status();
  std::optional<uint64_t> path;
  if (const Json* v = params.Find("path"); v != nullptr && !v->is_null()) {
    path = v->AsUint();
    if (!path) return absl::InvalidArgumentError("path: expected a path id (integer)");
  }
  absl::StatusOr<api::ConnectionStats> st = StatsOf(*id);
  if (!st.ok()) return st.status();
  if (path && *path >= st->paths.size()) {
    return absl::NotFoundError(absl::StrCat("connection ", *id, " has no path ", *path, " (",
                                            st->paths.size(), " paths)"));
  }
  Json out = Json::MakeObject();
  out["conn"] = *id;
  Json& list = out["paths"] = Json::MakeArray();
  for (const core::PathStats& p : st->paths) {
    if (!path || p.path_id == *path) list.Push(api::PathStatsJson(p));
  }
  return out;
}

absl::StatusOr<Json> PathManager::Rotate(const Json& params) {
  if (absl::Status s = OnlyKeys(params, {"conn", "path"}); !s.ok()) return s;
  absl::StatusOr<uint32_t> id = ConnId(params, "conn");
  if (!id.ok()) return id.status();
  absl::StatusOr<uint64_t> path = params.GetUint("path");
  if (!path.ok()) return path.status();
  absl::StatusOr<api::ConnectionStats> before = StatsOf(*id);
  if (!before.ok()) return before.status();
  if (*path >= before->paths.size()) {
    return absl::NotFoundError(absl::StrCat("connection ", *id, " has no path ", *path, " (",
                                            before->paths.size(), " paths)"));
  }
  if (absl::Status s = RotateOne(*id, static_cast<uint16_t>(*path)); !s.ok()) return s;
  absl::StatusOr<api::ConnectionStats> after = StatsOf(*id);
  if (!after.ok()) return after.status();
  const core::PathStats& b = before->paths[*path];
  const core::PathStats& a = after->paths[*path];
  Json out = Json::MakeObject();
  out["conn"] = *id;
  out["path_id"] = *path;
  out["old_port"] = b.src_port;
  out["new_port"] = a.src_port;
  // Inside the hold-down or without a token of the rate limit the core defers the rotation.
  out["deferred"] = a.rotations == b.rotations;
  return out;
}

absl::StatusOr<Json> PathManager::Events(const Json& params) {
  if (absl::Status s = OnlyKeys(params, {"conn", "after", "limit"}); !s.ok()) return s;
  std::optional<uint32_t> id;
  if (const Json* v = params.Find("conn"); v != nullptr && !v->is_null()) {
    absl::StatusOr<uint32_t> c = ConnId(params, "conn");
    if (!c.ok()) return c.status();
    if (!Exists(*c)) return absl::NotFoundError(absl::StrCat("no connection ", *c));
    id = *c;
  }
  absl::StatusOr<PageParams> page_params = ReadPageParams(params);
  if (!page_params.ok()) return page_params.status();
  Tick();  // what happened up to now
  PageBuilder page(*page_params);
  absl::MutexLock lock(&mu_);
  record_.Visit(id, page.first_key(), [&](const PathEventRecord::Entry& e) {
    return page.Offer(e.seq, [&] { return std::optional<Json>(PathEventRecord::ToJson(e)); });
  });
  Json out = Json::MakeObject();
  page.Finish(out, "events");
  return out;
}

}  // namespace metaroce::daemon
