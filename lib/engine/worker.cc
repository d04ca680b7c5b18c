#include "lib/engine/worker.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/core/probes.h"
#include "lib/wire/packet.h"

namespace metaroce::engine {
namespace {

// A wait shorter than this is spun rather than slept: waking a halted vCPU costs ~20 us
// (docs: ENVIRONMENT), so sleeping for less only adds latency.
constexpr core::Duration kMinSleep = std::chrono::microseconds(50);
// Upper bound of one sleep, so that a missed wake-up can never stall a worker for long.
constexpr core::Duration kMaxSleep = std::chrono::milliseconds(100);
// Sleep bound while something waits for the application (a full completion ring): the
// application frees room without waking us.
constexpr core::Duration kPendingSleep = std::chrono::milliseconds(1);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

core::WcStatus RefusalStatus(const absl::Status& s) {
  // The core's refusal codes (sender.cc / receiver.cc Post*): OutOfRange is LOC_LEN_ERR,
  // PermissionDenied LOC_PROT_ERR, InvalidArgument a message too long (LOC_LEN_ERR, as ibverbs),
  // FailedPrecondition a connection in error (flushed).
  switch (s.code()) {
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kInvalidArgument: return core::WcStatus::kLocLenErr;
    case absl::StatusCode::kPermissionDenied: return core::WcStatus::kLocProtErr;
    case absl::StatusCode::kFailedPrecondition: return core::WcStatus::kWrFlushErr;
    default: return core::WcStatus::kGeneralErr;
  }
}

// The core's entry point and the refusal's completion opcode for each kind of work request.
absl::Status Post(core::Connection& c, core::Instant now, const core::RecvWorkRequest& wr) {
  return c.PostRecv(now, wr);
}
absl::Status Post(core::Connection& c, core::Instant now, const core::SendWorkRequest& wr) {
  return c.PostSend(now, wr);
}
core::WcOpcode RefusalOpcode(const core::RecvWorkRequest&) { return core::WcOpcode::kRecv; }
core::WcOpcode RefusalOpcode(const core::SendWorkRequest& wr) {
  return wr.opcode == core::WrOpcode::kSend || wr.opcode == core::WrOpcode::kSendWithImm
             ? core::WcOpcode::kSend
             : core::WcOpcode::kRdmaWrite;
}

}  // namespace

core::Instant MonotonicNow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return core::Instant{int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec};
}

void Worker::ControlQueue::Push(ControlTask task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
  pending_.store(true, std::memory_order_release);
}

std::deque<Worker::ControlTask> Worker::ControlQueue::TakeAll() {
  absl::MutexLock lock(&mu_);
  pending_.store(false, std::memory_order_relaxed);
  std::deque<ControlTask> out;
  out.swap(tasks_);
  return out;
}

absl::StatusOr<std::unique_ptr<Worker>> Worker::Create(
    const WorkerOptions& options, std::vector<std::unique_ptr<io::PacketPort>> ports) {
  if (ports.empty() || ports.size() > 255) {
    return absl::InvalidArgumentError("a worker needs one port per plane (1..255 planes)");
  }
  for (const auto& p : ports) {
    if (p == nullptr) return absl::InvalidArgumentError("port factory returned a null port");
  }
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, "eventfd for the worker's wake-ups");
  return std::unique_ptr<Worker>(new Worker(options, std::move(ports), fd));
}

Worker::Worker(const WorkerOptions& options, std::vector<std::unique_ptr<io::PacketPort>> ports,
               int wake_fd)
    : options_(options),
      ports_(std::move(ports)),
      wake_fd_(wake_fd),
      sink_(*this),
      endpoint_(sink_, options.receive_budget),
      backlog_(ports_.size()),
      unflushed_(ports_.size(), false),
      rx_(std::max<uint32_t>(options.rx_batch, 1)),
      completion_buf_(64),
      observed_events_(options.observed_event_depth) {
  stats_.worker = options.id;
  own_marks_.doorbell = &doorbell_;
}

Worker::~Worker() {
  // Channels may outlive the worker: their pushes no longer mark our doorbells.
  for (auto& [id, oc] : owned_) oc->channel->ClearPostedMark();
  // Connections go before the ports and the sink they reference.
  owned_.clear();
  for (const AttachedDoorbell& d : doorbells_) close(d.socket);
  close(wake_fd_);
}

void Worker::Wire(std::vector<HandoffChannel*> to, std::vector<HandoffChannel*> from,
                  std::vector<Worker*> all) {
  handoff_to_ = std::move(to);
  handoff_from_ = std::move(from);
  all_ = std::move(all);
}

void Worker::Submit(ControlTask task) {
  control_.Push(std::move(task));
  Wake();
}

void Worker::Wake() {
  // Pairs with the fence in Sleep(): either the worker sees our ring/queue write before it
  // sleeps, or we see its doorbell raised and kick the eventfd (doorbell.h).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (doorbell_.sleeping.load(std::memory_order_relaxed) != 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  }
}

void Worker::Run(const std::atomic<bool>& stop) {
  while (!stop.load(std::memory_order_acquire)) {
    if (RunOnce()) {
      idle_loops_ = 0;
      continue;
    }
    if (options_.idle == IdleStrategy::kSpin || ++idle_loops_ < options_.spins_before_sleep) {
      CpuRelax();
      continue;
    }
    Sleep();
  }
  // Control tasks submitted during shutdown still get an answer.
  RunControlTasks();
}

bool Worker::RunOnce() {
  ++stats_.loops;
  size_t work = 0;
  if (control_.pending()) work += RunControlTasks();
  work += DrainBacklogs();
  // ACKs held by earlier receive phases (defer_receive_acks) leave after this iteration's
  // application requests; those this receive phase produces wait for the next iteration.
  const size_t held = held_acks_.size();
  core::Instant now = MonotonicNow();
  // The connections to look at, taken once: a post marked after this is seen next loop.
  CollectActive();
  // Posted receives enter the core before the loop's packets, so that a receive posted before a
  // Send arrived matches it (ibv_post_recv is effective at once).
  work += DrainRings(now, &ConnectionChannel::recvs, &OwnedConnection::recv);
  holding_acks_ = options_.defer_receive_acks;
  work += ReceiveFromPorts(now);
  work += ReceiveHandoffs(now);
  holding_acks_ = false;
  work += DrainRings(now, &ConnectionChannel::sends, &OwnedConnection::send);
  RetireActive();
  if (held > 0) {
    FlushPorts();  // the application's packets go first
    work += ReleaseHeldAcks(held);
  }
  // A loop that found nothing took well under a microsecond: its first reading still serves
  // (an idle poll then reads the clock once).
  if (work > 0) now = MonotonicNow();
  if (endpoint_.NextDeadline() <= now) {
    endpoint_.OnTimer(now);
    ++work;
  }
  DeliverReadyCompletions();
  FlushPorts();
  return work > 0;
}

size_t Worker::RunControlTasks() {
  std::deque<ControlTask> tasks = control_.TakeAll();
  for (ControlTask& t : tasks) t(*this);
  return tasks.size();
}

// ---- transmit ----

void Worker::PortSink::Transmit(const core::TxMeta& meta, std::span<const std::byte> headers,
                                std::span<const std::byte> payload) {
  Worker& w = w_;
  auto it = w.owned_.find(meta.conn_id);
  if (it == w.owned_.end() || meta.plane >= w.ports_.size() ||
      meta.plane >= it->second->route.plane_addresses.size()) {
    ++w.stats_.tx_no_route;
    return;
  }
  io::TxPacket p;
  p.dst = it->second->route.plane_addresses[meta.plane];
  p.src_port = meta.src_port;
  p.dst_port = meta.dst_port;
  p.headers = headers;
  p.payload = payload;
  if (w.holding_acks_ && headers.size() > offsetof(wire::BaseHeader, opcode) &&
      headers[offsetof(wire::BaseHeader, opcode)] == std::byte{uint8_t(wire::Opcode::kAck)}) {
    w.CopyPacket(meta.plane, p, w.held_acks_.emplace_back());
    return;
  }
  w.Emit(meta.plane, p);
}

void Worker::Emit(uint8_t plane, const io::TxPacket& p) {
  // A non-empty backlog goes first: overtaking it would reorder a path, and the core reads a
  // reordered path as loss.
  if (backlog_[plane].empty()) {
    io::PacketPort& port = *ports_[plane];
    for (uint32_t attempt = 0; attempt <= options_.tx_send_retries; ++attempt) {
      if (port.Send(p)) {
        ++stats_.tx_packets;
        unflushed_[plane] = true;
        return;
      }
      port.Flush();
      unflushed_[plane] = false;
    }
  }
  Backlog(plane, p);
}

void Worker::Backlog(uint8_t plane, const io::TxPacket& p) {
  auto& queue = backlog_[plane];
  if (queue.size() >= options_.tx_backlog_limit) {
    MR_PROBE4(worker_drop, options_.id, probe::kDropTxBacklog, plane, queue.size());
    ++stats_.tx_backlog_dropped;
    return;
  }
  ++stats_.tx_backlogged;
  CopyPacket(plane, p, queue.emplace_back());
}

void Worker::CopyPacket(uint8_t plane, const io::TxPacket& p, BacklogPacket& b) {
  if (!spare_buffers_.empty()) {
    b.bytes = std::move(spare_buffers_.back());
    spare_buffers_.pop_back();
  }
  b.bytes.assign(p.headers.begin(), p.headers.end());
  b.bytes.insert(b.bytes.end(), p.payload.begin(), p.payload.end());
  b.header_bytes = p.headers.size();
  b.dst = p.dst;
  b.src_port = p.src_port;
  b.dst_port = p.dst_port;
  b.plane = plane;
}

io::TxPacket Worker::BacklogPacket::View() const {
  io::TxPacket p;
  p.dst = dst;
  p.src_port = src_port;
  p.dst_port = dst_port;
  p.headers = std::span<const std::byte>(bytes.data(), header_bytes);
  p.payload = std::span<const std::byte>(bytes).subspan(header_bytes);
  return p;
}

size_t Worker::ReleaseHeldAcks(size_t count) {
  for (size_t i = 0; i < count; ++i) {
    BacklogPacket& b = held_acks_.front();
    Emit(b.plane, b.View());
    if (spare_buffers_.size() < 256) spare_buffers_.push_back(std::move(b.bytes));
    held_acks_.pop_front();
  }
  return count;
}

size_t Worker::DrainBacklogs() {
  size_t sent = 0;
  for (size_t plane = 0; plane < backlog_.size(); ++plane) {
    auto& queue = backlog_[plane];
    while (!queue.empty()) {
      BacklogPacket& b = queue.front();
      if (!ports_[plane]->Send(b.View())) {
        ports_[plane]->Flush();
        unflushed_[plane] = false;
        break;
      }
      ++stats_.tx_packets;
      unflushed_[plane] = true;
      if (spare_buffers_.size() < 256) spare_buffers_.push_back(std::move(b.bytes));
      queue.pop_front();
      ++sent;
    }
  }
  return sent;
}

void Worker::FlushPorts() {
  for (size_t plane = 0; plane < ports_.size(); ++plane) {
    if (unflushed_[plane]) {
      ports_[plane]->Flush();
      unflushed_[plane] = false;
    }
  }
}

// ---- receive ----

void Worker::Dispatch(core::Instant now, std::span<const std::byte> datagram,
                      const core::RxMeta& meta) {
  const int workers = options_.workers;
  if (workers > 1 && datagram.size() >= 8) {
    // BaseHeader.dest_conn (lib/wire/packet.h, offset 4) names the owner; the full parse and
    // every check happen in the owner's Endpoint.
    uint32_t be = 0;
    std::memcpy(&be, datagram.data() + 4, sizeof(be));
    const int owner = static_cast<int>(__builtin_bswap32(be) % static_cast<uint32_t>(workers));
    if (owner != options_.id) {
      switch (handoff_to_[owner]->TryPush(datagram, meta)) {
        case HandoffChannel::PushResult::kQueued:
          ++stats_.handoff_sent;
          all_[owner]->Wake();
          break;
        case HandoffChannel::PushResult::kNoSlot:
          MR_PROBE4(worker_drop, options_.id, probe::kDropHandoffNoSlot, owner, datagram.size());
          ++stats_.handoff_dropped;
          break;
        case HandoffChannel::PushResult::kTooLarge:
          MR_PROBE4(worker_drop, options_.id, probe::kDropHandoffTooLarge, owner,
                    datagram.size());
          ++stats_.handoff_too_large;
          break;
      }
      return;
    }
  }
  endpoint_.OnDatagram(now, datagram, meta);
}

size_t Worker::ReceiveFromPorts(core::Instant now) {
  size_t total = 0;
  for (size_t plane = 0; plane < ports_.size(); ++plane) {
    io::PacketPort& port = *ports_[plane];
    const size_t n = port.Receive(std::span<io::RxPacket>(rx_));
    for (size_t i = 0; i < n; ++i) {
      const io::RxPacket& r = rx_[i];
      core::RxMeta meta{r.src_port, r.dst_port, static_cast<uint8_t>(plane), r.ce};
      Dispatch(now, r.payload, meta);
    }
    if (n > 0) port.Release(std::span<const io::RxPacket>(rx_.data(), n));
    stats_.rx_packets += n;
    total += n;
  }
  return total;
}

size_t Worker::ReceiveHandoffs(core::Instant now) {
  size_t total = 0;
  for (HandoffChannel* ch : handoff_from_) {
    if (ch == nullptr) continue;
    total += ch->Drain(options_.rx_batch, [&](std::span<const std::byte> d, const core::RxMeta& m) {
      endpoint_.OnDatagram(now, d, m);
    });
  }
  stats_.handoff_received += total;
  return total;
}

// ---- application rings ----

bool Worker::PushCompletion(OwnedConnection& oc, const core::Completion& c) {
  const bool recv = c.opcode == core::WcOpcode::kRecv ||
                    c.opcode == core::WcOpcode::kRecvRdmaWithImm;
  CompletionChannel& cq = recv ? oc.channel->recv_cq() : oc.channel->send_cq();
  if (!cq.ring(options_.id).TryPush(c)) return false;
  ++stats_.completions;
  return true;
}

void Worker::CollectActive() {
  active_.swap(retry_);  // already queued
  retry_awake_ = retry_app_ = 0;
  auto take = [this](MarkTable& table) {
    // The slot comes from shared memory: it is in [0, kPostedSlots) (TakePosted), and names a
    // connection only if this worker gave it one in this doorbell.
    table.doorbell->TakePosted([this, &table](uint32_t slot) {
      if (slot >= table.by_slot.size()) return;
      OwnedConnection* oc = table.by_slot[slot];
      if (oc == nullptr || oc->queued) return;
      oc->queued = true;
      active_.push_back(oc);
    });
  };
  take(own_marks_);
  for (AttachedDoorbell& d : doorbells_) take(*d.marks);
  for (OwnedConnection* oc : unmarked_) {
    if (oc->queued) continue;
    oc->queued = true;
    active_.push_back(oc);
  }
}

template <typename Wr>
size_t Worker::DrainRings(core::Instant now, RequestRing<Wr> ConnectionChannel::*ring,
                          RingState OwnedConnection::*state) {
  size_t total = 0;
  for (OwnedConnection* active : active_) {
    OwnedConnection& oc = *active;
    const uint32_t id = oc.conn->local_id();
    SpscRing<Wr>& requests = oc.channel.get()->*ring;
    ++stats_.ring_polls;
    oc.*state = RingState::kMore;  // unless the ring empties or blocks first
    for (uint32_t i = 0; i < options_.commands_per_loop; ++i) {
      const Wr* front = requests.Front();
      if (front == nullptr) {
        oc.*state = RingState::kDone;
        break;
      }
      // A copy: the producer may be another process writing the slot while the core checks it.
      const Wr wr = *front;
      const absl::Status s = Post(*oc.conn, now, wr);
      if (absl::IsResourceExhausted(s)) {
        oc.*state = RingState::kCoreFull;  // stays in the ring until the core has room
        break;
      }
      if (!s.ok()) {
        // A refused request always completes, signaled or not, so the application learns why.
        core::Completion c;
        c.wr_id = wr.wr_id;
        c.status = RefusalStatus(s);
        c.opcode = RefusalOpcode(wr);
        c.conn_id = id;
        if (!PushCompletion(oc, c)) {
          oc.*state = RingState::kAppFull;  // retried when the application polls
          break;
        }
        ++stats_.commands_refused;
      }
      requests.PopFront();
      ++total;
    }
  }
  return total;
}

void Worker::CountRetry(const OwnedConnection& oc) {
  if (oc.send == RingState::kMore || oc.recv == RingState::kMore) {
    ++retry_awake_;  // work left by the budget: the worker must not sleep
  } else if (oc.send == RingState::kAppFull || oc.recv == RingState::kAppFull) {
    ++retry_app_;  // waits for the application to poll: sleep briefly
  }
}

void Worker::RetireActive() {
  for (OwnedConnection* oc : active_) {
    if (oc->send == RingState::kDone && oc->recv == RingState::kDone) {
      oc->queued = false;
      continue;
    }
    retry_.push_back(oc);
    CountRetry(*oc);
  }
  active_.clear();
}

void Worker::DeliverReadyCompletions() {
  ready_.clear();
  endpoint_.TakeReady(&ready_);
  // Held back by a full ring before: tried again first (the application may have polled).
  pending_retry_.clear();
  pending_retry_.swap(completions_pending_);
  for (uint32_t id : pending_retry_) {
    auto it = owned_.find(id);
    if (it != owned_.end()) DeliverCompletions(*it->second);
  }
  for (core::Connection* c : ready_) {
    auto it = owned_.find(c->local_id());
    if (it != owned_.end()) DeliverCompletions(*it->second);
  }
}

void Worker::DeliverCompletions(OwnedConnection& oc) {
  ConnectionChannel& ch = *oc.channel;
  auto& send_ring = ch.send_cq().ring(options_.id);
  auto& recv_ring = ch.recv_cq().ring(options_.id);
  while (true) {
    // Take from the core only what certainly fits: a completion left in the core is kept, one
    // taken out must not be dropped.
    size_t room = std::min(send_ring.FreeApprox(), recv_ring.FreeApprox());
    room = std::min(room, completion_buf_.size());
    if (room == 0) {
      if (std::find(completions_pending_.begin(), completions_pending_.end(),
                    oc.conn->local_id()) == completions_pending_.end()) {
        completions_pending_.push_back(oc.conn->local_id());
      }
      break;
    }
    const size_t n = oc.conn->PollCompletions(std::span<core::Completion>(completion_buf_.data(), room));
    for (size_t i = 0; i < n; ++i) PushCompletion(oc, completion_buf_[i]);
    if (n < room) break;
  }
  DeliverEvents(oc);
  const PublishedState now{oc.conn->state() == core::Connection::State::kError,
                           oc.conn->error_status()};
  if (now.error != oc.published.error || now.error_status != oc.published.error_status) {
    ch.Publish(now);
    oc.published = now;
  }
}

void Worker::DeliverEvents(OwnedConnection& oc) {
  core::PathEvent events[16];
  size_t n;
  while ((n = oc.conn->PollEvents(events)) > 0) {
    for (size_t i = 0; i < n; ++i) {
      if (oc.observe != ObservePathEvents::kOnly && !oc.channel->events.TryPush(events[i])) {
        oc.channel->CountDroppedEvent();
      }
      // A copy for the operator: the application's ring is the application's to consume.
      if (oc.observe != ObservePathEvents::kNo && !observed_events_.TryPush(events[i])) {
        ++stats_.observed_events_dropped;
      }
    }
  }
}

// ---- idling ----

bool Worker::HasPendingWork() {
  if (control_.pending()) return true;
  for (HandoffChannel* ch : handoff_from_) {
    if (ch != nullptr && !ch->EmptyApprox()) return true;
  }
  for (const auto& q : backlog_) {
    if (!q.empty()) return true;
  }
  if (!held_acks_.empty()) return true;
  // Requests: marked since the last loop took the marks, or left by the budget.
  if (retry_awake_ > 0 || own_marks_.doorbell->AnyPosted()) return true;
  for (const AttachedDoorbell& d : doorbells_) {
    if (d.doorbell->AnyPosted()) return true;
  }
  for (const OwnedConnection* oc : unmarked_) {
    if (oc->send != RingState::kCoreFull && !oc->channel->sends.EmptyApprox()) return true;
    if (oc->recv != RingState::kCoreFull && !oc->channel->recvs.EmptyApprox()) return true;
  }
  return false;
}

void Worker::RaiseDoorbells() {
  doorbell_.sleeping.store(1, std::memory_order_relaxed);
  for (const AttachedDoorbell& d : doorbells_) {
    d.doorbell->sleeping.store(1, std::memory_order_relaxed);
  }
}

void Worker::LowerDoorbells() {
  doorbell_.sleeping.store(0, std::memory_order_relaxed);
  for (const AttachedDoorbell& d : doorbells_) {
    d.doorbell->sleeping.store(0, std::memory_order_relaxed);
  }
}

// fds[0] is the wake eventfd, fds[1 + i] doorbells_[i]'s socket (-1, not polled, once hung up).
void Worker::DrainWakeFds(const std::vector<pollfd>& fds) {
  uint64_t drained;
  [[maybe_unused]] ssize_t r = read(wake_fd_, &drained, sizeof(drained));
  for (size_t i = 0; i < doorbells_.size(); ++i) {
    const short revents = fds[1 + i].revents;
    if (revents == 0) continue;
    AttachedDoorbell& d = doorbells_[i];
    // MSG_DONTWAIT: never blocks, whatever the other end does to its own file. What is left (a
    // poster that rang more than this) only makes the next ppoll() return at once.
    std::byte buf[512];
    const ssize_t n = recv(d.socket, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) ++stats_.doorbell_wakeups;
    // Closed or shut down by the other side: it would be readable forever, and the worker would
    // never sleep again.
    if (n == 0 || (revents & (POLLHUP | POLLERR | POLLNVAL)) != 0) d.hung_up = true;
  }
}

void Worker::Sleep() {
  // The order that loses no wake-up, in one process or across processes: doorbell.h.
  RaiseDoorbells();
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (HasPendingWork()) {
    LowerDoorbells();
    idle_loops_ = 0;
    return;
  }
  const core::Instant now = MonotonicNow();
  core::Duration timeout = kMaxSleep;
  const core::Instant deadline = endpoint_.NextDeadline();
  if (deadline != core::kNever) timeout = std::min(timeout, deadline - now);
  if (!completions_pending_.empty() || retry_app_ > 0) timeout = std::min(timeout, kPendingSleep);
  std::vector<pollfd> fds;
  fds.reserve(1 + doorbells_.size() + ports_.size());
  fds.push_back({wake_fd_, POLLIN, 0});
  for (const AttachedDoorbell& d : doorbells_) {
    fds.push_back({d.hung_up ? -1 : d.socket, POLLIN, 0});  // ppoll() skips negative fds
  }
  for (const auto& p : ports_) {
    const int fd = p->wait_fd();
    if (fd < 0) {
      // A port we cannot wait on is checked at least this often.
      timeout = std::min(timeout, core::Duration(kMinSleep));
    } else {
      fds.push_back({fd, POLLIN, 0});
    }
  }
  if (timeout >= kMinSleep) {
    ++stats_.sleeps;
    timespec ts{static_cast<time_t>(timeout.count() / 1'000'000'000),
                static_cast<long>(timeout.count() % 1'000'000'000)};
    if (ppoll(fds.data(), fds.size(), &ts, nullptr) <= 0) {
      for (pollfd& f : fds) f.revents = 0;  // a timeout or a signal: nothing to count
    }
  }
  LowerDoorbells();
  DrainWakeFds(fds);
  idle_loops_ = 0;
}

// ---- control path (owner thread) ----

absl::Status Worker::AddConnection(const core::ConnectionConfig& config, const PeerRoute& route,
                                   std::shared_ptr<ConnectionChannel> channel,
                                   ObservePathEvents observe,
                                   Doorbell* posted_marks) {
  if (route.plane_addresses.size() < config.plane_count || config.plane_count > ports_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "connection uses ", config.plane_count, " planes; the route names ",
        route.plane_addresses.size(), " peer addresses and the worker has ", ports_.size(),
        " ports"));
  }
  MarkTable* table = nullptr;
  if (posted_marks != nullptr) {
    table = MarkTableOf(posted_marks);
    if (table == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the connection's doorbell is neither worker ", options_.id,
          "'s own nor attached to it (AddDoorbell first)"));
    }
  }
  absl::StatusOr<core::Connection*> conn = endpoint_.CreateConnection(config);
  if (!conn.ok()) return conn.status();
  auto owned = std::make_unique<OwnedConnection>();
  OwnedConnection& oc = *owned;
  owned_[config.local_conn_id] = std::move(owned);
  oc.conn = *conn;
  oc.channel = std::move(channel);
  oc.route = route;
  oc.observe = observe;
  if (table == nullptr || !TakeSlot(*table, oc)) {
    unmarked_.push_back(&oc);
    ++stats_.unmarked_connections;
  }
  ++stats_.connections;
  return absl::OkStatus();
}

Worker::MarkTable* Worker::MarkTableOf(const Doorbell* doorbell) {
  if (doorbell == &doorbell_) return &own_marks_;
  for (AttachedDoorbell& d : doorbells_) {
    if (d.doorbell == doorbell) return d.marks.get();
  }
  return nullptr;
}

bool Worker::TakeSlot(MarkTable& table, OwnedConnection& oc) {
  uint32_t slot;
  if (!table.free_slots.empty()) {
    slot = table.free_slots.back();
    table.free_slots.pop_back();
  } else if (table.by_slot.size() < Doorbell::kPostedSlots) {
    slot = static_cast<uint32_t>(table.by_slot.size());
    table.by_slot.push_back(nullptr);
  } else {
    return false;
  }
  table.by_slot[slot] = &oc;
  oc.marks = &table;
  oc.slot = slot;
  // Before the channel is handed to its posters (the creator waits for this task).
  oc.channel->SetPostedMark(table.doorbell, slot);
  return true;
}

void Worker::ReleaseSlot(OwnedConnection& oc) {
  if (oc.marks == nullptr) return;
  oc.channel->ClearPostedMark();
  MarkTable& table = *oc.marks;
  table.by_slot[oc.slot] = nullptr;
  // The mark may still be set (a last post, or set again): it names a free slot until reused,
  // and then costs the new owner one look.
  table.free_slots.push_back(oc.slot);
  oc.marks = nullptr;
  oc.slot = Doorbell::kNoSlot;
}

absl::Status Worker::RemoveConnection(uint32_t conn_id) {
  auto it = owned_.find(conn_id);
  if (it == owned_.end()) {
    return absl::NotFoundError(absl::StrCat("worker ", options_.id, " owns no connection ", conn_id));
  }
  OwnedConnection& oc = *it->second;
  // Completions still in the core are delivered if there is room; the rest go with it.
  DeliverCompletions(oc);
  // Control tasks run between loops: active_ is empty, retry_ and unmarked_ may name it.
  if (oc.queued && std::erase(retry_, &oc) > 0) {
    retry_awake_ = retry_app_ = 0;  // recounted for what is left
    for (const OwnedConnection* r : retry_) CountRetry(*r);
  }
  if (oc.marks != nullptr) {
    ReleaseSlot(oc);
  } else if (std::erase(unmarked_, &oc) > 0) {
    --stats_.unmarked_connections;
  }
  owned_.erase(it);
  // A burst of connections leaves no table behind it: a daemon's memory returns to its level.
  if (owned_.size() * 4 < owned_.capacity()) owned_.rehash(0);
  --stats_.connections;
  return endpoint_.DestroyConnection(conn_id);
}

absl::StatusOr<ConnectionSnapshot> Worker::Snapshot(uint32_t conn_id) {
  auto it = owned_.find(conn_id);
  if (it == owned_.end()) {
    return absl::NotFoundError(absl::StrCat("worker ", options_.id, " owns no connection ", conn_id));
  }
  const core::Connection& c = *it->second->conn;
  ConnectionSnapshot s;
  s.conn_id = conn_id;
  s.owner = options_.id;
  s.state = c.state();
  s.error_status = c.error_status();
  s.counters = c.counters();
  for (uint16_t p = 0; p < c.path_count(); ++p) s.paths.push_back(c.path_stats(p));
  s.outstanding_sends = c.outstanding_sends();
  s.posted_receives = c.posted_receives();
  s.events_dropped = it->second->channel->events_dropped();
  return s;
}

absl::Status Worker::RequestRotation(uint32_t conn_id, uint16_t path_id) {
  core::Connection* c = endpoint_.Find(conn_id);
  if (c == nullptr) return absl::NotFoundError(absl::StrCat("no connection ", conn_id));
  return c->RequestRotation(MonotonicNow(), path_id);
}

absl::Status Worker::AbortConnection(uint32_t conn_id) {
  core::Connection* c = endpoint_.Find(conn_id);
  if (c == nullptr) return absl::NotFoundError(absl::StrCat("no connection ", conn_id));
  c->Abort(MonotonicNow());
  // The flushed completions and the error state go out now: an abort with nothing outstanding
  // makes no output for the endpoint to announce, and the state must still be published.
  if (auto it = owned_.find(conn_id); it != owned_.end()) DeliverCompletions(*it->second);
  return absl::OkStatus();
}

absl::StatusOr<int> Worker::AddDoorbell(Doorbell* doorbell) {
  if (doorbell == nullptr) return absl::InvalidArgumentError("null doorbell");
  for (const AttachedDoorbell& d : doorbells_) {
    if (d.doorbell == doorbell) {
      return absl::AlreadyExistsError(
          absl::StrCat("this doorbell is already attached to worker ", options_.id));
    }
  }
  int ends[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, ends) != 0) {
    return absl::ErrnoToStatus(errno, "socket pair for a doorbell (too many open files? raise "
                                      "RLIMIT_NOFILE)");
  }
  AttachedDoorbell& d = doorbells_.emplace_back();
  d.doorbell = doorbell;
  d.socket = ends[0];
  d.marks = std::make_unique<MarkTable>();
  d.marks->doorbell = doorbell;
  ++stats_.doorbells;
  return ends[1];
}

absl::Status Worker::RemoveDoorbell(const Doorbell* doorbell) {
  auto it = std::find_if(doorbells_.begin(), doorbells_.end(),
                         [doorbell](const AttachedDoorbell& d) { return d.doorbell == doorbell; });
  if (it == doorbells_.end()) {
    return absl::NotFoundError(
        absl::StrCat("this doorbell is not attached to worker ", options_.id));
  }
  // Its connections are looked at on every loop from now on: no one can mark them.
  for (OwnedConnection* oc : it->marks->by_slot) {
    if (oc == nullptr) continue;
    ReleaseSlot(*oc);
    unmarked_.push_back(oc);
    ++stats_.unmarked_connections;
  }
  close(it->socket);
  doorbells_.erase(it);
  --stats_.doorbells;
  return absl::OkStatus();
}

WorkerStats Worker::Stats() const {
  WorkerStats s = stats_;
  s.endpoint = endpoint_.counters();
  for (const auto& p : ports_) {
    s.ports.push_back(p->stats());
    s.port_descriptions.push_back(p->description());
    s.port_features.push_back(p->features());
  }
  return s;
}

}  // namespace metaroce::engine
