#include "lib/api/attached_backend.h"

#include <cerrno>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "lib/api/app_protocol.h"
#include "lib/api/completion_queue.h"
#include "lib/api/context.h"
#include "lib/api/stats_json.h"
#include "lib/control/absl_view.h"

namespace metaroce::api {
namespace {

using control::Json;
namespace app = app_protocol;

// This Abseil's StrCat takes absl::string_view, which is not std::string_view here.

// A member of a daemon result that must be an unsigned integer within [lo, hi].
absl::StatusOr<uint64_t> UintIn(const Json& result, std::string_view key, uint64_t lo,
                                uint64_t hi) {
  absl::StatusOr<uint64_t> v = result.GetUint(key);
  if (!v.ok()) return v.status();
  if (*v < lo || *v > hi) {
    return absl::InvalidArgumentError(absl::StrCat("metaroced answered ", control::AbslView(key), " ", *v,
                                                   ", outside ", lo, "..", hi));
  }
  return *v;
}

// The daemon is another version when its answers do not have the shape we expect.
absl::Status FromDaemon(std::string_view method, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(control::AbslView(method), ": unexpected answer from metaroced (",
                                             s.message(), "): is it the same version?"));
}

// What AttachedBackend does to a connection on the Connection's behalf.
class AttachedConnectionControl final : public ConnectionControl {
 public:
  AttachedConnectionControl(AttachedBackend& session, uint32_t conn_id)
      : session_(session), conn_id_(conn_id) {}
  ~AttachedConnectionControl() override {
    session_.Call(app::kQpDestroy, Params()).IgnoreError();
  }

  absl::StatusOr<ConnectionStats> Stats() override {
    absl::StatusOr<Json> r = session_.Call(app::kQpStats, Params());
    if (!r.ok()) return r.status();
    absl::StatusOr<ConnectionStats> s = ConnectionStatsFromJson(*r);
    if (!s.ok()) return FromDaemon(app::kQpStats, s.status());
    return s;
  }
  absl::Status RequestRotation(uint16_t path_id) override {
    Json p = Params();
    p["path"] = path_id;
    return session_.Call(app::kQpRotate, std::move(p)).status();
  }
  absl::Status Abort() override { return session_.Call(app::kQpAbort, Params()).status(); }

 private:
  Json Params() const {
    Json p = Json::MakeObject();
    p["conn_id"] = conn_id_;
    return p;
  }
  AttachedBackend& session_;
  const uint32_t conn_id_;
};

std::string ProgramName() {
  return program_invocation_short_name != nullptr ? program_invocation_short_name : "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<AttachedBackend>> AttachedBackend::Attach(
    const AttachOptions& options) {
  absl::StatusOr<control::Client> client =
      control::Client::Connect(options.socket_path, options.timeout);
  if (!client.ok()) return client.status();
  std::unique_ptr<AttachedBackend> b(new AttachedBackend(*std::move(client)));
  Json params = Json::MakeObject();
  params["name"] = options.name.empty() ? ProgramName() : options.name;
  std::vector<UniqueFd> fds;
  absl::StatusOr<Json> result = b->Call(app::kAttach, std::move(params), &fds);
  if (!result.ok()) {
    if (absl::IsUnimplemented(result.status())) {
      return absl::UnimplementedError(absl::StrCat(
          "metaroced at ", options.socket_path,
          " does not serve applications (no app.attach): update it"));
    }
    return result.status();
  }
  if (absl::Status s = b->TakeAttachResult(*result, std::move(fds)); !s.ok()) {
    return FromDaemon(app::kAttach, s);
  }
  return b;
}

AttachedBackend::~AttachedBackend() = default;

absl::Status AttachedBackend::TakeAttachResult(const Json& r, std::vector<UniqueFd> fds) {
  absl::StatusOr<uint64_t> session = r.GetUint("session");
  if (!session.ok()) return session.status();
  facts_.session = *session;
  absl::StatusOr<uint64_t> workers =
      UintIn(r, "workers", 1, engine::CompletionChannel::kMaxWorkers);
  if (!workers.ok()) return workers.status();
  facts_.workers = static_cast<int>(*workers);
  const Json* planes = r.Find("planes");
  if (planes == nullptr || planes->size() < 1 || planes->size() > kMaxPlanes) {
    return absl::InvalidArgumentError(absl::StrCat("planes: expected 1..", kMaxPlanes));
  }
  for (const Json& plane : planes->array()) {
    absl::StatusOr<std::string> text = plane.GetString("address");
    if (!text.ok()) return text.status();
    absl::StatusOr<io::IpAddress> a = io::IpAddress::Parse(*text);
    if (!a.ok()) return a.status();
    facts_.addresses.push_back(*a);
  }
  absl::StatusOr<uint64_t> mtu = UintIn(r, "mtu", 64, 65535);
  absl::StatusOr<uint64_t> udp_port = UintIn(r, "udp_port", 1, 65535);
  absl::StatusOr<uint64_t> lo = UintIn(r, "rotate_port_lo", 1, 65535);
  absl::StatusOr<uint64_t> hi = UintIn(r, "rotate_port_hi", 1, 65535);
  const size_t needed = app::DoorbellOffset(facts_.workers);
  absl::StatusOr<uint64_t> bell_bytes = UintIn(r, "doorbell_bytes", needed, uint64_t{1} << 24);
  for (const auto* s : {&mtu, &udp_port, &lo, &hi, &bell_bytes}) {
    if (!s->ok()) return s->status();
  }
  facts_.mtu = static_cast<uint32_t>(*mtu);
  facts_.udp_port = static_cast<uint16_t>(*udp_port);
  facts_.ports = {static_cast<uint16_t>(*lo), static_cast<uint16_t>(*hi)};
  if (fds.size() != 1 + static_cast<size_t>(facts_.workers)) {
    return absl::InvalidArgumentError(absl::StrCat("got ", fds.size(),
                                                   " descriptors; expected the doorbell block and ",
                                                   facts_.workers, " doorbell sockets"));
  }
  absl::StatusOr<std::shared_ptr<SharedMapping>> block =
      MapBlock(fds, static_cast<size_t>(*bell_bytes), "doorbell");
  if (!block.ok()) return block.status();
  doorbell_block_ = *std::move(block);
  for (int w = 0; w < facts_.workers; ++w) {
    absl::StatusOr<engine::Doorbell*> bell = engine::Doorbell::AttachAt(
        doorbell_block_->data() + app::DoorbellOffset(w), app::kDoorbellStride);
    if (!bell.ok()) return bell.status();
    doorbells_.push_back(*bell);
    doorbell_fds_.push_back(std::move(fds[1 + w]));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<SharedMapping>> AttachedBackend::MapBlock(
    std::vector<UniqueFd>& fds, size_t needed, std::string_view what) {
  if (fds.empty() || !fds[0].valid()) {
    return absl::InvalidArgumentError(absl::StrCat("no descriptor came with the ", control::AbslView(what),
                                                   " block"));
  }
  absl::StatusOr<size_t> bytes = FileBytes(fds[0].get());
  if (!bytes.ok()) return bytes.status();
  if (*bytes < needed || *bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat("the ", control::AbslView(what), " block has ", *bytes,
                                                   " bytes; ", needed, " needed"));
  }
  return SharedMapping::Map(fds[0].get(), *bytes);  // the mapping outlives the descriptor
}

absl::StatusOr<Json> AttachedBackend::Call(std::string_view method, Json params,
                                           std::vector<UniqueFd>* fds) {
  std::vector<int> received;
  absl::StatusOr<Json> result;
  {
    absl::MutexLock lock(&call_mu_);
    result = client_.CallWithFds(method, std::move(params), {}, &received);
  }
  std::vector<UniqueFd> owned = AdoptFds(received);
  if (fds != nullptr) *fds = std::move(owned);
  return result;
}

absl::StatusOr<std::span<std::byte>> AttachedBackend::AllocateMemory(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes");
  Json params = Json::MakeObject();
  params["bytes"] = static_cast<uint64_t>(bytes);
  std::vector<UniqueFd> fds;
  absl::StatusOr<Json> r = Call(app::kMemAlloc, std::move(params), &fds);
  if (!r.ok()) return r.status();
  absl::StatusOr<uint64_t> mem = r->GetUint("mem");
  if (!mem.ok()) return FromDaemon(app::kMemAlloc, mem.status());
  absl::StatusOr<std::shared_ptr<SharedMapping>> mapping = MapBlock(fds, bytes, "memory");
  if (!mapping.ok()) {
    Json undo = Json::MakeObject();
    undo["mem"] = *mem;
    Call(app::kMemFree, std::move(undo)).IgnoreError();
    return mapping.status();
  }
  const std::span<std::byte> span = (*mapping)->bytes();
  absl::MutexLock lock(&blocks_mu_);
  blocks_[reinterpret_cast<uintptr_t>(span.data())] = Block{*mem, *std::move(mapping)};
  return span;
}

absl::Status AttachedBackend::FreeMemory(std::span<std::byte> block) {
  uint64_t mem = 0;
  {
    absl::MutexLock lock(&blocks_mu_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(block.data()));
    if (it == blocks_.end() || it->second.mapping->size() != block.size()) {
      return absl::NotFoundError(
          "no block from Context::AllocateMemory starts there with that size: pass the span it "
          "returned");
    }
    mem = it->second.mem;
  }
  Json params = Json::MakeObject();
  params["mem"] = mem;
  if (absl::Status s = Call(app::kMemFree, std::move(params)).status(); !s.ok()) return s;
  absl::MutexLock lock(&blocks_mu_);
  blocks_.erase(reinterpret_cast<uintptr_t>(block.data()));
  return absl::OkStatus();
}

absl::StatusOr<core::MemoryRegion> AttachedBackend::RegisterMemory(void* addr, size_t length,
                                                                   uint32_t access) {
  const auto first = reinterpret_cast<uintptr_t>(addr);
  uint64_t mem = 0, offset = 0;
  {
    absl::MutexLock lock(&blocks_mu_);
    auto it = blocks_.upper_bound(first);
    const bool inside = it != blocks_.begin() && length > 0 &&
                        first - std::prev(it)->first <= std::prev(it)->second.mapping->size() &&
                        length <= std::prev(it)->second.mapping->size() -
                                      (first - std::prev(it)->first);
    if (!inside) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attached contexts register memory from Context::AllocateMemory: [",
          absl::Hex(first), ", +", length, ") is not inside one such block"));
    }
    --it;
    mem = it->second.mem;
    offset = first - it->first;
  }
  Json params = Json::MakeObject();
  params["mem"] = mem;
  params["offset"] = offset;
  params["length"] = static_cast<uint64_t>(length);
  params["access"] = access;
  params["addr"] = static_cast<uint64_t>(first);
  absl::StatusOr<Json> r = Call(app::kMrReg, std::move(params));
  if (!r.ok()) return r.status();
  core::MemoryRegion region;
  absl::StatusOr<uint64_t> lkey = UintIn(*r, "lkey", 1, std::numeric_limits<uint32_t>::max());
  absl::StatusOr<uint64_t> rkey = UintIn(*r, "rkey", 1, std::numeric_limits<uint32_t>::max());
  if (!lkey.ok() || !rkey.ok()) {
    return FromDaemon(app::kMrReg, lkey.ok() ? rkey.status() : lkey.status());
  }
  region.addr = first;
  region.length = length;
  region.lkey = static_cast<uint32_t>(*lkey);
  region.rkey = static_cast<uint32_t>(*rkey);
  region.access = access;
  return region;
}

absl::Status AttachedBackend::DeregisterMemory(const core::MemoryRegion& region) {
  Json params = Json::MakeObject();
  params["lkey"] = region.lkey;
  return Call(app::kMrDereg, std::move(params)).status();
}

absl::StatusOr<std::unique_ptr<CompletionQueue>> AttachedBackend::CreateCompletionQueue(
    size_t depth) {
  Json params = Json::MakeObject();
  params["depth"] = static_cast<uint64_t>(depth);
  std::vector<UniqueFd> fds;
  absl::StatusOr<Json> r = Call(app::kCqCreate, std::move(params), &fds);
  if (!r.ok()) return r.status();
  absl::StatusOr<uint64_t> id = r->GetUint("cq");
  if (!id.ok()) return FromDaemon(app::kCqCreate, id.status());
  auto destroy = [this, id = *id] {
    Json p = Json::MakeObject();
    p["cq"] = id;
    Call(app::kCqDestroy, std::move(p)).IgnoreError();
  };
  const size_t needed = engine::CompletionChannel::BytesFor(facts_.workers, depth);
  absl::StatusOr<std::shared_ptr<SharedMapping>> mapping = MapBlock(fds, needed, "completion");
  if (!mapping.ok()) {
    destroy();
    return mapping.status();
  }
  engine::BlockMemory memory{(*mapping)->data(), (*mapping)->size(), *mapping};
  absl::StatusOr<std::shared_ptr<engine::CompletionChannel>> channel =
      engine::CompletionChannel::AttachAt(std::move(memory), facts_.workers, depth);
  if (!channel.ok()) {
    destroy();
    return FromDaemon(app::kCqCreate, channel.status());
  }
  return std::unique_ptr<CompletionQueue>(
      new CompletionQueue(*std::move(channel), *id, std::move(destroy)));
}

absl::StatusOr<ConnectionSlot> AttachedBackend::PrepareConnection() {
  absl::StatusOr<Json> r = Call(app::kQpPrepare, Json::MakeObject());
  if (!r.ok()) return r.status();
  absl::StatusOr<uint64_t> id = UintIn(*r, "conn_id", 1, std::numeric_limits<uint32_t>::max());
  if (!id.ok()) return FromDaemon(app::kQpPrepare, id.status());
  ConnectionSlot slot;
  slot.conn_id = static_cast<uint32_t>(*id);
  if (r->Find("offer") != nullptr) {  // a daemon of an earlier release offers nothing
    absl::StatusOr<uint64_t> offer = UintIn(*r, "offer", 0, std::numeric_limits<uint32_t>::max());
    if (!offer.ok()) return FromDaemon(app::kQpPrepare, offer.status());
    slot.offer = static_cast<uint32_t>(*offer);
  }
  return slot;
}

absl::StatusOr<ConnectionBinding> AttachedBackend::CreateConnection(
    const ConnectOptions& o, const ConnectionParameters& ours, const ConnectionParameters& peer) {
  if (o.send_cq->daemon_id_ == 0 || o.recv_cq->daemon_id_ == 0) {
    return absl::InvalidArgumentError(
        "an attached context's connections need completion queues of that context");
  }
  if (o.path_events_to_observer) {
    return absl::InvalidArgumentError(
        "path_events_to_observer: an attached context's path events are its connections' (the "
        "daemon observes them)");
  }
  const engine::ConnectionChannel::Depths depths{ours.max_send_queue, ours.max_recv_queue,
                                                 app::kDefaultEventDepth};
  ExchangeMessage m;
  m.kind = ExchangeKind::kRequest;
  Json params = Json::MakeObject();
  params["conn_id"] = ours.conn_id;
  m.params = ours;
  params["ours"] = EncodeExchangeHex(m);
  m.params = peer;
  params["peer"] = EncodeExchangeHex(m);
  params["send_cq"] = o.send_cq->daemon_id_;
  params["recv_cq"] = o.recv_cq->daemon_id_;
  Json& d = params["depths"] = Json::MakeObject();
  d["send"] = static_cast<uint64_t>(depths.send);
  d["recv"] = static_cast<uint64_t>(depths.recv);
  d["event"] = static_cast<uint64_t>(depths.event);
  std::vector<UniqueFd> fds;
  absl::StatusOr<Json> r = Call(app::kQpCreate, std::move(params), &fds);
  if (!r.ok()) return r.status();
  // From here on the daemon holds the connection: the control's destructor destroys it again if
  // anything below fails.
  auto control = std::make_unique<AttachedConnectionControl>(*this, ours.conn_id);
  absl::StatusOr<uint64_t> owner = UintIn(*r, "owner", 0, facts_.workers - 1);
  if (!owner.ok()) return FromDaemon(app::kQpCreate, owner.status());
  absl::StatusOr<std::shared_ptr<SharedMapping>> mapping =
      MapBlock(fds, engine::ConnectionChannel::BytesFor(depths), "connection");
  if (!mapping.ok()) return mapping.status();
  engine::BlockMemory memory{(*mapping)->data(), (*mapping)->size(), *mapping};
  const int worker = static_cast<int>(*owner);
  absl::StatusOr<std::shared_ptr<engine::ConnectionChannel>> channel =
      engine::ConnectionChannel::AttachAt(std::move(memory), depths, ours.conn_id, worker);
  if (!channel.ok()) return FromDaemon(app::kQpCreate, channel.status());
  // Where our posts mark the connection for its worker (lib/engine/doorbell.h); without a slot
  // the worker looks at its rings on every loop.
  if (r->Find("posted_slot") != nullptr) {
    absl::StatusOr<uint64_t> s = UintIn(*r, "posted_slot", 0, engine::Doorbell::kPostedSlots - 1);
    if (!s.ok()) return FromDaemon(app::kQpCreate, s.status());
    (*channel)->SetPostedMark(doorbells_[worker], static_cast<uint32_t>(*s));
  }
  ConnectionBinding b;
  b.channel = *std::move(channel);
  b.wake.worker = worker;
  b.wake.doorbell = doorbells_[worker];
  b.wake.doorbell_fd = doorbell_fds_[worker].get();
  b.control = std::move(control);
  return b;
}

}  // namespace metaroce::api
