// The engine: N worker threads, each running to completion over its shard of connections
// (lib/engine/worker.h), glued to packet ports it does not know the kind of.
//
// Connection ownership: a connection is owned by worker OwnerOf(local_conn_id) =
// local_conn_id % workers for its whole life. Packets received by another worker are handed to
// the owner through a handoff ring; application requests reach the owner through the
// connection's rings (lib/engine/channels.h); everything else (create/destroy connections,
// register memory, snapshots) goes through the owner's control queue and waits for the answer.
//
// Two modes, chosen by EngineOptions::workers:
//   threaded (workers >= 1)  each worker runs on its own thread, sleeping when idle (IdleStrategy).
//   inline   (workers == 0)  one worker and no thread: the application's thread drives it by
//                            calling Poll(), which runs one loop iteration (Worker::RunOnce, the
//                            same body the threads loop over). Nothing progresses (no packet is
//                            received, acknowledged or retransmitted, no timer fires) between
//                            Poll() calls. This saves the thread handoffs of the threaded mode (a
//                            ping-pong then needs one thread per side, not two: on a 2-vCPU host
//                            every handoff can cost a vCPU wake-up, ~20 us).
//
// Threading: threaded mode: every public method is safe from any thread. Data-path methods are on
// the channels; the methods here are control path and block until the worker(s) answered
// (microseconds when workers are busy, at most one wake-up when they sleep). Inline mode: the
// application's ends of the channels from the driving thread (the one calling Poll(); handing
// them to another thread needs a happens-before, e.g. a join); control methods from any thread:
// they run on the calling thread under the engine's inline lock, which Poll() holds for each
// iteration, so a control call waits at most one iteration (a thread setting up connections
// while another drives the engine: the libfabric provider's connection manager, lib/ofi).
// Errors: absl::Status; nothing logs.
//
// Applications in other processes (the daemon hosting the engine): their channels are placed in
// memory shared with them (ConnectionChannel/CompletionChannel::PlaceAt, lib/engine/channels.h)
// and given to the engine with CreateConnectionOnChannel; they wake workers through doorbells
// of their own (AddDoorbell, lib/engine/doorbell.h); their memory is registered where it is
// mapped here (RegisterMappedMemory), each in a protection domain of its own
// (AllocateProtectionDomain; docs/spec/messages-and-memory.md [M7]), so that neither they nor
// their peers can name another's regions.
//
// Memory keys are allocated here, in one place, and are the same in every worker's table:
//   RegisterMemory        lkeys counting up from core::MemoryTable::kFirstCallerKey + 0x100,
//                         rkey = lkey ^ 0x5a5a0000 (predictable: embedded applications trust
//                         their process and their peers);
//   RegisterMappedMemory  lkey and rkey drawn at random (getrandom) from [kFirstRandomKey,
//                         kLastRandomKey], a range the counted keys above do not reach for their
//                         first 2^25 registrations: rkeys travel to peers, and a peer should not
//                         guess another region of the same domain.
// Either way a key in use is skipped: a key never names two regions at once, whatever their
// domains.
//
// Path events of a connection go to its channel's event ring, which its application consumes.
// A connection created with ObservePathEvents::kYes also has a copy of each of its events put
// into its owner worker's *observer ring* (one per worker, in this process's heap), which the
// host's operator side (the daemon's path manager) drains with PollObservedEvents: the daemon
// records the events of connections it does not consume (applications') without taking them
// from their owner. A full observer ring drops the copy and counts it
// (WorkerStats::observed_events_dropped); the application's own ring is not affected. With
// ObservePathEvents::kOnly the events go to the observer ring alone (the connection's own ring
// stays empty): the daemon's own connections, whose events only the daemon reads, so that it
// reads them all from one place instead of visiting every connection.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lib/core/config.h"
#include "lib/core/memory_table.h"
#include "lib/engine/channels.h"
#include "lib/engine/handoff.h"
#include "lib/engine/worker.h"
#include "lib/io/packet_port.h"

namespace metaroce::engine {

// Creates the port of `plane` for `worker` (e.g. an AF_XDP socket on queue first_queue+worker of
// the plane's interface). Called from Engine::Create's thread, before any worker starts.
using PortFactory =
    std::function<absl::StatusOr<std::unique_ptr<io::PacketPort>>(int worker, int plane)>;

struct EngineOptions {
  // Worker threads; 0: inline mode (one worker, driven by Poll() on the application's thread).
  int workers = 1;
  int planes = 1;
  // Optional CPU pinning: worker i runs on cpus[i % cpus.size()]. Empty: not pinned. Inline mode:
  // ignored (the application places its own thread).
  std::vector<int> cpus;
  // Threaded mode only: what an idle worker does (inline mode: the application's loop decides).
  IdleStrategy idle = IdleStrategy::kPoll;
  uint32_t spins_before_sleep = 256;
  uint32_t rx_batch = 32;
  uint32_t tx_send_retries = 4;
  uint32_t tx_backlog_limit = 4096;
  // Handoff between workers: datagrams in flight per ordered worker pair, and the largest
  // datagram (UDP payload) that can be handed off (mtu + headers is enough).
  uint32_t handoff_slots = 256;
  uint32_t max_datagram_bytes = 9216;
  // Ring depths of each connection (send, receive: rounded up to powers of two) and its events.
  uint32_t event_depth = 256;
  // Each worker's observer ring (copies of observed connections' path events).
  uint32_t observed_event_depth = 1024;
  // The host's receive budget, split evenly among the workers (each an Endpoint of its own:
  // lib/core/receive_budget.h); 0: no hints. `mtu`: the connections' payload per packet.
  uint64_t receive_budget_bytes = 1u << 20;
  uint32_t mtu = 4096;
  // The host's receive rate in Gb/s (its links together, wire bytes), the rate its pull pacer
  // releases pulls at (lib/core/pull_pacer.h); 0: no pulls. Finite, >= 0. Split evenly among
  // the workers like the budget: each worker's Endpoint is a shard of the host, and the shards'
  // pacers together must not pull more than the links carry. A pull lets through one full
  // packet: mtu + wire::kDataHeadersSize + the link's own 66 bytes on the wire.
  double pull_rate_gbps = 0;
};

// A region of another process to register: its addresses there, its bytes mapped here.
struct MappedRegion {
  uint64_t addr = 0;           // its first byte in the other process (what requests name)
  uint64_t length = 0;
  uint32_t access = 0;         // core::access::*
  void* local_base = nullptr;  // the same first byte, mapped in this process
};

class Engine {
 public:
  // Creates every worker's ports through `factory`, then starts the workers (inline mode: creates
  // the one worker's ports, worker index 0, and starts nothing). Fails with the factory's error
  // (naming the worker and plane) or if a thread cannot be pinned.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options,
                                                        const PortFactory& factory);
  // Stops and joins the workers; connections and ports go with them.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Shards (Worker objects): options.workers, or 1 in inline mode.
  int workers() const { return static_cast<int>(workers_.size()); }
  bool is_inline() const { return options_.workers == 0; }
  int planes() const { return options_.planes; }
  int OwnerOf(uint32_t conn_id) const { return static_cast<int>(conn_id % workers_.size()); }
  // A fresh non-zero connection id, unique within this engine (ids chosen by the caller must not
  // collide with these: use one scheme or the other).
  uint32_t AllocateConnectionId();
  // What the set-up protocol offers the peer of a new connection `conn_id` (its owner's share of
  // the receive budget for one more connection, congestion.md §5.3); 0 with the budget off.
  uint64_t InitialOffer(uint32_t conn_id);

  // Registers [base, base+length) in every worker's memory table under the same lkey and rkey
  // (counted here, >= core::MemoryTable::kFirstCallerKey), in protection domain `pd`. All or
  // nothing.
  absl::StatusOr<core::MemoryRegion> RegisterMemory(
      void* base, uint64_t length, uint32_t access,
      uint32_t pd = core::kDefaultProtectionDomain);
  // Registers another process's region (its addresses; its bytes at region.local_base here) in
  // every worker's table under random keys drawn here, in protection domain `pd`. All or
  // nothing. InvalidArgument for an empty, wrapping or unmapped region or bad access bits.
  absl::StatusOr<core::MemoryRegion> RegisterMappedMemory(const MappedRegion& region,
                                                          uint32_t pd);
  // The caller must not deregister memory that posted work still uses (as ibv_dereg_mr).
  absl::Status DeregisterMemory(uint32_t lkey);
  // A protection domain no one has had before in this engine: never the default domain, never
  // given twice while the engine lives. ResourceExhausted after 2^32 - 1 of them.
  absl::StatusOr<uint32_t> AllocateProtectionDomain();
  static constexpr uint32_t kFirstRandomKey = 0xa0000000u;
  static constexpr uint32_t kLastRandomKey = 0xd9ffffffu;

  // A completion channel with `depth` entries per worker, in heap memory. A channel in caller
  // memory: CompletionChannel::PlaceAt(memory, workers(), depth).
  std::shared_ptr<CompletionChannel> CreateCompletionChannel(size_t depth);

  // Creates the connection on its owner worker. The config must pass core validation and use
  // plane_count <= planes(); `route` names the peer's address on every plane. The returned
  // channel is the application's handle for the data path.
  absl::StatusOr<std::shared_ptr<ConnectionChannel>> CreateConnection(
      const core::ConnectionConfig& config, const PeerRoute& route,
      std::shared_ptr<CompletionChannel> send_cq, std::shared_ptr<CompletionChannel> recv_cq,
      ObservePathEvents observe = ObservePathEvents::kNo);
  // The same, on a channel the caller made (e.g. ConnectionChannel::PlaceAt in memory shared
  // with an application): its conn_id must be config.local_conn_id, its owner
  // OwnerOf(local_conn_id), and its completion channels must have workers() rings each. With
  // ObservePathEvents::kYes its path events are copied to the observer rings too (kOnly: go
  // there instead). `posted_marks`: the doorbell its posters mark (lib/engine/doorbell.h), attached to the owner
  // worker (AddDoorbell), typically the application's; the owner gives the connection a slot in
  // it and sets the channel's mark (ConnectionChannel::posted_slot(), to tell the application,
  // which sets the same mark on its view: SetPostedMark). Without one, nothing tells the owner
  // when the rings hold work, and it looks at them on every loop of its (a cost per loop that
  // grows with such connections). CreateConnection's channels use the owner's own doorbell.
  absl::Status CreateConnectionOnChannel(const core::ConnectionConfig& config,
                                         const PeerRoute& route,
                                         std::shared_ptr<ConnectionChannel> channel,
                                         ObservePathEvents observe = ObservePathEvents::kNo,
                                         Doorbell* posted_marks = nullptr);
  absl::Status DestroyConnection(uint32_t conn_id);
  absl::StatusOr<ConnectionSnapshot> Snapshot(uint32_t conn_id);
  absl::Status RequestRotation(uint32_t conn_id, uint16_t path_id);
  // The connection enters error: its outstanding work completes with WR_FLUSH_ERR
  // (core::Connection::Abort). It stays in the engine until DestroyConnection.
  absl::Status AbortConnection(uint32_t conn_id);
  std::vector<WorkerStats> Stats();
  // Moves up to out.size() copies of observed connections' path events into `out`, from every
  // worker's observer ring in turn; returns how many. Safe from any thread (callers are
  // serialized by a mutex: each ring has one consumer at a time); never waits for a worker.
  size_t PollObservedEvents(std::span<core::PathEvent> out);

  // Data path: tells the owner of `channel` that its rings have work (cheap when it is awake;
  // nothing in inline mode, where the next Poll() finds the work).
  void Wake(int worker) {
    if (!is_inline()) workers_[worker]->Wake();
  }

  // Worker `worker`'s own wake eventfd (owned by the engine; Worker::wake_fd says to whom it may
  // be given).
  int wake_fd(int worker) const { return workers_[worker]->wake_fd(); }
  // Control path: gives worker `worker` a doorbell in caller memory, typically one per
  // application and worker, placed with Doorbell::PlaceAt in memory shared with the application.
  // Returns a socket, owned by the caller, to hand to the application (SCM_RIGHTS) for
  // RingDoorbell(*doorbell, fd). The memory must stay mapped until RemoveDoorbell returns. See
  // Worker::AddDoorbell.
  absl::StatusOr<int> AddDoorbell(int worker, Doorbell* doorbell);
  absl::Status RemoveDoorbell(int worker, const Doorbell* doorbell);

  // Inline mode, driving thread: one iteration of the worker's loop (receive a batch from every
  // port and handoff, post what the application rings hold, fire due timers, deliver
  // completions and events, flush the ports). Returns whether it found any work. Threaded mode:
  // does nothing and returns false (the workers run by themselves), so that an application can
  // call it whatever the mode.
  bool Poll() {
    if (!is_inline()) return false;
    std::lock_guard<std::mutex> lock(inline_mu_);
    return workers_[0]->RunOnce();
  }

  // Runs `fn` on worker `w`'s thread and waits for its result (control path). Inline mode: runs
  // it on the calling thread under the inline lock (between two Poll() iterations); `fn` must
  // not call back into the engine's control methods.
  template <typename R>
  R Call(int w, absl::AnyInvocable<R(Worker&)> fn) {
    if (is_inline()) {
      std::lock_guard<std::mutex> lock(inline_mu_);
      return fn(*workers_[w]);
    }
    std::promise<R> promise;
    std::future<R> future = promise.get_future();
    workers_[w]->Submit([&promise, fn = std::move(fn)](Worker& worker) mutable {
      promise.set_value(fn(worker));
    });
    return future.get();
  }

 private:
  explicit Engine(const EngineOptions& options) : options_(options) {}

  const EngineOptions options_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::unique_ptr<HandoffChannel>> handoff_;  // [from * workers + to]
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> next_conn_id_{1};

  // Registers `r` (keys chosen) in every worker's table, its bytes at `local_base`; all or
  // nothing.
  absl::Status RegisterInEveryWorker(const core::MemoryRegion& r, std::byte* local_base)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(keys_mu_);
  // Fresh keys (lkey and rkey, distinct, neither in use).
  absl::StatusOr<std::pair<uint32_t, uint32_t>> CountedKeys()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(keys_mu_);
  absl::StatusOr<std::pair<uint32_t, uint32_t>> RandomKeys()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(keys_mu_);
  bool KeyInUse(uint32_t key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(keys_mu_);

  // Inline mode: Poll()'s iterations against control calls. A std::mutex: it is taken on every
  // Poll(), and absl::Mutex's deadlock detection (on in Debian's build) costs ~100 ns a time.
  std::mutex inline_mu_;
  absl::Mutex keys_mu_;  // serializes memory registration across workers
  uint32_t next_lkey_ ABSL_GUARDED_BY(keys_mu_) = core::MemoryTable::kFirstCallerKey + 0x100;
  absl::flat_hash_map<uint32_t, uint32_t> rkey_of_lkey_ ABSL_GUARDED_BY(keys_mu_);  // registered
  absl::flat_hash_set<uint32_t> rkeys_ ABSL_GUARDED_BY(keys_mu_);
  std::atomic<uint32_t> next_pd_{core::kDefaultProtectionDomain + 1};
  absl::Mutex observed_mu_;  // one consumer of the observer rings at a time
  size_t next_observed_worker_ ABSL_GUARDED_BY(observed_mu_) = 0;
};

}  // namespace metaroce::engine
