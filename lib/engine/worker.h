// One engine worker: a thread that runs to completion over its own shard of connections.
//
// A worker owns, and alone touches:
//   - its packet ports, one per plane (supplied by the engine's PortFactory),
//   - a core::Endpoint holding the connections it owns and its replica of the memory table,
//   - the transmit side (PortSink): core TxMeta -> the plane's port, destination = the
//     connection's peer address on that plane; a full port is flushed and retried a bounded number
//     of times, then the packet waits in a per-plane backlog drained first thing next loop (never
//     dropped silently: beyond tx_backlog_limit packets it is dropped and counted, and the
//     protocol's loss recovery resends it),
//   - timers (Endpoint::NextDeadline / OnTimer, with CLOCK_MONOTONIC as `now`),
//   - the consumer side of its connections' send/receive rings, the producer side of its
//     completion rings, and both ends of its handoff channels.
//
// Threading: everything marked "owner thread" runs on the worker's thread only: the loop itself
// and the control tasks it runs between iterations. In the engine's inline mode the owner thread
// is the application thread that calls RunOnce() (through Engine::Poll) and the control methods
// (through Engine::Call). Submit() and Wake() are safe from any thread.
// Wake-ups (lib/engine/doorbell.h): the worker's own doorbell and eventfd (Wake()), plus one
// doorbell per attached application (AddDoorbell), all raised while the worker sleeps.
// No lock is taken on the data path; the control queue has a mutex, checked through an atomic
// flag so that an idle control path costs one load per loop.
//
// What a loop costs does not grow with the connections a worker merely holds: it looks at the
// request rings of the connections marked posted in its doorbells (doorbell.h: its own, for the
// channels it made, and each application's, for the channels placed in that application's
// memory) and of those it could not finish before (the core's queue full, the per-loop budget
// used, a refusal's completion ring full), and at no others; completions and events go out for
// the connections the endpoint lists as having output (Endpoint::TakeReady). The exception:
// connections whose posters mark nothing the worker knows of (a placed channel created without a
// doorbell, or beyond a doorbell's Doorbell::kPostedSlots) have their rings looked at on every
// loop. WorkerStats::ring_polls counts the looks.
#pragma once

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lib/core/endpoint.h"
#include "lib/engine/channels.h"
#include "lib/engine/doorbell.h"
#include "lib/engine/handoff.h"
#include "lib/io/packet_port.h"

namespace metaroce::engine {

enum class IdleStrategy : uint8_t {
  kSpin,  // never sleep: lowest latency, one busy core per worker
  kPoll,  // after `spins_before_sleep` empty loops, block in ppoll() on the ports' wait_fds and
          // the worker's wake eventfd until a packet, a request or the next timer
};

struct WorkerOptions {
  int id = 0;
  int workers = 1;
  IdleStrategy idle = IdleStrategy::kPoll;
  uint32_t spins_before_sleep = 256;
  uint32_t rx_batch = 32;                // packets per Receive() call
  uint32_t tx_send_retries = 4;          // Flush-and-retry attempts before backlogging
  uint32_t tx_backlog_limit = 4096;      // packets per plane
  uint32_t commands_per_loop = 256;      // per connection and ring, for fairness
  // ACKs (and NAKs) produced while receiving are held, copied, and transmitted by the next
  // RunOnce() after the application's requests it finds. Meant for the engine's inline mode,
  // where the application answers a message only between two RunOnce() calls: its answer is
  // then on the wire before the ACK of the message, instead of behind it (on veth every packet
  // costs the sending CPU the whole path to the peer, ~2.5 us on the test fabric). An ACK waits
  // one iteration at most; ACKs carry no path sequence number, so data never reorders.
  bool defer_receive_acks = false;
  // Capacity of the observer ring (copies of observed connections' path events; Engine).
  uint32_t observed_event_depth = 1024;
  // This worker's share of the host's receive budget (its Endpoint's).
  core::ReceiveBudgetConfig receive_budget;
};

// Whether a connection's path events are also copied to the worker's observer ring
// (Worker::observed_events, Engine::PollObservedEvents), or go only there.
enum class ObservePathEvents : uint8_t {
  kNo,    // the connection's event ring only
  kYes,   // its ring, and a copy in the observer ring
  kOnly,  // the observer ring only: its own ring stays empty
};

// Where a connection's peer is: its address on each plane (index = plane).
struct PeerRoute {
  std::vector<io::IpAddress> plane_addresses;
};

struct WorkerStats {
  int worker = 0;
  uint64_t loops = 0;
  uint64_t sleeps = 0;
  uint64_t rx_packets = 0;           // from this worker's ports
  uint64_t handoff_sent = 0;         // received here for a connection another worker owns
  uint64_t handoff_received = 0;
  uint64_t handoff_dropped = 0;      // owner's handoff ring had no free slot (receive drop)
  uint64_t handoff_too_large = 0;    // datagram larger than a handoff slot (receive drop)
  uint64_t tx_packets = 0;           // accepted by a port
  uint64_t tx_backlogged = 0;        // port full after retries: kept for the next loop
  uint64_t tx_backlog_dropped = 0;   // backlog full too: dropped (loss recovery resends)
  uint64_t tx_no_route = 0;          // no route for (connection, plane): a bug if non-zero
  uint64_t commands_refused = 0;     // work requests the core refused (error completion sent)
  uint64_t completions = 0;          // delivered to completion rings
  uint64_t doorbell_wakeups = 0;     // sleeps ended by an application's doorbell (AddDoorbell)
  uint64_t doorbells = 0;            // application doorbells attached now
  uint64_t observed_events_dropped = 0;  // copies the observer ring had no room for
  uint64_t connections = 0;
  uint64_t ring_polls = 0;           // looks at a connection's request ring (send or receive)
  uint64_t unmarked_connections = 0;  // connections whose rings are looked at on every loop
  core::EndpointCounters endpoint;
  std::vector<io::PortStats> ports;  // per plane
  std::vector<std::string> port_descriptions;
  std::vector<io::PortFeatures> port_features;  // per plane, as port_descriptions
};

// Everything about one connection, taken on its owner thread.
struct ConnectionSnapshot {
  uint32_t conn_id = 0;
  int owner = 0;
  core::Connection::State state = core::Connection::State::kReady;
  core::WcStatus error_status = core::WcStatus::kSuccess;
  core::ConnectionCounters counters;
  std::vector<core::PathStats> paths;
  size_t outstanding_sends = 0;
  size_t posted_receives = 0;
  uint64_t events_dropped = 0;
};

// Current CLOCK_MONOTONIC time as a core Instant.
core::Instant MonotonicNow();

class Worker {
 public:
  using ControlTask = absl::AnyInvocable<void(Worker&)>;

  // `ports[p]` is the port of plane p. Fails if the wake eventfd cannot be created.
  static absl::StatusOr<std::unique_ptr<Worker>> Create(
      const WorkerOptions& options, std::vector<std::unique_ptr<io::PacketPort>> ports);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Before Run(): the handoff channels to and from every other worker (index = worker id; the
  // own index is null) and every worker, for waking them.
  void Wire(std::vector<HandoffChannel*> to, std::vector<HandoffChannel*> from,
            std::vector<Worker*> all);

  // Owner thread: runs the loop until `stop` becomes true (set it, then Wake()): RunOnce() while
  // it finds work, and the idle strategy when it does not.
  void Run(const std::atomic<bool>& stop);
  // Owner thread: one loop iteration: pending control tasks, the transmit backlog, a receive
  // batch from every port and handoff channel, the connections' send and receive rings, due
  // timers, completions and events, then a flush of every port written. Never blocks. Returns
  // whether any of it found work. Run() loops over it; the inline mode calls it directly.
  bool RunOnce();

  // Any thread: queues a control task, run by the owner thread between loop iterations.
  void Submit(ControlTask task);
  // Any thread: makes a sleeping worker run its loop again (as RingDoorbell(doorbell(),
  // wake_fd()) does).
  void Wake();

  int id() const { return options_.id; }
  // The worker's own doorbell and wake eventfd (non-blocking; owned by the worker). Wake() rings
  // them; anyone in this process may. Hand the eventfd only to trusted processes: whoever holds
  // it can also read it (stealing wake-ups) and clear its O_NONBLOCK; give applications
  // doorbells of their own (AddDoorbell) instead.
  const Doorbell& doorbell() const { return doorbell_; }
  int wake_fd() const { return wake_fd_; }
  // The same doorbell, for its posted marks: pass it to AddConnection for channels posted to in
  // this process (Engine::CreateConnection does).
  Doorbell& own_marks() { return doorbell_; }

  // Producer: the owner thread (copies of observed connections' path events). Consumer: one
  // thread at a time outside the worker (Engine::PollObservedEvents serializes them).
  SpscRing<core::PathEvent>& observed_events() { return observed_events_; }

  // ---- Owner thread only (control tasks) ----
  core::Endpoint& endpoint() { return endpoint_; }
  // `observe`: whether the connection's path events go to observed_events() too, or only.
  // `posted_marks`: the doorbell the channel's posters mark (doorbell.h), which must be this
  // worker's own (doorbell()) or attached here (AddDoorbell); the worker gives the connection a
  // slot in it and sets the channel's mark (ConnectionChannel::SetPostedMark). Null: no one
  // marks it, and its rings are looked at on every loop (as when the doorbell's slots are all
  // taken).
  absl::Status AddConnection(const core::ConnectionConfig& config, const PeerRoute& route,
                             std::shared_ptr<ConnectionChannel> channel,
                             ObservePathEvents observe = ObservePathEvents::kNo,
                             Doorbell* posted_marks = nullptr);
  absl::Status RemoveConnection(uint32_t conn_id);
  absl::StatusOr<ConnectionSnapshot> Snapshot(uint32_t conn_id);
  WorkerStats Stats() const;
  absl::Status RequestRotation(uint32_t conn_id, uint16_t path_id);
  absl::Status AbortConnection(uint32_t conn_id);
  // Attaches a doorbell in caller memory (e.g. shared with one application): from now on the
  // worker raises it whenever it sleeps, and wakes when the returned fd is written. Returns one
  // end of a non-blocking AF_UNIX stream socket pair, owned by the caller (RingDoorbell(*doorbell,
  // fd); pass it to the application, then close it); the worker keeps the other end until
  // RemoveDoorbell, and stops waiting on it once the caller's end is closed everywhere (hung up).
  // `doorbell` must stay mapped until RemoveDoorbell returns. Fails if it is already attached or
  // the sockets cannot be created.
  absl::StatusOr<int> AddDoorbell(Doorbell* doorbell);
  // Detaches it and closes the worker's end (RingDoorbell on the other end then fails silently).
  // Connections still marked through it have their marks cleared and are looked at on every loop
  // from then on.
  absl::Status RemoveDoorbell(const Doorbell* doorbell);

 private:
  class PortSink : public core::PacketSink {
   public:
    explicit PortSink(Worker& w) : w_(w) {}
    void Transmit(const core::TxMeta& meta, std::span<const std::byte> headers,
                  std::span<const std::byte> payload) override;

   private:
    Worker& w_;
  };
  struct BacklogPacket {
    std::vector<std::byte> bytes;  // headers then payload
    size_t header_bytes = 0;
    io::IpAddress dst;
    uint16_t src_port = 0, dst_port = 0;
    uint8_t plane = 0;
    io::TxPacket View() const;
  };
  struct OwnedConnection;
  // The slots of one doorbell's posted marks: which connection each names.
  struct MarkTable {
    Doorbell* doorbell = nullptr;
    std::vector<OwnedConnection*> by_slot;  // null: free
    std::vector<uint32_t> free_slots;       // below by_slot.size()
  };
  struct AttachedDoorbell {
    Doorbell* doorbell = nullptr;
    int socket = -1;       // the worker's end, non-blocking
    bool hung_up = false;  // the other end is closed: not waited on any more
    std::unique_ptr<MarkTable> marks;
  };
  // What the last look at a request ring left behind.
  enum class RingState : uint8_t {
    kDone,       // the ring was empty
    kMore,       // the per-loop budget ran out: the next loop goes on
    kCoreFull,   // the core had no room: retried every loop, but not work to stay awake for
    kAppFull,    // a refusal's completion did not fit: retried, waiting for the application
  };
  struct OwnedConnection {
    core::Connection* conn = nullptr;
    std::shared_ptr<ConnectionChannel> channel;
    PeerRoute route;
    ObservePathEvents observe = ObservePathEvents::kNo;  // where its path events go
    PublishedState published;
    MarkTable* marks = nullptr;        // where its posters mark it; null: in unmarked_
    uint32_t slot = Doorbell::kNoSlot;
    RingState send = RingState::kDone, recv = RingState::kDone;
    bool queued = false;               // in active_ or retry_
  };
  class ControlQueue {
   public:
    void Push(ControlTask task) ABSL_LOCKS_EXCLUDED(mu_);
    std::deque<ControlTask> TakeAll() ABSL_LOCKS_EXCLUDED(mu_);
    bool pending() const { return pending_.load(std::memory_order_acquire); }

   private:
    absl::Mutex mu_;
    std::deque<ControlTask> tasks_ ABSL_GUARDED_BY(mu_);
    std::atomic<bool> pending_{false};
  };

  Worker(const WorkerOptions& options, std::vector<std::unique_ptr<io::PacketPort>> ports,
         int wake_fd);

  size_t RunControlTasks();
  size_t DrainBacklogs();
  size_t ReceiveFromPorts(core::Instant now);
  size_t ReceiveHandoffs(core::Instant now);
  // The connections whose request rings this loop looks at (active_): those left unfinished by
  // the last loop (retry_), those marked posted in any doorbell since, and the unmarked ones.
  void CollectActive();
  // Moves the work requests of one application ring (`ring`: sends or receives) of every active
  // connection into the core, up to commands_per_loop each, and records what is left in `state`.
  // One the core has no room for stays in the ring (kCoreFull); one it refuses completes at once
  // with the reason. Returns how many left the rings.
  template <typename Wr>
  size_t DrainRings(core::Instant now, RequestRing<Wr> ConnectionChannel::*ring,
                    RingState OwnedConnection::*state);
  // After both drains: active connections with work left go to retry_, the others leave.
  void RetireActive();
  // Counts a connection left in retry_ into retry_awake_ or retry_app_ (RetireActive, and
  // RemoveConnection recounting what is left).
  void CountRetry(const OwnedConnection& oc);
  // Slots: a free one of `table` for `oc` (false when all are taken), and its release.
  bool TakeSlot(MarkTable& table, OwnedConnection& oc);
  void ReleaseSlot(OwnedConnection& oc);
  MarkTable* MarkTableOf(const Doorbell* doorbell);
  void DeliverCompletions(OwnedConnection& oc);
  void DeliverReadyCompletions();
  void DeliverEvents(OwnedConnection& oc);
  void FlushPorts();
  bool HasPendingWork();
  void Sleep();
  void RaiseDoorbells();
  void LowerDoorbells();
  void DrainWakeFds(const std::vector<pollfd>& fds);
  void Dispatch(core::Instant now, std::span<const std::byte> datagram, const core::RxMeta& meta);
  void Emit(uint8_t plane, const io::TxPacket& packet);
  void Backlog(uint8_t plane, const io::TxPacket& packet);
  void CopyPacket(uint8_t plane, const io::TxPacket& packet, BacklogPacket& out);
  size_t ReleaseHeldAcks(size_t count);
  bool PushCompletion(OwnedConnection& oc, const core::Completion& c);

  const WorkerOptions options_;
  std::vector<std::unique_ptr<io::PacketPort>> ports_;
  const int wake_fd_;
  PortSink sink_;
  core::Endpoint endpoint_;
  // Heap nodes: the mark tables and the lists below hold pointers to them.
  absl::flat_hash_map<uint32_t, std::unique_ptr<OwnedConnection>> owned_;
  MarkTable own_marks_;                    // doorbell_'s slots: the channels this worker made
  std::vector<OwnedConnection*> active_;   // this loop's (CollectActive); empty between loops
  std::vector<OwnedConnection*> retry_;    // unfinished by the last loop
  size_t retry_awake_ = 0;                 // of retry_, those with kMore (HasPendingWork)
  size_t retry_app_ = 0;                   // of retry_, those waiting for the application
  std::vector<OwnedConnection*> unmarked_;  // looked at on every loop
  // Connections whose completions or events are delivered this iteration: those the endpoint
  // lists as having output (Endpoint::TakeReady), and those a full ring held back before
  // (completions_pending_, ids). Nothing walks owned_ to find them.
  std::vector<core::Connection*> ready_;
  std::vector<uint32_t> completions_pending_;
  std::vector<uint32_t> pending_retry_;  // DeliverReadyCompletions' scratch (keeps its capacity)
  std::vector<std::deque<BacklogPacket>> backlog_;   // per plane
  std::deque<BacklogPacket> held_acks_;               // defer_receive_acks, oldest first
  bool holding_acks_ = false;                         // in the receive phase of RunOnce()
  std::vector<std::vector<std::byte>> spare_buffers_;  // recycled backlog buffers
  std::vector<bool> unflushed_;                        // per plane
  std::vector<io::RxPacket> rx_;
  std::vector<core::Completion> completion_buf_;
  SpscRing<core::PathEvent> observed_events_;
  std::vector<HandoffChannel*> handoff_to_, handoff_from_;
  std::vector<Worker*> all_;
  ControlQueue control_;
  std::vector<AttachedDoorbell> doorbells_;  // owner thread
  Doorbell doorbell_;  // alignas(kCacheLineBytes): read by every poster, written on sleep only
  uint32_t idle_loops_ = 0;
  WorkerStats stats_;
};

}  // namespace metaroce::engine
