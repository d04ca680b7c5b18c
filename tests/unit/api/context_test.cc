// Two Contexts in one process over MemoryPort pairs, connected through the real TCP parameter
// exchange on 127.0.0.1.
#include "lib/api/context.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/io/memory_port.h"
#include "lib/wire/packet.h"

namespace metaroce::api {
namespace {

using ::testing::HasSubstr;

constexpr auto kTimeout = std::chrono::seconds(8);

// Port pairs shared by the two contexts' factories: worker w of the server and of the client.
class MemoryFabric {
 public:
  explicit MemoryFabric(int workers) {
    for (int w = 0; w < workers; ++w) {
      io::MemoryPort::Options a, b;
      a.local_ip = *io::IpAddress::Parse("198.18.0.1");
      b.local_ip = *io::IpAddress::Parse("198.18.0.2");
      auto [pa, pb] = io::MemoryPort::CreatePair(a, b);
      server_.push_back(std::move(pa));
      client_.push_back(std::move(pb));
    }
  }
  PortFactory Factory(bool server) {
    return [this, server](const PortSpec& spec) -> absl::StatusOr<std::unique_ptr<io::PacketPort>> {
      auto& v = server ? server_ : client_;
      if (spec.kind != PortKind::kMemory || v[spec.worker] == nullptr) {
        return absl::InvalidArgumentError("test fabric has memory ports only");
      }
      return std::unique_ptr<io::PacketPort>(std::move(v[spec.worker]));
    };
  }

 private:
  std::vector<std::unique_ptr<io::MemoryPort>> server_, client_;
};

ContextOptions Options(const char* ip) {
  ContextOptions o;
  o.planes = {{"mem0", ip}};
  o.port_kind = PortKind::kMemory;
  o.workers = 2;
  o.mtu = 1024;
  return o;
}

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

// What perftest exchanges: where to write.
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

class ContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server = *Context::Create(Options("198.18.0.1"), fabric.Factory(true));
    client = *Context::Create(Options("198.18.0.2"), fabric.Factory(false));
    scq = *server->CreateCompletionQueue(256);
    ccq = *client->CreateCompletionQueue(256);
    listener = *server->Listen(0, "127.0.0.1");
  }
  ConnectOptions Opts(bool is_server) {
    ConnectOptions o;
    o.send_cq = o.recv_cq = is_server ? scq.get() : ccq.get();
    o.path_count = 4;
    o.timeout = absl::Seconds(5);
    // Loaded test machines (2 vCPUs, parallel tests, sanitizers) stall threads for longer than
    // the protocol's defaults tolerate.
    o.tuning.no_progress_timeout = std::chrono::seconds(5);
    o.tuning.max_transmissions = 255;
    o.tuning.min_probe_timeout = std::chrono::milliseconds(2);
    o.tuning.initial_rtt = std::chrono::microseconds(500);
    return o;
  }
  // Runs Accept on a thread while the client connects.
  std::pair<absl::StatusOr<std::unique_ptr<Connection>>, absl::StatusOr<std::unique_ptr<Connection>>>
  Pair(const ConnectOptions& so, const ConnectOptions& co) {
    absl::StatusOr<std::unique_ptr<Connection>> s;
    std::thread t([&] { s = listener->Accept(so); });
    auto c = client->Connect("127.0.0.1", listener->port(), co);
    t.join();
    return {std::move(s), std::move(c)};
  }

  MemoryFabric fabric{2};
  std::unique_ptr<Context> server, client;
  std::unique_ptr<CompletionQueue> scq, ccq;
  std::unique_ptr<Listener> listener;
};

TEST_F(ContextTest, WriteAndSendRoundTrip) {
  std::vector<std::byte> sbuf(8192), cbuf(8192);
  auto smr = *server->RegisterMemory(sbuf.data(), sbuf.size(),
                                     access::kLocalWrite | access::kRemoteWrite);
  auto cmr = *client->RegisterMemory(cbuf.data(), cbuf.size(),
                                     access::kLocalWrite | access::kRemoteWrite);
  ConnectOptions so = Opts(true), co = Opts(false);
  so.private_data = AsBytes({smr.addr, smr.rkey, static_cast<uint32_t>(sbuf.size())});
  co.private_data = AsBytes({cmr.addr, cmr.rkey, static_cast<uint32_t>(cbuf.size())});
  auto [sc, cc] = Pair(so, co);
  ASSERT_TRUE(sc.ok()) << sc.status();
  ASSERT_TRUE(cc.ok()) << cc.status();
  Connection& s = **sc;
  Connection& c = **cc;
  EXPECT_EQ(s.remote_id(), c.local_id());
  EXPECT_EQ(c.remote_id(), s.local_id());
  RemoteBuffer at_server;
  ASSERT_EQ(c.peer_private_data().size(), sizeof(at_server));
  std::memcpy(&at_server, c.peer_private_data().data(), sizeof(at_server));
  EXPECT_EQ(at_server.rkey, smr.rkey);

  // Write: client bytes [0, 3000) -> server buffer.
  for (size_t i = 0; i < 3000; ++i) cbuf[i] = std::byte(i * 31 + 5);
  SendWorkRequest w;
  w.wr_id = 1;
  w.opcode = core::WrOpcode::kWrite;
  w.local = {cmr.addr, 3000, cmr.lkey};
  w.remote_addr = at_server.addr;
  w.rkey = at_server.rkey;
  ASSERT_TRUE(c.PostSend(w).ok());
  auto wc = Collect(*ccq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, core::WcStatus::kSuccess);
  EXPECT_EQ(wc[0].opcode, core::WcOpcode::kRdmaWrite);
  EXPECT_EQ(std::memcmp(sbuf.data(), cbuf.data(), 3000), 0);

  // Send round trip: client -> server, then server echoes it back with an immediate.
  RecvWorkRequest sr{10, {smr.addr + 4096, 4096, smr.lkey}};
  RecvWorkRequest cr{20, {cmr.addr + 4096, 4096, cmr.lkey}};
  ASSERT_TRUE(s.PostRecv(sr).ok());
  ASSERT_TRUE(c.PostRecv(cr).ok());
  SendWorkRequest ping;
  ping.wr_id = 2;
  ping.opcode = core::WrOpcode::kSend;
  ping.local = {cmr.addr, 1500, cmr.lkey};
  ASSERT_TRUE(c.PostSend(ping).ok());
  auto got = Collect(*scq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 10u);
  EXPECT_EQ(got[0].status, core::WcStatus::kSuccess);
  EXPECT_EQ(got[0].byte_len, 1500u);
  EXPECT_EQ(got[0].conn_id, s.local_id());
  SendWorkRequest pong;
  pong.wr_id = 3;
  pong.opcode = core::WrOpcode::kSendWithImm;
  pong.imm = 0xabcd;
  pong.local = {smr.addr + 4096, 1500, smr.lkey};
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
  auto stats = c.Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counters.messages_completed, 2u);
  EXPECT_EQ(stats->paths.size(), 4u);
  EXPECT_FALSE(c.in_error());
}

TEST_F(ContextTest, AbortFlushesPostedReceivesWithWrFlushErr) {
  std::vector<std::byte> buf(4096);
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
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (!c.in_error() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  EXPECT_TRUE(c.in_error());
  EXPECT_EQ(c.error_status(), core::WcStatus::kWrFlushErr);
}

TEST_F(ContextTest, AcceptDecidesFromTheRequestAndKeepsTheExchangeSocket) {
  auto waited = listener->WaitForClient(absl::Milliseconds(5));
  ASSERT_TRUE(waited.ok());
  EXPECT_FALSE(*waited);  // nobody yet
  ConnectOptions co = Opts(false);
  co.path_count = 3;
  co.keep_exchange_socket = true;
  uint16_t seen_paths = 0;
  absl::StatusOr<std::unique_ptr<Connection>> sc;
  std::thread t([&] {
    ASSERT_TRUE(*listener->WaitForClient(absl::Seconds(5)));
    sc = listener->Accept(
        [&](const ConnectionParameters& request) -> absl::StatusOr<ConnectOptions> {
          seen_paths = request.path_count;
          ConnectOptions so = Opts(true);
          so.path_count = request.path_count;  // whatever the client asks
          so.keep_exchange_socket = true;
          return so;
        },
        absl::Seconds(5));
  });
  auto cc = client->Connect("127.0.0.1", listener->port(), co);
  t.join();
  ASSERT_TRUE(sc.ok()) << sc.status();
  ASSERT_TRUE(cc.ok()) << cc.status();
  EXPECT_EQ(seen_paths, 3);
  EXPECT_EQ((*sc)->local_parameters().path_count, 3);
  // The kept sockets still talk to each other.
  ExchangeSocket a = (*cc)->TakeExchangeSocket(), b = (*sc)->TakeExchangeSocket();
  ASSERT_GE(a.fd(), 0);
  ASSERT_GE(b.fd(), 0);
  EXPECT_EQ((*cc)->TakeExchangeSocket().fd(), -1);  // once
  const std::vector<std::byte> hello = {std::byte{'h'}, std::byte{'i'}};
  ASSERT_TRUE(a.SendMessage(hello, absl::Now() + absl::Seconds(5)).ok());
  auto got = b.ReceiveMessage(absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, hello);
}

TEST_F(ContextTest, AcceptDecisionRefusalReachesTheClient) {
  absl::StatusOr<std::unique_ptr<Connection>> sc;
  std::thread t([&] {
    sc = listener->Accept(
        [](const ConnectionParameters&) -> absl::StatusOr<ConnectOptions> {
          return absl::ResourceExhaustedError("connection limit 0 reached");
        },
        absl::Seconds(5));
  });
  auto cc = client->Connect("127.0.0.1", listener->port(), Opts(false));
  t.join();
  ASSERT_FALSE(sc.ok());
  ASSERT_FALSE(cc.ok());
  EXPECT_THAT(std::string(cc.status().message()), ::testing::HasSubstr("connection limit 0"));
}

TEST_F(ContextTest, MismatchIsRefusedOnBothSidesWithReason) {
  ConnectOptions so = Opts(true), co = Opts(false);
  co.path_count = 8;
  auto [sc, cc] = Pair(so, co);
  ASSERT_FALSE(sc.ok());
  ASSERT_FALSE(cc.ok());
  EXPECT_THAT(std::string(sc.status().message()), HasSubstr("path counts differ"));
  EXPECT_THAT(std::string(cc.status().message()), HasSubstr("peer refused"));
  EXPECT_THAT(std::string(cc.status().message()), HasSubstr("path counts differ"));
}

TEST_F(ContextTest, MalformedExchangeIsRefused) {
  absl::StatusOr<std::unique_ptr<Connection>> s;
  std::thread t([&] { s = listener->Accept(Opts(true)); });
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(listener->port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const char junk[] = "\0\0\0\x0cGET / HTTP/1";
  ASSERT_EQ(write(fd, junk, 16), 16);
  t.join();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("magic"));
  // The client was told why.
  char reply[256];
  const ssize_t n = read(fd, reply, sizeof(reply));
  EXPECT_GT(n, 8);
  EXPECT_THAT(std::string(reply + 4, std::max<ssize_t>(n - 4, 0)), HasSubstr("magic"));
  close(fd);
}

TEST_F(ContextTest, AcceptTimesOut) {
  ConnectOptions so = Opts(true);
  so.timeout = absl::Milliseconds(100);
  auto s = listener->Accept(so);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(ContextTest, ConnectWithoutListenerFails) {
  const uint16_t port = listener->port();
  listener.reset();
  auto c = client->Connect("127.0.0.1", port, Opts(false));
  EXPECT_FALSE(c.ok());
}

TEST(Context_Create, RefusesBadOptions) {
  MemoryFabric fabric(1);
  ContextOptions o = Options("198.18.0.1");
  o.workers = 1;
  o.planes[0].local_ip = "not-an-ip";
  EXPECT_THAT(std::string(Context::Create(o, fabric.Factory(true)).status().message()),
              HasSubstr("local_ip"));
  o = Options("198.18.0.1");
  o.planes.clear();
  EXPECT_FALSE(Context::Create(o, fabric.Factory(true)).ok());
  o = Options("198.18.0.1");
  o.workers = -1;
  EXPECT_EQ(Context::Create(o, fabric.Factory(true)).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = Options("198.18.0.1");
  o.pull_rate_gbps = -1;
  EXPECT_THAT(std::string(Context::Create(o, fabric.Factory(true)).status().message()),
              HasSubstr("pull_rate_gbps"));
  // Memory ports come from a broker (or a factory); the context cannot make them up.
  o = Options("198.18.0.1");
  EXPECT_THAT(std::string(Context::Create(o).status().message()), HasSubstr("memory_broker"));
}

// The pull pacer's rate reaches the engine as given, split among its workers like the budget,
// with pulls of the context's MTU; the default is no pulls (the host's links are the embedding
// application's to know).
TEST(Context_Create, PassesThePullRateToTheEngineWorkers) {
  EXPECT_EQ(ContextOptions().pull_rate_gbps, 0);
  MemoryFabric fabric(2);
  ContextOptions o = Options("198.18.0.1");  // 2 workers, mtu 1024
  o.pull_rate_gbps = 100;
  o.receive_budget_bytes = 400000;
  absl::StatusOr<std::unique_ptr<Context>> ctx = Context::Create(o, fabric.Factory(true));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  EXPECT_EQ((*ctx)->options().pull_rate_gbps, 100);
  for (int w = 0; w < 2; ++w) {
    const core::ReceiveBudgetConfig b =
        (*ctx)->engine().Call<core::ReceiveBudgetConfig>(w, [](engine::Worker& wk) {
          return wk.endpoint().receive_budget().config();
        });
    EXPECT_EQ(b.budget_bytes, 200000u) << w;
    EXPECT_EQ(b.pull.rate_gbps, 50) << w;
    EXPECT_EQ(b.pull.pulled_packet_wire_bytes, 1024u + wire::kDataHeadersSize + 66) << w;
  }
}

TEST_F(ContextTest, PollIsANoOpWithEngineThreads) {
  EXPECT_FALSE(server->is_inline());
  EXPECT_FALSE(server->Poll());
  EXPECT_EQ(server->datapath(), nullptr);  // made with a PortFactory
}

// Inline contexts (workers 0) over a MemoryPairBroker's port pair: no engine thread; this test's
// thread runs both engines by calling Poll() on each in turn. The TCP exchange blocks, so Accept
// runs on a helper thread, which hands the server context back when joined.
class InlineContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto broker = std::make_shared<MemoryPairBroker>();
    for (int side = 0; side < 2; ++side) {
      DatapathOptions d;
      d.kind = PortKind::kMemory;
      d.planes = {PlaneOptions{}};  // address: 198.19.250.(1 + side)
      d.memory_broker = broker;
      d.memory_side = side;
      absl::StatusOr<std::unique_ptr<Datapath>> dp = Datapath::Create(d);
      ASSERT_TRUE(dp.ok()) << dp.status();
      ContextOptions o;
      o.planes = {PlaneOptions{}};
      o.port_kind = PortKind::kMemory;
      o.workers = 0;
      o.mtu = 1024;
      absl::StatusOr<std::unique_ptr<Context>> ctx = Context::Create(o, *std::move(dp));
      ASSERT_TRUE(ctx.ok()) << ctx.status();
      (side == 0 ? server : client) = *std::move(ctx);
    }
    scq = *server->CreateCompletionQueue(64);
    ccq = *client->CreateCompletionQueue(64);
  }
  // Polls both contexts until `cq` has `count` completions (or the timeout passed).
  std::vector<WorkCompletion> Drive(CompletionQueue& cq, size_t count) {
    std::vector<WorkCompletion> out;
    const auto deadline = std::chrono::steady_clock::now() + kTimeout;
    WorkCompletion buf[16];
    while (out.size() < count && std::chrono::steady_clock::now() < deadline) {
      server->Poll();
      client->Poll();
      const size_t n = cq.Poll(buf);
      out.insert(out.end(), buf, buf + n);
    }
    return out;
  }

  std::unique_ptr<Context> server, client;
  std::unique_ptr<CompletionQueue> scq, ccq;
};

TEST_F(InlineContextTest, WriteAndSendRoundTripInOneThread) {
  ASSERT_TRUE(server->is_inline());
  ASSERT_NE(server->datapath(), nullptr);
  EXPECT_EQ(server->options().planes[0].local_ip, "198.19.250.1");  // from the datapath
  EXPECT_EQ(client->options().planes[0].local_ip, "198.19.250.2");
  std::vector<std::byte> sbuf(8192), cbuf(8192);
  const uint32_t rw = access::kLocalWrite | access::kRemoteWrite;
  auto smr = *server->RegisterMemory(sbuf.data(), sbuf.size(), rw);
  auto cmr = *client->RegisterMemory(cbuf.data(), cbuf.size(), rw);
  auto listener = *server->Listen(0, "127.0.0.1");
  ConnectOptions so, co;
  so.send_cq = so.recv_cq = scq.get();
  co.send_cq = co.recv_cq = ccq.get();
  so.path_count = co.path_count = 4;
  so.private_data = AsBytes({smr.addr, smr.rkey, static_cast<uint32_t>(sbuf.size())});
  absl::StatusOr<std::unique_ptr<Connection>> sc;
  std::thread accept([&] { sc = listener->Accept(so); });
  absl::StatusOr<std::unique_ptr<Connection>> cc = client->Connect("127.0.0.1", listener->port(), co);
  accept.join();
  ASSERT_TRUE(sc.ok()) << sc.status();
  ASSERT_TRUE(cc.ok()) << cc.status();
  Connection& s = **sc;
  Connection& c = **cc;
  RemoteBuffer at_server;
  std::memcpy(&at_server, c.peer_private_data().data(), sizeof(at_server));

  // Write: client [0, 3000) -> server [0, 3000), three packets.
  for (size_t i = 0; i < 3000; ++i) cbuf[i] = std::byte(i * 13 + 1);
  SendWorkRequest w;
  w.wr_id = 1;
  w.opcode = core::WrOpcode::kWrite;
  w.flags = send_flags::kSignaled;
  w.local = {cmr.addr, 3000, cmr.lkey};
  w.remote_addr = at_server.addr;
  w.rkey = at_server.rkey;
  ASSERT_TRUE(c.PostSend(w).ok());
  std::vector<WorkCompletion> wc = Drive(*ccq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, core::WcStatus::kSuccess);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(std::memcmp(cbuf.data(), sbuf.data(), 3000), 0);

  // Send back: server [0, 3000) -> the client's receive at [4096, 8192).
  RecvWorkRequest r;
  r.wr_id = 2;
  r.local = {cmr.addr + 4096, 4096, cmr.lkey};
  ASSERT_TRUE(c.PostRecv(r).ok());
  SendWorkRequest snd;
  snd.wr_id = 3;
  snd.opcode = core::WrOpcode::kSend;
  snd.flags = send_flags::kSignaled;
  snd.local = {smr.addr, 3000, smr.lkey};
  ASSERT_TRUE(s.PostSend(snd).ok());
  std::vector<WorkCompletion> got = Drive(*ccq, 1);
  std::vector<WorkCompletion> sent = Drive(*scq, 1);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(got[0].status, core::WcStatus::kSuccess);
  EXPECT_EQ(got[0].wr_id, 2u);
  EXPECT_EQ(got[0].byte_len, 3000u);
  EXPECT_EQ(sent[0].status, core::WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(cbuf.data(), cbuf.data() + 4096, 3000), 0);

  // Control calls run on this thread at once.
  absl::StatusOr<ConnectionStats> st = c.Stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->counters.messages_completed, 1u);
  EXPECT_EQ(st->counters.messages_received, 1u);
}

}  // namespace
}  // namespace metaroce::api
