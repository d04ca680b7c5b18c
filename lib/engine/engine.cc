#include "lib/engine/engine.h"

#include <pthread.h>
#include <sched.h>
#include <sys/random.h>

#include <cerrno>

#include <algorithm>
#include <bit>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "lib/wire/packet.h"

namespace metaroce::engine {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options,
                                                       const PortFactory& factory) {
  if (options.workers < 0 || options.workers > 256) {
    return absl::InvalidArgumentError("workers must be in 0..256 (0: inline mode)");
  }
  if (options.planes < 1 || options.planes > 255) {
    return absl::InvalidArgumentError("planes must be in 1..255");
  }
  if (options.max_datagram_bytes < 128 || options.handoff_slots == 0) {
    return absl::InvalidArgumentError("max_datagram_bytes must be >= 128 and handoff_slots > 0");
  }
  if (!std::isfinite(options.pull_rate_gbps) || options.pull_rate_gbps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pull_rate_gbps ", options.pull_rate_gbps, " must be a finite rate >= 0 (0: no pulls)"));
  }
  std::unique_ptr<Engine> e(new Engine(options));
  const bool inline_mode = options.workers == 0;
  const int n = inline_mode ? 1 : options.workers;
  for (int w = 0; w < n; ++w) {
    std::vector<std::unique_ptr<io::PacketPort>> ports;
    for (int p = 0; p < options.planes; ++p) {
      absl::StatusOr<std::unique_ptr<io::PacketPort>> port = factory(w, p);
      if (!port.ok()) {
        return absl::Status(port.status().code(),
                            absl::StrCat("worker ", w, " plane ", p, ": ", port.status().message()));
      }
      ports.push_back(*std::move(port));
    }
    WorkerOptions wo;
    wo.id = w;
    wo.workers = n;
    wo.idle = options.idle;
    wo.spins_before_sleep = options.spins_before_sleep;
    wo.rx_batch = options.rx_batch;
    wo.tx_send_retries = options.tx_send_retries;
    wo.tx_backlog_limit = options.tx_backlog_limit;
    wo.observed_event_depth = options.observed_event_depth;
    wo.receive_budget.budget_bytes =
        options.receive_budget_bytes == 0
            ? 0
            : std::max<uint64_t>(1, options.receive_budget_bytes / static_cast<uint64_t>(n));
    wo.receive_budget.mtu = options.mtu;
    core::PullPacerConfig& pull = wo.receive_budget.pull;
    pull.rate_gbps = options.pull_rate_gbps / n;
    pull.pulled_packet_wire_bytes =
        options.mtu + static_cast<uint32_t>(wire::kDataHeadersSize) + pull.wire_overhead_bytes;
    // Inline: the application answers between two iterations; its answer goes before our ACK.
    wo.defer_receive_acks = inline_mode;
    absl::StatusOr<std::unique_ptr<Worker>> worker = Worker::Create(wo, std::move(ports));
    if (!worker.ok()) return worker.status();
    e->workers_.push_back(*std::move(worker));
  }
  e->handoff_.resize(size_t(n) * n);
  for (int from = 0; from < n; ++from) {
    for (int to = 0; to < n; ++to) {
      if (from != to) {
        e->handoff_[from * n + to] =
            std::make_unique<HandoffChannel>(options.handoff_slots, options.max_datagram_bytes);
      }
    }
  }
  std::vector<Worker*> all;
  for (auto& w : e->workers_) all.push_back(w.get());
  for (int w = 0; w < n; ++w) {
    std::vector<HandoffChannel*> to(n, nullptr), from(n, nullptr);
    for (int o = 0; o < n; ++o) {
      to[o] = e->handoff_[w * n + o].get();
      from[o] = e->handoff_[o * n + w].get();
    }
    e->workers_[w]->Wire(std::move(to), std::move(from), all);
  }
  if (inline_mode) return e;  // the application's thread drives worker 0 through Poll()
  for (int w = 0; w < n; ++w) {
    Worker* worker = e->workers_[w].get();
    e->threads_.emplace_back([worker, stop = &e->stop_] { worker->Run(*stop); });
    pthread_setname_np(e->threads_.back().native_handle(),
                       absl::StrCat("metaroce-w", w).c_str());
    if (!options.cpus.empty()) {
      const int cpu = options.cpus[w % options.cpus.size()];
      cpu_set_t set;
      CPU_ZERO(&set);
      if (cpu < 0 || cpu >= CPU_SETSIZE) {
        return absl::InvalidArgumentError(absl::StrCat("CPU ", cpu, " is out of range"));
      }
      CPU_SET(cpu, &set);
      if (int rc = pthread_setaffinity_np(e->threads_.back().native_handle(), sizeof(set), &set);
          rc != 0) {
        // The destructor stops and joins the threads already started.
        return absl::ErrnoToStatus(
            rc, absl::StrCat("pinning worker ", w, " to CPU ", cpu, " (is the CPU online and in "
                             "this process's cpuset?)"));
      }
    }
  }
  return e;
}

Engine::~Engine() {
  stop_.store(true, std::memory_order_release);
  for (auto& w : workers_) w->Wake();
  for (auto& t : threads_) t.join();
  // Workers (their connections, then their ports) are destroyed before the handoff channels
  // they point to, by member order... made explicit here.
  workers_.clear();
}

uint64_t Engine::InitialOffer(uint32_t conn_id) {
  return Call<uint64_t>(OwnerOf(conn_id), [](Worker& w) {
    return w.endpoint().receive_budget().InitialOffer();
  });
}

uint32_t Engine::AllocateConnectionId() {
  uint32_t id;
  do {
    id = next_conn_id_.fetch_add(1, std::memory_order_relaxed);
  } while (id == 0);
  return id;
}

namespace {

// The checks every shard's MemoryTable makes too, made once, before any shard is touched.
absl::Status CheckRegion(uint64_t addr, uint64_t length, uint32_t access) {
  if (addr == 0 || length == 0) {
    return absl::InvalidArgumentError("memory region must be non-empty and non-null");
  }
  if (addr + length < addr) return absl::InvalidArgumentError("memory region wraps around");
  constexpr uint32_t kAll =
      core::access::kLocalWrite | core::access::kRemoteWrite | core::access::kRemoteRead;
  if ((access & ~kAll) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("access ", access, " has unknown bits; known: ", kAll));
  }
  if ((access & core::access::kRemoteWrite) && !(access & core::access::kLocalWrite)) {
    return absl::InvalidArgumentError("REMOTE_WRITE requires LOCAL_WRITE (as ibv_reg_mr)");
  }
  return absl::OkStatus();
}

// Counted keys: rkeys are distinct from every lkey (as MemoryTable::Register makes them).
constexpr uint32_t kCountedRkeyMask = 0x5a5a0000u;
// Random draws before giving up: the space holds ~2^30 keys, so only a table holding most of
// them makes a draw fail this often.
constexpr int kRandomKeyAttempts = 64;

}  // namespace

bool Engine::KeyInUse(uint32_t key) const {
  return rkey_of_lkey_.contains(key) || rkeys_.contains(key);
}

absl::StatusOr<std::pair<uint32_t, uint32_t>> Engine::CountedKeys() {
  while (next_lkey_ >= core::MemoryTable::kFirstCallerKey) {
    const uint32_t lkey = next_lkey_++;
    const uint32_t rkey = lkey ^ kCountedRkeyMask;
    if (rkey >= core::MemoryTable::kFirstCallerKey && !KeyInUse(lkey) && !KeyInUse(rkey)) {
      return std::make_pair(lkey, rkey);
    }
  }
  return absl::ResourceExhaustedError(
      "this engine has given out every memory key it counts: restart the process");
}

absl::StatusOr<std::pair<uint32_t, uint32_t>> Engine::RandomKeys() {
  constexpr uint32_t kSpan = kLastRandomKey - kFirstRandomKey + 1;
  for (int attempt = 0; attempt < kRandomKeyAttempts; ++attempt) {
    uint32_t r[2];
    if (getrandom(r, sizeof(r), 0) != static_cast<ssize_t>(sizeof(r))) {
      return absl::ErrnoToStatus(errno, "getrandom for memory keys");
    }
    const uint32_t lkey = kFirstRandomKey + r[0] % kSpan;
    const uint32_t rkey = kFirstRandomKey + r[1] % kSpan;
    if (lkey != rkey && !KeyInUse(lkey) && !KeyInUse(rkey)) return std::make_pair(lkey, rkey);
  }
  return absl::ResourceExhaustedError(
      "no free random memory key found: deregister memory regions first");
}

absl::Status Engine::RegisterInEveryWorker(const core::MemoryRegion& r, std::byte* local_base) {
  for (int w = 0; w < workers(); ++w) {
    absl::Status s = Call<absl::Status>(w, [r, local_base](Worker& worker) {
      return worker.endpoint().memory().RegisterMapped(r, local_base);
    });
    if (!s.ok()) {
      for (int undo = 0; undo < w; ++undo) {
        Call<absl::Status>(undo, [lkey = r.lkey](Worker& worker) {
          return worker.endpoint().memory().Deregister(lkey);
        }).IgnoreError();
      }
      return s;
    }
  }
  rkey_of_lkey_[r.lkey] = r.rkey;
  rkeys_.insert(r.rkey);
  return absl::OkStatus();
}

absl::StatusOr<core::MemoryRegion> Engine::RegisterMemory(void* base, uint64_t length,
                                                          uint32_t access, uint32_t pd) {
  const uint64_t addr = reinterpret_cast<uint64_t>(base);
  if (absl::Status s = CheckRegion(addr, length, access); !s.ok()) return s;
  absl::MutexLock lock(&keys_mu_);
  absl::StatusOr<std::pair<uint32_t, uint32_t>> keys = CountedKeys();
  if (!keys.ok()) return keys.status();
  const core::MemoryRegion r{addr, length, keys->first, keys->second, access, pd};
  if (absl::Status s = RegisterInEveryWorker(r, static_cast<std::byte*>(base)); !s.ok()) return s;
  return r;
}

absl::StatusOr<core::MemoryRegion> Engine::RegisterMappedMemory(const MappedRegion& region,
                                                                uint32_t pd) {
  if (region.local_base == nullptr) {
    return absl::InvalidArgumentError("a mapped region needs its local mapping (local_base)");
  }
  if (absl::Status s = CheckRegion(region.addr, region.length, region.access); !s.ok()) return s;
  absl::MutexLock lock(&keys_mu_);
  absl::StatusOr<std::pair<uint32_t, uint32_t>> keys = RandomKeys();
  if (!keys.ok()) return keys.status();
  const core::MemoryRegion r{region.addr, region.length, keys->first, keys->second,
                             region.access, pd};
  if (absl::Status s = RegisterInEveryWorker(r, static_cast<std::byte*>(region.local_base));
      !s.ok()) {
    return s;
  }
  return r;
}

absl::Status Engine::DeregisterMemory(uint32_t lkey) {
  absl::MutexLock lock(&keys_mu_);
  absl::Status first;
  for (int w = 0; w < workers(); ++w) {
    absl::Status s = Call<absl::Status>(
        w, [lkey](Worker& worker) { return worker.endpoint().memory().Deregister(lkey); });
    if (first.ok()) first = s;
  }
  if (auto it = rkey_of_lkey_.find(lkey); it != rkey_of_lkey_.end()) {
    rkeys_.erase(it->second);
    rkey_of_lkey_.erase(it);
  }
  return first;
}

absl::StatusOr<uint32_t> Engine::AllocateProtectionDomain() {
  uint32_t pd = next_pd_.load(std::memory_order_relaxed);
  do {
    if (pd == core::kDefaultProtectionDomain) {  // wrapped: every other one was given out
      return absl::ResourceExhaustedError(
          "this engine has given out every protection domain: restart the process");
    }
  } while (!next_pd_.compare_exchange_weak(pd, pd + 1, std::memory_order_relaxed));
  return pd;
}

std::shared_ptr<CompletionChannel> Engine::CreateCompletionChannel(size_t depth) {
  return std::make_shared<CompletionChannel>(workers(), depth);
}

absl::StatusOr<std::shared_ptr<ConnectionChannel>> Engine::CreateConnection(
    const core::ConnectionConfig& config, const PeerRoute& route,
    std::shared_ptr<CompletionChannel> send_cq, std::shared_ptr<CompletionChannel> recv_cq,
    ObservePathEvents observe) {
  if (send_cq == nullptr || recv_cq == nullptr) {
    return absl::InvalidArgumentError("a connection needs a send and a receive completion queue");
  }
  if (config.plane_count > options_.planes) {
    return absl::InvalidArgumentError(absl::StrCat("connection uses ", config.plane_count,
                                                   " planes; the engine has ", options_.planes));
  }
  // An observer-only connection's own event ring is never written: the smallest there is.
  const size_t event_depth = observe == ObservePathEvents::kOnly ? 2 : options_.event_depth;
  auto channel = std::make_shared<ConnectionChannel>(
      config.local_conn_id, OwnerOf(config.local_conn_id), config.max_send_queue,
      config.max_recv_queue, event_depth, std::move(send_cq), std::move(recv_cq));
  if (absl::Status s = CreateConnectionOnChannel(config, route, channel, observe,
                                                 &workers_[channel->owner()]->own_marks());
      !s.ok()) {
    return s;
  }
  return channel;
}

absl::Status Engine::CreateConnectionOnChannel(const core::ConnectionConfig& config,
                                               const PeerRoute& route,
                                               std::shared_ptr<ConnectionChannel> channel,
                                               ObservePathEvents observe,
                                               Doorbell* posted_marks) {
  if (channel == nullptr || !channel->has_completion_channels()) {
    return absl::InvalidArgumentError(
        "a connection needs a channel with a send and a receive completion channel");
  }
  if (config.plane_count > options_.planes) {
    return absl::InvalidArgumentError(absl::StrCat("connection uses ", config.plane_count,
                                                   " planes; the engine has ", options_.planes));
  }
  const int owner = OwnerOf(config.local_conn_id);
  if (channel->conn_id() != config.local_conn_id || channel->owner() != owner) {
    return absl::InvalidArgumentError(absl::StrCat(
        "channel is for connection ", channel->conn_id(), " on worker ", channel->owner(),
        "; the config says connection ", config.local_conn_id, ", owned by worker ", owner));
  }
  for (CompletionChannel* cq : {&channel->send_cq(), &channel->recv_cq()}) {
    if (cq->workers() != workers()) {
      return absl::InvalidArgumentError(absl::StrCat("completion channel has rings for ",
                                                     cq->workers(), " workers; the engine has ",
                                                     workers()));
    }
  }
  return Call<absl::Status>(
      owner, [&config, &route, channel = std::move(channel), observe, posted_marks](Worker& w) {
        return w.AddConnection(config, route, channel, observe, posted_marks);
      });
}

absl::StatusOr<int> Engine::AddDoorbell(int worker, Doorbell* doorbell) {
  if (worker < 0 || worker >= workers()) {
    return absl::InvalidArgumentError(absl::StrCat("no worker ", worker));
  }
  return Call<absl::StatusOr<int>>(worker,
                                   [doorbell](Worker& w) { return w.AddDoorbell(doorbell); });
}

absl::Status Engine::RemoveDoorbell(int worker, const Doorbell* doorbell) {
  if (worker < 0 || worker >= workers()) {
    return absl::InvalidArgumentError(absl::StrCat("no worker ", worker));
  }
  return Call<absl::Status>(worker,
                            [doorbell](Worker& w) { return w.RemoveDoorbell(doorbell); });
}

absl::Status Engine::DestroyConnection(uint32_t conn_id) {
  return Call<absl::Status>(OwnerOf(conn_id),
                            [conn_id](Worker& w) { return w.RemoveConnection(conn_id); });
}

absl::StatusOr<ConnectionSnapshot> Engine::Snapshot(uint32_t conn_id) {
  return Call<absl::StatusOr<ConnectionSnapshot>>(
      OwnerOf(conn_id), [conn_id](Worker& w) { return w.Snapshot(conn_id); });
}

absl::Status Engine::RequestRotation(uint32_t conn_id, uint16_t path_id) {
  return Call<absl::Status>(OwnerOf(conn_id), [conn_id, path_id](Worker& w) {
    return w.RequestRotation(conn_id, path_id);
  });
}

absl::Status Engine::AbortConnection(uint32_t conn_id) {
  return Call<absl::Status>(OwnerOf(conn_id),
                            [conn_id](Worker& w) { return w.AbortConnection(conn_id); });
}

size_t Engine::PollObservedEvents(std::span<core::PathEvent> out) {
  absl::MutexLock lock(&observed_mu_);
  size_t n = 0;
  const size_t count = workers_.size();
  // Starting one worker further each call, so that no worker's events starve another's.
  for (size_t i = 0; i < count && n < out.size(); ++i) {
    n += workers_[(next_observed_worker_ + i) % count]->observed_events().PopBatch(out.subspan(n));
  }
  next_observed_worker_ = (next_observed_worker_ + 1) % count;
  return n;
}

std::vector<WorkerStats> Engine::Stats() {
  std::vector<WorkerStats> out;
  for (int w = 0; w < workers(); ++w) {
    out.push_back(Call<WorkerStats>(w, [](Worker& worker) { return worker.Stats(); }));
  }
  return out;
}

}  // namespace metaroce::engine
