// The provider's libfabric objects: each a C++ object whose first member is the libfabric
// struct the application holds (fid_fabric, fid_domain, fid_ep, fid_cq, ...), so that a fid
// handed back to the provider is the object (FromFid). The C entry points that libfabric calls
// are in the .cc of each object (fabric.cc, domain.cc, endpoint.cc, completion.cc,
// address_vector.cc); the message protocol is endpoint.cc's (docs/ofi.md).
//
// Locking: every object of a domain is guarded by its domain's mutex (Domain::mu), taken by each
// C entry point: the provider offers FI_THREAD_SAFE whatever the application asks. Progress
// (Domain::Progress) runs inside fi_cq_read, fi_cntr_read and their relatives, under that lock.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include <mutex>
#include "lib/api/context.h"
#include "lib/ofi/address.h"
#include "lib/ofi/buffer_pool.h"
#include "lib/ofi/info.h"
#include "lib/ofi/settings.h"

namespace metaroce::ofi {

template <typename T, typename F>
T* FromFid(F* fid) {
  return reinterpret_cast<T*>(fid);
}

class Endpoint;

struct Fabric {
  fid_fabric fid;  // first
  Settings settings;
  uint32_t api_version = 0;
};

// One completion, as fi_cq_tagged_entry plus what error entries and readfrom need.
struct CqEntry {
  void* op_context = nullptr;
  uint64_t flags = 0;
  size_t len = 0;
  void* buf = nullptr;
  uint64_t data = 0;
  uint64_t tag = 0;
  fi_addr_t source = FI_ADDR_NOTAVAIL;
  int err = 0;          // 0: a completion; else a positive FI_E* (an error entry)
  int prov_errno = 0;   // the ibv_wc_status of the failure
  size_t olen = 0;      // FI_ETRUNC: bytes that did not fit
};

class Domain;

struct Cq {
  fid_cq fid;  // first
  Domain* domain = nullptr;
  fi_cq_format format = FI_CQ_FORMAT_CONTEXT;
  std::deque<CqEntry> entries;  // guarded by domain->mu
  std::atomic<int> refs{0};     // endpoints bound
  // fi_cq_sread's sleep (on domain->mu): woken by an entry pushed (by another thread's progress,
  // or the domain's progress thread) and by fi_cq_signal. Guarded by domain->mu.
  std::condition_variable wake;
  int sleepers = 0;       // threads in fi_cq_sread's wait
  bool signaled = false;  // fi_cq_signal since the last fi_cq_sread returned
  void Push(const CqEntry& e) {
    entries.push_back(e);
    ++*delivered;
    if (sleepers > 0) wake.notify_all();
  }
  uint64_t* delivered = nullptr;  // the domain's count of entries given to the application
};

struct Cntr {
  fid_cntr fid;  // first
  Domain* domain = nullptr;
  std::atomic<uint64_t> value{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<int> refs{0};
};

struct Av {
  fid_av fid;  // first
  Domain* domain = nullptr;
  fi_av_type type = FI_AV_TABLE;
  std::vector<EndpointAddress::Bytes> entries;  // by fi_addr
  std::vector<bool> valid;
  absl::flat_hash_map<std::string, fi_addr_t> by_address;
  uint64_t generation = 1;  // changes with every insert or remove
  std::atomic<int> refs{0};
  // The fi_addr of the endpoint at `address`, or FI_ADDR_NOTAVAIL.
  fi_addr_t Lookup(const EndpointAddress::Bytes& address) const;
};

struct Mr {
  fid_mr fid;  // first
  Domain* domain = nullptr;
  std::byte* base = nullptr;
  size_t length = 0;
  uint64_t access = 0;
  uint64_t address_base = 0;  // the address remote writes name base by (VIRT_ADDR: base)
};

struct Eq {
  fid_eq fid;  // first
  Domain* domain = nullptr;  // none: opened on the fabric
};

// The engine a process's domains share (docs/ofi.md, "Domains and processes"): one
// api::Context per process for each set of engine settings (mode, socket, interfaces, port
// kind, engine threads), opened by the first domain that asks and closed with the last. An
// embedded engine owns its interfaces' XDP program and MetaRoCE's UDP port, so a second one in
// the process could not open; attached, one attachment serves every domain. Its mutex is every
// sharing domain's lock (Domain::mu): an inline engine's data path must come from one thread at
// a time (lib/api/context.h), and two domains' progress would otherwise poll it at once.
struct SharedEngine {
  std::mutex mu;
  std::unique_ptr<api::Context> context;
  // The process's engine for `s`: the one open (shared), or a new one (OpenContext's errors).
  static absl::StatusOr<std::shared_ptr<SharedEngine>> For(const Settings& s);
};

class Domain {
 public:
  fid_domain fid;  // first

  // Opens the engine (attached or embedded, as the settings say) and the domain's queues.
  static absl::StatusOr<std::unique_ptr<Domain>> Open(Fabric& fabric, const fi_info& info);
  ~Domain();

  // Receives and dispatches what the engine completed, sets up connections the connection
  // managers finished, and retries what waited for resources. Requires mu.
  // Returns whether it found work.
  bool Progress();

  // Memory registrations by key (remote writes name them).
  Mr* FindMr(uint64_t key);
  absl::Status AddMr(Mr* mr, uint64_t requested_key);
  void RemoveMr(Mr* mr);
  // Whether [addr, addr+len) lies inside a registration `desc` (FI_MR_LOCAL checks).
  bool CoversLocal(void* desc, const void* addr, size_t len);

  void AddEndpoint(Endpoint* ep);
  void RemoveEndpoint(Endpoint* ep);
  // Connections of the domain's endpoints by local connection id (completions carry it).
  void AddConnection(uint32_t conn_id, Endpoint* ep);
  void RemoveConnection(uint32_t conn_id);

  // Guards the domain and every object on it: the shared engine's mutex (SharedEngine), so
  // held by one domain of the engine at a time.
  std::mutex& mu;
  api::Context& context() { return *context_; }
  api::CompletionQueue& send_cq() { return *send_cq_; }
  api::CompletionQueue& recv_cq() { return *recv_cq_; }
  BufferPool& eager_pool() { return *eager_pool_; }
  BufferPool& chunk_pool() { return *chunk_pool_; }
  const Settings& settings() const { return settings_; }
  const fi_info& info() const { return *info_; }
  // The mr_mode bits the domain acts by (FI_MR_BASIC and FI_MR_SCALABLE translated).
  uint64_t mr_mode() const { return EffectiveMrMode(api_version_, info_->domain_attr->mr_mode); }
  // Whether rendezvous writes from and into the application's buffers: the engine can register
  // any of this process's memory (embedded; attached: only shared memory) and
  // FI_METAROCE_ZERO_COPY is not 0.
  bool registers_any_memory() const { return !context_->is_attached() && settings_.zero_copy; }
  uint32_t api_version() const { return api_version_; }
  std::atomic<int> refs{0};  // objects opened on it
  uint64_t delivered = 0;    // completion entries given to the application (its CQs), ever

 private:
  explicit Domain(std::shared_ptr<SharedEngine> engine)
      : mu(engine->mu), engine_(std::move(engine)), context_(engine_->context.get()) {}
  // A thread of the domain's that calls Progress(), until the domain closes:
  //   FI_PROGRESS_AUTO: every 50 us, or again at once while it finds work;
  //   an inline engine (FI_METAROCE_ENGINE_THREADS=0) under manual progress: only when the
  //   application has not called for kWatchdogIdle / 2 (to kWatchdogIdle), so that the
  //   transport still answers its peers (ACKs, probes) while the application blocks elsewhere
  //   (fi_pingpong waits on a TCP socket between sizes while its peer waits for ACKs of its
  //   last send).
  void ProgressLoop(bool only_when_idle);
  static constexpr std::chrono::microseconds kWatchdogIdle{500};
  // Progress()'s handling of the transport's completions (both queues), then the endpoints'
  // waiting work; returns whether it found a completion. Requires mu.
  bool HandleCompletions();
  // Rounds of completions one Progress() handles at most, each after an engine iteration: the
  // first, then another after each round that gave the application nothing (bounded, so that a
  // call returns; the last such round's posts still leave in the call, as one more iteration).
  static constexpr int kMaxPollsPerProgress = 4;
  std::thread progress_thread_;
  std::atomic<bool> stop_{false};
  // Progress() calls so far: the watchdog reads it, so that a call costs no clock read.
  std::atomic<uint64_t> progress_calls_{0};
  Settings settings_;
  uint32_t api_version_ = 0;
  fi_info* info_ = nullptr;  // a copy
  std::shared_ptr<SharedEngine> engine_;  // released last (~Domain)
  api::Context* context_ = nullptr;        // engine_'s
  std::unique_ptr<api::CompletionQueue> send_cq_;
  std::unique_ptr<api::CompletionQueue> recv_cq_;
  std::unique_ptr<BufferPool> eager_pool_;
  std::unique_ptr<BufferPool> chunk_pool_;
  absl::flat_hash_map<uint64_t, Mr*> mrs_;
  uint64_t next_key_ = 1;
  std::vector<Endpoint*> endpoints_;
  absl::flat_hash_map<uint32_t, Endpoint*> connections_;
  // Progress()'s room for the transport's completions (under mu): a member, so that a call
  // does not zero 2 KB of stack first (it was a quarter of Progress's own time when polling).
  std::array<api::WorkCompletion, 64> wcs_;
};

// FI_E* for an ibv_wc_status (core::WcStatus).
int ErrorOfStatus(core::WcStatus status);

}  // namespace metaroce::ofi
