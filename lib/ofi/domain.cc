// The domain: the engine (attached to metaroced, or embedded), its completion queues and buffer
// pools, memory registrations, and progress; with libfabric's domain and MR entry points.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/ofi/endpoint.h"
#include "lib/ofi/entry_points.h"
#include "lib/ofi/peer_protocol.h"

namespace metaroce::ofi {

int ErrorOfStatus(core::WcStatus status) {
  switch (status) {
    case core::WcStatus::kSuccess: return 0;
    case core::WcStatus::kLocLenErr: return FI_EMSGSIZE;
    case core::WcStatus::kLocQpOpErr: return FI_EOPBADSTATE;
    case core::WcStatus::kLocProtErr: return FI_EACCES;
    case core::WcStatus::kWrFlushErr: return FI_ECANCELED;
    case core::WcStatus::kRemInvReqErr: return FI_EINVAL;
    case core::WcStatus::kRemAccessErr: return FI_EACCES;
    case core::WcStatus::kRemOpErr: return FI_EREMOTEIO;
    case core::WcStatus::kRetryExcErr: return FI_ETIMEDOUT;
    case core::WcStatus::kRnrRetryExcErr: return FI_ENORX;
    case core::WcStatus::kGeneralErr: return FI_EOTHER;
  }
  return FI_EOTHER;
}

namespace {

absl::StatusOr<std::unique_ptr<api::Context>> OpenContext(const Settings& s) {
  const std::string socket =
      s.socket_path.empty() ? std::string(control::kDefaultSocketPath) : s.socket_path;
  absl::Status attach_error;
  if (s.mode != Mode::kEmbedded) {
    api::AttachOptions a;
    a.socket_path = socket;
    a.name = "libfabric";
    absl::StatusOr<std::unique_ptr<api::Context>> ctx = api::Context::Attach(a);
    if (ctx.ok() || s.mode == Mode::kAttached) return ctx;
    attach_error = ctx.status();
  }
  std::vector<std::string> interfaces = s.interfaces;
  if (interfaces.empty()) interfaces = InterfacesFromDaemonConfig("/etc/metaroce/metaroced.conf");
  if (interfaces.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no metaroced answers at ", socket,
        attach_error.ok() ? "" : absl::StrCat(" (", attach_error.message(), ")"),
        ", and no interfaces to run an engine on: set FI_METAROCE_INTERFACES"));
  }
  api::ContextOptions o;
  for (const std::string& ifname : interfaces) o.planes.push_back({ifname, ""});
  const bool privileged = geteuid() == 0;
  o.port_kind = (s.port_kind_set ? s.udp_port_kind : !privileged) ? api::PortKind::kUdp
                                                                   : api::PortKind::kAfXdp;
  o.workers = s.engine_threads;
  o.mtu = 0;  // the largest every plane carries
  return api::Context::Create(o);
}

}  // namespace

absl::StatusOr<std::shared_ptr<SharedEngine>> SharedEngine::For(const Settings& s) {
  // What makes two engines the same (OpenContext reads these).
  const std::string key = absl::StrCat(
      static_cast<int>(s.mode), "|", s.socket_path, "|", absl::StrJoin(s.interfaces, ","), "|",
      s.port_kind_set ? (s.udp_port_kind ? "udp" : "af_xdp") : "default", "|", s.engine_threads);
  static std::mutex registry_mu;
  static auto* registry = new absl::flat_hash_map<std::string, std::weak_ptr<SharedEngine>>();
  std::lock_guard<std::mutex> lock(registry_mu);
  std::weak_ptr<SharedEngine>& slot = (*registry)[key];
  if (std::shared_ptr<SharedEngine> open = slot.lock()) return open;
  absl::StatusOr<std::unique_ptr<api::Context>> ctx = OpenContext(s);
  if (!ctx.ok()) return ctx.status();
  auto engine = std::make_shared<SharedEngine>();
  engine->context = std::move(*ctx);
  slot = engine;
  return engine;
}

absl::StatusOr<std::unique_ptr<Domain>> Domain::Open(Fabric& fabric, const fi_info& info) {
  absl::StatusOr<std::shared_ptr<SharedEngine>> engine = SharedEngine::For(fabric.settings);
  if (!engine.ok()) return engine.status();
  std::unique_ptr<Domain> d(new Domain(std::move(*engine)));
  std::memset(&d->fid, 0, sizeof(d->fid));
  d->settings_ = fabric.settings;
  d->api_version_ = fabric.api_version;
  d->info_ = fi_dupinfo(&info);
  if (d->info_ == nullptr) return absl::ResourceExhaustedError("fi_dupinfo");
  absl::StatusOr<std::unique_ptr<api::CompletionQueue>> scq =
      d->context_->CreateCompletionQueue(4096);
  if (!scq.ok()) return scq.status();
  absl::StatusOr<std::unique_ptr<api::CompletionQueue>> rcq =
      d->context_->CreateCompletionQueue(4096);
  if (!rcq.ok()) return rcq.status();
  d->send_cq_ = std::move(*scq);
  d->recv_cq_ = std::move(*rcq);
  std::lock_guard<std::mutex> lock(d->mu);
  d->eager_pool_ = std::make_unique<BufferPool>(
      *d->context_, kHeaderBytes + d->settings_.eager_size, 64, size_t{1} << 20);
  d->chunk_pool_ =
      std::make_unique<BufferPool>(*d->context_, d->settings_.chunk_size, 8, size_t{1} << 16);
  const bool auto_progress = info.domain_attr->data_progress == FI_PROGRESS_AUTO;
  if (auto_progress || d->context_->is_inline()) {
    Domain* self = d.get();
    d->progress_thread_ = std::thread([self, auto_progress] { self->ProgressLoop(!auto_progress); });
  }
  return d;
}

Domain::~Domain() {
  stop_ = true;
  if (progress_thread_.joinable()) progress_thread_.join();
  {
    std::lock_guard<std::mutex> lock(mu);
    eager_pool_.reset();
    chunk_pool_.reset();
  }
  send_cq_.reset();
  recv_cq_.reset();
  context_ = nullptr;
  engine_.reset();  // the last domain of the engine closes it
  if (info_ != nullptr) fi_freeinfo(info_);
}

bool Domain::Progress() {
  progress_calls_.store(progress_calls_.load(std::memory_order_relaxed) + 1,
                        std::memory_order_relaxed);  // under mu: no lost update
  bool work = context_->Poll();
  for (Endpoint* ep : endpoints_) ep->TakeConnections();
  // Inline mode: what a round posted (receives reposted, the protocol's own messages) and the
  // transport's ACKs of what arrived go out with the next Poll(). When the application was given
  // something to answer, that is its next post: its answer then leaves before those ACKs, as the
  // engine's inline mode intends (each packet costs this CPU its trip through the fabric, and
  // the answer is what the peer waits for: fi_pingpong 8 B, 6.0 -> 4.1 us). When it was given
  // nothing (a send's completion, a rendezvous step, credits), they leave now, and what that
  // Poll() completed is handled in this call too: a message it received would otherwise wait
  // for the next call, whose Poll() first sends the message's held ACK (the engine releases
  // held ACKs in its next iteration), so that the ACK, not the answer, went first. fi_pingpong
  // 8 B met that on ~30 % of its messages (a peer's ACK handled, then its next message received
  // by the second Poll): ~5 us of the sending CPU's trip through the fabric before the answer.
  // An application that goes away instead of answering has the watchdog (ProgressLoop) send
  // the held ACKs within kWatchdogIdle.
  for (int polls = 1;; ++polls) {
    const uint64_t delivered_before = delivered;
    const bool handled = HandleCompletions();
    work = work || handled;
    if (!handled || delivered != delivered_before) break;
    if (polls == kMaxPollsPerProgress) {
      context_->Poll();  // what this round posted leaves now; its completions, next call
      break;
    }
    if (!context_->Poll()) break;  // it found nothing: no completion waits
    work = true;
  }
  return work;
}

bool Domain::HandleCompletions() {
  bool handled = false;
  std::span<api::WorkCompletion> wcs(wcs_);
  for (api::CompletionQueue* cq : {send_cq_.get(), recv_cq_.get()}) {
    for (;;) {
      const size_t n = cq->Poll(wcs);
      for (size_t i = 0; i < n; ++i) {
        auto it = connections_.find(wcs[i].conn_id);
        handled = true;
        if (it == connections_.end()) continue;  // of a connection already destroyed
        if (cq == send_cq_.get()) {
          it->second->OnSendCompletion(wcs[i]);
        } else {
          it->second->OnRecvCompletion(wcs[i]);
        }
      }
      if (n < wcs.size()) break;
    }
  }
  for (Endpoint* ep : endpoints_) ep->RetryWaiting();
  return handled;
}

void Domain::ProgressLoop(bool only_when_idle) {
  // Watchdog: it looks every kWatchdogIdle / 2 and progresses when a look finds no Progress()
  // call since the one before (the application away for at least kWatchdogIdle / 2).
  // As SCHED_BATCH it does not preempt the thread running when its sleep ends (the scheduler
  // lets it in at that thread's next tick or block): an application spinning on its CQ on the
  // same CPU was preempted at every look, ~3,000 times a second (fi_pingpong on the fabric,
  // both sides pinned: 1 MiB 2.25-2.33 -> 2.03-2.15 ms per transfer, 8 B 6.4-7.1 -> 5.7-6.0 us).
  // When the application blocks the CPU is free and the watchdog runs at once, as before; when
  // it computes without progress the watchdog waits for a tick (1-4 ms), still its fair share.
  if (only_when_idle) {
    sched_param param{};
    pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);  // best effort
  }
  uint64_t seen = progress_calls_.load(std::memory_order_relaxed);
  while (!stop_.load(std::memory_order_relaxed)) {
    if (only_when_idle) {
      std::this_thread::sleep_for(kWatchdogIdle / 2);
      const uint64_t now = progress_calls_.load(std::memory_order_relaxed);
      if (now != seen) {
        seen = now;
        continue;
      }
    }
    bool work;
    {
      std::lock_guard<std::mutex> lock(mu);
      work = Progress();
      seen = progress_calls_.load(std::memory_order_relaxed);  // this call is not the app's
    }
    if (!only_when_idle && !work) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

Mr* Domain::FindMr(uint64_t key) {
  auto it = mrs_.find(key);
  return it == mrs_.end() ? nullptr : it->second;
}

absl::Status Domain::AddMr(Mr* mr, uint64_t requested_key) {
  const bool prov_key = (mr_mode() & FI_MR_PROV_KEY) != 0;
  uint64_t key = requested_key;
  if (prov_key) {
    while (mrs_.contains(next_key_)) ++next_key_;
    key = next_key_++;
  } else if (mrs_.contains(key)) {
    return absl::AlreadyExistsError(absl::StrCat("memory key ", key, " is in use"));
  }
  mr->fid.key = key;
  mrs_[key] = mr;
  return absl::OkStatus();
}

void Domain::RemoveMr(Mr* mr) { mrs_.erase(mr->fid.key); }

bool Domain::CoversLocal(void* desc, const void* addr, size_t len) {
  if (desc == nullptr) return false;
  auto* mr = static_cast<Mr*>(desc);
  auto it = mrs_.find(mr->fid.key);
  if (it == mrs_.end() || it->second != mr) return false;
  const auto* p = static_cast<const std::byte*>(addr);
  return p >= mr->base && len <= mr->length && static_cast<size_t>(p - mr->base) <= mr->length - len;
}

void Domain::AddEndpoint(Endpoint* ep) { endpoints_.push_back(ep); }
void Domain::RemoveEndpoint(Endpoint* ep) { std::erase(endpoints_, ep); }
void Domain::AddConnection(uint32_t conn_id, Endpoint* ep) { connections_[conn_id] = ep; }
void Domain::RemoveConnection(uint32_t conn_id) { connections_.erase(conn_id); }

// ---- libfabric entry points: domain and memory registration -------------------------------------

namespace {

int DomainClose(fid* f) {
  auto* d = FromFid<Domain>(f);
  if (d->refs.load() > 0) return -FI_EBUSY;
  delete d;
  return 0;
}

int MrClose(fid* f) {
  auto* mr = FromFid<Mr>(f);
  Domain* d = mr->domain;
  {
    std::lock_guard<std::mutex> lock(d->mu);
    d->RemoveMr(mr);
  }
  --d->refs;
  delete mr;
  return 0;
}

int MrBind(fid*, fid*, uint64_t) { return 0; }
int MrControl(fid*, int command, void*) {
  return command == FI_ENABLE ? 0 : -FI_ENOSYS;
}

fi_ops kMrOps = {sizeof(fi_ops), MrClose, MrBind, MrControl, METAROCE_ENOSYS(fi_ops, ops_open),
                 nullptr, nullptr};

int RegisterIov(fid* f, const iovec* iov, size_t count, uint64_t access, uint64_t offset,
                uint64_t requested_key, uint64_t flags, fid_mr** out, void* context) {
  auto* d = FromFid<Domain>(f);
  if (count != 1 || (flags & ~uint64_t{FI_RMA_EVENT}) != 0) return -FI_EINVAL;
  if (access & (FI_READ | FI_REMOTE_READ) & ~(FI_READ)) {
    // Registering for remote reads is refused: the transport has no RDMA Read.
    return -FI_EINVAL;
  }
  auto* mr = new Mr;
  std::memset(&mr->fid, 0, sizeof(mr->fid));
  mr->fid.fid.fclass = FI_CLASS_MR;
  mr->fid.fid.context = context;
  mr->fid.fid.ops = &kMrOps;
  mr->fid.mem_desc = mr;
  mr->domain = d;
  mr->base = static_cast<std::byte*>(iov[0].iov_base);
  mr->length = iov[0].iov_len;
  mr->access = access;
  const bool virt = (d->mr_mode() & FI_MR_VIRT_ADDR) != 0;
  mr->address_base = virt ? reinterpret_cast<uint64_t>(mr->base) : offset;
  {
    std::lock_guard<std::mutex> lock(d->mu);
    if (!d->AddMr(mr, requested_key).ok()) {
      delete mr;
      return -FI_ENOKEY;
    }
  }
  ++d->refs;
  *out = &mr->fid;
  return 0;
}

int MrReg(fid* f, const void* buf, size_t len, uint64_t access, uint64_t offset,
          uint64_t requested_key, uint64_t flags, fid_mr** mr, void* context) {
  iovec v{const_cast<void*>(buf), len};
  return RegisterIov(f, &v, 1, access, offset, requested_key, flags, mr, context);
}

int MrRegv(fid* f, const iovec* iov, size_t count, uint64_t access, uint64_t offset,
           uint64_t requested_key, uint64_t flags, fid_mr** mr, void* context) {
  return RegisterIov(f, iov, count, access, offset, requested_key, flags, mr, context);
}

int MrRegattr(fid* f, const fi_mr_attr* attr, uint64_t flags, fid_mr** mr) {
  if (attr->iface != FI_HMEM_SYSTEM) return -FI_ENOSYS;
  return RegisterIov(f, attr->mr_iov, attr->iov_count, attr->access, attr->offset,
                     attr->requested_key, flags, mr, attr->context);
}

fi_ops kDomainOps = {sizeof(fi_ops), DomainClose, METAROCE_ENOSYS(fi_ops, bind),
                     METAROCE_ENOSYS(fi_ops, control), METAROCE_ENOSYS(fi_ops, ops_open), nullptr,
                     nullptr};
fi_ops_mr kDomainMrOps = {sizeof(fi_ops_mr), MrReg, MrRegv, MrRegattr};

int EndpointOpen(fid_domain* dom, fi_info* info, fid_ep** ep, void* context) {
  return OpenEndpoint(FromFid<Domain>(dom), info, ep, context);
}

fi_ops_domain kDomainDomainOps = {sizeof(fi_ops_domain),
                                  OpenAv,
                                  OpenCq,
                                  EndpointOpen,
                                  METAROCE_ENOSYS(fi_ops_domain, scalable_ep),
                                  OpenCntr,
                                  METAROCE_ENOSYS(fi_ops_domain, poll_open),
                                  METAROCE_ENOSYS(fi_ops_domain, stx_ctx),
                                  METAROCE_ENOSYS(fi_ops_domain, srx_ctx),
                                  METAROCE_ENOSYS(fi_ops_domain, query_atomic),
                                  METAROCE_ENOSYS(fi_ops_domain, query_collective),
                                  METAROCE_ENOSYS(fi_ops_domain, endpoint2)};

}  // namespace

int OpenDomain(fid_fabric* fabric, fi_info* info, fid_domain** out, void* context) {
  auto* f = FromFid<Fabric>(fabric);
  if (info == nullptr || info->domain_attr == nullptr) return -FI_EINVAL;
  absl::StatusOr<std::unique_ptr<Domain>> d = Domain::Open(*f, *info);
  if (!d.ok()) {
    Warn(absl::StrCat("fi_domain: ", d.status().message()));
    return d.status().code() == absl::StatusCode::kPermissionDenied ? -FI_EPERM : -FI_ENODEV;
  }
  Domain* dom = d->release();
  dom->fid.fid.fclass = FI_CLASS_DOMAIN;
  dom->fid.fid.context = context;
  dom->fid.fid.ops = &kDomainOps;
  dom->fid.ops = &kDomainDomainOps;
  dom->fid.mr = &kDomainMrOps;
  *out = &dom->fid;
  return 0;
}

}  // namespace metaroce::ofi
