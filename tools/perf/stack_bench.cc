#include "tools/perf/stack_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/api/stats_json.h"
#include "lib/api/context.h"
#include "tools/perf/common.h"
#include "tools/perf/control.h"
#include "tools/perf/report.h"

namespace metaroce::perf {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMaxRegionBytes = uint64_t{256} << 20;  // per side, all connections
constexpr uint64_t kSeqMask = (uint64_t{1} << 40) - 1;
constexpr size_t kPostBatch = 32;

// What each side advertises in private_data: its buffer, as slots of slot_bytes.
struct BufferAd {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t slot_bytes = 0;
  uint32_t rkey = 0;
  uint32_t slots = 0;
};

std::vector<std::byte> Encode(const BufferAd& b) {
  std::vector<std::byte> out(sizeof(BufferAd));
  std::memcpy(out.data(), &b, sizeof b);  // both ends run this binary on one machine kind
  return out;
}

absl::StatusOr<BufferAd> Decode(std::span<const std::byte> data) {
  if (data.size() != sizeof(BufferAd)) {
    return absl::InvalidArgumentError(absl::StrCat("peer private_data of ", data.size(),
                                                   " bytes; mrperf sends ", sizeof(BufferAd)));
  }
  BufferAd b;
  std::memcpy(&b, data.data(), sizeof b);
  return b;
}

core::TransportProfile Profile(Transport t) {
  switch (t) {
    case Transport::kMetaRoce: return core::TransportProfile::MetaRoce();
    case Transport::kGoBackN: return core::TransportProfile::GoBackN();
    case Transport::kReorder: return core::TransportProfile::ReorderBuffer();
  }
  return core::TransportProfile::MetaRoce();
}

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

uint32_t SlotsFor(uint32_t depth, uint64_t slot_bytes, int qps) {
  const uint64_t fit = kMaxRegionBytes / (slot_bytes * static_cast<uint64_t>(qps));
  return static_cast<uint32_t>(std::clamp<uint64_t>(fit, 1, depth));
}

struct Qp {
  uint32_t index = 0;
  std::unique_ptr<api::Connection> conn;
  std::byte* buf = nullptr;
  size_t buf_bytes = 0;
  api::MemoryRegion mr;
  uint64_t slot_bytes = 0;
  uint32_t slots = 0;
  uint32_t recvs = 0;        // receives kept posted (server / latency)
  BufferAd remote;
  uint64_t next_seq = 0;     // messages posted (client) / expected (server)
  uint64_t outstanding = 0;
  uint64_t recv_posted = 0;  // index of the next receive
  // send_bw server: the slot each posted receive writes into (receive k takes message k), and
  // the slots free for the next receives. A receive is reposted into the slot its completion
  // freed, never into one whose message is not verified yet (completions come out of order).
  absl::flat_hash_map<uint64_t, uint32_t> slot_of;
  // Client with --verify: slots whose message has not completed. Completions come out of order,
  // so "fewer than `slots` outstanding" does not mean that the next message's slot is free; a
  // message still retransmitting reads its buffer (and, for writes, targets its remote slot).
  std::vector<uint8_t> busy;
  std::vector<uint32_t> free_slots;
};

// One side's stack: datapath, context, completion queues and connections, torn down in order
// (the context and its ports before the datapath that detaches the XDP programs).
struct Session {
  PerfOptions o;  // the effective test parameters (the server adopts the client's)
  uint32_t mtu = 0;
  // Embedded engine: the datapath the context's port factory opens ports from, and how those
  // ports are bound (recorded from the ports as they open).
  std::unique_ptr<api::Datapath> datapath;
  std::shared_ptr<PortModes> port_modes = std::make_shared<PortModes>();
  std::unique_ptr<api::Context> ctx;
  std::unique_ptr<api::CompletionQueue> scq, rcq;
  std::vector<Qp> qps;

  ~Session() {
    for (Qp& q : qps) q.conn.reset();
    for (Qp& q : qps) {
      if (q.buf != nullptr) {
        ctx->DeregisterMemory(q.mr).IgnoreError();
        ctx->FreeMemory(std::span<std::byte>(q.buf, q.buf_bytes)).IgnoreError();
      }
    }
    rcq.reset();
    scq.reset();
    ctx.reset();
  }

  // The embedded engine's datapath; null when attached to metaroced.
  const api::Datapath* dp() const { return datapath.get(); }
  size_t planes() const { return ctx->options().planes.size(); }
};

absl::Status AttachToDaemon(Session& s) {
  api::AttachOptions ao;
  ao.socket_path = s.o.daemon_socket;
  ao.name = "mrperf";
  ao.timeout = absl::Seconds(std::max(s.o.timeout_s, 1.0));
  absl::StatusOr<std::unique_ptr<api::Context>> ctx = api::Context::Attach(ao);
  if (!ctx.ok()) return ctx.status();
  s.ctx = *std::move(ctx);
  s.mtu = s.o.mtu != 0 ? s.o.mtu : s.ctx->options().mtu;
  if (s.mtu != s.ctx->options().mtu) {
    return absl::InvalidArgumentError(absl::StrCat("--mtu ", s.o.mtu, ": metaroced runs mtu ",
                                                   s.ctx->options().mtu));
  }
  return absl::OkStatus();
}

absl::Status CreateStack(Session& s, std::shared_ptr<api::MemoryPairBroker> broker, int side) {
  if (s.o.engine_mode != EngineMode::kEmbedded) {
    absl::Status attached = AttachToDaemon(s);
    // kAuto: nobody listening on the socket means "no daemon here"; any other refusal (a
    // daemon that refuses this user, a limit) is the answer.
    if (attached.ok() || s.o.engine_mode == EngineMode::kDaemon ||
        attached.code() != absl::StatusCode::kUnavailable) {
      return attached;
    }
  }
  if (s.o.interfaces.empty() && s.o.port_kind != PortKindFlag::kMemory) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no metaroced answers at ", s.o.daemon_socket,
        ", and an embedded engine needs --interface IF[,IF...] (one per plane)"));
  }
  absl::StatusOr<std::unique_ptr<api::Datapath>> dp =
      api::Datapath::Create(DatapathOptionsFor(s.o, std::move(broker), side));
  if (!dp.ok()) return dp.status();
  s.datapath = *std::move(dp);
  s.mtu = s.o.mtu != 0 ? s.o.mtu : s.datapath->DefaultMtu();
  api::ContextOptions co;
  for (const api::PlaneInfo& p : s.datapath->planes()) {
    co.planes.push_back({p.ifname, p.local_ip.ToString()});
  }
  co.port_kind = s.datapath->kind();
  co.workers = s.o.workers;
  co.cpus = s.o.cpus;
  co.idle = s.o.spin ? engine::IdleStrategy::kSpin : engine::IdleStrategy::kPoll;
  co.udp_port = s.o.udp_port;
  co.mtu = s.mtu;
  // The session keeps the datapath (rather than handing it to the context) so that every port
  // the engine opens passes through here, where its bind mode is recorded from the port itself.
  api::PortFactory factory = [dp = s.datapath.get(), modes = s.port_modes](
                                 const api::PortSpec& spec)
      -> absl::StatusOr<std::unique_ptr<io::PacketPort>> {
    absl::StatusOr<std::unique_ptr<io::PacketPort>> port = dp->Open(spec);
    if (port.ok()) modes->Record(**port);
    return port;
  };
  absl::StatusOr<std::unique_ptr<api::Context>> ctx = api::Context::Create(co, std::move(factory));
  if (!ctx.ok()) return ctx.status();
  s.ctx = *std::move(ctx);
  return absl::OkStatus();
}

absl::Status CreateQueues(Session& s) {
  const uint64_t want = static_cast<uint64_t>(s.o.qps) * (s.o.tx_depth + s.o.rx_depth) + 1024;
  const size_t depth = static_cast<size_t>(std::min<uint64_t>(want, uint64_t{1} << 20));
  absl::StatusOr<std::unique_ptr<api::CompletionQueue>> scq = s.ctx->CreateCompletionQueue(depth);
  if (!scq.ok()) return scq.status();
  absl::StatusOr<std::unique_ptr<api::CompletionQueue>> rcq = s.ctx->CreateCompletionQueue(depth);
  if (!rcq.ok()) return rcq.status();
  s.scq = *std::move(scq);
  s.rcq = *std::move(rcq);
  return absl::OkStatus();
}

absl::Status AllocateBuffer(Session& s, Qp& q, uint64_t slot_bytes, uint32_t slots) {
  q.slot_bytes = slot_bytes;
  q.slots = slots;
  q.buf_bytes = static_cast<size_t>(RoundUp(slot_bytes * slots, 4096));
  // From the context: shared with metaroced when attached (where data is placed directly).
  absl::StatusOr<std::span<std::byte>> block = s.ctx->AllocateMemory(q.buf_bytes);
  if (!block.ok()) {
    return absl::Status(block.status().code(),
                        absl::StrCat("cannot allocate ", q.buf_bytes, " bytes of buffer (",
                                     block.status().message(), "): use a smaller -s or -q"));
  }
  q.buf = block->data();  // zero-filled
  q.buf_bytes = block->size();
  absl::StatusOr<api::MemoryRegion> mr = s.ctx->RegisterMemory(
      q.buf, q.buf_bytes, api::access::kLocalWrite | api::access::kRemoteWrite);
  if (!mr.ok()) return mr.status();
  q.mr = *mr;
  return absl::OkStatus();
}

api::ConnectOptions ConnectOptionsFor(const Session& s, const Qp& q) {
  api::ConnectOptions co;
  co.send_cq = s.scq.get();
  co.recv_cq = s.rcq.get();
  co.path_count = static_cast<uint16_t>(s.o.paths);
  co.profile = Profile(s.o.transport);
  co.max_send_queue = std::max<uint32_t>(1024, s.o.tx_depth * 2);
  co.max_recv_queue = std::max<uint32_t>(1024, s.o.rx_depth * 2);
  co.timeout = absl::Seconds(s.o.timeout_s);
  BufferAd ad{reinterpret_cast<uint64_t>(q.buf), q.buf_bytes, q.slot_bytes, q.mr.rkey, q.slots};
  co.private_data = Encode(ad);
  return co;
}

bool IsWriteTest(TestKind t) { return t == TestKind::kWriteBw || t == TestKind::kWriteLat; }

// Latency ping-pong uses the last byte as the arrival flag when the message is one packet and
// nothing needs verifying (perftest's write_lat); otherwise completions.
bool PollsMemory(const Session& s, uint64_t size) {
  return s.o.test == TestKind::kWriteLat && !s.o.verify && size <= s.mtu;
}

// Whether the server keeps receives posted, and how many per connection.
uint32_t ServerReceives(const Session& s, const Qp& q) {
  switch (s.o.test) {
    case TestKind::kSendBw: return s.o.verify ? q.slots : s.o.rx_depth;  // unverified: all into slot 0
    case TestKind::kWriteBw: return s.o.verify ? s.o.rx_depth : 0;
    default: return 16;  // latency: one message at a time; a few spare
  }
}

absl::Status PostReceives(Session& s, Qp& q, uint32_t count) {
  const bool into_slots = s.o.test == TestKind::kSendBw || s.o.test == TestKind::kSendLat;
  std::vector<api::RecvWorkRequest> wrs;
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t n = q.recv_posted + i;
    api::RecvWorkRequest wr;
    wr.wr_id = (uint64_t{q.index} << 40) | (n & kSeqMask);
    if (s.o.test == TestKind::kSendBw) {
      uint32_t slot = static_cast<uint32_t>(n % q.slots);
      if (!q.free_slots.empty()) {
        slot = q.free_slots.back();
        q.free_slots.pop_back();
      }
      q.slot_of[n] = slot;
      wr.local = {reinterpret_cast<uint64_t>(q.buf + uint64_t{slot} * q.slot_bytes),
                  static_cast<uint32_t>(q.slot_bytes), q.mr.lkey};
    } else if (into_slots) {  // send_lat: slot 0 is the receive target
      wr.local = {reinterpret_cast<uint64_t>(q.buf), static_cast<uint32_t>(q.slot_bytes),
                  q.mr.lkey};
    } else {  // Write with immediate: the data goes to the region, the receive takes only imm
      wr.local = {reinterpret_cast<uint64_t>(q.buf), 0, q.mr.lkey};
    }
    wrs.push_back(wr);
  }
  size_t done = 0;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(2);
  while (done < wrs.size()) {
    done += q.conn->PostRecvs(std::span<const api::RecvWorkRequest>(wrs).subspan(done));
    if (done < wrs.size()) {
      if (Clock::now() > deadline) {
        return absl::ResourceExhaustedError("receive ring stays full: lower -r");
      }
      if (s.ctx->is_inline()) {
        s.ctx->Poll();  // the engine that empties the ring is this thread
      } else {
        YieldCpu();
      }
    }
  }
  q.recv_posted += count;
  return absl::OkStatus();
}

// ---- client: bandwidth ----

BwResult ClientBw(Session& s, uint64_t size) {
  const PerfOptions& o = s.o;
  const bool write = o.test == TestKind::kWriteBw;
  const core::WrOpcode opcode = write ? (o.verify ? core::WrOpcode::kWriteWithImm
                                                  : core::WrOpcode::kWrite)
                                      : core::WrOpcode::kSend;
  const bool by_time = o.duration_s > 0;
  BwResult r;
  r.size = size;
  std::vector<uint64_t> depth(s.qps.size()), posted(s.qps.size(), 0), ring(s.qps.size());
  for (size_t i = 0; i < s.qps.size(); ++i) {
    Qp& q = s.qps[i];
    ring[i] = write ? std::min<uint64_t>(q.slots, q.remote.slots) : q.slots;
    depth[i] = o.verify ? std::min<uint64_t>(o.tx_depth, ring[i]) : o.tx_depth;
    if (o.verify && q.busy.size() != ring[i]) q.busy.assign(ring[i], 0);
  }
  RateMeter meter;
  const Clock::time_point start = Clock::now();
  const auto window = by_time && o.duration_s >= 2 ? std::chrono::nanoseconds(std::chrono::seconds(1))
                                                   : std::chrono::nanoseconds(std::chrono::milliseconds(100));
  meter.Start(start, window);
  const Clock::time_point end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration_s));
  Clock::time_point last_completion = start;
  Clock::time_point drain_deadline{};
  uint64_t completed = 0;
  std::vector<api::SendWorkRequest> wrs(kPostBatch);
  std::vector<api::WorkCompletion> wc(128);
  uint32_t idle = 0;
  while (true) {
    const Clock::time_point now = Clock::now();
    bool posting = !StopRequested() && (by_time ? now < end : false);
    size_t work = 0;
    for (size_t i = 0; i < s.qps.size(); ++i) {
      Qp& q = s.qps[i];
      const bool more = by_time ? posting : (!StopRequested() && posted[i] < o.iterations);
      if (!by_time && more) posting = true;
      if (!more || q.conn->in_error() || q.outstanding >= depth[i]) continue;
      uint64_t n = std::min<uint64_t>(depth[i] - q.outstanding, kPostBatch);
      if (!by_time) n = std::min<uint64_t>(n, o.iterations - posted[i]);
      if (o.verify) {
        // Stop at the first slot still in use (its message has not completed).
        uint64_t free = 0;
        while (free < n && !q.busy[(q.next_seq + free) % ring[i]]) ++free;
        n = free;
      }
      for (uint64_t k = 0; k < n; ++k) {
        const uint64_t g = q.next_seq + k;
        const uint64_t local_slot = o.verify ? g % ring[i] : g % q.slots;
        std::byte* src = q.buf + local_slot * q.slot_bytes;
        api::SendWorkRequest& wr = wrs[k];
        wr = {};
        wr.wr_id = (uint64_t{q.index} << 40) | (g & kSeqMask);
        wr.opcode = opcode;
        wr.flags = api::send_flags::kSignaled;
        wr.local = {reinterpret_cast<uint64_t>(src), static_cast<uint32_t>(size), q.mr.lkey};
        if (write) {
          const uint64_t remote_slot = o.verify ? g % ring[i] : g % q.remote.slots;
          wr.remote_addr = q.remote.addr + remote_slot * q.remote.slot_bytes;
          wr.rkey = q.remote.rkey;
          wr.imm = static_cast<uint32_t>(g);
          if (o.verify) FillPattern(src, size, g, q.index, remote_slot);
        } else if (o.verify) {
          FillPattern(src, size, g, q.index, g);
        }
      }
      const size_t done = q.conn->PostSends(std::span<const api::SendWorkRequest>(wrs.data(), n));
      if (o.verify) {
        for (size_t k = 0; k < done; ++k) q.busy[(q.next_seq + k) % ring[i]] = 1;
      }
      q.next_seq += done;
      q.outstanding += done;
      posted[i] += done;
      work += done;
    }
    if (s.ctx->Poll()) ++work;  // inline engine: transmit what was posted, receive ACKs
    const size_t got = s.scq->Poll(wc);
    const Clock::time_point t = got > 0 ? Clock::now() : now;
    for (size_t k = 0; k < got; ++k) {
      const api::WorkCompletion& c = wc[k];
      const size_t qi = static_cast<size_t>(c.wr_id >> 40);
      Qp& q = s.qps[qi];
      if (q.outstanding > 0) --q.outstanding;
      if (o.verify) q.busy[(c.wr_id & kSeqMask) % ring[qi]] = 0;
      if (c.status != core::WcStatus::kSuccess) {
        ++r.failed_ops;
        continue;
      }
      if (by_time && t > end) continue;  // drained after the measured interval
      ++completed;
      meter.Add(t, size);
      last_completion = t;
    }
    work += got;
    if (!posting) {
      uint64_t outstanding = 0;
      for (const Qp& q : s.qps) outstanding += q.conn->in_error() ? 0 : q.outstanding;
      if (outstanding == 0) break;
      if (drain_deadline == Clock::time_point{}) {
        drain_deadline = now + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(o.timeout_s));
      }
      if (now > drain_deadline || StopRequested()) {
        r.failed_ops += outstanding;  // never completed
        break;
      }
    }
    if (work == 0) {
      IdleWait(idle, /*latency=*/false, s.ctx->is_inline());
    } else {
      idle = 0;
    }
  }
  const Clock::time_point stop = by_time ? end : last_completion;
  r.seconds = std::chrono::duration<double>(stop - start).count();
  r.iterations = completed;
  r.bytes = completed * size;
  if (r.seconds > 0) {
    r.avg_bytes_per_s = static_cast<double>(r.bytes) / r.seconds;
    r.msg_rate_per_s = static_cast<double>(completed) / r.seconds;
  }
  r.peak_bytes_per_s = meter.PeakBytesPerSecond(stop, r.avg_bytes_per_s);
  return r;
}

// Inline engine: after its last message the client keeps the engine running a little, so that
// what it owes the peer (delayed ACKs of the last answers, replies to retransmissions) goes out
// before it blocks on the control connection, where nothing runs the engine. Meanwhile the
// server still polls (it stops at the client's "round_done"). No-op with engine threads.
void Settle(Session& s) {
  if (!s.ctx->is_inline()) return;
  const Clock::time_point until = Clock::now() + std::chrono::milliseconds(5);
  while (Clock::now() < until) s.ctx->Poll();
}

// ---- latency (both sides) ----

inline uint8_t Tag(uint64_t g) { return static_cast<uint8_t>(g % 255 + 1); }

inline uint8_t LoadByte(const std::byte* p) {
  return std::atomic_ref<const uint8_t>(*reinterpret_cast<const uint8_t*>(p))
      .load(std::memory_order_acquire);
}

// Posts message g of a ping-pong from slot 1 to the peer's slot 0.
absl::Status PostPing(Session& s, Qp& q, uint64_t size, uint64_t g, bool polls_memory) {
  std::byte* src = q.buf + q.slot_bytes;
  if (s.o.verify) FillPattern(src, size, g, q.index, g);
  if (polls_memory) src[size - 1] = std::byte{Tag(g)};
  api::SendWorkRequest wr;
  wr.wr_id = (uint64_t{q.index} << 40) | (g & kSeqMask);
  wr.flags = 0;  // unsignaled: errors still complete
  wr.local = {reinterpret_cast<uint64_t>(src), static_cast<uint32_t>(size), q.mr.lkey};
  if (IsWriteTest(s.o.test)) {
    wr.opcode = polls_memory ? core::WrOpcode::kWrite : core::WrOpcode::kWriteWithImm;
    wr.remote_addr = q.remote.addr;
    wr.rkey = q.remote.rkey;
    wr.imm = static_cast<uint32_t>(g);
  } else {
    wr.opcode = core::WrOpcode::kSend;
  }
  return q.conn->PostSend(wr);
}

LatResult ClientLat(Session& s, uint64_t size) {
  const PerfOptions& o = s.o;
  Qp& q = s.qps[0];
  const bool polls_memory = PollsMemory(s, size);
  const bool by_time = o.duration_s > 0;
  const uint64_t warmup = by_time ? 100 : std::min<uint64_t>(o.iterations / 10, 100);
  LatResult r;
  std::vector<int64_t> samples;
  samples.reserve(by_time ? 1 << 20 : o.iterations);
  std::vector<api::WorkCompletion> wc(16);
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_s));
  const Clock::time_point start = Clock::now();
  const Clock::time_point end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration_s));
  for (uint64_t i = 0;; ++i) {
    if (StopRequested()) break;
    if (by_time ? (i >= warmup && Clock::now() >= end) : i >= warmup + o.iterations) break;
    const uint64_t g = q.next_seq++;
    const Clock::time_point t0 = Clock::now();
    if (!PostPing(s, q, size, g, polls_memory).ok()) {
      ++r.failed_ops;
      break;
    }
    bool done = false, failed = false;
    uint32_t spins = 0;
    while (!done && !failed) {
      s.ctx->Poll();  // inline engine: this thread sends the ping and receives the pong
      if (polls_memory) {
        if (LoadByte(q.buf + size - 1) == Tag(g)) done = true;
      } else {
        const size_t n = s.rcq->Poll(wc);
        for (size_t k = 0; k < n; ++k) {
          if (wc[k].status != core::WcStatus::kSuccess) {
            failed = true;
            continue;
          }
          done = true;
          if (o.verify) {
            ++r.verified;
            if (!CheckPattern(q.buf, size, g, q.index, g, 0)) ++r.data_errors;
          }
        }
        if (n > 0 && !PostReceives(s, q, static_cast<uint32_t>(n)).ok()) failed = true;
      }
      if ((++spins & 1023) == 0) {
        const size_t e = s.scq->Poll(wc);  // unsignaled sends complete only on error
        if (e > 0) failed = true;
        if (Clock::now() - t0 > timeout || StopRequested()) failed = true;
      }
    }
    const Clock::time_point t1 = Clock::now();
    if (failed) {
      ++r.failed_ops;
      break;
    }
    if (i >= warmup) samples.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count() / 2);
  }
  const uint64_t failed = r.failed_ops, errors = r.data_errors, verified = r.verified;
  r = ComputeLatency(size, samples);
  r.failed_ops = failed;
  r.data_errors = errors;
  r.verified = verified;
  return r;
}

// ---- server ----

// The first words that differ, on stderr: what a data error looked like.
void ReportMismatch(const Qp& q, uint64_t index, uint32_t slot, uint32_t byte_len, uint64_t size,
                    uint64_t g) {
  const std::byte* p = q.buf + uint64_t{slot} * q.slot_bytes;
  std::vector<std::byte> want(size);
  FillPattern(want.data(), size, g, q.index, g);
  size_t first = size, last = 0, count = 0;
  for (size_t i = 0; i < size; ++i) {
    if (p[i] != want[i]) {
      first = std::min(first, i);
      last = i;
      ++count;
    }
  }
  uint64_t w = 0;
  if (first + 8 <= size) std::memcpy(&w, p + (first & ~size_t{7}), 8);
  std::fprintf(stderr,
               "mrperf: data error: connection %u receive %lu slot %u byte_len %u (expected %lu): "
               "%zu bytes differ in [%zu, %zu]; word there %016lx (message %lu word %lu)\n",
               q.index, static_cast<unsigned long>(index), slot, byte_len,
               static_cast<unsigned long>(size), count, first, last, static_cast<unsigned long>(w),
               static_cast<unsigned long>(w >> 32), static_cast<unsigned long>(w & 0xffffff));
}

struct ServerRound {
  uint64_t failed_ops = 0, data_errors = 0, verified = 0, messages = 0;
};

// Serves one round until the client's "round_done" arrives on `ctl`.
ServerRound Serve(Session& s, ControlChannel& ctl, uint64_t size) {
  const PerfOptions& o = s.o;
  ServerRound r;
  const bool latency = IsLatency(o.test);
  const bool polls_memory = latency && PollsMemory(s, size);
  bool uses_receives = false;
  for (Qp& q : s.qps) uses_receives = uses_receives || q.recvs > 0;
  if (!latency && !uses_receives) {
    // write_bw without --verify: the data path needs nothing from us (as ib_write_bw's server),
    // except, with an inline engine, the thread that runs it.
    if (!s.ctx->is_inline()) {
      while (!ctl.Readable() && !StopRequested()) absl::SleepFor(absl::Milliseconds(5));
      return r;
    }
    for (uint32_t loops = 1;; ++loops) {
      s.ctx->Poll();
      if ((loops & 255) == 0 && (ctl.Readable() || StopRequested())) break;
    }
    return r;
  }
  std::vector<api::WorkCompletion> wc(128);
  uint32_t idle = 0, loops = 0;
  Clock::time_point drain_until{};
  while (true) {
    if ((++loops & 255) == 0) {
      if (StopRequested()) break;
      if (drain_until == Clock::time_point{} && ctl.Readable()) {
        drain_until = Clock::now() + std::chrono::milliseconds(latency ? 0 : 20);
      }
      if (drain_until != Clock::time_point{} && Clock::now() >= drain_until) break;
    }
    size_t work = s.ctx->Poll() ? 1 : 0;  // inline engine: receive, post, transmit
    if (polls_memory) {
      Qp& q = s.qps[0];
      if (LoadByte(q.buf + size - 1) == Tag(q.next_seq)) {
        if (!PostPing(s, q, size, q.next_seq, true).ok()) ++r.failed_ops;
        ++q.next_seq;
        ++r.messages;
        ++work;
      }
    } else {
      const size_t n = s.rcq->Poll(wc);
      for (size_t k = 0; k < n; ++k) {
        const api::WorkCompletion& c = wc[k];
        Qp& q = s.qps[static_cast<size_t>(c.wr_id >> 40)];
        if (c.status != core::WcStatus::kSuccess) {
          ++r.failed_ops;
          continue;
        }
        ++r.messages;
        const uint64_t index = c.wr_id & kSeqMask;
        uint64_t g = index;
        if (o.verify) {
          bool ok = true;
          if (o.test == TestKind::kSendBw) {
            auto it = q.slot_of.find(index);
            const uint32_t slot = it == q.slot_of.end() ? 0 : it->second;
            ok = it != q.slot_of.end() && c.byte_len == size &&
                 CheckPattern(q.buf + uint64_t{slot} * q.slot_bytes, size, g, q.index, g, 0);
            if (!ok && r.data_errors < 5) {
              ReportMismatch(q, index, slot, c.byte_len, size, g);
            }
          } else if (o.test == TestKind::kWriteBw) {
            g = c.imm;
            const uint64_t slot = g % q.slots;
            ok = c.has_imm &&
                 CheckPattern(q.buf + slot * q.slot_bytes, size, g, q.index, slot, q.slots);
          } else {  // latency: the message sits in slot 0
            if (IsWriteTest(o.test)) g = c.imm;
            ok = CheckPattern(q.buf, size, g, q.index, g, 0);
          }
          ++r.verified;
          if (!ok) ++r.data_errors;
        } else if (IsWriteTest(o.test) && latency) {
          g = c.imm;
        }
        if (latency) {
          if (!PostPing(s, q, size, g, false).ok()) ++r.failed_ops;
        }
        if (o.test == TestKind::kSendBw) {
          if (auto it = q.slot_of.find(index); it != q.slot_of.end()) {
            q.free_slots.push_back(it->second);
            q.slot_of.erase(it);
          }
        }
        if (!PostReceives(s, q, 1).ok()) ++r.failed_ops;
      }
      work += n;
      if ((loops & 63) == 0) {
        const size_t e = s.scq->Poll(wc);
        for (size_t k = 0; k < e; ++k) {
          if (wc[k].status != core::WcStatus::kSuccess) ++r.failed_ops;
        }
      }
    }
    if (work == 0) {
      IdleWait(idle, latency, s.ctx->is_inline());
    } else {
      idle = 0;
    }
  }
  return r;
}

// ---- shared plumbing ----

ControlMessage HelloFor(const Session& s) {
  ControlMessage m;
  m.kind = "hello";
  const PerfOptions& o = s.o;
  m.Set("test", TestName(o.test));
  std::vector<std::string> sizes;
  for (uint64_t v : o.Sizes()) sizes.push_back(std::to_string(v));
  m.Set("sizes", absl::StrJoin(sizes, ","));
  m.Set("iterations", o.iterations);
  m.SetDouble("duration_s", o.duration_s);
  m.Set("qps", static_cast<uint64_t>(o.qps));
  m.Set("paths", static_cast<uint64_t>(o.paths));
  m.Set("transport", TransportName(o.transport));
  m.Set("verify", o.verify ? 1 : 0);
  m.Set("tx_depth", o.tx_depth);
  m.Set("rx_depth", o.rx_depth);
  m.Set("mtu", s.mtu);
  return m;
}

// The server adopts the client's test parameters (its own datapath flags stay).
absl::Status AdoptHello(Session& s, const ControlMessage& m, std::vector<uint64_t>* sizes) {
  absl::StatusOr<std::string> test = m.Get("test");
  if (!test.ok()) return test.status();
  if (*test != TestName(s.o.test)) {
    return absl::FailedPreconditionError(absl::StrCat("the client runs ", *test,
                                                      ", this server ", std::string(TestName(s.o.test)),
                                                      ": run the same test on both sides"));
  }
  absl::StatusOr<uint64_t> mtu = m.GetU64("mtu");
  if (!mtu.ok()) return mtu.status();
  if (*mtu != s.mtu) {
    return absl::FailedPreconditionError(absl::StrCat(
        "payload mtu differs: client ", *mtu, ", server ", s.mtu,
        " (give both the same --mtu, or interfaces of the same MTU)"));
  }
  sizes->clear();
  absl::StatusOr<std::string> list = m.Get("sizes");
  if (!list.ok()) return list.status();
  for (absl::string_view v : absl::StrSplit(*list, ',', absl::SkipEmpty())) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(v, &n) || n == 0) return absl::InvalidArgumentError("bad sizes");
    sizes->push_back(n);
  }
  if (sizes->empty()) return absl::InvalidArgumentError("no sizes");
  s.o.iterations = m.U64Or("iterations", s.o.iterations);
  s.o.duration_s = m.GetDouble("duration_s").value_or(0);
  s.o.qps = static_cast<int>(m.U64Or("qps", 1));
  s.o.paths = static_cast<int>(m.U64Or("paths", 8));
  s.o.verify = m.U64Or("verify", 0) != 0;
  s.o.tx_depth = static_cast<uint32_t>(m.U64Or("tx_depth", s.o.tx_depth));
  s.o.rx_depth = static_cast<uint32_t>(m.U64Or("rx_depth", s.o.rx_depth));
  const std::string transport = m.Get("transport").value_or("metaroce");
  if (transport == "gbn") s.o.transport = Transport::kGoBackN;
  else if (transport == "reorder") s.o.transport = Transport::kReorder;
  else s.o.transport = Transport::kMetaRoce;
  if (s.o.qps < 1 || s.o.qps > 1024 || s.o.paths < 1 || s.o.paths > 256) {
    return absl::InvalidArgumentError("qps/paths out of range");
  }
  s.o.all_sizes = false;
  s.o.size = sizes->back();
  return absl::OkStatus();
}

// Slots of this side's buffer per connection.
std::pair<uint64_t, uint32_t> BufferShape(const Session& s, uint64_t max_size, bool server) {
  const uint64_t slot_bytes = RoundUp(std::max<uint64_t>(max_size, 64), 64);
  if (IsLatency(s.o.test)) return {slot_bytes, 2};  // 0: receive target, 1: send source
  // Without --verify nothing reads the data, so every message of a connection goes from one
  // buffer to one buffer, as perftest's bandwidth tests do for messages larger than its cycle
  // buffer: the figure is the transport's, not the memory system's streaming through
  // tx-depth x size bytes (8 MiB at the defaults, beyond the caches) on both hosts.
  if (!s.o.verify) return {slot_bytes, 1};
  if (server && s.o.test == TestKind::kSendBw) {
    return {slot_bytes, SlotsFor(s.o.rx_depth, slot_bytes, s.o.qps)};
  }
  return {slot_bytes, SlotsFor(s.o.tx_depth, slot_bytes, s.o.qps)};
}

JsonValue ConnectionsJson(Session& s) {
  JsonValue out = JsonValue::MakeArray();
  for (Qp& q : s.qps) {
    absl::StatusOr<api::ConnectionStats> st = q.conn->Stats();
    if (st.ok()) out.Push(api::ConnectionStatsJson(*st));
  }
  return out;
}

JsonValue XdpJson(const Session& s) {
  JsonValue out = JsonValue::MakeArray();
  if (s.dp() == nullptr) return out;  // attached: the daemon's (mrctl stat show)
  for (const auto& [ifname, c] : s.dp()->SteeringCounters()) {
    JsonValue j;
    j["interface"] = ifname;
    j["redirected"] = c.redirected;
    j["pass_no_socket"] = c.pass_no_socket;
    j["drop_no_socket"] = c.drop_no_socket;
    j["drop_truncated"] = c.drop_truncated;
    j["drop_bad_version"] = c.drop_bad_version;
    j["pass_not_ip"] = c.pass_not_ip;
    j["pass_not_udp"] = c.pass_not_udp;
    j["pass_other_port"] = c.pass_other_port;
    j["pass_fragment"] = c.pass_fragment;
    j["pass_malformed"] = c.pass_malformed;
    out.Push(std::move(j));
  }
  return out;
}

JsonValue DocumentHead(const Session& s, std::string_view role) {
  JsonValue doc;
  doc["version"] = kJsonVersion;
  doc["tool"] = "mrperf";
  doc["test"] = TestName(s.o.test);
  doc["role"] = role;
  JsonValue config = ConfigJson(s.o, s.dp(), s.mtu);
  config["engine"] = s.ctx->is_attached() ? "metaroced" : "embedded";
  if (s.ctx->is_attached()) config["daemon_socket"] = s.o.daemon_socket;
  std::vector<engine::WorkerStats> ws = s.ctx->Stats();
  JsonValue& ports = config["port_descriptions"] = JsonValue::MakeArray();
  for (const engine::WorkerStats& w : ws) {
    for (const std::string& d : w.port_descriptions) ports.Push(d);
  }
  // Attached: the ports are metaroced's, not this process's to ask (`mrctl -j daemon show`).
  config["zero_copy"] = s.ctx->is_attached() ? JsonValue(nullptr)
                                             : JsonValue(s.port_modes->zero_copy());
  doc["config"] = std::move(config);
  return doc;
}

void PrintHeader(const Session& s, bool latency) {
  if (TablesQuiet()) return;
  const std::string engine =
      s.ctx->is_attached() ? absl::StrCat("metaroced (", s.ctx->options().workers, " worker(s))")
      : s.o.workers == 0   ? std::string("inline engine")
                           : absl::StrCat(s.o.workers, " worker(s)");
  std::printf("%s  %s, %d connection(s), %d path(s), %zu plane(s), %s, mtu %u%s\n",
              std::string(TestName(s.o.test)).c_str(),
              std::string(TransportName(s.o.transport)).c_str(), s.o.qps, s.o.paths,
              s.planes(), engine.c_str(), s.mtu, s.o.verify ? ", verify" : "");
  std::vector<engine::WorkerStats> ws = s.ctx->Stats();
  if (!ws.empty() && !ws[0].port_descriptions.empty()) {
    std::printf("port: %s\n", ws[0].port_descriptions[0].c_str());
  }
  if (latency) {
    PrintLatHeader();
  } else {
    PrintBwHeader(s.o.report_gbits);
  }
}

ControlMessage BwToMessage(const BwResult& r) {
  ControlMessage m;
  m.kind = "round_done";
  m.Set("size", r.size).Set("iterations", r.iterations).Set("bytes", r.bytes);
  m.SetDouble("seconds", r.seconds).SetDouble("peak", r.peak_bytes_per_s);
  m.SetDouble("avg", r.avg_bytes_per_s).SetDouble("rate", r.msg_rate_per_s);
  m.Set("failed_ops", r.failed_ops).Set("data_errors", r.data_errors).Set("verified", r.verified);
  return m;
}

ControlMessage LatToMessage(const LatResult& r) {
  ControlMessage m;
  m.kind = "round_done";
  PutLatency(m, r);
  return m;
}

}  // namespace

absl::StatusOr<JsonValue> RunStackServer(const PerfOptions& options,
                                         std::shared_ptr<api::MemoryPairBroker> broker,
                                         std::function<void()> ready) {
  Session s;
  s.o = options;
  if (absl::Status st = CreateStack(s, broker, 0); !st.ok()) return st;
  absl::StatusOr<ClientGreeting> greeting = AwaitClient(options, ready);
  if (!greeting.ok()) return greeting.status();
  ControlChannel* ctl = &greeting->channel;
  const ControlMessage* hello = &greeting->hello;
  const absl::Duration timeout = absl::Seconds(options.timeout_s);
  std::vector<uint64_t> sizes;
  if (absl::Status st = AdoptHello(s, *hello, &sizes); !st.ok()) {
    ctl->SendError(std::string(st.message()));
    return st;
  }
  if (absl::Status st = CreateQueues(s); !st.ok()) return st;
  const std::string bind = options.port_kind == PortKindFlag::kMemory ? "127.0.0.1" : "";
  absl::StatusOr<std::unique_ptr<api::Listener>> listener = s.ctx->Listen(0, bind);
  if (!listener.ok()) return listener.status();
  ControlMessage rdy;
  rdy.kind = "ready";
  rdy.Set("exchange_port", (*listener)->port());
  if (absl::Status st = ctl->Send(rdy); !st.ok()) return st;
  const uint64_t max_size = *std::max_element(sizes.begin(), sizes.end());
  const auto [slot_bytes, slots] = BufferShape(s, max_size, true);
  s.qps.resize(s.o.qps);
  for (int i = 0; i < s.o.qps; ++i) {
    Qp& q = s.qps[i];
    q.index = static_cast<uint32_t>(i);
    if (absl::Status st = AllocateBuffer(s, q, slot_bytes, slots); !st.ok()) {
      ctl->SendError(std::string(st.message()));
      return st;
    }
    absl::StatusOr<std::unique_ptr<api::Connection>> conn =
        (*listener)->Accept(ConnectOptionsFor(s, q));
    if (!conn.ok()) return conn.status();
    q.conn = *std::move(conn);
    absl::StatusOr<BufferAd> ad = Decode(q.conn->peer_private_data());
    if (!ad.ok()) return ad.status();
    q.remote = *ad;
    q.recvs = ServerReceives(s, q);
    if (q.recvs > 0) {
      if (absl::Status st = PostReceives(s, q, q.recvs); !st.ok()) return st;
    }
  }
  const bool latency = IsLatency(s.o.test);
  JsonValue doc = DocumentHead(s, "server");
  JsonValue& results = doc["results"] = JsonValue::MakeArray();
  PrintHeader(s, latency);
  uint64_t total_failed = 0, total_errors = 0;
  while (true) {
    absl::StatusOr<ControlMessage> m = ctl->Receive("", absl::InfiniteFuture());
    if (!m.ok()) return m.status();
    if (m->kind == "bye") break;
    if (m->kind != "round") return absl::InvalidArgumentError("unexpected control message " + m->kind);
    const uint64_t size = m->U64Or("size", 0);
    if (size == 0 || size > max_size) return absl::InvalidArgumentError("bad round size");
    for (Qp& q : s.qps) std::memset(q.buf, 0, q.buf_bytes);
    ControlMessage go;
    go.kind = "go";
    if (absl::Status st = ctl->Send(go); !st.ok()) return st;
    ServerRound sr = Serve(s, *ctl, size);
    absl::StatusOr<ControlMessage> done = ctl->Receive("round_done", absl::Now() + timeout);
    if (!done.ok()) return done.status();
    ControlMessage res;
    res.kind = "round_result";
    res.Set("failed_ops", sr.failed_ops).Set("data_errors", sr.data_errors);
    res.Set("verified", sr.verified).Set("messages", sr.messages);
    if (absl::Status st = ctl->Send(res); !st.ok()) return st;
    total_failed += sr.failed_ops + done->U64Or("failed_ops", 0);
    total_errors += sr.data_errors + done->U64Or("data_errors", 0);
    if (latency) {
      LatResult r = LatencyFrom(*done, size);
      r.failed_ops += sr.failed_ops;
      r.data_errors += sr.data_errors;
      r.verified += sr.verified;
      PrintLatRow(r);
      results.Push(ToJson(r));
    } else {
      BwResult r;
      r.size = size;
      r.iterations = done->U64Or("iterations", 0);
      r.bytes = done->U64Or("bytes", 0);
      r.seconds = done->GetDouble("seconds").value_or(0);
      r.peak_bytes_per_s = done->GetDouble("peak").value_or(0);
      r.avg_bytes_per_s = done->GetDouble("avg").value_or(0);
      r.msg_rate_per_s = done->GetDouble("rate").value_or(0);
      r.failed_ops = sr.failed_ops + done->U64Or("failed_ops", 0);
      r.data_errors = sr.data_errors;
      r.verified = sr.verified;
      PrintBwRow(r, s.o.report_gbits);
      results.Push(ToJson(r));
    }
  }
  PrintDashes();
  doc["connections"] = ConnectionsJson(s);
  doc["workers"] = WorkerStatsJson(s.ctx->Stats());
  doc["xdp"] = XdpJson(s);
  JsonValue& summary = doc["summary"];
  summary["failed_ops"] = total_failed;
  summary["data_errors"] = total_errors;
  ControlMessage bye;
  bye.kind = "bye";
  JsonValue server_part;
  server_part["connections"] = doc["connections"];
  server_part["workers"] = doc["workers"];
  server_part["xdp"] = doc["xdp"];
  server_part["config"] = doc["config"];
  bye.Set("document", server_part.Dump());
  ctl->Send(bye).IgnoreError();
  return doc;
}

absl::StatusOr<JsonValue> RunStackClient(const PerfOptions& options,
                                         std::shared_ptr<api::MemoryPairBroker> broker) {
  Session s;
  s.o = options;
  if (absl::Status st = CreateStack(s, broker, 1); !st.ok()) return st;
  if (absl::Status st = CreateQueues(s); !st.ok()) return st;
  const std::string host = options.server.value_or("127.0.0.1");
  const absl::Duration timeout = absl::Seconds(options.timeout_s);
  absl::StatusOr<ControlChannel> ctl = ControlChannel::Connect(host, options.port, timeout);
  if (!ctl.ok()) return ctl.status();
  if (absl::Status st = ctl->Send(HelloFor(s)); !st.ok()) return st;
  absl::StatusOr<ControlMessage> rdy = ctl->Receive("ready", absl::Now() + timeout);
  if (!rdy.ok()) return rdy.status();
  const uint16_t exchange_port = static_cast<uint16_t>(rdy->U64Or("exchange_port", 0));
  const std::vector<uint64_t> sizes = s.o.Sizes();
  const uint64_t max_size = *std::max_element(sizes.begin(), sizes.end());
  const auto [slot_bytes, slots] = BufferShape(s, max_size, false);
  s.qps.resize(s.o.qps);
  for (int i = 0; i < s.o.qps; ++i) {
    Qp& q = s.qps[i];
    q.index = static_cast<uint32_t>(i);
    if (absl::Status st = AllocateBuffer(s, q, slot_bytes, slots); !st.ok()) return st;
    absl::StatusOr<std::unique_ptr<api::Connection>> conn =
        s.ctx->Connect(host, exchange_port, ConnectOptionsFor(s, q));
    if (!conn.ok()) return conn.status();
    q.conn = *std::move(conn);
    absl::StatusOr<BufferAd> ad = Decode(q.conn->peer_private_data());
    if (!ad.ok()) return ad.status();
    q.remote = *ad;
  }
  const bool latency = IsLatency(s.o.test);
  if (latency && s.o.qps != 1) return absl::InvalidArgumentError("latency tests run -q 1");
  JsonValue doc = DocumentHead(s, "client");
  JsonValue& results = doc["results"] = JsonValue::MakeArray();
  PrintHeader(s, latency);
  uint64_t total_failed = 0, total_errors = 0;
  for (uint64_t size : sizes) {
    if (StopRequested()) break;
    for (Qp& q : s.qps) std::memset(q.buf, 0, q.buf_bytes);
    if (latency && !PollsMemory(s, size)) {
      Qp& q = s.qps[0];
      if (q.recv_posted == 0) {
        if (absl::Status st = PostReceives(s, q, 16); !st.ok()) return st;
      }
    }
    ControlMessage round;
    round.kind = "round";
    round.Set("size", size);
    if (absl::Status st = ctl->Send(round); !st.ok()) return st;
    absl::StatusOr<ControlMessage> go = ctl->Receive("go", absl::Now() + timeout);
    if (!go.ok()) return go.status();
    ControlMessage done;
    BwResult bw;
    LatResult lat;
    if (latency) {
      lat = ClientLat(s, size);
      Settle(s);
      done = LatToMessage(lat);
    } else {
      bw = ClientBw(s, size);
      Settle(s);
      done = BwToMessage(bw);
    }
    if (absl::Status st = ctl->Send(done); !st.ok()) return st;
    absl::StatusOr<ControlMessage> res = ctl->Receive("round_result", absl::Now() + timeout);
    if (!res.ok()) return res.status();
    const uint64_t sf = res->U64Or("failed_ops", 0), se = res->U64Or("data_errors", 0),
                   sv = res->U64Or("verified", 0);
    if (latency) {
      lat.failed_ops += sf;
      lat.data_errors += se;
      lat.verified += sv;
      total_failed += lat.failed_ops;
      total_errors += lat.data_errors;
      PrintLatRow(lat);
      results.Push(ToJson(lat));
    } else {
      bw.failed_ops += sf;
      bw.data_errors += se;
      bw.verified += sv;
      total_failed += bw.failed_ops;
      total_errors += bw.data_errors;
      PrintBwRow(bw, s.o.report_gbits);
      results.Push(ToJson(bw));
    }
  }
  PrintDashes();
  ControlMessage bye;
  bye.kind = "bye";
  ctl->Send(bye).IgnoreError();
  absl::StatusOr<ControlMessage> peer_bye = ctl->Receive("bye", absl::Now() + timeout);
  doc["connections"] = ConnectionsJson(s);
  doc["workers"] = WorkerStatsJson(s.ctx->Stats());
  doc["xdp"] = XdpJson(s);
  uint64_t retransmits = 0, in_error = 0;
  for (Qp& q : s.qps) {
    absl::StatusOr<api::ConnectionStats> st = q.conn->Stats();
    if (!st.ok()) continue;
    retransmits += st->counters.retransmits;
    if (st->state != core::Connection::State::kReady) ++in_error;
  }
  doc["server"] = peer_bye.ok() ? JsonValue::Raw(peer_bye->Get("document").value_or(""))
                                : JsonValue();
  JsonValue& summary = doc["summary"];
  summary["failed_ops"] = total_failed;
  summary["data_errors"] = total_errors;
  summary["retransmits"] = retransmits;
  summary["connections_in_error"] = in_error;
  if (!results.is_null()) {
    summary["interrupted"] = StopRequested();
  }
  return doc;
}

}  // namespace metaroce::perf
