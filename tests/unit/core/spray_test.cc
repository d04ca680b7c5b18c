// Spray: the choice of a new packet's path, asked directly of paths built here, with no
// connection (lib/core/spray.h; docs/spec/congestion.md §1, §3, §6; paths-and-recovery.md [R5b]).
#include "lib/core/spray.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace metaroce::core {
namespace {

constexpr Duration kUs = std::chrono::microseconds(1);
constexpr uint32_t kMtu = 1000;
constexpr uint32_t kCwnd = 10'000;

Instant At(Duration d) { return Instant{} + d; }

// A connection's config and paths as the Sender builds them: path i on plane i % planes, every
// window kCwnd. Kept in place (the Spray holds the config by reference).
struct Fixture {
  ConnectionConfig cfg;
  std::vector<SenderPath> paths;

  explicit Fixture(uint16_t n, uint8_t planes = 1, uint64_t seed = 1) {
    cfg.path_count = n;
    cfg.plane_count = planes;
    cfg.seed = seed;
    cfg.mtu = kMtu;
    CongestionParams cc;
    cc.mtu = kMtu;
    cc.initial_cwnd = kCwnd;
    cc.min_cwnd = kMtu;
    cc.max_cwnd = 100 * kCwnd;
    paths.reserve(n);
    for (uint16_t i = 0; i < n; ++i) {
      SenderPath& p = paths.emplace_back(i, cc, 20 * kUs);
      p.plane = static_cast<uint8_t>(i % planes);
    }
  }
  void SetInflight(std::initializer_list<uint32_t> bytes) {
    uint16_t i = 0;
    for (uint32_t b : bytes) paths[i++].inflight_bytes = b;
  }
  void SetHint(uint32_t hint) {
    for (SenderPath& p : paths) p.window_hint = hint;
  }
};

SprayRequest Packet(uint32_t bytes = kMtu) {
  SprayRequest r;
  r.bytes = bytes;
  r.latest_rtt = 10 * kUs;
  return r;
}

// The id of the path picked, or -1 for none.
int PickId(Spray& spray, Fixture& f, const SprayRequest& r, Instant now = At(0 * kUs),
           Instant* wakeup = nullptr) {
  Instant w = kNever;
  SenderPath* p = spray.Pick(now, f.paths, r, wakeup != nullptr ? *wakeup : w);
  return p == nullptr ? -1 : p->id;
}

TEST(Spray_RoundRobin, IdlePathsTakeTurnsFromTheSeedsPath) {
  Fixture f(4);
  Spray spray(f.cfg);
  std::vector<int> picked;
  for (int i = 0; i < 5; ++i) picked.push_back(PickId(spray, f, Packet()));
  EXPECT_EQ(picked, (std::vector<int>{0, 1, 2, 3, 0}));

  Fixture g(4, 1, /*seed=*/3);  // starts on path (seed - 1) % paths
  Spray other(g.cfg);
  EXPECT_EQ(PickId(other, g, Packet()), 2);
  EXPECT_EQ(PickId(other, g, Packet()), 3);
}

TEST(Spray_FewestInFlight, LeastLoadedPathFirstTiesInRoundRobinOrder) {
  Fixture f(4);
  f.SetInflight({3000, 1000, 2000, 1000});
  Spray spray(f.cfg);
  EXPECT_EQ(PickId(spray, f, Packet()), 1);  // 1 and 3 tie: 1 comes first from the cursor (0)
  EXPECT_EQ(PickId(spray, f, Packet()), 3);  // the cursor moved past 1: now 3 comes first
  EXPECT_EQ(PickId(spray, f, Packet()), 1);
}

TEST(Spray_Open, PathsNotActiveResendingOrWithAFullSackWindowAreSkipped) {
  Fixture f(4);
  f.paths[0].state = PathState::kSuspect;
  f.paths[1].gbn_resending = true;
  f.paths[2].next_psn = wire::kSackBits;  // 256 PSNs outstanding
  Spray spray(f.cfg);
  EXPECT_EQ(PickId(spray, f, Packet()), 3);
  f.paths[3].state = PathState::kProbing;
  EXPECT_EQ(PickId(spray, f, Packet()), -1);
}

TEST(Spray_Window, APathWhoseWindowCannotTakeThePacketIsPassedOver) {
  Fixture f(4);
  f.SetInflight({kCwnd - 500, 0, kCwnd - 500, kCwnd - 500});
  f.paths[1].state = PathState::kFailed;
  Spray spray(f.cfg);
  Instant wakeup = kNever;
  EXPECT_EQ(PickId(spray, f, Packet(), At(0 * kUs), &wakeup), -1);
  EXPECT_EQ(wakeup, kNever);  // nothing paced: the next ACK, not a timer, opens a window
  EXPECT_EQ(PickId(spray, f, Packet(500)), 0);  // fits exactly
}

TEST(Spray_ConnectionCaps, InflightLimitAndResponderShareHoldThePacketBack) {
  Fixture f(4);
  f.cfg.connection_max_inflight_bytes = 5000;
  Spray spray(f.cfg);
  SprayRequest r = Packet();
  r.inflight_bytes = 4500;
  EXPECT_EQ(PickId(spray, f, r), -1);
  r.inflight_bytes = 0;  // the first packet always goes, whatever its size
  r.bytes = 6000;
  EXPECT_EQ(PickId(spray, f, r), 0);

  // A share of one packet or more per path caps the connection at share x paths, counted on
  // Active paths only.
  Fixture g(4);
  g.SetHint(2000);
  Spray capped(g.cfg);
  EXPECT_EQ(capped.ConnectionShare(g.paths), 8000u);
  SprayRequest s = Packet();
  s.inflight_bytes = 50'000;  // stranded on a Suspect path: does not count
  s.active_inflight_bytes = 7500;
  EXPECT_EQ(PickId(capped, g, s), -1);
  s.active_inflight_bytes = 7000;
  EXPECT_EQ(PickId(capped, g, s), 0);
}

TEST(Spray_Window, HintBelowOnePacketIsEachPathsRateAboveItTheConnectionsCap) {
  Fixture f(4);
  Spray spray(f.cfg);
  EXPECT_EQ(spray.Window(f.paths[0]), kCwnd);  // no hint
  EXPECT_EQ(spray.ConnectionShare(f.paths), UINT64_MAX);
  f.SetHint(400);
  EXPECT_EQ(spray.Window(f.paths[0]), 400u);
  EXPECT_EQ(spray.ConnectionShare(f.paths), UINT64_MAX);
  f.SetHint(3000);
  EXPECT_EQ(spray.Window(f.paths[0]), kCwnd);
  EXPECT_EQ(spray.ConnectionShare(f.paths), 12'000u);
}

TEST(Spray_Preferred, APullsPathIsTakenWhenItHasRoomAndTheCursorStays) {
  Fixture f(4);
  f.SetInflight({0, 5000, 0, 0});
  Spray spray(f.cfg);
  SprayRequest r = Packet();
  r.preferred = 1;
  EXPECT_EQ(PickId(spray, f, r), 1);
  EXPECT_EQ(PickId(spray, f, Packet()), 0);  // the round robin did not move
  f.paths[1].inflight_bytes = kCwnd;         // no room: the usual choice
  EXPECT_EQ(PickId(spray, f, r), 2);
}

TEST(Spray_Hedge, AvoidsItsOwnPathAndTriesItsPlaneFirst) {
  Fixture f(4, /*planes=*/2);  // plane 0: paths 0 and 2; plane 1: paths 1 and 3
  f.SetInflight({0, 0, 3000, 0});
  const Reroute hedge{PacketRef{7, 0}, /*from_path=*/0, /*hedge=*/true};
  SprayRequest r = Packet();
  r.queued = &hedge;
  {
    Spray spray(f.cfg);
    EXPECT_EQ(PickId(spray, f, r), 2);  // its plane, though 1 and 3 are idle
  }
  f.paths[2].state = PathState::kSuspect;
  {
    Spray spray(f.cfg);
    EXPECT_EQ(PickId(spray, f, r), 1);  // then the other plane, never its own path
  }
  // A reroute off a failed path is not a hedge: the usual choice, its old path included.
  const Reroute moved{PacketRef{7, 0}, /*from_path=*/0, /*hedge=*/false};
  r.queued = &moved;
  Spray spray(f.cfg);
  EXPECT_EQ(PickId(spray, f, r), 0);
}

TEST(Spray_SinglePath, OnlyTheFirstPathIsSprayed) {
  Fixture f(4);
  f.cfg.profile.spray = SprayPolicy::kSinglePath;
  f.SetInflight({5000, 0, 0, 0});
  Spray spray(f.cfg);
  EXPECT_EQ(PickId(spray, f, Packet()), 0);
  EXPECT_EQ(PickId(spray, f, Packet()), 0);
}

// congestion.md §1: a window below one packet is a rate, one packet per
// PacingRtt * bytes / window, the paths' first packets staggered evenly over that interval.
TEST(Spray_Paced, PathsBelowOnePacketTakeTurnsAtTheirRateStaggeredOverTheInterval) {
  Fixture f(4);
  f.SetHint(100);  // 1000-byte packets every 10 us x 1000 / 100 = 100 us per path
  const Duration interval = 100 * kUs;
  Spray spray(f.cfg);
  const SprayRequest r = Packet();
  Instant wakeup = kNever;
  EXPECT_EQ(PickId(spray, f, r, At(0 * kUs), &wakeup), -1);  // no path due yet (random phase)
  ASSERT_GT(wakeup, At(0 * kUs));
  ASSERT_LE(wakeup, At(0 * kUs) + interval / 4);  // one of four evenly spaced phases

  std::vector<int> order;
  std::vector<Instant> when;
  for (int i = 0; i < 5; ++i) {
    const Instant now = wakeup;
    wakeup = kNever;
    const int id = PickId(spray, f, r, now, &wakeup);
    ASSERT_NE(id, -1) << "pick " << i;
    order.push_back(id);
    when.push_back(now);
    // Nothing else is due at the same instant: the next one is a quarter interval on.
    wakeup = kNever;
    EXPECT_EQ(PickId(spray, f, r, now, &wakeup), -1);
    EXPECT_GT(wakeup, now);
    EXPECT_LE(wakeup, now + interval / 4 + Duration(1));
  }
  EXPECT_EQ(std::set<int>(order.begin(), order.begin() + 4).size(), 4u);  // each path once
  EXPECT_EQ(order[4], order[0]);                                          // then around again
  EXPECT_EQ(when[4], when[0] + interval);
}

TEST(Spray_Paced, AClockedConnectionsIdlePathTakesThePacketAtOnce) {
  Fixture f(4);
  f.SetHint(100);
  Spray spray(f.cfg);
  SprayRequest r = Packet();
  r.clocked = true;  // on a pull, or within the responder's whole share
  Instant wakeup = kNever;
  EXPECT_EQ(PickId(spray, f, r, At(0 * kUs), &wakeup), 0);
  EXPECT_EQ(wakeup, kNever);
}

TEST(Spray_PulledPath, APathNeverSentOnComesFirstThenThePullsOwn) {
  Fixture f(4);
  Spray spray(f.cfg);
  f.paths[0].tx_order = 5;
  EXPECT_EQ(spray.PulledPath(f.paths, 3), 1);
  for (SenderPath& p : f.paths) p.tx_order = 5;
  EXPECT_EQ(spray.PulledPath(f.paths, 3), 3);
  f.paths[2].tx_order = 0;
  f.paths[2].state = PathState::kFailed;  // not usable: no pull can bring its data
  EXPECT_EQ(spray.PulledPath(f.paths, 3), 3);
}

TEST(Spray_FirstUsableInTurn, FromTheCursorSkippingPathsNotActive) {
  Fixture f(4, 1, /*seed=*/2);  // the cursor starts at path 1
  Spray spray(f.cfg);
  EXPECT_EQ(spray.FirstUsableInTurn(f.paths)->id, 1);
  f.paths[1].state = PathState::kSuspect;
  EXPECT_EQ(spray.FirstUsableInTurn(f.paths)->id, 2);
  for (SenderPath& p : f.paths) p.state = PathState::kFailed;
  EXPECT_EQ(spray.FirstUsableInTurn(f.paths), nullptr);
}

TEST(Spray_Determinism, SameSeedSamePathsSameChoices) {
  const auto run = [](uint64_t seed) {
    Fixture f(8, 2, seed);
    Spray spray(f.cfg);
    std::vector<int> picked;
    for (int i = 0; i < 200; ++i) {
      const int id = PickId(spray, f, Packet(), At(i * kUs));
      picked.push_back(id);
      if (id >= 0) f.paths[id].inflight_bytes += kMtu;
      if (i % 3 == 0) f.paths[i % 8].inflight_bytes = 0;  // an ACK drains a path
    }
    return picked;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

}  // namespace
}  // namespace metaroce::core
