// Property test of the cluster model (mrsim --topology leaf-spine) over many seeds: each seed
// draws a leaf-spine fabric (hosts, leaves, spines, planes, lossy or lossless, delays, queues),
// a transport, a workload and faults (loss on spines or links, flapping links, rate cuts, spines
// blackholed for a while or for good, routing reconvergence or none). Checked for every seed:
//   1. every byte placed is the byte sent (the cluster's placement check), nothing lands outside
//      the destination region, and no message completes without all its bytes placed once;
//   2. no message resolves (completes or fails) more than once, whenever the run stops; and every
//      posted message has resolved when nothing is left to happen: the run ended as `done`, or
//      `idle` (no event left: an unresolved message would never resolve), or at the duration
//      cap and again at ten times the cap (Unresolved below), for every transport and seed;
//   3. MetaRoCE with two or more paths completes everything when a spine of every plane stays
//      alive (faults may kill the others for good): its paths rotate off the dead routes.
// The seed range comes from MR_CLUSTER_PROPERTY_FROM / MR_CLUSTER_PROPERTY_SEEDS (or one seed,
// MR_CLUSTER_PROPERTY_SEED); a failure prints "seed S: reason" and the last line counts them;
// MR_CLUSTER_PROPERTY_VERBOSE=1 prints what each seed drew and what happened.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "tools/sim/cluster.h"
#include "tools/sim/rng.h"

namespace metaroce::sim {
namespace {

using std::chrono::microseconds;

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::strtoull(v, nullptr, 10);
}

struct Drawn {
  ClusterConfig config;
  bool liveness = false;  // property 3 applies
  std::string description;
};

Drawn Draw(uint64_t seed) {
  Xoshiro256 rng(DeriveSeed(seed, 0xc105));
  auto pick = [&rng](uint64_t lo, uint64_t hi) { return lo + rng.Next() % (hi - lo + 1); };
  auto chance = [&rng](double p) { return rng.NextUnit() < p; };
  Drawn d;
  ClusterConfig& c = d.config;
  LeafSpineConfig& f = c.fabric;
  f.hosts = static_cast<uint32_t>(pick(4, 24));
  f.hosts_per_leaf = static_cast<uint32_t>(pick(1, std::max<uint64_t>(1, f.hosts / 2)));
  f.spines = static_cast<uint32_t>(pick(1, 4));
  f.planes = static_cast<uint8_t>(pick(1, 2));
  f.host_gbps = chance(0.5) ? 100 : 25;
  f.fabric_gbps = chance(0.5) ? 100 : 40;
  f.hop_delay = Duration(static_cast<int64_t>(pick(200, 2000)));
  f.queue_bytes = pick(32, 512) * 1024;
  f.ecn_threshold_bytes = f.queue_bytes / pick(2, 8);
  f.lossless = chance(0.3);
  f.pfc_xoff_bytes = pick(24, 128) * 1024;
  f.pfc_xon_bytes = f.pfc_xoff_bytes / 2;
  f.reconvergence = chance(0.5) ? Duration(0) : Duration(static_cast<int64_t>(pick(20, 200)) * 1000);
  f.seed = rng.Next();
  const uint64_t t = pick(0, 9);
  c.transport = t < 6 ? TransportKind::kMetaRoce
                      : (t < 8 ? TransportKind::kGoBackN : TransportKind::kReorderBuffer);
  c.paths = static_cast<uint16_t>(pick(1, 8));
  c.connections_per_pair = static_cast<uint32_t>(pick(1, 2));
  c.mtu = chance(0.5) ? 1024 : 4096;
  const uint64_t w = pick(0, f.hosts <= 8 ? 4 : 3);
  c.workload = w == 0   ? Workload::kPair
               : w == 1 ? Workload::kPermutation
               : w == 2 ? Workload::kIncast
               : w == 3 ? Workload::kAllReduceRing
                        : Workload::kAllToAll;
  c.message_bytes = pick(1, 96 * 1024);
  c.steps = static_cast<uint32_t>(c.workload == Workload::kAllReduceRing ? 1 : pick(1, 3));
  c.incast_degree = static_cast<uint32_t>(pick(1, f.hosts - 1));
  c.seed = rng.Next();
  c.duration_cap = std::chrono::seconds(2);
  // Faults. One spine of each plane is never killed for good.
  std::vector<uint32_t> survivor(f.planes);
  for (uint8_t p = 0; p < f.planes; ++p) survivor[p] = static_cast<uint32_t>(pick(0, f.spines - 1));
  const uint64_t faults = pick(0, 3);
  for (uint64_t i = 0; i < faults; ++i) {
    FabricFault fault;
    fault.plane = static_cast<uint8_t>(pick(0, f.planes - 1));
    fault.whole_spine = chance(0.5);
    fault.spine = static_cast<uint32_t>(pick(0, f.spines - 1));
    fault.link = {fault.plane, FabricLink::Tier::kSpine,
                  static_cast<uint32_t>(pick(0, f.leaves() - 1)), fault.spine};
    // Most runs last tens to hundreds of microseconds: faults start while traffic flows.
    const Instant begin = Instant{0} + microseconds(pick(0, 30));
    const Instant end = begin + microseconds(pick(20, 3000));
    fault.window = {begin, end};
    switch (pick(0, 3)) {
      case 0:
        fault.kind = FabricFault::Kind::kLoss;
        fault.loss_probability = static_cast<double>(pick(1, 50)) / 1000;
        fault.window.end = core::kNever;
        break;
      case 1:
        fault.kind = FabricFault::Kind::kFlap;
        fault.flap_period = microseconds(pick(10, 200));
        break;
      case 2:
        fault.kind = FabricFault::Kind::kRateCut;
        fault.rate_factor = static_cast<double>(pick(10, 100)) / 100;
        break;
      case 3:
        fault.kind = FabricFault::Kind::kBlackhole;
        if (fault.spine != survivor[fault.plane] && chance(0.5)) fault.window.end = core::kNever;
        break;
    }
    c.faults.push_back(fault);
  }
  d.liveness = c.transport == TransportKind::kMetaRoce && c.paths >= 2;
  std::string fault_list;
  for (const FabricFault& fault : c.faults) {
    static constexpr const char* kKinds[] = {"loss", "blackhole", "rate", "flap"};
    absl::StrAppend(&fault_list, " ", kKinds[static_cast<int>(fault.kind)], "@",
                    fault.whole_spine
                        ? absl::StrCat("spine=", int(fault.plane), ".", fault.spine)
                        : absl::StrCat("link=", int(fault.link.plane), ".", fault.link.a, ".",
                                       fault.link.b),
                    "[", static_cast<int64_t>(fault.window.begin.ns / 1000), "-",
                    fault.window.end == core::kNever ? std::string("end")
                                                     : absl::StrCat(fault.window.end.ns / 1000),
                    "us]");
  }
  d.description = absl::StrCat(
      "hosts ", f.hosts, " per leaf ", f.hosts_per_leaf, " spines ", f.spines, " planes ",
      int(f.planes), f.lossless ? " lossless" : " lossy", ", ", std::string(TransportName(c.transport)),
      " paths ", c.paths, " x", c.connections_per_pair, ", ", std::string(WorkloadName(c.workload)), " of ",
      c.message_bytes, " B x ", c.steps, ", faults:", fault_list.empty() ? std::string(" none") : fault_list);
  return d;
}

// Property 2's count: messages posted (refused posts included: a connection already in error
// fails them and they were never posted) less those resolved; negative when more resolved than
// were posted (a message resolved twice).
int64_t Unresolved(const ClusterResult& r) {
  const auto refused_it = r.failed_by_status.find("POST_REFUSED");
  const uint64_t refused = refused_it == r.failed_by_status.end() ? 0 : refused_it->second;
  return static_cast<int64_t>(r.messages_posted + refused) -
         static_cast<int64_t>(r.messages_completed + r.messages_failed);
}

// How much longer a run stopped by the duration cap with messages unresolved gets, and its event
// bound then. At the cap (2 s simulated, 20 times the default no_progress_timeout of 100 ms) a
// message may still be outstanding only on a connection that has kept making progress (one that
// makes none for no_progress_timeout completes its oldest work request with RETRY_EXC_ERR and
// flushes the rest: docs/spec/paths-and-recovery.md §9); at ten times the cap, with a workload of
// at most 3 steps of 96 KiB per flow, that is a stuck message, not a slow one.
constexpr int kCapExtension = 10;
constexpr uint64_t kExtendedMaxEvents = 200'000'000;

// Property 2 for a run that stopped with result `r`; `run_longer` runs the same configuration
// kCapExtension times as long. Empty when it holds, else why not.
std::string CheckResolved(const ClusterResult& r,
                          const std::function<absl::StatusOr<ClusterResult>()>& run_longer) {
  auto counts = [](const ClusterResult& x) {
    return absl::StrCat("posted ", x.messages_posted, ", completed ", x.messages_completed,
                        ", failed ", x.messages_failed);
  };
  // Whatever stopped the run, nothing resolved twice.
  if (Unresolved(r) < 0) {
    return absl::StrCat("more messages resolved than posted (stop ", r.stop_reason, "): ",
                        counts(r));
  }
  // Every posted message resolved once nothing is left to happen: done, or idle (no event left).
  if ((r.stop_reason == "done" || r.stop_reason == "idle") && Unresolved(r) != 0) {
    return absl::StrCat(Unresolved(r), " messages unresolved at the end (stop ", r.stop_reason,
                        "): ", counts(r));
  }
  // At the duration cap: the same run given kCapExtension times as long must resolve them.
  if (r.stop_reason == "duration_cap" && Unresolved(r) != 0) {
    absl::StatusOr<ClusterResult> again = run_longer();
    if (!again.ok()) return absl::StrCat("refused when run longer: ", again.status().message());
    if (Unresolved(*again) < 0 ||
        (again->stop_reason != "event_cap" && Unresolved(*again) != 0)) {
      return absl::StrCat(Unresolved(*again), " messages unresolved at ", kCapExtension,
                          " times the duration cap (stop ", again->stop_reason, "): ",
                          counts(*again));
    }
  }
  return "";
}

// Empty when every property holds, else the first broken one.
std::string Check(uint64_t seed) {
  Drawn d = Draw(seed);
  if (const char* v = std::getenv("MR_CLUSTER_PROPERTY_VERBOSE"); v != nullptr && v[0] == '3') {
    d.config.on_path_event = [](uint32_t host, const core::PathEvent& e) {
      std::printf("  %.3f us host %u conn %u path %u %s %s->%s port %u->%u (%s)\n",
                  static_cast<double>(e.at.ns) / 1000, host, e.conn_id, e.path_id,
                  e.kind == core::PathEvent::Kind::kPortRotated ? "rotated" : "state",
                  std::string(core::PathStateName(e.from)).c_str(),
                  std::string(core::PathStateName(e.to)).c_str(), e.old_port, e.new_port,
                  std::string(core::PathEventReasonName(e.reason)).c_str());
    };
  }
  absl::StatusOr<ClusterResult> r = RunCluster(d.config);
  if (!r.ok()) return absl::StrCat("refused: ", r.status().message(), " (", d.description, ")");
  if (const char* v = std::getenv("MR_CLUSTER_PROPERTY_VERBOSE"); v != nullptr && v[0] == '2') {
    std::fputs(ClusterResultToJson(*r).c_str(), stdout);
  }
  if (std::getenv("MR_CLUSTER_PROPERTY_VERBOSE") != nullptr) {
    std::printf("seed %llu: %s: stop %s, %llu/%llu completed, %llu failed, %llu bytes verified, "
                "drops %llu/%llu/%llu, pauses %llu, rotations %llu\n",
                static_cast<unsigned long long>(seed), d.description.c_str(),
                r->stop_reason.c_str(), static_cast<unsigned long long>(r->messages_completed),
                static_cast<unsigned long long>(r->messages_posted),
                static_cast<unsigned long long>(r->messages_failed),
                static_cast<unsigned long long>(r->bytes_verified),
                static_cast<unsigned long long>(r->fabric.dropped[0]),
                static_cast<unsigned long long>(r->fabric.dropped[1]),
                static_cast<unsigned long long>(r->fabric.dropped[2]),
                static_cast<unsigned long long>(r->fabric.pauses),
                static_cast<unsigned long long>(r->port_rotations));
  }
  if (r->data_errors != 0) {
    std::string kinds;
    for (const auto& [k, v] : r->data_errors_by_kind) absl::StrAppend(&kinds, " ", k, "=", v);
    return absl::StrCat(r->data_errors, " data errors:", kinds, " (", d.description, ")");
  }
  if (std::string why = CheckResolved(*r, [&] {
        ClusterConfig longer = d.config;
        longer.duration_cap *= kCapExtension;
        longer.max_events = kExtendedMaxEvents;
        longer.on_path_event = nullptr;
        return RunCluster(longer);
      });
      !why.empty()) {
    return absl::StrCat(why, " (", d.description, ")");
  }
  if (d.liveness && (r->stop_reason != "done" || r->messages_failed != 0)) {
    std::string statuses;
    for (const auto& [k, v] : r->failed_by_status) absl::StrAppend(&statuses, " ", k, "=", v);
    return absl::StrCat("a spine of every plane lived, yet stop ", r->stop_reason, ", ",
                        r->messages_failed, " failed", statuses, " (", d.description, ")");
  }
  return "";
}

void RunSeeds() {
  const char* one = std::getenv("MR_CLUSTER_PROPERTY_SEED");
  const uint64_t from = one ? std::strtoull(one, nullptr, 10) : EnvOr("MR_CLUSTER_PROPERTY_FROM", 1);
  const uint64_t seeds = one ? 1 : EnvOr("MR_CLUSTER_PROPERTY_SEEDS", 200);
  uint64_t failed = 0;
  for (uint64_t s = from; s < from + seeds; ++s) {
    const std::string why = Check(s);
    if (!why.empty()) {
      ++failed;
      std::printf("seed %llu: %s\n", static_cast<unsigned long long>(s), why.c_str());
      ADD_FAILURE() << "seed " << s << ": " << why;
    }
  }
  std::printf("cluster property: %llu seeds from %llu, %llu failed\n",
              static_cast<unsigned long long>(seeds), static_cast<unsigned long long>(from),
              static_cast<unsigned long long>(failed));
}

// Properties 1, 2 and 3 for every seed. Property 3 found a protocol gap (seeds 263, 601, 679,
// 771 of the first 1,000): when every path of a connection started on a route dead in one
// direction or the other (2 spines, one dead leaf-spine link: a path lives only if its data and
// its ACKs both avoid it, 1 in 4), every path was silent at once, the stall gate of [R5]
// attributed no expiry, nothing failed or rotated, and no_progress_timeout ended the connection
// beside a live route. Fixed in the spec: [R5c] (a connection silent for the recovery cap fails
// one path per cap) and the stuck probe pace of [R7] (docs/spec/paths-and-recovery.md §6.1, §8).
TEST(Cluster_Property, EveryByteRightEveryMessageResolvedAndMetaRoceLives) { RunSeeds(); }

// Property 2's verdict on runs that stopped otherwise than `done`. It was once checked only for
// `done`, so that a seed without property 3 (go-back-N, the reorder buffer, one path: about
// half the draws) that ran out of events, or hit the cap, with messages never resolved passed.
ClusterResult Stopped(std::string stop, uint64_t posted, uint64_t completed, uint64_t failed) {
  ClusterResult r;
  r.stop_reason = std::move(stop);
  r.messages_posted = posted;
  r.messages_completed = completed;
  r.messages_failed = failed;
  return r;
}

absl::StatusOr<ClusterResult> NotRunAgain() {
  ADD_FAILURE() << "ran longer, though nothing asked for it";
  return absl::InternalError("not to be run");
}

TEST(Cluster_Property2, UnresolvedWhenIdleFails) {
  EXPECT_NE(CheckResolved(Stopped("idle", 10, 7, 1), NotRunAgain), "");
  EXPECT_EQ(CheckResolved(Stopped("idle", 10, 7, 3), NotRunAgain), "");
}

TEST(Cluster_Property2, UnresolvedWhenDoneFails) {
  EXPECT_NE(CheckResolved(Stopped("done", 10, 9, 0), NotRunAgain), "");
}

TEST(Cluster_Property2, ResolvedTwiceFailsWhateverTheStop) {
  for (const char* stop : {"done", "idle", "duration_cap", "event_cap"}) {
    EXPECT_NE(CheckResolved(Stopped(stop, 10, 10, 1), NotRunAgain), "") << stop;
  }
}

TEST(Cluster_Property2, UnresolvedAtTheCapMustResolveWhenRunLonger) {
  // Resolved at ten times the cap: a slow run, not a stuck one.
  EXPECT_EQ(CheckResolved(Stopped("duration_cap", 10, 4, 0),
                          [] { return Stopped("done", 10, 9, 1); }),
            "");
  // Still unresolved then, or the longer run ran out of events with them: stuck.
  EXPECT_NE(CheckResolved(Stopped("duration_cap", 10, 4, 0),
                          [] { return Stopped("duration_cap", 10, 8, 0); }),
            "");
  EXPECT_NE(CheckResolved(Stopped("duration_cap", 10, 4, 0),
                          [] { return Stopped("idle", 10, 8, 0); }),
            "");
  // The event bound of the longer run stops it short of a verdict.
  EXPECT_EQ(CheckResolved(Stopped("duration_cap", 10, 4, 0),
                          [] { return Stopped("event_cap", 10, 8, 0); }),
            "");
}

TEST(Cluster_Property2, EventCapDemandsOnlyNothingResolvedTwice) {
  EXPECT_EQ(CheckResolved(Stopped("event_cap", 10, 2, 0), NotRunAgain), "");
}

}  // namespace
}  // namespace metaroce::sim
