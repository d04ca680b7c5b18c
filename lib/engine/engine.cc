#include "lib/engine/engine.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <bit>

#include "absl/strings/str_cat.h"

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

uint32_t Engine::AllocateConnectionId() {
  uint32_t id;
  do {
    id = next_conn_id_.fetch_add(1, std::memory_order_relaxed);
  } while (id == 0);
  return id;
}

absl::StatusOr<core::MemoryRegion> Engine::RegisterMemory(void* base, uint64_t length,
                                                          uint32_t access) {
  if (base == nullptr || length == 0) {
    return absl::InvalidArgumentError("memory region must be non-empty and non-null");
  }
  if ((access & core::access::kRemoteWrite) && !(access & core::access::kLocalWrite)) {
    // Same rule as ibv_reg_mr.
    return absl::InvalidArgumentError("REMOTE_WRITE requires LOCAL_WRITE");
  }
  absl::MutexLock lock(&keys_mu_);
  core::MemoryRegion r;
  r.addr = reinterpret_cast<uint64_t>(base);
  r.length = length;
  r.access = access;
  r.lkey = next_lkey_++;
  // Distinct from every lkey (as MemoryTable::Register does), and still >= kFirstCallerKey.
  r.rkey = r.lkey ^ 0x5a5a0000u;
  for (int w = 0; w < workers(); ++w) {
    absl::Status s = Call<absl::Status>(
        w, [r](Worker& worker) { return worker.endpoint().memory().RegisterWithKeys(r); });
    if (!s.ok()) {
      for (int undo = 0; undo < w; ++undo) {
        Call<absl::Status>(undo, [lkey = r.lkey](Worker& worker) {
          return worker.endpoint().memory().Deregister(lkey);
        }).IgnoreError();
      }
      return s;
    }
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
  return first;
}

std::shared_ptr<CompletionChannel> Engine::CreateCompletionChannel(size_t depth) {
  return std::make_shared<CompletionChannel>(workers(), depth);
}

absl::StatusOr<std::shared_ptr<ConnectionChannel>> Engine::CreateConnection(
    const core::ConnectionConfig& config, const PeerRoute& route,
    std::shared_ptr<CompletionChannel> send_cq, std::shared_ptr<CompletionChannel> recv_cq) {
  if (send_cq == nullptr || recv_cq == nullptr) {
    return absl::InvalidArgumentError("a connection needs a send and a receive completion queue");
  }
  if (config.plane_count > options_.planes) {
    return absl::InvalidArgumentError(absl::StrCat("connection uses ", config.plane_count,
                                                   " planes; the engine has ", options_.planes));
  }
  auto channel = std::make_shared<ConnectionChannel>(
      config.local_conn_id, OwnerOf(config.local_conn_id), config.max_send_queue,
      config.max_recv_queue, options_.event_depth, std::move(send_cq), std::move(recv_cq));
  if (absl::Status s = CreateConnectionOnChannel(config, route, channel); !s.ok()) return s;
  return channel;
}

absl::Status Engine::CreateConnectionOnChannel(const core::ConnectionConfig& config,
                                               const PeerRoute& route,
                                               std::shared_ptr<ConnectionChannel> channel) {
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
  return Call<absl::Status>(owner, [&config, &route, channel = std::move(channel)](Worker& w) {
    return w.AddConnection(config, route, channel);
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

std::vector<WorkerStats> Engine::Stats() {
  std::vector<WorkerStats> out;
  for (int w = 0; w < workers(); ++w) {
    out.push_back(Call<WorkerStats>(w, [](Worker& worker) { return worker.Stats(); }));
  }
  return out;
}

}  // namespace metaroce::engine
