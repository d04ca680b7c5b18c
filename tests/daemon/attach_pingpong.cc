// attach_pingpong: a small application attached to metaroced (api::Context::Attach), for
// tests/daemon/attach_test.py. Needs no privilege, only the daemon's control socket.
//
// The client and the server each allocate one block of shared memory (Context::AllocateMemory)
// holding four buffers of --size bytes: write source, write target, send source, receive target.
// Each iteration, the client writes a pattern into the server's write target (RDMA Write with
// immediate, which completes a receive at the server once every byte is placed) and sends
// another in a Send; the server checks every byte of both, then answers the same way with its
// own patterns, which the client checks. Patterns differ per iteration and side, so a stale or
// misplaced byte is caught.
//
//   attach_pingpong --socket PATH --server [--port N] [options]
//   attach_pingpong --socket PATH --client ADDR [--port N] [options]
//     --iterations N   (default 100)   --size BYTES (default 65536)   --paths N (default 4)
//     --hold           after the iterations, print "holding" and wait to be killed
//
// Prints one line per stage; exit 0 when every byte of every iteration matched, 1 on any failure
// (with the reason), 2 on a usage error, 3 when the connection was flushed (a completion with
// WR_FLUSH_ERR: the operator deleted it with `mrctl conn del`, or it was aborted): the
// application then says so, destroys the connection itself (qp.destroy), and exits.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "lib/api/context.h"

namespace {

using namespace metaroce;

struct Flags {
  std::string socket;
  bool server = false;
  std::string client_of;  // the server's address
  uint16_t port = 18515;
  int iterations = 100;
  size_t size = 65536;
  uint16_t paths = 4;
  bool hold = false;
};

// Where the peer wants to be written.
struct RemoteBuffer {
  uint64_t addr;
  uint32_t rkey;
  uint32_t length;
};

enum Buffer { kWriteSource = 0, kWriteTarget = 1, kSendSource = 2, kRecvTarget = 3 };

[[noreturn]] void Fail(const std::string& why) {
  std::fprintf(stderr, "attach_pingpong: %s\n", why.c_str());
  std::exit(1);
}

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) Fail(std::string(what) + ": " + std::string(s.message()));
}

bool ParseFlags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--server") {
      f.server = true;
    } else if (a == "--hold") {
      f.hold = true;
    } else if ((a == "--socket" || a == "--client" || a == "--port" || a == "--iterations" ||
                a == "--size" || a == "--paths") &&
               (v = value()) != nullptr) {
      if (a == "--socket") f.socket = v;
      if (a == "--client") f.client_of = v;
      if (a == "--port") f.port = static_cast<uint16_t>(std::atoi(v));
      if (a == "--iterations") f.iterations = std::atoi(v);
      if (a == "--size") f.size = static_cast<size_t>(std::atoll(v));
      if (a == "--paths") f.paths = static_cast<uint16_t>(std::atoi(v));
    } else {
      return false;
    }
  }
  return !f.socket.empty() && f.server != !f.client_of.empty() && f.iterations > 0 &&
         f.size > 0 && f.size <= (uint32_t{1} << 30) && f.paths > 0;
}

std::byte Pattern(int iteration, bool server, Buffer which, size_t k) {
  return std::byte(static_cast<uint8_t>(iteration * 131 + (server ? 77 : 5) + which * 29 + k * 7 +
                                        (k >> 8) * 3));
}

class PingPong {
 public:
  PingPong(const Flags& f, std::span<std::byte> block, api::MemoryRegion mr,
           api::CompletionQueue& cq)
      : f_(f), block_(block), mr_(mr), cq_(cq) {}

  void Bind(api::Connection& conn, const RemoteBuffer& peer) {
    conn_ = &conn;
    peer_ = peer;
  }
  // Until every iteration is verified, or the connection is flushed (flushed() says where).
  void Run() {
    if (!f_.server) PostReceives();  // for iteration 0: before the server may answer
    for (int i = 0; i < f_.iterations && !flushed(); ++i) {
      if (f_.server) {
        AwaitReceives(i, /*from_server=*/false);
        if (flushed()) return;
        PostReceives();
        Answer(i);
      } else {
        Answer(i);
        AwaitReceives(i, /*from_server=*/true);
        if (flushed()) return;
        PostReceives();
      }
    }
    if (!flushed()) AwaitSends();
  }
  bool flushed() const { return flushed_at_ >= 0; }
  int flushed_at() const { return flushed_at_; }
  // Two receives per iteration: the Write-with-immediate consumes one (its data goes to the
  // write target), the Send the other.
  void PostReceives() {
    for (int n = 0; n < 2; ++n) {
      api::RecvWorkRequest r{next_wr_id_++, {Addr(kRecvTarget), Size32(), mr_.lkey}};
      Check(conn_->PostRecv(r), "post receive");
    }
  }
  uint64_t verified_bytes() const { return verified_; }

 private:
  uint64_t Addr(Buffer b) const { return mr_.addr + static_cast<uint64_t>(b) * f_.size; }
  uint32_t Size32() const { return static_cast<uint32_t>(f_.size); }
  std::span<std::byte> Buf(Buffer b) { return block_.subspan(b * f_.size, f_.size); }

  // Our patterns of iteration i: into the peer's write target, then as a Send.
  void Answer(int i) {
    for (Buffer b : {kWriteSource, kSendSource}) {
      std::span<std::byte> buf = Buf(b);
      for (size_t k = 0; k < buf.size(); ++k) {
        buf[k] = Pattern(i, f_.server, b == kWriteSource ? kWriteTarget : kRecvTarget, k);
      }
    }
    api::SendWorkRequest w;
    w.wr_id = next_wr_id_++;
    w.opcode = core::WrOpcode::kWriteWithImm;
    w.imm = static_cast<uint32_t>(i);
    w.local = {Addr(kWriteSource), Size32(), mr_.lkey};
    w.remote_addr = peer_.addr + static_cast<uint64_t>(kWriteTarget) * f_.size;
    w.rkey = peer_.rkey;
    api::SendWorkRequest s;
    s.wr_id = next_wr_id_++;
    s.opcode = core::WrOpcode::kSend;
    s.local = {Addr(kSendSource), Size32(), mr_.lkey};
    Check(conn_->PostSend(w), "post write");
    Check(conn_->PostSend(s), "post send");
    sends_outstanding_ += 2;
  }

  // Both messages of the peer's iteration i arrived: check every byte of both.
  void AwaitReceives(int i, bool from_server) {
    int receives = 0;
    bool write_seen = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (receives < 2) {
      if (std::chrono::steady_clock::now() > deadline) {
        Fail("iteration " + std::to_string(i) + ": timed out waiting for the peer's messages");
      }
      api::WorkCompletion wc[8];
      const size_t n = cq_.Poll(wc);
      for (size_t j = 0; j < n; ++j) {
        if (IsFlush(wc[j], i)) return;
        if (wc[j].status != core::WcStatus::kSuccess) {
          Fail("iteration " + std::to_string(i) + ": completion with status " +
               std::string(core::StatusName(wc[j].status)));
        }
        if (wc[j].opcode == core::WcOpcode::kSend || wc[j].opcode == core::WcOpcode::kRdmaWrite) {
          --sends_outstanding_;
          continue;
        }
        ++receives;
        if (wc[j].opcode == core::WcOpcode::kRecvRdmaWithImm) {
          write_seen = true;
          if (!wc[j].has_imm || wc[j].imm != static_cast<uint32_t>(i)) {
            Fail("iteration " + std::to_string(i) + ": write immediate " +
                 std::to_string(wc[j].imm));
          }
        } else if (wc[j].byte_len != f_.size) {
          Fail("iteration " + std::to_string(i) + ": received " + std::to_string(wc[j].byte_len) +
               " bytes, expected " + std::to_string(f_.size));
        }
      }
      if (n == 0) std::this_thread::yield();
    }
    if (!write_seen) Fail("iteration " + std::to_string(i) + ": two sends and no write");
    for (Buffer b : {kWriteTarget, kRecvTarget}) {
      std::span<std::byte> buf = Buf(b);
      for (size_t k = 0; k < buf.size(); ++k) {
        if (buf[k] != Pattern(i, from_server, b, k)) {
          Fail("iteration " + std::to_string(i) + ": byte " + std::to_string(k) + " of the " +
               (b == kWriteTarget ? "write" : "send") + " target is wrong");
        }
      }
      verified_ += buf.size();
    }
  }

  void AwaitSends() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (sends_outstanding_ > 0) {
      if (std::chrono::steady_clock::now() > deadline) Fail("timed out waiting for our sends");
      api::WorkCompletion wc[8];
      const size_t n = cq_.Poll(wc);
      for (size_t j = 0; j < n; ++j) {
        if (IsFlush(wc[j], f_.iterations)) return;
        if (wc[j].status != core::WcStatus::kSuccess) {
          Fail("send completion with status " + std::string(core::StatusName(wc[j].status)));
        }
        --sends_outstanding_;
      }
    }
  }

  // A flushed request: the connection is in error and everything outstanding follows it.
  bool IsFlush(const api::WorkCompletion& wc, int iteration) {
    if (wc.status != core::WcStatus::kWrFlushErr) return false;
    flushed_at_ = iteration;
    return true;
  }

  const Flags& f_;
  std::span<std::byte> block_;
  api::MemoryRegion mr_;
  api::CompletionQueue& cq_;
  api::Connection* conn_ = nullptr;
  RemoteBuffer peer_{};
  uint64_t next_wr_id_ = 1;
  int sends_outstanding_ = 0;
  uint64_t verified_ = 0;
  int flushed_at_ = -1;  // the iteration during which a WR_FLUSH_ERR completion came
};

// Drains the connection's path events (the application's own: the daemon records copies) and
// says how many were manual rotations (`mrctl path rotate`).
void ReportPathEvents(api::Connection& conn) {
  int events = 0, manual_rotations = 0;
  api::PathEvent buf[64];
  size_t n;
  while ((n = conn.PollEvents(buf)) > 0) {
    for (size_t i = 0; i < n; ++i) {
      ++events;
      if (buf[i].kind == core::PathEvent::Kind::kPortRotated &&
          buf[i].reason == core::PathEventReason::kManual) {
        ++manual_rotations;
      }
    }
  }
  std::printf("path events: %d, of which %d manual rotation(s)\n", events, manual_rotations);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, f)) {
    std::fprintf(stderr,
                 "usage: attach_pingpong --socket PATH (--server | --client ADDR) [--port N] "
                 "[--iterations N] [--size BYTES] [--paths N] [--hold]\n");
    return 2;
  }
  api::AttachOptions ao;
  ao.socket_path = f.socket;
  ao.name = f.server ? "pingpong-server" : "pingpong-client";
  absl::StatusOr<std::unique_ptr<api::Context>> ctx = api::Context::Attach(ao);
  if (!ctx.ok()) Fail("attach: " + std::string(ctx.status().message()));
  std::printf("attached: uid %d, %d workers, plane 0 %s\n", static_cast<int>(getuid()),
              (*ctx)->options().workers, (*ctx)->options().planes[0].local_ip.c_str());
  std::fflush(stdout);

  absl::StatusOr<std::span<std::byte>> block = (*ctx)->AllocateMemory(4 * f.size);
  if (!block.ok()) Fail("allocate: " + std::string(block.status().message()));
  absl::StatusOr<api::MemoryRegion> mr = (*ctx)->RegisterMemory(
      block->data(), 4 * f.size, api::access::kLocalWrite | api::access::kRemoteWrite);
  if (!mr.ok()) Fail("register: " + std::string(mr.status().message()));
  absl::StatusOr<std::unique_ptr<api::CompletionQueue>> cq = (*ctx)->CreateCompletionQueue(256);
  if (!cq.ok()) Fail("completion queue: " + std::string(cq.status().message()));

  api::ConnectOptions co;
  co.send_cq = co.recv_cq = cq->get();
  co.path_count = f.paths;
  co.max_send_queue = 64;
  co.max_recv_queue = 64;
  co.timeout = absl::Seconds(20);
  co.keep_exchange_socket = true;  // the start signal travels on it
  RemoteBuffer mine{mr->addr, mr->rkey, static_cast<uint32_t>(4 * f.size)};
  co.private_data.resize(sizeof(mine));
  std::memcpy(co.private_data.data(), &mine, sizeof(mine));

  PingPong game(f, *block, *mr, **cq);
  absl::StatusOr<std::unique_ptr<api::Connection>> conn;
  if (f.server) {
    absl::StatusOr<std::unique_ptr<api::Listener>> listener = (*ctx)->Listen(f.port);
    if (!listener.ok()) Fail("listen: " + std::string(listener.status().message()));
    std::printf("listening on %u\n", f.port);
    std::fflush(stdout);
    conn = (*listener)->Accept(co);
  } else {
    conn = (*ctx)->Connect(f.client_of, f.port, co);
  }
  if (!conn.ok()) Fail("connect: " + std::string(conn.status().message()));
  RemoteBuffer peer;
  if ((*conn)->peer_private_data().size() != sizeof(peer)) Fail("peer sent no buffer");
  std::memcpy(&peer, (*conn)->peer_private_data().data(), sizeof(peer));
  std::printf("connected: conn %u, owner worker %d, %u paths\n", (*conn)->local_id(),
              (*conn)->owner_worker(), f.paths);
  std::fflush(stdout);

  // The server posts its first receives, then tells the client to start.
  game.Bind(**conn, peer);
  api::ExchangeSocket start = (*conn)->TakeExchangeSocket();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  if (f.server) {
    game.PostReceives();
    Check(start.SendMessage(std::vector<std::byte>{std::byte{'g'}}, deadline), "start signal");
  } else {
    Check(start.ReceiveMessage(deadline).status(), "start signal");
  }
  game.Run();
  if (game.flushed()) {
    std::printf("flushed: iteration %d: a completion with WR_FLUSH_ERR: the connection was "
                "aborted (mrctl conn del?) after %llu bytes verified; destroying it\n",
                game.flushed_at(), static_cast<unsigned long long>(game.verified_bytes()));
    std::fflush(stdout);
    ReportPathEvents(**conn);
    conn->reset();  // qp.destroy: the application owns the connection to the end
    std::printf("destroyed the flushed connection\n");
    std::fflush(stdout);
    return 3;
  }
  absl::StatusOr<api::ConnectionStats> stats = (*conn)->Stats();
  if (!stats.ok()) Fail("stats: " + std::string(stats.status().message()));
  std::printf("verified %d iterations, %llu bytes; %llu messages completed, %llu retransmits\n",
              f.iterations, static_cast<unsigned long long>(game.verified_bytes()),
              static_cast<unsigned long long>(stats->counters.messages_completed),
              static_cast<unsigned long long>(stats->counters.retransmits));
  std::fflush(stdout);
  if (f.hold) {
    std::printf("holding\n");
    std::fflush(stdout);
    while (true) pause();
  }
  return 0;
}
