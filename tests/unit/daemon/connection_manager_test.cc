// ConnectionManager's liveness against a stand-in peer daemon: a Context whose Listener accepts
// as a daemon does (its identity in the private data), keeps each connection's link, and writes
// heartbeats on the links the test names. Both contexts run over MemoryPort pairs; the exchange
// and the links are TCP on 127.0.0.1. Over the same connections: conn.show by pages, and the
// path manager's record of a burst of path events through observer rings of the daemon's depth.
#include "daemon/connection_manager.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/app_session.h"
#include "daemon/config.h"
#include "daemon/path_manager.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/io/memory_port.h"

namespace metaroce::daemon {
namespace {

using control::Json;

// Long enough that a loaded machine (2 vCPUs, tests in parallel, sanitizers) does not stall a
// heartbeat past it.
constexpr absl::Duration kBeat = absl::Milliseconds(20);
constexpr absl::Duration kDead = absl::Seconds(1);

api::ContextOptions Options(const char* ip) {
  api::ContextOptions o;
  o.planes = {{"mem0", ip}};
  o.port_kind = api::PortKind::kMemory;
  o.workers = 1;
  o.mtu = 1024;
  return o;
}

// Our side runs as metaroced's Context does: observer rings of the daemon's default depth.
api::ContextOptions DaemonOptions(const char* ip) {
  api::ContextOptions o = Options(ip);
  o.observed_event_depth = ObservedEventDepth(Config{});
  return o;
}

std::vector<std::byte> Bytes(std::string_view s) {
  std::vector<std::byte> v(s.size());
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}

class Liveness : public ::testing::Test {
 protected:
  void SetUp() override {
    io::MemoryPort::Options a, b;
    a.local_ip = *io::IpAddress::Parse("198.18.0.1");
    b.local_ip = *io::IpAddress::Parse("198.18.0.2");
    auto [pa, pb] = io::MemoryPort::CreatePair(a, b);
    ports_[0] = std::move(pa);
    ports_[1] = std::move(pb);
    auto factory = [this](int side) {
      return [this, side](const api::PortSpec&)
                 -> absl::StatusOr<std::unique_ptr<io::PacketPort>> {
        return std::unique_ptr<io::PacketPort>(std::move(ports_[side]));
      };
    };
    ours_ = *api::Context::Create(DaemonOptions("198.18.0.1"), factory(0));
    peer_ = *api::Context::Create(Options("198.18.0.2"), factory(1));
    peer_cq_ = *peer_->CreateCompletionQueue(64);
    listener_ = *peer_->Listen(0, "127.0.0.1");
    ConnectionManagerOptions o;
    o.control_port = 0;
    o.bind_address = "127.0.0.1";
    o.heartbeat = kBeat;
    o.dead_peer_timeout = kDead;
    manager_ = std::make_unique<ConnectionManager>(*ours_, o);
    ASSERT_TRUE(manager_->Start().ok());
  }
  void TearDown() override {
    beating_ = false;
    if (beater_.joinable()) beater_.join();
    manager_.reset();  // its goodbyes go to links still open
    links_.clear();
    peer_conns_.clear();
  }

  // conn.add to the stand-in peer, which accepts as a daemon that shares its liveness across
  // links or not.
  void Add(bool per_peer, int paths = 2) {
    Json identity = Json::MakeObject();
    identity["kind"] = "metaroced";
    identity["version"] = 1;
    identity["host"] = "stand-in";
    identity["pid"] = 1;
    identity["regions"] = Json::MakeArray();
    if (per_peer) identity["liveness"] = "per_peer";
    absl::StatusOr<std::unique_ptr<api::Connection>> accepted;
    std::thread accept([&] {
      accepted = listener_->Accept(
          [&](const api::ConnectionParameters& request) -> absl::StatusOr<api::ConnectOptions> {
            api::ConnectOptions o;
            o.send_cq = o.recv_cq = peer_cq_.get();
            o.path_count = request.path_count;
            o.max_send_queue = o.max_recv_queue = 16;
            o.keep_exchange_socket = true;
            o.private_data = Bytes(identity.Dump());
            return o;
          },
          absl::Seconds(5));
    });
    Json params = Json::MakeObject();
    params["peer"] = absl::StrCat("127.0.0.1:", listener_->port());
    params["paths"] = paths;
    absl::StatusOr<Json> added = manager_->Add(params);
    accept.join();
    ASSERT_TRUE(added.ok()) << added.status();
    ASSERT_TRUE(accepted.ok()) << accepted.status();
    absl::MutexLock lock(&mu_);
    links_.push_back((*accepted)->TakeExchangeSocket());
    peer_conns_.push_back(*std::move(accepted));
  }
  // The stand-in writes a heartbeat on link `link` every kBeat until told to stop.
  void BeatOn(size_t link) {
    beating_ = true;
    beater_ = std::thread([this, link] {
      while (beating_) {
        {
          absl::MutexLock lock(&mu_);
          links_[link].SendMessage(Bytes("heartbeat"), absl::Now() + absl::Seconds(1)).IgnoreError();
        }
        absl::SleepFor(kBeat);
      }
    });
  }
  // conn.show's entries, in id order: "ready", or "error: REASON".
  std::vector<std::string> States() {
    std::vector<std::string> out;
    absl::StatusOr<Json> shown = manager_->Show(Json::MakeObject());
    EXPECT_TRUE(shown.ok()) << shown.status();
    if (!shown.ok()) return out;
    for (const Json& c : shown->Find("connections")->array()) {
      const Json* reason = c.Find("error_reason");
      out.push_back(reason == nullptr
                        ? std::string(c.Find("state")->AsString().value_or("?"))
                        : absl::StrCat("error: ", std::string(reason->AsString().value_or(""))));
    }
    return out;
  }

  std::unique_ptr<io::MemoryPort> ports_[2];
  std::unique_ptr<api::Context> ours_, peer_;
  std::unique_ptr<api::CompletionQueue> peer_cq_;
  std::unique_ptr<api::Listener> listener_;
  std::unique_ptr<ConnectionManager> manager_;
  absl::Mutex mu_;
  std::vector<api::ExchangeSocket> links_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<api::Connection>> peer_conns_;
  std::atomic<bool> beating_{false};
  std::thread beater_;
};

// A peer that shares its liveness is alive for all its connections as long as it is heard on
// any one link; silent, it fails all of them at once.
TEST_F(Liveness, OneHeartbeatPerPeerKeepsEveryConnectionAlive) {
  for (int i = 0; i < 3; ++i) Add(/*per_peer=*/true);
  BeatOn(1);
  absl::SleepFor(2 * kDead);
  EXPECT_THAT(States(), ::testing::Each(std::string("ready")));
  beating_ = false;
  beater_.join();
  absl::SleepFor(2 * kDead);
  EXPECT_THAT(States(), ::testing::Each(::testing::HasSubstr("error: no word from the peer daemon")));
}

// A peer that does not say so (an older daemon) is heard per connection, as before: the links it
// is silent on fail, the one it beats on does not.
TEST_F(Liveness, APeerThatDoesNotShareIsHeardPerConnection) {
  for (int i = 0; i < 3; ++i) Add(/*per_peer=*/false);
  BeatOn(1);
  absl::SleepFor(2 * kDead);
  const std::vector<std::string> states = States();
  ASSERT_EQ(states.size(), 3u);
  EXPECT_THAT(states[0], ::testing::HasSubstr("error: no word from the peer daemon"));
  EXPECT_EQ(states[1], "ready");
  EXPECT_THAT(states[2], ::testing::HasSubstr("error: no word from the peer daemon"));
}

// A link the peer closes fails its connection alone, whatever the heartbeats on the others.
TEST_F(Liveness, AClosedLinkFailsItsConnectionOnly) {
  for (int i = 0; i < 3; ++i) Add(/*per_peer=*/true);
  BeatOn(0);
  {
    absl::MutexLock lock(&mu_);
    links_[2] = api::ExchangeSocket();
  }
  absl::SleepFor(2 * kDead);
  const std::vector<std::string> states = States();
  ASSERT_EQ(states.size(), 3u);
  EXPECT_EQ(states[0], "ready");
  EXPECT_EQ(states[1], "ready");
  EXPECT_THAT(states[2], ::testing::HasSubstr("error: peer daemon gone"));
}

// conn.show by pages over the daemon's connections: each once, in id order, `next` on every
// page but the last.
// The paths really held (daemon.show paths_held, against the observer rings' depth): every
// connection's path count added up.
TEST_F(Liveness, PathsHeldAddUpEveryConnectionsPaths) {
  EXPECT_EQ(manager_->paths_held(), 0u);
  Add(/*per_peer=*/true, 2);
  Add(/*per_peer=*/true, 5);
  EXPECT_EQ(manager_->paths_held(), 7u);
}

TEST_F(Liveness, ConnShowPagesListEveryConnectionOnce) {
  Add(/*per_peer=*/true);
  BeatOn(0);  // alive for as long as the test takes
  for (int i = 0; i < 2; ++i) Add(/*per_peer=*/true);
  std::vector<uint64_t> ids;
  Json params = Json::MakeObject();
  params["limit"] = 1;
  int pages = 0;
  while (true) {
    absl::StatusOr<Json> page = manager_->Show(params);
    ASSERT_TRUE(page.ok()) << page.status();
    ++pages;
    ASSERT_EQ(page->Find("connections")->size(), 1u);
    ids.push_back(*page->Find("connections")->array()[0].Find("id")->AsUint());
    const Json* next = page->Find("next");
    if (next == nullptr) break;
    EXPECT_EQ(next->AsUint(), ids.back());
    params["after"] = *next;
  }
  EXPECT_EQ(pages, 3);
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end());
  absl::StatusOr<Json> all = manager_->Show(Json::MakeObject());
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->Find("connections")->size(), 3u);
  EXPECT_EQ(all->Find("next"), nullptr);
  params["limit"] = 0;
  EXPECT_EQ(manager_->Show(params).status().code(), absl::StatusCode::kInvalidArgument);
}

// A burst of path events larger than the observer ring's old depth (1,024 per worker), all
// within one path manager tick: 4 connections of 256 paths each rotated at once (a rotation is
// two events, the port and the state probing, and the probe's answer a third), the path manager
// not draining meanwhile. With the daemon's default depth nothing is dropped, and path.events,
// by pages, lists each event once, in sequence order.
TEST_F(Liveness, ABurstBeyondTheOldObserverDepthIsKeptAndPagedOnce) {
  ASSERT_GE(ObservedEventDepth(Config{}), 4096u);
  core::ConnectionConfig tuning = api::HostTuning();
  tuning.rotation_holddown = std::chrono::nanoseconds(0);
  tuning.rotation_burst = 1024;
  tuning.rotation_rate = 1e6;
  manager_->SetTuning(tuning);
  constexpr int kConnections = 4;
  constexpr int kPaths = 256;
  Add(/*per_peer=*/true, kPaths);
  BeatOn(0);  // alive for as long as the test takes
  for (int i = 1; i < kConnections; ++i) Add(/*per_peer=*/true, kPaths);
  AppSessions apps(*ours_, AppSessionsOptions{});
  PathPolicy policy;
  policy.events_kept = 4096;
  PathManager paths(*manager_, apps, policy, absl::Now());

  std::vector<uint32_t> ids = manager_->Ids("");
  ASSERT_EQ(ids.size(), static_cast<size_t>(kConnections));
  for (uint32_t id : ids) {
    for (uint16_t p = 0; p < kPaths; ++p) {
      ASSERT_TRUE(manager_->Find(id)->RequestRotation(p).ok());
    }
  }
  absl::SleepFor(absl::Milliseconds(200));  // the probes' answers
  uint64_t dropped = 0;
  for (const engine::WorkerStats& w : ours_->Stats()) dropped += w.observed_events_dropped;
  EXPECT_EQ(dropped, 0u);

  Json params = Json::MakeObject();
  params["limit"] = 500;
  std::vector<uint64_t> seqs;
  size_t manual_rotations = 0, pages = 0;
  while (true) {
    absl::StatusOr<Json> page = paths.Events(params);
    ASSERT_TRUE(page.ok()) << page.status();
    ++pages;
    for (const Json& e : page->Find("events")->array()) {
      seqs.push_back(*e.Find("seq")->AsUint());
      if (e.Find("kind")->AsString() == "rotation" && e.Find("reason")->AsString() == "manual") {
        ++manual_rotations;
      }
    }
    const Json* next = page->Find("next");
    if (next == nullptr) break;
    params["after"] = *next;
  }
  EXPECT_EQ(manual_rotations, static_cast<size_t>(kConnections * kPaths));
  EXPECT_GE(seqs.size(), static_cast<size_t>(2 * kConnections * kPaths));
  EXPECT_GE(pages, 5u);
  EXPECT_TRUE(std::is_sorted(seqs.begin(), seqs.end()));
  EXPECT_EQ(std::adjacent_find(seqs.begin(), seqs.end()), seqs.end());  // each once
  // One connection's record, by pages too.
  Json one = Json::MakeObject();
  one["conn"] = ids[0];
  absl::StatusOr<Json> first = paths.Events(one);
  ASSERT_TRUE(first.ok());
  EXPECT_GE(first->Find("events")->size(), static_cast<size_t>(2 * kPaths));
  EXPECT_EQ(first->Find("next"), nullptr);
}

}  // namespace
}  // namespace metaroce::daemon
