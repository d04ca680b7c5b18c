#include "tools/sim/scenario.h"

#include <malloc.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <memory>
#include <span>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "lib/core/endpoint.h"
#include "lib/wire/packet.h"
#include "lib/core/counter_fields.h"
#include "tools/sim/rng.h"

namespace metaroce::sim {

size_t HeapInUseBytes() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

core::TransportProfile ProfileOf(TransportKind t, uint32_t reorder_buffer_kb) {
  switch (t) {
    case TransportKind::kMetaRoce: return core::TransportProfile::MetaRoce();
    case TransportKind::kGoBackN: return core::TransportProfile::GoBackN();
    case TransportKind::kReorderBuffer:
      return core::TransportProfile::ReorderBuffer(reorder_buffer_kb * 1024);
  }
  return core::TransportProfile::MetaRoce();
}

std::string_view TransportName(TransportKind t) {
  switch (t) {
    case TransportKind::kMetaRoce: return "metaroce";
    case TransportKind::kGoBackN: return "gbn";
    case TransportKind::kReorderBuffer: return "reorder";
  }
  return "?";
}

std::string_view OperationName(Operation op) {
  switch (op) {
    case Operation::kWrite: return "write";
    case Operation::kSend: return "send";
    case Operation::kWriteImm: return "write_imm";
  }
  return "?";
}

namespace {

constexpr uint64_t kMaxBufferBytes = uint64_t{4} << 30;  // all slots of all connections, per host
constexpr uint16_t kFirstEphemeralPort = 49152;
constexpr double kRecoveryFraction = 0.85;

// Independent random streams derived from the scenario seed.
enum Stream : uint64_t {
  kTokenStream = 1,
  kConnectionSeedStream = 2,
  kPatternStream = 3,
  kLinkLossStream = 4,
  kImmStream = 5,
  kCeMarkStream = 6,
};

// Lowest port >= 49152 with (port + udp_port) % P == 0: with the ECMP hash (src + dst) % P,
// source port port_base + n then starts on physical path n % P.
uint32_t AlignedPortBase(uint16_t physical_paths) {
  uint32_t base = kFirstEphemeralPort;
  while ((base + wire::kDefaultUdpPort) % physical_paths != 0) ++base;
  return base;
}

// Source ports are unique within one connection direction only (spec wire-format §1): path i of
// connection c starts on port_base + (c x logical paths + i) mod R, R the largest multiple of P
// that fits below 65536, so that ports run on across connections (each connection starts where
// the previous one ended, spreading over the physical paths) and wrap when there are more paths
// in all than ports.
uint32_t PortSpan(uint16_t physical_paths) {
  const uint32_t base = AlignedPortBase(physical_paths);
  return (65536 - base) / physical_paths * physical_paths;
}

// Message payloads: a pseudo-random stream per (seed, connection, message), 8 bytes at a time.
void FillPattern(uint64_t seed, uint32_t conn, uint64_t local_index, std::span<std::byte> out) {
  Xoshiro256 rng(DeriveSeed(seed, kPatternStream, conn, local_index));
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    const uint64_t v = rng.Next();
    std::memcpy(out.data() + i, &v, 8);
  }
  if (i < out.size()) {
    const uint64_t v = rng.Next();
    std::memcpy(out.data() + i, &v, out.size() - i);
  }
}

bool MatchesPattern(uint64_t seed, uint32_t conn, uint64_t local_index,
                    std::span<const std::byte> data) {
  Xoshiro256 rng(DeriveSeed(seed, kPatternStream, conn, local_index));
  size_t i = 0;
  for (; i + 8 <= data.size(); i += 8) {
    const uint64_t want = rng.Next();
    if (std::memcmp(data.data() + i, &want, 8) != 0) return false;
  }
  if (i < data.size()) {
    const uint64_t want = rng.Next();
    if (std::memcmp(data.data() + i, &want, data.size() - i) != 0) return false;
  }
  return true;
}

std::byte GuardByte(size_t i) { return static_cast<std::byte>(0xA5u ^ (i * 131u & 0xffu)); }

// A buffer of `region_bytes` between two guard areas that are never registered. The guards hold a
// known pattern; the core must never change them.
class GuardedBuffer {
 public:
  static constexpr size_t kGuardBytes = 4096;

  // calloc: a large buffer comes as fresh zero pages, touched only where messages are written,
  // so thousands of connections' buffers cost what their traffic touches, not their size.
  explicit GuardedBuffer(size_t region_bytes)
      : region_bytes_(region_bytes),
        storage_(static_cast<std::byte*>(std::calloc(region_bytes + 2 * kGuardBytes, 1))) {
    if (storage_ == nullptr) throw std::bad_alloc();
    for (size_t i = 0; i < kGuardBytes; ++i) {
      storage_[i] = GuardByte(i);
      storage_[kGuardBytes + region_bytes_ + i] = GuardByte(i);
    }
  }
  std::byte* region() { return storage_.get() + kGuardBytes; }
  size_t region_bytes() const { return region_bytes_; }
  // Number of guard areas (0..2) with any byte changed.
  int CorruptedGuards() const {
    int corrupted = 0;
    for (size_t base : {size_t{0}, kGuardBytes + region_bytes_}) {
      for (size_t i = 0; i < kGuardBytes; ++i) {
        if (storage_[base + i] != GuardByte(i)) {
          ++corrupted;
          break;
        }
      }
    }
    return corrupted;
  }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  size_t region_bytes_;
  std::unique_ptr<std::byte[], Free> storage_;
};

double Percentile(const std::vector<int64_t>& sorted_ns, double q) {
  if (sorted_ns.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted_ns.size())));
  rank = std::clamp<size_t>(rank, 1, sorted_ns.size());
  return static_cast<double>(sorted_ns[rank - 1]) / 1000.0;
}

class Simulation {
 public:
  explicit Simulation(const ScenarioConfig& config);
  absl::Status Setup();
  void Run();
  ScenarioResult Finish();

 private:
  enum class Host : uint8_t { kA = 0, kB = 1 };
  static constexpr uint32_t kNoMessage = UINT32_MAX;

  class Port final : public core::PacketSink {
   public:
    Port(Simulation& sim, Direction direction) : sim_(sim), direction_(direction) {}
    void Transmit(const core::TxMeta& meta, std::span<const std::byte> headers,
                  std::span<const std::byte> payload) override {
      sim_.OnTransmit(direction_, meta, headers, payload);
    }

   private:
    Simulation& sim_;
    Direction direction_;
  };

  struct TimerSlot {
    uint64_t generation = 0;
    Instant scheduled = core::kNever;
  };

  // What posting and completing a message touch comes first, in one cache line: with thousands
  // of connections a connection's state is cold when its turn comes, and every pointer followed
  // from it (a buffer object, a vector of slots) was one more miss per message.
  struct alignas(64) ConnectionState {
    core::Connection* requester = nullptr;
    std::byte* source = nullptr;       // A's registered region (source_buffer's), its MR's addr
    std::byte* destination = nullptr;  // B's registered region (destination_buffer's)
    uint64_t total_messages = 0;
    uint64_t next_local_index = 0;
    uint32_t outstanding = 0;
    uint32_t source_lkey = 0;
    uint32_t destination_rkey = 0;
    bool stopped = false;  // PostSend refused: no more posts on this connection
    bool wants_post = false;  // a completion freed a slot: listed in to_post_

    core::Connection* responder = nullptr;
    std::unique_ptr<GuardedBuffer> source_buffer;       // on A
    std::unique_ptr<GuardedBuffer> destination_buffer;  // on B
    core::MemoryRegion destination_mr;
    // Responder receives: wr_id = (c << 32) | index; index n matches the n-th message.
    std::vector<uint32_t> receive_slot;  // by receive index
    std::vector<bool> receive_done;
  };

  struct MessageState {
    bool posted = false;
    bool requester_done = false;
    bool succeeded = false;
    bool receive_done = false;
    uint32_t slot = 0;
    Instant posted_at;
  };

  uint32_t ConnOf(uint64_t k) const { return static_cast<uint32_t>(k % config_.connections); }
  uint64_t LocalIndexOf(uint64_t k) const { return k / config_.connections; }
  uint64_t MessageIndex(uint32_t conn, uint64_t local) const {
    return local * config_.connections + conn;
  }
  uint32_t ImmFor(uint64_t k) const {
    return static_cast<uint32_t>(DeriveSeed(config_.seed, kImmStream, k));
  }
  core::Endpoint& EndpointOf(Host h) { return h == Host::kA ? *endpoint_a_ : *endpoint_b_; }

  void DataError(std::string_view kind) {
    ++result_.data_errors;
    ++result_.data_errors_by_kind[std::string(kind)];
  }
  void AddToBin(std::vector<uint64_t>& bins, Instant at, uint64_t bytes) {
    const size_t index = static_cast<size_t>(at.ns / bin_ns_);
    if (bins.size() <= index) bins.resize(index + 1, 0);
    bins[index] += bytes;
  }

  // Event handlers.
  void OnTransmit(Direction direction, const core::TxMeta& meta,
                  std::span<const std::byte> headers, std::span<const std::byte> payload);
  void OnArrival(Datagram& datagram);
  void OnTimerEvent(Host host, uint64_t generation);
  void PostInitialReceives();
  void StartWorkload();
  // After anything that entered an endpoint: collect completions and path events, post more
  // work, and re-arm the endpoint's timer.
  void AfterHostEvent(Host host, bool timer_did_not_advance = false);
  void RescheduleTimer(Host host, bool timer_did_not_advance);

  void PostMoreMessages(uint32_t conn);
  void PostReceive(uint32_t conn, uint32_t slot);
  void OnRequesterCompletion(const core::Completion& wc);
  void OnReceiveCompletion(const core::Completion& wc);
  void CollectPathEvents(Host host, core::Connection& connection);
  bool WorkloadDone() const;
  // Steps: the first message index not yet allowed to be posted.
  uint64_t PostLimit() const {
    return config_.steps == 0 ? total_messages_
                              : std::min(total_messages_, (current_step_ + 1) * config_.messages);
  }
  // Steps: ends the current step if every message of it is resolved, then starts the next.
  void MaybeEndStep();
  void TakeSample();

  ScenarioConfig config_;
  EventQueue queue_;
  Fabric fabric_;
  Port port_a_;
  Port port_b_;
  // Declared before the endpoints so that the connections go before the memory they reference.
  std::vector<ConnectionState> conns_;
  std::unique_ptr<core::Endpoint> endpoint_a_;
  std::unique_ptr<core::Endpoint> endpoint_b_;
  std::array<TimerSlot, 2> timers_;
  std::vector<MessageState> messages_;
  std::vector<uint64_t> slot_owner_;  // A: [c * depth + slot] message in the slot, or kNoMessage
  uint64_t total_messages_ = 0;
  int64_t bin_ns_ = 1;
  // Steps.
  uint64_t current_step_ = 0;
  uint64_t step_scan_ = 0;      // messages of the step below this are resolved
  bool step_refused_ = false;   // ... and one of them was never posted (its connection stopped)
  Instant step_started_;
  bool step_failed_ = false;
  // AfterHostEvent's scratch, kept: built per event, the arrays alone were 2.4 KiB of stores.
  std::vector<core::Connection*> ready_;
  std::array<core::Completion, 64> completions_;
  std::array<core::PathEvent, 16> path_events_;
  std::vector<uint32_t> to_post_;         // connections with a slot freed since the last post
  std::vector<int64_t> step_ns_;

  uint64_t outstanding_total_ = 0;
  uint64_t posting_conns_ = 0;  // connections neither stopped nor done posting their messages
  uint64_t core_heap_bytes_ = 0;  // taken by CreateConnection, both hosts
  uint64_t succeeded_awaiting_receive_ = 0;
  Instant last_completion_;
  Instant last_post_;
  std::vector<int64_t> latencies_ns_;
  std::vector<uint64_t> delivered_bins_;
  std::vector<uint64_t> completed_bins_;
  // Data identities (dest_conn, msg_seq, offset) sent by A and received by B.
  absl::flat_hash_set<std::tuple<uint32_t, uint32_t, uint32_t>> sent_identities_;
  absl::flat_hash_set<std::tuple<uint32_t, uint32_t, uint32_t>> delivered_identities_;
  ScenarioResult result_;
};

std::vector<PhysicalPathConfig> BuildFabricConfig(const ScenarioConfig& c) {
  std::vector<PhysicalPathConfig> paths(c.physical_paths);
  for (uint16_t p = 0; p < c.physical_paths; ++p) {
    for (int dir = 0; dir < 2; ++dir) {
      LinkConfig& link = dir == 0 ? paths[p].a_to_b : paths[p].b_to_a;
      link.rate_gbps = c.PathRateGbps(p);
      link.delay = c.delay;
      link.queue_bytes = c.queue_bytes;
      link.ecn_threshold_bytes = c.ecn_threshold_bytes;
      link.loss_probability = c.PathLossProbability(p, dir == 1);
      link.seed = DeriveSeed(c.seed, kLinkLossStream, p, dir);
      link.ce_seed = DeriveSeed(c.seed, kCeMarkStream, p, dir);
      for (const Blackhole& b : c.blackholes) {
        if (b.path == p) link.blackholes.push_back(b.window);
      }
      if (dir == 0) {
        for (const CeMarking& m : c.ce_marks) {
          if (m.path != p) continue;
          link.ce_injections.push_back(
              {m.probability, m.window.value_or(TimeWindow{Instant{0}, core::kNever})});
        }
      }
    }
  }
  return paths;
}

Simulation::Simulation(const ScenarioConfig& config)
    : config_(config),
      fabric_(BuildFabricConfig(config), queue_, [this](Datagram& d) { OnArrival(d); }),
      port_a_(*this, Direction::kAToB),
      port_b_(*this, Direction::kBToA),
      endpoint_a_(std::make_unique<core::Endpoint>(port_a_, config.HostBudget())),
      endpoint_b_(std::make_unique<core::Endpoint>(port_b_, config.HostBudget())) {
  result_.config = config;
  total_messages_ = config.TotalMessages();
  bin_ns_ = std::max<int64_t>(1, config.EffectiveBin().count());
}

absl::Status Simulation::Setup() {
  const uint16_t logical_paths = config_.EffectiveLogicalPaths();
  const uint32_t port_base = AlignedPortBase(config_.physical_paths);
  const uint32_t port_span = PortSpan(config_.physical_paths);
  const uint64_t slot_bytes = config_.message_bytes;
  conns_.resize(config_.connections);
  messages_.resize(total_messages_);
  slot_owner_.assign(uint64_t{config_.connections} * config_.depth, kNoMessage);

  for (uint32_t c = 0; c < config_.connections; ++c) {
    ConnectionState& cs = conns_[c];
    core::ConnectionConfig base;
    base.local_conn_id = c + 1;
    base.remote_conn_id = c + 1;
    base.path_count = logical_paths;
    for (uint16_t i = 0; i < logical_paths; ++i) {
      base.initial_ports.push_back(static_cast<uint16_t>(
          port_base + (uint64_t{c} * logical_paths + i) % port_span));
    }
    base.profile = ProfileOf(config_.transport, config_.reorder_buffer_kb);
    base.mtu = config_.mtu;
    base.ordered_completion = config_.ordered_completion;
    base.ack_every = config_.ack_every;
    base.max_send_queue = std::max<uint32_t>(base.max_send_queue, config_.depth);
    base.max_recv_queue = std::max<uint32_t>(base.max_recv_queue, config_.depth);

    core::ConnectionConfig on_a = base;
    on_a.tx_token = DeriveSeed(config_.seed, kTokenStream, c, 0);
    on_a.rx_token = DeriveSeed(config_.seed, kTokenStream, c, 1);
    on_a.seed = DeriveSeed(config_.seed, kConnectionSeedStream, c, 0);
    core::ConnectionConfig on_b = base;
    on_b.tx_token = on_a.rx_token;
    on_b.rx_token = on_a.tx_token;
    on_b.seed = DeriveSeed(config_.seed, kConnectionSeedStream, c, 1);

    // What the set-up exchange does: each side offers the other its share of its receive budget
    // as the new connection's initial window_hint, answering the whole burst of set-up requests
    // (every connection of the run) together (receive_budget.h).
    const uint64_t arriving = config_.connections - c;
    on_a.initial_window_hint_bytes = endpoint_b_->receive_budget().InitialOffer(arriving);
    on_b.initial_window_hint_bytes = endpoint_a_->receive_budget().InitialOffer(arriving);

    const size_t heap_before = config_.measure ? HeapInUseBytes() : 0;
    auto requester = endpoint_a_->CreateConnection(on_a);
    if (!requester.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("core refused the requester connection config: ",
                       requester.status().message()));
    }
    auto responder = endpoint_b_->CreateConnection(on_b);
    if (!responder.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("core refused the responder connection config: ",
                       responder.status().message()));
    }
    cs.requester = *requester;
    cs.responder = *responder;
    if (config_.measure) core_heap_bytes_ += HeapInUseBytes() - heap_before;

    cs.source_buffer = std::make_unique<GuardedBuffer>(config_.depth * slot_bytes);
    cs.destination_buffer = std::make_unique<GuardedBuffer>(config_.depth * slot_bytes);
    cs.source = cs.source_buffer->region();
    cs.destination = cs.destination_buffer->region();
    auto source_mr = endpoint_a_->memory().Register(cs.source, cs.source_buffer->region_bytes(), 0);
    if (!source_mr.ok()) return source_mr.status();
    auto destination_mr = endpoint_b_->memory().Register(
        cs.destination, cs.destination_buffer->region_bytes(),
        core::access::kLocalWrite | core::access::kRemoteWrite);
    if (!destination_mr.ok()) return destination_mr.status();
    // Work requests name the regions by their pointers (the core's virtual addresses).
    if (source_mr->addr != reinterpret_cast<uint64_t>(cs.source) ||
        destination_mr->addr != reinterpret_cast<uint64_t>(cs.destination)) {
      return absl::InternalError("a registered region's address is not its pointer");
    }
    cs.source_lkey = source_mr->lkey;
    cs.destination_rkey = destination_mr->rkey;
    cs.destination_mr = *destination_mr;
    cs.total_messages =
        c < total_messages_ ? (total_messages_ - c + config_.connections - 1) / config_.connections
                            : 0;
    if (cs.total_messages > 0) ++posting_conns_;
  }

  if (config_.UsesReceives()) {
    queue_.Schedule(Instant{0} + config_.recv_delay, [this] { PostInitialReceives(); });
  }
  queue_.Schedule(Instant{0}, [this] { StartWorkload(); });
  if (config_.sample_interval.count() > 0) {
    const uint16_t n = conns_.empty() ? 0 : logical_paths;
    result_.path_samples.paths.resize(n);
    for (uint16_t i = 0; i < n; ++i) result_.path_samples.paths[i].path = i;
    queue_.Schedule(Instant{0}, [this] { TakeSample(); });
  }
  return absl::OkStatus();
}

void Simulation::StartWorkload() {
  for (uint32_t c = 0; c < conns_.size(); ++c) PostMoreMessages(c);
  AfterHostEvent(Host::kA);
}

void Simulation::PostInitialReceives() {
  for (uint32_t c = 0; c < conns_.size(); ++c) {
    const uint64_t initial = std::min<uint64_t>(config_.depth, conns_[c].total_messages);
    for (uint32_t slot = 0; slot < initial; ++slot) PostReceive(c, slot);
  }
  AfterHostEvent(Host::kB);
}

void Simulation::PostMoreMessages(uint32_t c) {
  ConnectionState& cs = conns_[c];
  while (!cs.stopped && cs.outstanding < config_.depth &&
         cs.next_local_index < cs.total_messages &&
         MessageIndex(c, cs.next_local_index) < PostLimit()) {
    uint64_t* const owner = &slot_owner_[uint64_t{c} * config_.depth];
    const uint32_t slot =
        static_cast<uint32_t>(std::find(owner, owner + config_.depth, kNoMessage) - owner);
    const uint64_t local = cs.next_local_index;
    const uint64_t k = MessageIndex(c, local);
    const uint64_t offset = uint64_t{slot} * config_.message_bytes;
    FillPattern(config_.seed, c, local,
                std::span<std::byte>(cs.source + offset, config_.message_bytes));

    core::SendWorkRequest wr;
    wr.wr_id = k;
    wr.flags = core::send_flags::kSignaled;
    wr.local = core::Sge{reinterpret_cast<uint64_t>(cs.source) + offset, config_.message_bytes,
                         cs.source_lkey};
    switch (config_.op) {
      case Operation::kWrite: wr.opcode = core::WrOpcode::kWrite; break;
      case Operation::kWriteImm: wr.opcode = core::WrOpcode::kWriteWithImm; break;
      case Operation::kSend: wr.opcode = core::WrOpcode::kSend; break;
    }
    if (config_.op != Operation::kSend) {
      wr.remote_addr = reinterpret_cast<uint64_t>(cs.destination) + offset;
      wr.rkey = cs.destination_rkey;
    }
    if (config_.op == Operation::kWriteImm) wr.imm = ImmFor(k);

    const absl::Status posted = cs.requester->PostSend(queue_.now(), wr);
    if (!posted.ok()) {
      ++result_.post_refusals;
      if (result_.first_post_refusal.empty()) {
        result_.first_post_refusal = std::string(posted.message());
      }
      cs.stopped = true;
      --posting_conns_;
      return;
    }
    MessageState& m = messages_[k];
    m.posted = true;
    m.slot = slot;
    m.posted_at = queue_.now();
    owner[slot] = k;
    if (++cs.next_local_index == cs.total_messages) --posting_conns_;
    ++cs.outstanding;
    ++outstanding_total_;
    ++result_.messages_posted;
    last_post_ = queue_.now();
  }
}

void Simulation::PostReceive(uint32_t c, uint32_t slot) {
  ConnectionState& cs = conns_[c];
  const uint64_t index = cs.receive_slot.size();
  core::RecvWorkRequest wr;
  wr.wr_id = (uint64_t{c} << 32) | index;
  const uint64_t offset = uint64_t{slot} * config_.message_bytes;
  wr.local = core::Sge{cs.destination_mr.addr + offset, config_.message_bytes,
                       cs.destination_mr.lkey};
  if (!cs.responder->PostRecv(queue_.now(), wr).ok()) return;  // connection in error
  cs.receive_slot.push_back(slot);
  cs.receive_done.push_back(false);
}

void Simulation::OnTransmit(Direction direction, const core::TxMeta& meta,
                            std::span<const std::byte> headers,
                            std::span<const std::byte> payload) {
  std::vector<std::byte> bytes = fabric_.TakeBuffer();
  bytes.reserve(headers.size() + payload.size());
  bytes.insert(bytes.end(), headers.begin(), headers.end());
  bytes.insert(bytes.end(), payload.begin(), payload.end());

  const wire::ParseResult parsed = wire::Parse(bytes);
  const bool is_data = parsed.ok() && wire::IsData(parsed.packet.opcode);
  if (is_data) {
    ++result_.data_packets_sent;
    const auto identity = std::make_tuple(parsed.packet.dest_conn, parsed.packet.data.msg_seq,
                                          parsed.packet.data.offset);
    const bool flagged = parsed.packet.flags & wire::flags::kRetransmit;
    const bool resent = !sent_identities_.insert(identity).second;
    if (flagged) ++result_.retransmits;
    if (resent) {
      ++result_.resent_data_packets;
      if (!flagged) ++result_.unflagged_resends;
      if (delivered_identities_.contains(identity)) ++result_.spurious_retransmits;
    } else if (flagged) {
      ++result_.flagged_first_sends;
    }
  }
  const Fabric::SendResult sent = fabric_.Send(direction, meta, std::move(bytes));
  switch (sent.transmission.drop) {
    case DropCause::kNone: return;
    case DropCause::kRandomLoss: ++result_.lost_random; break;
    case DropCause::kTailDrop: ++result_.lost_tail_drop; break;
    case DropCause::kBlackhole: ++result_.lost_blackhole; break;
  }
  ++result_.packets_lost;
  if (is_data) ++result_.data_packets_lost;
}

void Simulation::OnArrival(Datagram& datagram) {
  if (config_.on_arrival) config_.on_arrival(datagram);
  const Host host = datagram.direction == Direction::kAToB ? Host::kB : Host::kA;
  core::Endpoint& endpoint = EndpointOf(host);
  if (host == Host::kA) {
    endpoint.OnDatagram(queue_.now(), datagram.bytes, datagram.meta);
    AfterHostEvent(host);
    return;
  }
  // At B, a data packet counts as received when the core accepted it (its connection's rcvd_pkts
  // advanced): a packet refused for lack of a receive (RNR) or for arriving out of order
  // (go-back-N) has reached the host but B does not have its data.
  const wire::ParseResult parsed = wire::Parse(datagram.bytes);
  const bool is_data = parsed.ok() && wire::IsData(parsed.packet.opcode);
  core::Connection* connection = is_data ? endpoint.Find(parsed.packet.dest_conn) : nullptr;
  const uint64_t accepted_before = connection ? connection->counters().rcvd_pkts : 0;
  endpoint.OnDatagram(queue_.now(), datagram.bytes, datagram.meta);
  if (connection != nullptr && connection->counters().rcvd_pkts > accepted_before &&
      delivered_identities_
          .insert(std::make_tuple(parsed.packet.dest_conn, parsed.packet.data.msg_seq,
                                  parsed.packet.data.offset))
          .second) {
    AddToBin(delivered_bins_, queue_.now(), parsed.packet.payload.size());
  }
  AfterHostEvent(host);
}

void Simulation::OnTimerEvent(Host host, uint64_t generation) {
  TimerSlot& slot = timers_[static_cast<size_t>(host)];
  if (generation != slot.generation) return;  // superseded
  slot.scheduled = core::kNever;
  core::Endpoint& endpoint = EndpointOf(host);
  endpoint.OnTimer(queue_.now());
  AfterHostEvent(host, endpoint.NextDeadline() <= queue_.now());
}

void Simulation::AfterHostEvent(Host host, bool timer_did_not_advance) {
  core::Endpoint& endpoint = EndpointOf(host);
  // Only connections that announced output are polled, and only those whose completions freed a
  // slot post more: the cost of an event does not grow with the connections (issue 12).
  do {
    ready_.clear();
    endpoint.TakeReady(&ready_);
    for (core::Connection* connection : ready_) {
      size_t n;
      while ((n = connection->PollCompletions(completions_)) > 0) {
        for (size_t i = 0; i < n; ++i) {
          if (host == Host::kA) {
            OnRequesterCompletion(completions_[i]);
          } else {
            OnReceiveCompletion(completions_[i]);
          }
        }
      }
      CollectPathEvents(host, *connection);
    }
    if (host == Host::kA) {
      for (size_t i = 0; i < to_post_.size(); ++i) {  // PostMoreMessages may not add to it
        conns_[to_post_[i]].wants_post = false;
        PostMoreMessages(to_post_[i]);
      }
      to_post_.clear();
      if (config_.steps > 0) MaybeEndStep();
    }
  } while (!ready_.empty());
  RescheduleTimer(host, timer_did_not_advance);
  if (host == Host::kB && config_.steps > 0 && config_.UsesReceives()) {
    // A receive completion at B may be what ends a step: the next step posts at A.
    const uint64_t step = current_step_;
    MaybeEndStep();
    if (current_step_ != step) AfterHostEvent(Host::kA);
  }
}

void Simulation::RescheduleTimer(Host host, bool timer_did_not_advance) {
  TimerSlot& slot = timers_[static_cast<size_t>(host)];
  const Instant now = queue_.now();
  Instant deadline = EndpointOf(host).NextDeadline();
  if (timer_did_not_advance) {
    // OnTimer(now) left a deadline at or before now: the core would spin at one instant. Count
    // the contract breach and move on by a nanosecond so that the run still ends.
    ++result_.timer_deadline_not_advanced;
    deadline = std::max(deadline, now + Duration(1));
  }
  if (deadline == core::kNever) {
    if (slot.scheduled != core::kNever) {
      ++slot.generation;
      slot.scheduled = core::kNever;
    }
    return;
  }
  deadline = std::max(deadline, now);
  if (deadline == slot.scheduled) return;
  ++slot.generation;
  slot.scheduled = deadline;
  queue_.Schedule(deadline, [this, host, g = slot.generation] { OnTimerEvent(host, g); });
}

void Simulation::OnRequesterCompletion(const core::Completion& wc) {
  const uint64_t k = wc.wr_id;
  if (k >= messages_.size() || !messages_[k].posted) {
    DataError("unknown_completion");
    return;
  }
  MessageState& m = messages_[k];
  if (m.requester_done) {
    DataError("duplicate_completion");
    return;
  }
  const uint32_t c = ConnOf(k);
  ConnectionState& cs = conns_[c];
  m.requester_done = true;
  --cs.outstanding;
  --outstanding_total_;
  const Instant now = queue_.now();

  if (wc.status == core::WcStatus::kSuccess) {
    m.succeeded = true;
    ++result_.messages_completed;
    latencies_ns_.push_back((now - m.posted_at).count());
    last_completion_ = now;
    AddToBin(completed_bins_, now, config_.message_bytes);
    const core::WcOpcode expected_opcode =
        config_.op == Operation::kSend ? core::WcOpcode::kSend : core::WcOpcode::kRdmaWrite;
    if (wc.opcode != expected_opcode) DataError("wrong_completion_opcode");
    if (config_.op != Operation::kSend) {
      // RC: every byte was placed before the requester saw the acknowledgement.
      const std::span<const std::byte> placed(
          cs.destination + uint64_t{m.slot} * config_.message_bytes,
          config_.message_bytes);
      if (!MatchesPattern(config_.seed, c, LocalIndexOf(k), placed)) {
        DataError("write_data_mismatch");
      }
    }
    if (config_.UsesReceives() && !m.receive_done) ++succeeded_awaiting_receive_;
  } else {
    ++result_.messages_failed;
    ++result_.failed_by_status[std::string(core::StatusName(wc.status))];
    step_failed_ = true;
  }
  slot_owner_[uint64_t{c} * config_.depth + m.slot] = kNoMessage;
  if (!cs.wants_post) {
    cs.wants_post = true;
    to_post_.push_back(c);
  }
}

void Simulation::OnReceiveCompletion(const core::Completion& wc) {
  const uint32_t c = static_cast<uint32_t>(wc.wr_id >> 32);
  const uint64_t index = wc.wr_id & 0xffffffffu;
  if (c >= conns_.size() || index >= conns_[c].receive_slot.size()) {
    DataError("unknown_receive_completion");
    return;
  }
  ConnectionState& cs = conns_[c];
  if (cs.receive_done[index]) {
    DataError("duplicate_receive_completion");
    return;
  }
  cs.receive_done[index] = true;
  const uint32_t slot = cs.receive_slot[index];

  if (wc.status != core::WcStatus::kSuccess) {
    ++result_.receives_failed;
  } else {
    ++result_.receives_completed;
    // Receive n matches the n-th message of this connection (every message consumes a receive).
    const uint64_t k = MessageIndex(c, index);
    if (k >= messages_.size() || !messages_[k].posted) {
      DataError("receive_without_message");
    } else {
      MessageState& m = messages_[k];
      if (m.receive_done) DataError("duplicate_receive_for_message");
      m.receive_done = true;
      if (m.requester_done && m.succeeded) --succeeded_awaiting_receive_;
      if (wc.byte_len != config_.message_bytes) DataError("receive_length_mismatch");
      if (config_.op == Operation::kSend) {
        if (wc.opcode != core::WcOpcode::kRecv || wc.has_imm) DataError("wrong_receive_opcode");
        const std::span<const std::byte> placed(
            cs.destination + uint64_t{slot} * config_.message_bytes,
            config_.message_bytes);
        if (!MatchesPattern(config_.seed, c, index, placed)) DataError("send_data_mismatch");
      } else {
        if (wc.opcode != core::WcOpcode::kRecvRdmaWithImm) DataError("wrong_receive_opcode");
        if (!wc.has_imm || wc.imm != ImmFor(k)) DataError("receive_imm_mismatch");
        // Once A has completed k its slot may already hold a later message; A checked it then.
        if (!m.requester_done) {
          const std::span<const std::byte> placed(
              cs.destination + uint64_t{m.slot} * config_.message_bytes,
              config_.message_bytes);
          if (!MatchesPattern(config_.seed, c, index, placed)) {
            DataError("write_imm_data_mismatch");
          }
        }
      }
    }
  }
  if (cs.receive_slot.size() < cs.total_messages) PostReceive(c, slot);
}

void Simulation::CollectPathEvents(Host host, core::Connection& connection) {
  size_t n;
  while ((n = connection.PollEvents(path_events_)) > 0) {
    for (size_t i = 0; i < n; ++i) {
      const core::PathEvent& e = path_events_[i];
      if (e.kind == core::PathEvent::Kind::kPortRotated) {
        ++result_.port_rotations;
      } else {
        ++result_.path_state_changes;
        if (e.to == core::PathState::kFailed) ++result_.paths_failed;
      }
      ++result_.path_events_by_reason[std::string(core::PathEventReasonName(e.reason))];
      if (result_.first_path_events.size() < config_.max_path_events) {
        result_.first_path_events.push_back({host == Host::kA ? 'A' : 'B', e});
      }
    }
  }
}

void Simulation::MaybeEndStep() {
  // Posting happens only from AfterHostEvent on A, which calls this after posting; B's receive
  // completions (send/write_imm) are collected at B's events, so a step may end there too.
  // The scan resumes where the previous call stopped (a resolved message stays resolved), so
  // over a step it costs O(messages of the step) in all, not per event.
  while (current_step_ * config_.messages < total_messages_) {
    const uint64_t end = PostLimit();
    for (; step_scan_ < end; ++step_scan_) {
      const MessageState& m = messages_[step_scan_];
      if (m.requester_done) {
        if (m.succeeded && config_.UsesReceives() && !m.receive_done) return;
        continue;
      }
      // Never posted on a connection that stopped: it never will be (the step did not do it).
      if (!m.posted && conns_[ConnOf(step_scan_)].stopped) {
        step_refused_ = true;
        continue;
      }
      return;
    }
    if (step_refused_) step_failed_ = true;
    step_refused_ = false;
    const Instant now = queue_.now();
    step_ns_.push_back((now - step_started_).count());
    if (step_failed_) ++result_.steps.with_failures;
    step_failed_ = false;
    ++current_step_;
    step_started_ = now;
    for (uint32_t c = 0; c < conns_.size(); ++c) PostMoreMessages(c);
  }
}

void Simulation::TakeSample() {
  const Instant now = queue_.now();
  PathSamples& ps = result_.path_samples;
  ps.t_us.push_back(static_cast<double>(now.ns) / 1000.0);
  const core::Connection& conn = *conns_.front().requester;
  for (PathSamples::Series& series : ps.paths) {
    const core::PathStats st = conn.path_stats(series.path);
    series.physical.push_back(fabric_.PhysicalPathFor(st.src_port, wire::kDefaultUdpPort));
    series.state.emplace_back(core::PathStateName(st.state));
    series.srtt_us.push_back(static_cast<double>(st.srtt.count()) / 1000.0);
    series.min_rtt_us.push_back(static_cast<double>(st.min_rtt.count()) / 1000.0);
    series.ecn_alpha.push_back(st.ecn_fraction);
    series.cwnd_kb.push_back(st.cwnd_bytes / 1024.0);
    series.inflight_kb.push_back(st.inflight_bytes / 1024.0);
    series.window_hint_kb.push_back(st.window_hint_bytes / 1024.0);
    series.utilization.push_back(st.utilization);
  }
  // Only while something else is pending: samples alone must not keep an idle run alive.
  if (!queue_.empty()) queue_.Schedule(now + config_.sample_interval, [this] { TakeSample(); });
}

bool Simulation::WorkloadDone() const {
  // Checked before every event: counters, not a walk over the connections.
  return outstanding_total_ == 0 && succeeded_awaiting_receive_ == 0 && posting_conns_ == 0;
}

void Simulation::Run() {
  result_.stop_reason = std::string(queue_.RunUntil(
      Instant{0} + config_.duration_cap, config_.max_events, [this] { return WorkloadDone(); }));
}

ScenarioResult Simulation::Finish() {
  ScenarioResult& r = result_;
  const Instant end = queue_.now();
  r.sim_time_us = static_cast<double>(end.ns) / 1000.0;
  r.last_post_us = static_cast<double>(last_post_.ns) / 1000.0;
  r.events = queue_.executed();
  r.core_heap_bytes_per_connection =
      conns_.empty() ? 0 : core_heap_bytes_ / (2 * conns_.size());
  r.messages_not_posted = total_messages_ - r.messages_posted;
  if (config_.steps > 0) {
    StepSummary& st = r.steps;
    st.count = step_ns_.size();
    for (int64_t ns : step_ns_) st.times_us.push_back(static_cast<double>(ns) / 1000.0);
    std::vector<int64_t> sorted = step_ns_;
    std::sort(sorted.begin(), sorted.end());
    st.p50_us = Percentile(sorted, 0.50);
    st.p99_us = Percentile(sorted, 0.99);
    st.max_us = Percentile(sorted, 1.0);
    if (!sorted.empty()) {
      double sum = 0;
      for (int64_t ns : sorted) sum += static_cast<double>(ns);
      st.mean_us = sum / static_cast<double>(sorted.size()) / 1000.0;
    }
  }
  r.messages_outstanding = outstanding_total_;

  for (uint64_t i = 0; i < succeeded_awaiting_receive_; ++i) DataError("missing_receive_completion");
  for (const ConnectionState& cs : conns_) {
    for (int i = 0; i < cs.source_buffer->CorruptedGuards(); ++i) DataError("guard_corrupted");
    for (int i = 0; i < cs.destination_buffer->CorruptedGuards(); ++i) {
      DataError("guard_corrupted");
    }
    core::AccumulateCounters(r.requester_counters, cs.requester->counters());
    core::AccumulateCounters(r.responder_counters, cs.responder->counters());
  }
  for (const core::Endpoint* ep : {endpoint_a_.get(), endpoint_b_.get()}) {
    r.malformed_datagrams += ep->counters().malformed;
    r.unknown_connection_datagrams += ep->counters().unknown_connection;
  }

  // Throughput and capacity.
  const double data_packet_wire_bytes =
      static_cast<double>(WireBytes(config_.mtu + wire::kDataHeadersSize));
  for (uint16_t p = 0; p < config_.physical_paths; ++p) {
    PathReport path;
    path.path = p;
    path.rate_gbps = config_.PathRateGbps(p);
    path.a_to_b = fabric_.link(p, Direction::kAToB).counters();
    path.b_to_a = fabric_.link(p, Direction::kBToA).counters();
    if (end.ns > 0) {
      const double end_ps = static_cast<double>(end.ns) * 1000.0;
      path.utilization_a_to_b = static_cast<double>(path.a_to_b.busy_ps) / end_ps;
      path.utilization_b_to_a = static_cast<double>(path.b_to_a.busy_ps) / end_ps;
    }
    r.capacity_gbps += path.rate_gbps;
    r.paths.push_back(path);
  }
  r.payload_capacity_gbps = r.capacity_gbps * config_.mtu / data_packet_wire_bytes;
  if (last_completion_.ns > 0) {
    r.goodput_gbps = static_cast<double>(r.messages_completed) * config_.message_bytes * 8.0 /
                     static_cast<double>(last_completion_.ns);
  }
  std::sort(latencies_ns_.begin(), latencies_ns_.end());
  r.completion_us = {Percentile(latencies_ns_, 0.50), Percentile(latencies_ns_, 0.99),
                     Percentile(latencies_ns_, 1.0)};

  // Timelines.
  const size_t bins = static_cast<size_t>((end.ns + bin_ns_ - 1) / bin_ns_);
  delivered_bins_.resize(std::max(bins, delivered_bins_.size()), 0);
  completed_bins_.resize(std::max(bins, completed_bins_.size()), 0);
  const double bin_ns = static_cast<double>(bin_ns_);
  for (uint64_t bytes : delivered_bins_) r.delivered_gbps.push_back(bytes * 8.0 / bin_ns);
  for (uint64_t bytes : completed_bins_) r.completed_gbps.push_back(bytes * 8.0 / bin_ns);
  r.base_rtt_us = static_cast<double>(config_.BaseRtt().count()) / 1000.0;

  if (!config_.blackholes.empty()) {
    const Blackhole* first = &config_.blackholes.front();
    for (const Blackhole& b : config_.blackholes) {
      if (b.window.begin < first->window.begin) first = &b;
    }
    const double threshold =
        kRecoveryFraction * (r.capacity_gbps - config_.PathRateGbps(first->path));
    const int64_t from = first->window.begin.ns;
    const int64_t until = std::min(first->window.end.ns, last_post_.ns);
    // Bins wholly inside [from, until): the pipe should be full while work remains to be posted.
    const size_t first_bin = static_cast<size_t>((from + bin_ns_ - 1) / bin_ns_);
    const size_t end_bin = static_cast<size_t>(std::max<int64_t>(until, 0) / bin_ns_);
    if (first_bin < end_bin && end_bin <= r.delivered_gbps.size()) {
      std::optional<size_t> last_low;
      for (size_t b = first_bin; b < end_bin; ++b) {
        if (r.delivered_gbps[b] < threshold) last_low = b;
      }
      if (!last_low) {
        r.recovery_us = 0;
      } else if (*last_low + 1 < end_bin) {
        r.recovery_us = static_cast<double>((*last_low + 1) * bin_ns_ - from) / 1000.0;
      }
    }
  }
  return std::move(result_);
}

}  // namespace

absl::Status ScenarioConfig::Validate() const {
  if (physical_paths < 1 || physical_paths > 1024) {
    return absl::InvalidArgumentError("--paths must be in 1..1024");
  }
  if (!(rate_gbps > 0)) return absl::InvalidArgumentError("--rate-gbps must be > 0");
  for (const SlowPath& s : slow_paths) {
    if (s.path >= physical_paths) return absl::InvalidArgumentError("--slow names a path >= --paths");
    if (!(s.rate_gbps > 0)) return absl::InvalidArgumentError("--slow rate must be > 0");
  }
  if (delay.count() < 0) return absl::InvalidArgumentError("--delay-us must be >= 0");
  if (pull_rate_gbps && !(*pull_rate_gbps >= 0)) {
    return absl::InvalidArgumentError("--pull-rate-gbps must be >= 0");
  }
  if (queue_bytes < WireBytes(mtu + wire::kDataHeadersSize)) {
    return absl::InvalidArgumentError("--queue-kb must hold at least one MTU packet");
  }
  if (!(loss >= 0 && loss < 1)) return absl::InvalidArgumentError("--loss must be in [0, 1)");
  if (ack_loss && !(*ack_loss >= 0 && *ack_loss < 1)) {
    return absl::InvalidArgumentError("--ack-loss must be in [0, 1)");
  }
  for (const PathLoss& l : path_losses) {
    if (l.path >= physical_paths) {
      return absl::InvalidArgumentError("--path-loss names a path >= --paths");
    }
    if (!(l.probability >= 0 && l.probability < 1)) {
      return absl::InvalidArgumentError("--path-loss probability must be in [0, 1)");
    }
  }
  for (const CeMarking& m : ce_marks) {
    if (m.path >= physical_paths) return absl::InvalidArgumentError("--ce-mark names a path >= --paths");
    if (!(m.probability >= 0 && m.probability <= 1)) {
      return absl::InvalidArgumentError("--ce-mark probability must be in [0, 1]");
    }
    if (m.window && !(m.window->begin < m.window->end)) {
      return absl::InvalidArgumentError("--ce-mark window must be T1-T2 with T1 < T2");
    }
  }
  for (const Blackhole& b : blackholes) {
    if (b.path >= physical_paths) {
      return absl::InvalidArgumentError("--blackhole names a path >= --paths");
    }
    if (!(b.window.begin < b.window.end)) {
      return absl::InvalidArgumentError("--blackhole window must be T1-T2 with T1 < T2");
    }
  }
  if (connections < 1) return absl::InvalidArgumentError("--connections must be >= 1");
  if (messages < 1) return absl::InvalidArgumentError("--messages must be >= 1");
  if (message_bytes < 1) return absl::InvalidArgumentError("--size must be >= 1");
  if (depth < 1) return absl::InvalidArgumentError("--depth must be >= 1");
  if (ack_every < 1) return absl::InvalidArgumentError("--ack-every must be >= 1");
  if (mtu < 64 || mtu > 65000) return absl::InvalidArgumentError("--mtu must be in 64..65000");
  if (transport == TransportKind::kReorderBuffer &&
      (reorder_buffer_kb == 0 || uint64_t{reorder_buffer_kb} * 1024 < mtu ||
       reorder_buffer_kb > 4u << 20)) {
    return absl::InvalidArgumentError(
        "--reorder-buffer-kb must hold at least one --mtu and at most 4 GiB");
  }
  if (uint64_t{connections} * depth * message_bytes > kMaxBufferBytes) {
    return absl::InvalidArgumentError(
        "--connections x --depth x --size exceeds 4 GiB of buffers per host; lower one of them");
  }
  if (EffectiveLogicalPaths() > PortSpan(physical_paths)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--paths ", EffectiveLogicalPaths(), " exceeds the ", PortSpan(physical_paths),
        " source ports one connection can use"));
  }
  if (recv_delay.count() < 0) return absl::InvalidArgumentError("--recv-delay-us must be >= 0");
  if (duration_cap.count() <= 0) return absl::InvalidArgumentError("--duration-cap-ms must be > 0");
  if (max_events < 1) return absl::InvalidArgumentError("--max-events must be >= 1");
  if (bin.count() < 0) return absl::InvalidArgumentError("--bin-us must be >= 0");
  if (sample_interval.count() < 0) return absl::InvalidArgumentError("--sample-us must be >= 0");
  if (steps > 0 && messages > UINT64_MAX / steps) {
    return absl::InvalidArgumentError("--steps x --messages is too large");
  }
  if (TotalMessages() > (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError("--steps x --messages exceeds 2^32 messages");
  }
  return absl::OkStatus();
}

uint16_t ScenarioConfig::EffectiveLogicalPaths() const {
  if (transport == TransportKind::kGoBackN) return 1;
  return logical_paths == 0 ? physical_paths : logical_paths;
}

double ScenarioConfig::PullRateGbps() const {
  if (pull_rate_gbps) return *pull_rate_gbps;
  double gbps = 0;
  for (uint16_t p = 0; p < physical_paths; ++p) gbps += PathRateGbps(p);
  return gbps;
}

core::ReceiveBudgetConfig ScenarioConfig::HostBudget() const {
  return SimHostBudget(ReceiveBudgetBytes(), mtu, PullRateGbps());
}

uint64_t ScenarioConfig::ReceiveBudgetBytes() const {
  if (receive_budget_bytes) return *receive_budget_bytes;
  double gbps = 0;
  for (uint16_t p = 0; p < physical_paths; ++p) gbps += PathRateGbps(p);
  return SimDefaultBudgetBytes(gbps, BaseRtt());
}

double ScenarioConfig::PathLossProbability(uint16_t path, bool ack_direction) const {
  double p = ack_direction ? ack_loss.value_or(loss) : loss;
  for (const PathLoss& l : path_losses) {
    if (l.path == path) p = l.probability;
  }
  return p;
}

double ScenarioConfig::PathRateGbps(uint16_t path) const {
  double rate = rate_gbps;
  for (const SlowPath& s : slow_paths) {
    if (s.path == path) rate = s.rate_gbps;
  }
  return rate;
}

Duration ScenarioConfig::BaseRtt() const {
  const double data_ns = static_cast<double>(WireBytes(mtu + wire::kDataHeadersSize)) * 8 / rate_gbps;
  const double ack_ns = static_cast<double>(WireBytes(wire::kAckPacketSize)) * 8 / rate_gbps;
  return 2 * delay + Duration(static_cast<int64_t>(std::ceil(data_ns + ack_ns)));
}

Duration ScenarioConfig::EffectiveBin() const { return bin.count() > 0 ? bin : 2 * BaseRtt(); }

absl::StatusOr<ScenarioResult> RunScenario(const ScenarioConfig& config) {
  if (absl::Status valid = config.Validate(); !valid.ok()) return valid;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Simulation simulation(config);
  if (absl::Status ready = simulation.Setup(); !ready.ok()) return ready;
  const Clock::time_point set_up = Clock::now();
  const double cpu_before = ProcessCpuSeconds();
  simulation.Run();
  const double cpu_ran = ProcessCpuSeconds();
  const Clock::time_point ran = Clock::now();
  ScenarioResult result = simulation.Finish();
  if (config.measure) {
    result.setup_wall_s = std::chrono::duration<double>(set_up - start).count();
    result.run_wall_s = std::chrono::duration<double>(ran - set_up).count();
    result.run_cpu_s = cpu_ran - cpu_before;
  }
  return result;
}

}  // namespace metaroce::sim
