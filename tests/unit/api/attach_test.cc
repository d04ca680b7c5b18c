// Attached contexts (Context::Attach) against the daemon's side of them (daemon/app_session.h),
// without root: two "daemons" in this process, each an embedded engine over memory ports (side 0
// and side 1 of one MemoryPairBroker) with an AppSessions and a ControlServer on a socket in a
// temporary directory; one attached application context per daemon; the applications connect
// through the real TCP parameter exchange on 127.0.0.1. Raw control clients speak the protocol
// directly where a test needs to misbehave.
#include "lib/api/context.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "daemon/app_session.h"
#include "daemon/connection_manager.h"
#include "daemon/control_server.h"
#include "daemon/path_manager.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/api/app_protocol.h"
#include "lib/api/shared_memory.h"
#include "lib/api/stats_json.h"
#include "lib/control/protocol.h"

namespace metaroce::api {
namespace {

using control::Json;
using daemon::AppSessions;
using daemon::AppSessionsOptions;
using ::testing::HasSubstr;
namespace app = app_protocol;

constexpr auto kTimeout = std::chrono::seconds(8);

// Loaded test machines (2 vCPUs, parallel tests, sanitizers) stall threads for longer than the
// protocol's defaults tolerate; the daemon's tunables are what attached connections get.
core::ConnectionConfig PatientTuning() {
  core::ConnectionConfig t = HostTuning();
  t.no_progress_timeout = std::chrono::seconds(5);
  t.max_transmissions = 255;
  t.min_probe_timeout = std::chrono::milliseconds(2);
  t.initial_rtt = std::chrono::microseconds(500);
  return t;
}

// One "metaroced": an engine over memory ports, its application sessions and control socket.
struct DaemonSide {
  std::unique_ptr<Context> context;
  std::unique_ptr<AppSessions> apps;
  std::unique_ptr<daemon::ControlServer> server;
  std::string socket_path;
  size_t other_connections = 0;  // stands in for conn.add's connections

  engine::Engine& engine() { return context->engine(); }
  // Memory regions in worker w's table.
  size_t RegionsIn(int w) {
    return engine().Call<size_t>(
        w, [](engine::Worker& worker) { return worker.endpoint().memory().size(); });
  }
  uint64_t Doorbells() {
    uint64_t n = 0;
    for (const engine::WorkerStats& w : engine().Stats()) n += w.doorbells;
    return n;
  }
  uint64_t EngineConnections() {
    uint64_t n = 0;
    for (const engine::WorkerStats& w : engine().Stats()) n += w.connections;
    return n;
  }
  // Connections whose rings the workers look at on every loop: none that posts through marks.
  uint64_t UnmarkedConnections() {
    uint64_t n = 0;
    for (const engine::WorkerStats& w : engine().Stats()) n += w.unmarked_connections;
    return n;
  }
};

class AttachTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/mr-attach-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto broker = std::make_shared<MemoryPairBroker>();
    for (int side = 0; side < 2; ++side) StartDaemon(side, broker);
  }
  void TearDown() override {
    for (DaemonSide& d : daemons_) {
      if (d.server) d.server->Stop();
      d.apps.reset();
      d.server.reset();
      d.context.reset();
    }
    std::filesystem::remove_all(dir_);
  }

  void StartDaemon(int side, std::shared_ptr<MemoryPairBroker> broker) {
    DatapathOptions dp;
    dp.kind = PortKind::kMemory;
    dp.planes = {PlaneOptions{}};  // address 198.19.250.(1 + side)
    dp.memory_broker = std::move(broker);
    dp.memory_side = side;
    dp.queues = 2;
    absl::StatusOr<std::unique_ptr<Datapath>> datapath = Datapath::Create(dp);
    ASSERT_TRUE(datapath.ok()) << datapath.status();
    ContextOptions o;
    o.planes = {PlaneOptions{}};
    o.port_kind = PortKind::kMemory;
    o.workers = 2;
    o.mtu = 1024;
    absl::StatusOr<std::unique_ptr<Context>> ctx = Context::Create(o, *std::move(datapath));
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    DaemonSide& d = daemons_[side];
    d.context = *std::move(ctx);
    AppSessionsOptions ao;
    ao.tuning = PatientTuning();
    ao.other_connections = [&d] { return d.other_connections; };
    d.apps = std::make_unique<AppSessions>(*d.context, std::move(ao));
    d.socket_path = absl::StrCat(dir_, "/d", side, ".sock");
    daemon::ControlServerOptions so;
    so.path = d.socket_path;
    d.server = std::make_unique<daemon::ControlServer>(std::move(so));
    d.apps->Serve(*d.server);
    ASSERT_TRUE(d.server->Start().ok());
  }

  std::unique_ptr<Context> AttachTo(int side, std::string name = "attach_test") {
    AttachOptions o;
    o.socket_path = daemons_[side].socket_path;
    o.name = std::move(name);
    absl::StatusOr<std::unique_ptr<Context>> ctx = Context::Attach(o);
    EXPECT_TRUE(ctx.ok()) << ctx.status();
    return ctx.ok() ? *std::move(ctx) : nullptr;
  }

  // Waits until `done` or the timeout; returns done().
  template <typename Fn>
  static bool Eventually(Fn done) {
    const auto deadline = std::chrono::steady_clock::now() + kTimeout;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done();
  }

  std::string dir_;
  DaemonSide daemons_[2];
};

std::vector<WorkCompletion> Collect(CompletionQueue& cq, size_t count) {
  std::vector<WorkCompletion> out;
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  WorkCompletion buf[16];
  while (out.size() < count && std::chrono::steady_clock::now() < deadline) {
    const size_t n = cq.Poll(buf);
    out.insert(out.end(), buf, buf + n);
    if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return out;
}

struct RemoteBuffer {
  uint64_t addr;
  uint32_t rkey;
  uint32_t length;
};
std::vector<std::byte> AsBytes(const RemoteBuffer& r) {
  std::vector<std::byte> v(sizeof(r));
  std::memcpy(v.data(), &r, sizeof(r));
  return v;
}

// Two attached applications, one per daemon, with a connection between them.
class AttachedPairTest : public AttachTest {
 protected:
  void SetUp() override {
    AttachTest::SetUp();
    if (HasFatalFailure()) return;
    server = AttachTo(0, "server");
    client = AttachTo(1, "client");
    ASSERT_NE(server, nullptr);
    ASSERT_NE(client, nullptr);
    scq = *server->CreateCompletionQueue(256);
    ccq = *client->CreateCompletionQueue(256);
    listener = *server->Listen(0, "127.0.0.1");
  }
  void TearDown() override {
    listener.reset();
    scq.reset();
    ccq.reset();
    server.reset();
    client.reset();
    AttachTest::TearDown();
  }
  ConnectOptions Opts(bool is_server) {
    ConnectOptions o;
    o.send_cq = o.recv_cq = is_server ? scq.get() : ccq.get();
    o.path_count = 4;
    o.timeout = absl::Seconds(5);
    return o;
  }
  std::pair<absl::StatusOr<std::unique_ptr<Connection>>,
            absl::StatusOr<std::unique_ptr<Connection>>>
  Pair(const ConnectOptions& so, const ConnectOptions& co) {
    absl::StatusOr<std::unique_ptr<Connection>> s;
    std::thread t([&] { s = listener->Accept(so); });
    auto c = client->Connect("127.0.0.1", listener->port(), co);
    t.join();
    return {std::move(s), std::move(c)};
  }

  std::unique_ptr<Context> server, client;
  std::unique_ptr<CompletionQueue> scq, ccq;
  std::unique_ptr<Listener> listener;
};

TEST_F(AttachedPairTest, AttachDescribesTheDaemonsEngine) {
  EXPECT_TRUE(server->is_attached());
  EXPECT_FALSE(server->is_inline());
  EXPECT_FALSE(server->Poll());
  EXPECT_EQ(server->datapath(), nullptr);
  EXPECT_TRUE(server->Stats().empty());
  EXPECT_EQ(server->options().workers, 2);
  EXPECT_EQ(server->options().mtu, 1024u);
  ASSERT_EQ(server->options().planes.size(), 1u);
  EXPECT_EQ(server->options().planes[0].local_ip, "198.19.250.1");
  EXPECT_EQ(client->options().planes[0].local_ip, "198.19.250.2");
  EXPECT_EQ(daemons_[0].apps->sessions(), 1u);
  EXPECT_EQ(daemons_[0].Doorbells(), 2u);  // one per worker
  EXPECT_EQ(scq->depth_per_worker(), 256u);
  EXPECT_FALSE(daemons_[0].context->is_attached());
}

TEST_F(AttachedPairTest, WriteAndSendRoundTripThroughSharedMemory) {
  std::span<std::byte> sbuf = *server->AllocateMemory(8192);
  std::span<std::byte> cbuf = *client->AllocateMemory(8192);
  ASSERT_EQ(sbuf.size(), 8192u);
  auto smr = server->RegisterMemory(sbuf.data(), sbuf.size(),
                                    access::kLocalWrite | access::kRemoteWrite);
  auto cmr = client->RegisterMemory(cbuf.data(), cbuf.size(),
                                    access::kLocalWrite | access::kRemoteWrite);
  ASSERT_TRUE(smr.ok()) << smr.status();
  ASSERT_TRUE(cmr.ok()) << cmr.status();
  EXPECT_EQ(smr->addr, reinterpret_cast<uint64_t>(sbuf.data()));  // the application's address
  EXPECT_EQ(daemons_[0].RegionsIn(0), 1u);
  EXPECT_EQ(daemons_[0].RegionsIn(1), 1u);  // every shard
  ConnectOptions so = Opts(true), co = Opts(false);
  so.private_data = AsBytes({smr->addr, smr->rkey, static_cast<uint32_t>(sbuf.size())});
  co.private_data = AsBytes({cmr->addr, cmr->rkey, static_cast<uint32_t>(cbuf.size())});
  auto [sc, cc] = Pair(so, co);
  ASSERT_TRUE(sc.ok()) << sc.status();
  ASSERT_TRUE(cc.ok()) << cc.status();
  Connection& s = **sc;
  Connection& c = **cc;
  EXPECT_EQ(daemons_[0].apps->connections(), 1u);
  EXPECT_EQ(daemons_[1].EngineConnections(), 1u);
  // Each has a slot in its application's doorbell, which the application's posts below mark
  // (were they not marked, nothing would complete).
  EXPECT_EQ(daemons_[0].UnmarkedConnections(), 0u);
  EXPECT_EQ(daemons_[1].UnmarkedConnections(), 0u);
  RemoteBuffer at_server;
  ASSERT_EQ(c.peer_private_data().size(), sizeof(at_server));
  std::memcpy(&at_server, c.peer_private_data().data(), sizeof(at_server));

  // Write: client bytes [0, 3000) -> the server's memory, placed by daemon 0's worker.
  for (size_t i = 0; i < 3000; ++i) cbuf[i] = std::byte(i * 31 + 5);
  SendWorkRequest w;
  w.wr_id = 1;
  w.opcode = core::WrOpcode::kWrite;
  w.local = {cmr->addr, 3000, cmr->lkey};
  w.remote_addr = at_server.addr;
  w.rkey = at_server.rkey;
  ASSERT_TRUE(c.PostSend(w).ok());
  auto wc = Collect(*ccq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, core::WcStatus::kSuccess);
  EXPECT_EQ(wc[0].opcode, core::WcOpcode::kRdmaWrite);
  EXPECT_EQ(std::memcmp(sbuf.data(), cbuf.data(), 3000), 0);

  // Send round trip: client -> server, then the server echoes it back with an immediate.
  ASSERT_TRUE(s.PostRecv(RecvWorkRequest{10, {smr->addr + 4096, 4096, smr->lkey}}).ok());
  ASSERT_TRUE(c.PostRecv(RecvWorkRequest{20, {cmr->addr + 4096, 4096, cmr->lkey}}).ok());
  SendWorkRequest ping;
  ping.wr_id = 2;
  ping.opcode = core::WrOpcode::kSend;
  ping.local = {cmr->addr, 1500, cmr->lkey};
  ASSERT_TRUE(c.PostSend(ping).ok());
  auto got = Collect(*scq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 10u);
  EXPECT_EQ(got[0].status, core::WcStatus::kSuccess);
  EXPECT_EQ(got[0].byte_len, 1500u);
  EXPECT_EQ(got[0].conn_id, s.local_id());
  EXPECT_EQ(std::memcmp(sbuf.data() + 4096, cbuf.data(), 1500), 0);
  SendWorkRequest pong;
  pong.wr_id = 3;
  pong.opcode = core::WrOpcode::kSendWithImm;
  pong.imm = 0xabcd;
  pong.local = {smr->addr + 4096, 1500, smr->lkey};
  ASSERT_TRUE(s.PostSend(pong).ok());
  auto back = Collect(*ccq, 2);  // ping's send completion and pong's receive
  ASSERT_EQ(back.size(), 2u);
  for (const WorkCompletion& x : back) {
    EXPECT_EQ(x.status, core::WcStatus::kSuccess);
    if (x.wr_id == 20) {
      EXPECT_TRUE(x.has_imm);
      EXPECT_EQ(x.imm, 0xabcdu);
      EXPECT_EQ(x.byte_len, 1500u);
    } else {
      EXPECT_EQ(x.wr_id, 2u);
    }
  }
  EXPECT_EQ(std::memcmp(cbuf.data() + 4096, cbuf.data(), 1500), 0);

  // Stats come back through qp.stats.
  absl::StatusOr<ConnectionStats> stats = c.Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->conn_id, c.local_id());
  EXPECT_EQ(stats->counters.messages_completed, 2u);
  EXPECT_EQ(stats->paths.size(), 4u);
  EXPECT_EQ(stats->state, core::Connection::State::kReady);
  EXPECT_TRUE(c.RequestRotation(1).ok());
  EXPECT_FALSE(c.in_error());

  // conn.show's listing names the owner.
  std::vector<Json> listed = daemons_[1].apps->Describe(c.local_id(), "");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(*listed[0].Find("owner")->Find("name")->AsString(), "client");
  EXPECT_EQ(*listed[0].Find("owner")->Find("pid")->AsInt(), getpid());
  EXPECT_EQ(*listed[0].Find("peer")->AsString(), "198.19.250.1");
  EXPECT_EQ(*listed[0].Find("paths")->AsUint(), 4u);

  // Tearing down in order leaves nothing in the daemons but the sessions' doorbells.
  sc->reset();
  cc->reset();
  EXPECT_EQ(daemons_[0].EngineConnections(), 0u);
  EXPECT_TRUE(server->DeregisterMemory(*smr).ok());
  EXPECT_EQ(daemons_[0].RegionsIn(1), 0u);
  EXPECT_TRUE(server->FreeMemory(sbuf).ok());
}

TEST_F(AttachedPairTest, AbortFlushesWithWrFlushErr) {
  std::span<std::byte> buf = *client->AllocateMemory(4096);
  auto mr = *client->RegisterMemory(buf.data(), buf.size(), access::kLocalWrite);
  auto [sc, cc] = Pair(Opts(true), Opts(false));
  ASSERT_TRUE(sc.ok()) << sc.status();
  ASSERT_TRUE(cc.ok()) << cc.status();
  Connection& c = **cc;
  ASSERT_TRUE(c.PostRecv(RecvWorkRequest{7, {mr.addr, 4096, mr.lkey}}).ok());
  ASSERT_TRUE(c.PostRecv(RecvWorkRequest{8, {mr.addr, 4096, mr.lkey}}).ok());
  ASSERT_TRUE(c.Abort().ok());
  auto wc = Collect(*ccq, 2);
  ASSERT_EQ(wc.size(), 2u);
  for (const WorkCompletion& x : wc) EXPECT_EQ(x.status, core::WcStatus::kWrFlushErr);
  EXPECT_TRUE(Eventually([&] { return c.in_error(); }));
  EXPECT_EQ(c.error_status(), core::WcStatus::kWrFlushErr);
}

// Protection domains (docs/spec/messages-and-memory.md [M7]): every session has its own, so a
// session cannot post work naming another's lkey, and a peer cannot write with another
// session's rkey; both are refused exactly as keys that do not exist.
TEST_F(AttachedPairTest, SessionsCannotNameEachOthersMemory) {
  std::unique_ptr<Context> other = AttachTo(0, "other");  // a second session on daemon 0
  ASSERT_NE(other, nullptr);
  std::span<std::byte> obuf = *other->AllocateMemory(4096);
  std::span<std::byte> sbuf = *server->AllocateMemory(4096);
  std::span<std::byte> cbuf = *client->AllocateMemory(4096);
  const uint32_t rw = access::kLocalWrite | access::kRemoteWrite;
  MemoryRegion omr = *other->RegisterMemory(obuf.data(), obuf.size(), rw);
  MemoryRegion smr = *server->RegisterMemory(sbuf.data(), sbuf.size(), rw);
  MemoryRegion cmr = *client->RegisterMemory(cbuf.data(), cbuf.size(), rw);
  EXPECT_GE(omr.rkey, engine::Engine::kFirstRandomKey);
  EXPECT_LE(omr.rkey, engine::Engine::kLastRandomKey);
  auto [sc, cc] = Pair(Opts(true), Opts(false));
  ASSERT_TRUE(sc.ok()) << sc.status();
  ASSERT_TRUE(cc.ok()) << cc.status();
  Connection& s = **sc;
  Connection& c = **cc;
  std::memset(obuf.data(), 0x5a, obuf.size());

  // The server (session A) posts a Send and a receive naming the other session's lkey, then
  // an lkey that names nothing: all refused alike, with LOC_PROT_ERR.
  SendWorkRequest send;
  send.wr_id = 1;
  send.opcode = core::WrOpcode::kSend;
  send.local = {omr.addr, 64, omr.lkey};
  ASSERT_TRUE(s.PostSend(send).ok());
  ASSERT_TRUE(s.PostRecv(RecvWorkRequest{2, {omr.addr, 64, omr.lkey}}).ok());
  send.wr_id = 3;
  send.local.lkey = omr.lkey ^ 1;
  ASSERT_TRUE(s.PostSend(send).ok());
  std::vector<WorkCompletion> refused = Collect(*scq, 3);
  ASSERT_EQ(refused.size(), 3u);
  for (const WorkCompletion& x : refused) {
    EXPECT_EQ(x.status, core::WcStatus::kLocProtErr) << x.wr_id;
  }
  EXPECT_FALSE(s.in_error());  // a refused post is not a connection error

  // The client writes into the server's own region: placed.
  for (size_t i = 0; i < 64; ++i) cbuf[i] = std::byte(i + 1);
  SendWorkRequest w;
  w.wr_id = 10;
  w.opcode = core::WrOpcode::kWrite;
  w.local = {cmr.addr, 64, cmr.lkey};
  w.remote_addr = smr.addr;
  w.rkey = smr.rkey;
  ASSERT_TRUE(c.PostSend(w).ok());
  std::vector<WorkCompletion> placed = Collect(*ccq, 1);
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].status, core::WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(sbuf.data(), cbuf.data(), 64), 0);

  // With the other session's rkey (its address, its region on the same daemon): REMOTE_ACCESS.
  w.wr_id = 11;
  w.remote_addr = omr.addr;
  w.rkey = omr.rkey;
  ASSERT_TRUE(c.PostSend(w).ok());
  std::vector<WorkCompletion> nak = Collect(*ccq, 1);
  ASSERT_EQ(nak.size(), 1u);
  EXPECT_EQ(nak[0].wr_id, 11u);
  EXPECT_EQ(nak[0].status, core::WcStatus::kRemAccessErr);
  EXPECT_TRUE(std::all_of(obuf.begin(), obuf.end(),
                          [](std::byte b) { return b == std::byte{0x5a}; }));  // untouched
  absl::StatusOr<ConnectionStats> server_stats = s.Stats();
  ASSERT_TRUE(server_stats.ok());
  EXPECT_GE(server_stats->counters.access_naks_sent, 1u);
}

// The operator's view (mrctl through metaroced's handlers) of an application's connection:
// path.show, path.rotate and path.events as for the daemon's own connections, without taking
// the application's events; stat.show's counters; conn.del aborts it and leaves it to the
// application, which destroys it.
TEST_F(AttachedPairTest, OperatorSeesRotatesAndDeletesApplicationConnections) {
  DaemonSide& d = daemons_[1];  // the client's
  daemon::ConnectionManager daemon_connections(*d.context, daemon::ConnectionManagerOptions{});
  daemon::PathManager paths(daemon_connections, *d.apps, daemon::PathPolicy{}, absl::Now());
  std::span<std::byte> buf = *client->AllocateMemory(4096);
  MemoryRegion mr = *client->RegisterMemory(buf.data(), buf.size(), access::kLocalWrite);
  auto [sc, cc] = Pair(Opts(true), Opts(false));
  ASSERT_TRUE(sc.ok()) << sc.status();
  ASSERT_TRUE(cc.ok()) << cc.status();
  Connection& c = **cc;
  const uint32_t id = c.local_id();
  auto Params = [id](std::optional<uint64_t> path = std::nullopt) {
    Json p = Json::MakeObject();
    p["conn"] = id;
    if (path) p["path"] = *path;
    return p;
  };

  absl::StatusOr<Json> shown = paths.Show(Params());
  ASSERT_TRUE(shown.ok()) << shown.status();
  ASSERT_EQ(shown->Find("paths")->size(), 4u);
  const uint64_t port0 = *shown->Find("paths")->array()[0].Find("src_port")->AsUint();

  absl::StatusOr<Json> rotated = paths.Rotate(Params(0));
  ASSERT_TRUE(rotated.ok()) << rotated.status();
  EXPECT_EQ(*rotated->Find("old_port")->AsUint(), port0);
  EXPECT_FALSE(*rotated->Find("deferred")->AsBool());
  EXPECT_NE(*rotated->Find("new_port")->AsUint(), port0);

  // The record has the rotation, and so does the application's own event ring.
  auto manual_rotation = [](const Json& e) {
    return *e.Find("kind")->AsString() == "rotation" && *e.Find("path_id")->AsUint() == 0 &&
           *e.Find("reason")->AsString() == "manual";
  };
  bool recorded = false;
  EXPECT_TRUE(Eventually([&] {
    absl::StatusOr<Json> events = paths.Events(Params());
    if (!events.ok()) return false;
    for (const Json& e : events->Find("events")->array()) recorded = recorded || manual_rotation(e);
    return recorded;
  }));
  bool delivered = false;
  EXPECT_TRUE(Eventually([&] {
    PathEvent events[16];
    const size_t n = c.PollEvents(events);
    for (size_t i = 0; i < n; ++i) {
      delivered = delivered || (events[i].kind == PathEvent::Kind::kPortRotated &&
                                events[i].reason == core::PathEventReason::kManual);
    }
    return delivered;
  }));

  // stat.show sums the applications' counters too: one Send completed here.
  std::span<std::byte> sbuf = *server->AllocateMemory(4096);
  MemoryRegion smr = *server->RegisterMemory(sbuf.data(), sbuf.size(), access::kLocalWrite);
  ASSERT_TRUE((*sc)->PostRecv(RecvWorkRequest{1, {smr.addr, 4096, smr.lkey}}).ok());
  SendWorkRequest send;
  send.wr_id = 2;
  send.opcode = core::WrOpcode::kSend;
  send.local = {mr.addr, 100, mr.lkey};
  ASSERT_TRUE(c.PostSend(send).ok());
  std::vector<WorkCompletion> sent = Collect(*ccq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, core::WcStatus::kSuccess);
  Json sum = CountersJson(core::ConnectionCounters{});
  d.apps->AddCounters(sum);
  EXPECT_EQ(*sum.Find("messages_completed")->AsUint(), 1u);
  EXPECT_GE(*sum.Find("sent_pkts")->AsUint(), 1u);

  ASSERT_TRUE(c.PostRecv(RecvWorkRequest{7, {mr.addr, 4096, mr.lkey}}).ok());
  ASSERT_TRUE(c.PostRecv(RecvWorkRequest{8, {mr.addr, 4096, mr.lkey}}).ok());

  // conn.del: the posted receives flush into the application's queue; it is still listed,
  // deleted by the operator, until the application destroys it.
  ASSERT_TRUE(d.apps->DeleteByOperator(id).ok());
  std::vector<WorkCompletion> flushed = Collect(*ccq, 2);
  ASSERT_EQ(flushed.size(), 2u);
  for (const WorkCompletion& x : flushed) EXPECT_EQ(x.status, core::WcStatus::kWrFlushErr);
  EXPECT_TRUE(Eventually([&] { return c.in_error(); }));
  EXPECT_TRUE(d.apps->DeleteByOperator(id).ok());  // again: nothing more
  std::vector<Json> listed = d.apps->Describe(id, "");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_TRUE(*listed[0].Find("deleted_by_operator")->AsBool());
  EXPECT_EQ(*listed[0].Find("state")->AsString(), "error");
  EXPECT_EQ(c.PostRecv(RecvWorkRequest{9, {mr.addr, 64, mr.lkey}}), absl::OkStatus());
  std::vector<WorkCompletion> late = Collect(*ccq, 1);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].status, core::WcStatus::kWrFlushErr);
  cc->reset();  // qp.destroy
  EXPECT_EQ(d.apps->connections(), 0u);
  EXPECT_EQ(d.EngineConnections(), 0u);
  EXPECT_EQ(paths.Show(Params()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(d.apps->DeleteByOperator(id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(paths.Rotate(Params(0)).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(AttachedPairTest, MemoryMustComeFromAllocateMemory) {
  std::vector<std::byte> heap(4096);
  absl::StatusOr<MemoryRegion> r =
      client->RegisterMemory(heap.data(), heap.size(), access::kLocalWrite);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("attached contexts register memory from Context::AllocateMemory"));
  std::span<std::byte> block = *client->AllocateMemory(4096);
  // Straddling the end of the block.
  r = client->RegisterMemory(block.data() + 2048, 4096, access::kLocalWrite);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("AllocateMemory"));
  // Freeing a registered block is refused; after deregistration it works.
  MemoryRegion mr = *client->RegisterMemory(block.data(), block.size(), access::kLocalWrite);
  absl::Status freed = client->FreeMemory(block);
  EXPECT_EQ(freed.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(freed.message()), HasSubstr("mr.dereg first"));
  EXPECT_TRUE(client->DeregisterMemory(mr).ok());
  EXPECT_TRUE(client->FreeMemory(block).ok());
  EXPECT_EQ(client->FreeMemory(block).code(), absl::StatusCode::kNotFound);
}

TEST_F(AttachedPairTest, DaemonLimitsAreRefusedWithTheirNames) {
  daemon::AppLimits limits;
  limits.max_memory_bytes = 1 << 20;
  limits.max_paths = 2;
  limits.max_connections = 1;
  daemons_[1].apps->SetLimits(limits);
  absl::StatusOr<std::span<std::byte>> big = client->AllocateMemory(2 << 20);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("max_memory_bytes 1048576"));

  // Four paths against max_paths 2: the client's daemon refuses, the server hears why.
  auto [sc, cc] = Pair(Opts(true), Opts(false));
  ASSERT_FALSE(cc.ok());
  EXPECT_EQ(cc.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(cc.status().message()), HasSubstr("max_paths 2"));
  EXPECT_FALSE(sc.ok());

  // One connection is allowed; the daemon's own connections count too.
  limits.max_paths = 8;
  daemons_[1].apps->SetLimits(limits);
  auto [s1, c1] = Pair(Opts(true), Opts(false));
  ASSERT_TRUE(c1.ok()) << c1.status();
  auto [s2, c2] = Pair(Opts(true), Opts(false));
  ASSERT_FALSE(c2.ok());
  EXPECT_THAT(std::string(c2.status().message()), HasSubstr("max_connections 1"));
  c1->reset();
  daemons_[1].other_connections = 1;
  auto [s3, c3] = Pair(Opts(true), Opts(false));
  EXPECT_THAT(std::string(c3.status().message()), HasSubstr("max_connections 1"));
}

// ---- the protocol spoken directly, as a hostile or crashing application would ----

class RawSessionTest : public AttachTest {
 protected:
  control::Client Connect(int side) {
    absl::StatusOr<control::Client> c = control::Client::Connect(daemons_[side].socket_path);
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }
  // A call whose answer's descriptors are kept in `fds` (owned).
  static absl::StatusOr<Json> Call(control::Client& c, std::string_view method, Json params,
                                   std::vector<UniqueFd>* fds = nullptr) {
    std::vector<int> received;
    absl::StatusOr<Json> r = c.CallWithFds(method, std::move(params), {}, &received);
    std::vector<UniqueFd> owned = AdoptFds(received);
    if (fds != nullptr) *fds = std::move(owned);
    return r;
  }
  static Json Obj(std::initializer_list<std::pair<std::string, Json>> members) {
    Json j = Json::MakeObject();
    for (const auto& [k, v] : members) j[k] = v;
    return j;
  }
  // Parameters of one side of a 2-path connection on daemon `side`'s engine.
  static ConnectionParameters Params(uint32_t conn_id, int side) {
    ConnectionParameters p;
    p.conn_id = conn_id;
    p.token = 0x1234 + side;
    p.path_count = 2;
    p.initial_ports = {50000, 50001};
    p.plane_addresses = {*io::IpAddress::Parse(side == 0 ? "198.19.250.1" : "198.19.250.2")};
    p.mtu = 1024;
    p.max_send_queue = 16;
    p.max_recv_queue = 16;
    p.udp_port = wire::kDefaultUdpPort;
    return p;
  }
  static std::string Hex(const ConnectionParameters& p) {
    ExchangeMessage m;
    m.kind = ExchangeKind::kRequest;
    m.params = p;
    return EncodeExchangeHex(m);
  }
  static Json CreateParams(const ConnectionParameters& ours, const ConnectionParameters& peer,
                           uint64_t cq) {
    return Obj({{"conn_id", ours.conn_id},
                {"ours", Hex(ours)},
                {"peer", Hex(peer)},
                {"send_cq", cq},
                {"recv_cq", cq},
                {"depths", Obj({{"send", 16}, {"recv", 16}, {"event", 64}})}});
  }
};

TEST_F(RawSessionTest, EverythingNeedsAttachFirst) {
  control::Client c = Connect(0);
  for (std::string_view m : {app::kMemAlloc, app::kQpPrepare, app::kCqCreate, app::kMrDereg}) {
    absl::StatusOr<Json> r = Call(c, m, Json::MakeObject());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << m;
  }
  EXPECT_EQ(Call(c, app::kMemAlloc, Obj({{"bytes", 4096}})).status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::vector<UniqueFd> fds;
  absl::StatusOr<Json> attached = Call(c, app::kAttach, Obj({{"name", "raw"}}), &fds);
  ASSERT_TRUE(attached.ok()) << attached.status();
  EXPECT_EQ(fds.size(), 3u);  // the doorbell block and one socket per worker
  EXPECT_EQ(*attached->Find("workers")->AsUint(), 2u);
  EXPECT_EQ(Call(c, app::kAttach, Json::MakeObject()).status().code(),
            absl::StatusCode::kFailedPrecondition);  // once per connection
  // The doorbell block is sealed: the application cannot shrink it under the daemon.
  EXPECT_NE(ftruncate(fds[0].get(), 0), 0);
}

TEST_F(RawSessionTest, AbruptCloseFreesEverythingTheSessionMade) {
  DaemonSide& d = daemons_[0];
  {
    control::Client c = Connect(0);
    std::vector<UniqueFd> fds;
    ASSERT_TRUE(Call(c, app::kAttach, Obj({{"name", "two\nlines"}}), &fds).ok());
    absl::StatusOr<Json> mem = Call(c, app::kMemAlloc, Obj({{"bytes", 10000}}), &fds);
    ASSERT_TRUE(mem.ok()) << mem.status();
    EXPECT_EQ(*mem->Find("bytes")->AsUint(), RoundUpToPage(10000));
    ASSERT_EQ(fds.size(), 1u);
    absl::StatusOr<std::shared_ptr<SharedMapping>> mapped =
        SharedMapping::Map(fds[0].get(), RoundUpToPage(10000));
    ASSERT_TRUE(mapped.ok());
    const uint64_t mem_id = *mem->Find("mem")->AsUint();
    const uint64_t addr = reinterpret_cast<uint64_t>((*mapped)->data());
    absl::StatusOr<Json> mr = Call(
        c, app::kMrReg,
        Obj({{"mem", mem_id}, {"offset", 0}, {"length", 8192}, {"access", 3}, {"addr", addr}}));
    ASSERT_TRUE(mr.ok()) << mr.status();
    EXPECT_GE(*mr->Find("lkey")->AsUint(), 0xa0000000u);
    // Outside the block.
    absl::StatusOr<Json> outside = Call(
        c, app::kMrReg,
        Obj({{"mem", mem_id}, {"offset", 8192}, {"length", 8192}, {"access", 1}, {"addr", 1}}));
    EXPECT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(outside.status().message()), HasSubstr("outside memory block"));
    absl::StatusOr<Json> cq = Call(c, app::kCqCreate, Obj({{"depth", 64}}), &fds);
    ASSERT_TRUE(cq.ok()) << cq.status();
    const uint64_t cq_id = *cq->Find("cq")->AsUint();
    absl::StatusOr<Json> id = Call(c, app::kQpPrepare, Json::MakeObject());
    ASSERT_TRUE(id.ok());
    const uint32_t conn_id = static_cast<uint32_t>(*id->Find("conn_id")->AsUint());
    absl::StatusOr<Json> qp =
        Call(c, app::kQpCreate, CreateParams(Params(conn_id, 0), Params(99, 1), cq_id), &fds);
    ASSERT_TRUE(qp.ok()) << qp.status();
    EXPECT_EQ(fds.size(), 1u);
    EXPECT_EQ(Call(c, app::kCqDestroy, Obj({{"cq", cq_id}})).status().code(),
              absl::StatusCode::kFailedPrecondition);  // in use
    EXPECT_EQ(d.EngineConnections(), 1u);
    EXPECT_EQ(d.RegionsIn(0), 1u);
    EXPECT_EQ(d.Doorbells(), 2u);
    EXPECT_GT(d.apps->memory_bytes(), 10000u);
    std::vector<Json> listed = d.apps->Describe(std::nullopt, "198.19.250.2");
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(*listed[0].Find("owner")->Find("name")->AsString(), "two?lines");
  }  // the client's socket closes without a word
  EXPECT_TRUE(Eventually([&] { return d.apps->sessions() == 0; }));
  EXPECT_EQ(d.apps->connections(), 0u);
  EXPECT_EQ(d.apps->memory_bytes(), 0u);
  EXPECT_EQ(d.EngineConnections(), 0u);
  EXPECT_EQ(d.RegionsIn(0), 0u);
  EXPECT_EQ(d.RegionsIn(1), 0u);
  EXPECT_EQ(d.Doorbells(), 0u);
  EXPECT_EQ(*d.apps->Summary().Find("retired_blocks")->AsUint(), 0u);
}

TEST_F(RawSessionTest, KilledApplicationProcessIsCleanedUp) {
  DaemonSide& d = daemons_[0];
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // An application that attaches, allocates, registers and makes a queue, then is killed.
    AttachOptions o;
    o.socket_path = d.socket_path;
    absl::StatusOr<std::unique_ptr<Context>> ctx = Context::Attach(o);
    bool ok = ctx.ok();
    std::unique_ptr<CompletionQueue> cq;
    if (ok) {
      absl::StatusOr<std::span<std::byte>> block = (*ctx)->AllocateMemory(1 << 16);
      ok = block.ok() &&
           (*ctx)->RegisterMemory(block->data(), block->size(), access::kLocalWrite).ok();
      absl::StatusOr<std::unique_ptr<CompletionQueue>> q = (*ctx)->CreateCompletionQueue(16);
      ok = ok && q.ok();
      if (q.ok()) cq = *std::move(q);
    }
    const char c = ok ? 'y' : 'n';
    [[maybe_unused]] ssize_t n = write(ready[1], &c, 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  EXPECT_EQ(c, 'y');
  EXPECT_EQ(d.apps->sessions(), 1u);
  EXPECT_EQ(d.RegionsIn(1), 1u);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(Eventually([&] { return d.apps->sessions() == 0; }));
  EXPECT_EQ(d.apps->memory_bytes(), 0u);
  EXPECT_EQ(d.RegionsIn(1), 0u);
  EXPECT_EQ(d.Doorbells(), 0u);
}

TEST_F(RawSessionTest, ConnectionIdsAndParametersAreChecked) {
  control::Client a = Connect(0), b = Connect(0);
  std::vector<UniqueFd> fds;
  ASSERT_TRUE(Call(a, app::kAttach, Json::MakeObject(), &fds).ok());
  ASSERT_TRUE(Call(b, app::kAttach, Json::MakeObject(), &fds).ok());
  absl::StatusOr<Json> cq = Call(b, app::kCqCreate, Obj({{"depth", 16}}), &fds);
  ASSERT_TRUE(cq.ok());
  const uint64_t cq_id = *cq->Find("cq")->AsUint();
  absl::StatusOr<Json> theirs = Call(a, app::kQpPrepare, Json::MakeObject());
  ASSERT_TRUE(theirs.ok());
  const uint32_t a_id = static_cast<uint32_t>(*theirs->Find("conn_id")->AsUint());

  // b creates a connection under a's connection id.
  absl::StatusOr<Json> stolen =
      Call(b, app::kQpCreate, CreateParams(Params(a_id, 0), Params(5, 1), cq_id), &fds);
  EXPECT_EQ(stolen.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(stolen.status().message()), HasSubstr("not prepared by this session"));

  absl::StatusOr<Json> mine = Call(b, app::kQpPrepare, Json::MakeObject());
  const uint32_t b_id = static_cast<uint32_t>(*mine->Find("conn_id")->AsUint());
  // Malformed hex, and an exchange that is not a REQUEST.
  Json bad = CreateParams(Params(b_id, 0), Params(5, 1), cq_id);
  bad["ours"] = "4d5243xz";
  absl::StatusOr<Json> r = Call(b, app::kQpCreate, bad, &fds);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("non-hex"));
  bad["ours"] = "4d5243";
  EXPECT_EQ(Call(b, app::kQpCreate, bad, &fds).status().code(),
            absl::StatusCode::kInvalidArgument);
  ExchangeMessage confirm;
  confirm.kind = ExchangeKind::kConfirm;
  bad["ours"] = EncodeExchangeHex(confirm);
  r = Call(b, app::kQpCreate, bad, &fds);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("expected an exchange REQUEST"));
  // Not the daemon's address, MTU or source port range.
  ConnectionParameters ours = Params(b_id, 1);  // daemon 1's address, on daemon 0
  r = Call(b, app::kQpCreate, CreateParams(ours, Params(5, 1), cq_id), &fds);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("metaroced's address there"));
  ours = Params(b_id, 0);
  ours.initial_ports = {1000, 1001};
  r = Call(b, app::kQpCreate, CreateParams(ours, Params(5, 1), cq_id), &fds);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("source port 1000"));
  // Another session's queue.
  r = Call(a, app::kQpCreate, CreateParams(Params(a_id, 0), Params(5, 1), cq_id), &fds);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  // Unknown parameters are refused by name.
  r = Call(b, app::kMemAlloc, Obj({{"bytes", 4096}, {"byets", 1}}), &fds);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("byets"));
  // And the well-formed one works.
  r = Call(b, app::kQpCreate, CreateParams(Params(b_id, 0), Params(5, 1), cq_id), &fds);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r->Find("owner")->AsUint(), b_id % 2);
  // Someone else's connection cannot be named.
  EXPECT_EQ(Call(a, app::kQpStats, Obj({{"conn_id", b_id}})).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Call(a, app::kQpAbort, Obj({{"conn_id", b_id}})).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(Call(b, app::kQpDestroy, Obj({{"conn_id", b_id}})).ok());
}

TEST(EmbeddedContext, AllocateMemoryIsPageAlignedAndFreed) {
  auto broker = std::make_shared<MemoryPairBroker>();
  DatapathOptions dp;
  dp.kind = PortKind::kMemory;
  dp.planes = {PlaneOptions{}};
  dp.memory_broker = broker;
  ContextOptions o;
  o.planes = {PlaneOptions{}};
  o.port_kind = PortKind::kMemory;
  o.workers = 1;
  o.mtu = 1024;
  auto ctx = Context::Create(o, *Datapath::Create(dp));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  EXPECT_FALSE((*ctx)->is_attached());
  absl::StatusOr<std::span<std::byte>> block = (*ctx)->AllocateMemory(100);
  ASSERT_TRUE(block.ok());
  EXPECT_EQ(block->size(), PageBytes());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(block->data()) % PageBytes(), 0u);
  (*block)[99] = std::byte{1};
  EXPECT_TRUE((*ctx)->RegisterMemory(block->data(), block->size(), access::kLocalWrite).ok());
  EXPECT_EQ((*ctx)->FreeMemory(block->subspan(1)).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE((*ctx)->FreeMemory(*block).ok());
  EXPECT_TRUE((*ctx)->AllocateMemory(1 << 20).ok());  // released with the context
}

}  // namespace
}  // namespace metaroce::api
