#include "daemon/app_session.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/params.h"
#include "lib/api/app_protocol.h"
#include "lib/api/exchange.h"
#include "lib/api/stats_json.h"
#include "lib/control/absl_view.h"
#include "lib/engine/doorbell.h"

namespace metaroce::daemon {
namespace {

using control::Json;
namespace app = api::app_protocol;

// Each shared block is one mapping in the daemon; vm.max_map_count is 65530 by default.
constexpr size_t kMaxSharedBlocks = 32768;
constexpr size_t kMaxRegionsPerSession = 16384;
// Ids from qp.prepare not used yet; beyond this the oldest is forgotten.
constexpr size_t kMaxPreparedPerSession = 1024;
constexpr size_t kMaxNameBytes = 64;
// app.attach sends the doorbell block and one socket per worker in one message (SCM_MAX_FD).
constexpr int kMaxFdsPerMessage = 253;
// Larger requests are refused before any arithmetic on them.
constexpr uint64_t kMaxBlockBytes = uint64_t{1} << 46;

// This Abseil's StrCat takes absl::string_view, which is not std::string_view here.

absl::Status NoConnection(uint32_t id) {
  return absl::NotFoundError(absl::StrCat("no connection ", id));
}

// A member that must be an unsigned integer within [lo, hi].
absl::StatusOr<uint64_t> UintIn(const Json& params, std::string_view key, uint64_t lo,
                                uint64_t hi) {
  absl::StatusOr<uint64_t> v = params.GetUint(key);
  if (!v.ok()) return v.status();
  if (*v < lo || *v > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(control::AbslView(key), " ", *v, " is outside ", lo, "..", hi));
  }
  return *v;
}

// An application's name as the daemon shows and logs it: at most `bytes` bytes, cut at a UTF-8
// character boundary, control characters replaced (a name cannot forge a log line).
std::string PrintableName(std::string s, size_t bytes) {
  if (s.size() > bytes) {
    size_t cut = bytes;
    while (cut > 0 && (static_cast<uint8_t>(s[cut]) & 0xc0) == 0x80) --cut;
    s.resize(cut);
  }
  for (char& c : s) {
    if (static_cast<uint8_t>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return s;
}

}  // namespace

struct AppSessions::MemoryBlock {
  std::shared_ptr<api::SharedMapping> mapping;
  size_t regions = 0;  // registered in it now
};

struct AppSessions::Region {
  uint64_t mem = 0;
  core::MemoryRegion region;
};

struct AppSessions::CompletionQueue {
  std::shared_ptr<engine::CompletionChannel> channel;
  uint64_t bytes = 0;  // charged
  size_t users = 0;    // connections bound to it
};

struct AppSessions::AppConnection {
  uint32_t id = 0;
  bool deleted_by_operator = false;  // conn.del: aborted, still the application's
  uint64_t serial = 0;
  uint64_t send_cq = 0, recv_cq = 0;
  std::shared_ptr<engine::ConnectionChannel> channel;  // holds its block's mapping
  uint64_t bytes = 0;  // charged: the ring block and the core's reorder buffer
  std::string peer;    // the peer's plane 0 address
  uint32_t peer_id = 0;
  uint16_t paths = 0;
  int planes = 0;
  std::string profile;
  double created_s = 0;
};

struct AppSessions::Session {
  uint64_t id = 0;  // the control connection's client id
  pid_t pid = 0;
  uid_t uid = 0;
  std::string name;
  uint32_t pd = 0;  // its protection domain: its regions and connections, no one else's
  std::shared_ptr<api::SharedMapping> doorbell_block;
  std::vector<engine::Doorbell*> doorbells;  // attached to the engine's workers, by worker
  std::map<uint64_t, MemoryBlock> blocks;
  std::map<uint32_t, Region> regions;  // by lkey
  std::map<uint64_t, CompletionQueue> cqs;
  std::map<uint32_t, AppConnection> connections;
  std::deque<uint32_t> prepared;  // qp.prepare's ids, not used yet
  uint64_t next_id = 1;           // of memory blocks and completion queues
  uint64_t memory_bytes = 0;      // charged to this session
};

AppSessions::AppSessions(api::Context& context, AppSessionsOptions options)
    : context_(context), engine_(context.engine()), options_(std::move(options)) {
  for (const api::PlaneOptions& plane : context_.options().planes) {
    absl::StatusOr<io::IpAddress> a = io::IpAddress::Parse(plane.local_ip);
    addresses_.push_back(a.ok() ? *a : io::IpAddress{});
  }
}

AppSessions::~AppSessions() { CloseAll(); }

void AppSessions::Serve(ControlServer& server) {
  using Method = absl::StatusOr<Json> (AppSessions::*)(const Json&, const ClientInfo&);
  const std::pair<std::string_view, Method> methods[] = {
      {app::kAttach, &AppSessions::Attach},
      {app::kMemAlloc, &AppSessions::AllocateMemory},
      {app::kMemFree, &AppSessions::FreeMemory},
      {app::kMrReg, &AppSessions::RegisterRegion},
      {app::kMrDereg, &AppSessions::DeregisterRegion},
      {app::kCqCreate, &AppSessions::CreateCompletionQueue},
      {app::kCqDestroy, &AppSessions::DestroyCompletionQueue},
      {app::kQpPrepare, &AppSessions::PrepareConnection},
      {app::kQpCreate, &AppSessions::CreateConnection},
      {app::kQpDestroy, &AppSessions::DestroyConnection},
      {app::kQpStats, &AppSessions::ConnectionStats},
      {app::kQpRotate, &AppSessions::RotatePath},
      {app::kQpAbort, &AppSessions::AbortConnection},
  };
  for (const auto& entry : methods) {
    // Named copies, not structured bindings: Debian 12's clang (14) cannot capture those.
    const std::string_view name = entry.first;
    const Method method = entry.second;
    const bool needs_session = name != app::kAttach;
    server.Register(std::string(name),
                    [this, method, needs_session](const Json& p,
                                                  const ClientInfo& c) -> absl::StatusOr<Json> {
                      // Before anything about the request is read: the first thing to fix.
                      if (needs_session) {
                        absl::MutexLock lock(&mu_);
                        if (absl::StatusOr<Session*> s = SessionOf(c); !s.ok()) return s.status();
                      }
                      return (this->*method)(p, c);
                    });
  }
  server.OnDisconnect([this](uint64_t client_id) { Close(client_id); });
}

// ---- sessions ----

absl::StatusOr<AppSessions::Session*> AppSessions::SessionOf(const ClientInfo& client) {
  auto it = sessions_.find(client.client_id);
  if (it == sessions_.end()) {
    return absl::FailedPreconditionError(
        "this control connection is not attached: call app.attach on it first");
  }
  return it->second.get();
}

template <typename Handler>
absl::StatusOr<Json> AppSessions::InSession(const ClientInfo& client, Handler&& handler) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Session*> session = SessionOf(client);
  if (!session.ok()) return session.status();
  return handler(**session);
}

template <typename Handler>
absl::StatusOr<Json> AppSessions::OnConnection(const Json& params, const ClientInfo& client,
                                               Handler&& handler) {
  return InSession(client, [&](Session& session) -> absl::StatusOr<Json> {
    absl::StatusOr<AppConnection*> c = ConnectionOf(session, params);
    if (!c.ok()) return c.status();
    return handler(session, **c);
  });
}

absl::StatusOr<Json> AppSessions::Attach(const Json& params, const ClientInfo& client) {
  if (absl::Status s = OnlyKeys(params, {"name"}); !s.ok()) return s;
  absl::StatusOr<std::string> name = params.GetStringOr("name", "");
  if (!name.ok()) return name.status();
  const int workers = engine_.workers();
  if (1 + workers > kMaxFdsPerMessage) {
    return absl::FailedPreconditionError(absl::StrCat(
        "metaroced runs ", workers, " workers; applications attach to at most ",
        kMaxFdsPerMessage - 1, " (one doorbell socket each, in one message): lower [daemon] "
        "workers"));
  }
  absl::MutexLock lock(&mu_);
  if (auto it = sessions_.find(client.client_id); it != sessions_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this control connection is attached already (session ", it->first,
        "): one session per connection; open another connection for another session"));
  }
  absl::StatusOr<uint32_t> pd = engine_.AllocateProtectionDomain();
  if (!pd.ok()) return pd.status();
  auto owned = std::make_unique<Session>();
  Session& session = *owned;
  session.id = client.client_id;
  session.pd = *pd;
  session.pid = client.pid;
  session.uid = client.uid;
  session.name = PrintableName(*std::move(name), kMaxNameBytes);
  sessions_[session.id] = std::move(owned);
  // From here on a failure closes the session, which undoes whatever was made.
  absl::StatusOr<std::shared_ptr<api::SharedMapping>> block = NewSharedBlock(
      "metaroce-doorbells", "the doorbell block", app::DoorbellOffset(workers), client, session);
  if (!block.ok()) {
    CloseLocked(session.id, /*log=*/false);
    return block.status();
  }
  session.doorbell_block = *std::move(block);
  for (int w = 0; w < workers; ++w) {
    absl::StatusOr<engine::Doorbell*> bell = engine::Doorbell::PlaceAt(
        session.doorbell_block->data() + app::DoorbellOffset(w), app::kDoorbellStride);
    absl::StatusOr<int> fd = bell.ok() ? engine_.AddDoorbell(w, *bell) : bell.status();
    if (!fd.ok()) {
      CloseLocked(session.id, /*log=*/false);
      return fd.status();
    }
    session.doorbells.push_back(*bell);
    client.reply_fds.push_back(*fd);
  }
  const core::ConnectionConfig& tuning = options_.tuning;
  Json r = Json::MakeObject();
  r["session"] = session.id;
  r["workers"] = workers;
  Json& planes = r["planes"] = Json::MakeArray();
  for (const io::IpAddress& a : addresses_) {
    Json p = Json::MakeObject();
    p["address"] = a.ToString();
    planes.Push(std::move(p));
  }
  r["mtu"] = context_.options().mtu;
  r["udp_port"] = context_.options().udp_port;
  r["rotate_port_lo"] = tuning.rotate_port_lo;
  r["rotate_port_hi"] = tuning.rotate_port_hi;
  r["doorbell_bytes"] = static_cast<uint64_t>(session.doorbell_block->size());
  return r;
}

void AppSessions::Close(uint64_t client_id) {
  absl::MutexLock lock(&mu_);
  CloseLocked(client_id, /*log=*/true);
}

void AppSessions::CloseAll() {
  absl::MutexLock lock(&mu_);
  while (!sessions_.empty()) CloseLocked(sessions_.begin()->first, /*log=*/true);
}

void AppSessions::CloseLocked(uint64_t client_id, bool log) {
  auto it = sessions_.find(client_id);
  if (it == sessions_.end()) return;
  Session& s = *it->second;
  const size_t connections = s.connections.size(), regions = s.regions.size();
  const uint64_t bytes = s.memory_bytes;
  while (!s.connections.empty()) RemoveConnection(s, s.connections.begin()->first, true);
  while (!s.regions.empty()) RemoveRegion(s, s.regions.begin()->first);
  while (!s.blocks.empty()) RetireBlock(s, s.blocks.begin()->first);
  for (auto& [id, cq] : s.cqs) {
    Refund(s, cq.bytes);
    --shared_blocks_;
  }
  s.cqs.clear();
  for (size_t w = 0; w < s.doorbells.size(); ++w) {
    engine_.RemoveDoorbell(static_cast<int>(w), s.doorbells[w]).IgnoreError();
  }
  s.doorbells.clear();
  if (s.doorbell_block != nullptr) {
    Refund(s, s.doorbell_block->size());
    --shared_blocks_;
    s.doorbell_block.reset();  // unmapped: no worker holds a doorbell in it any more
  }
  ReleaseRetiredBlocks();
  if (log) {
    options_.log(absl::StrCat("application ", s.name.empty() ? "(unnamed)" : s.name, " (pid ",
                              s.pid, ", uid ", s.uid, ", session ", s.id, ") detached: ",
                              connections, " connection(s) destroyed, ", regions,
                              " region(s) deregistered, ", bytes,
                              " bytes of shared memory released"));
  }
  sessions_.erase(it);
}

// ---- shared memory ----

absl::Status AppSessions::Charge(Session& session, uint64_t bytes, std::string_view what) {
  const uint64_t max = options_.limits.max_memory_bytes;
  if (bytes > max || memory_bytes_ > max - bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        control::AbslView(what), " of ", bytes, " bytes would exceed max_memory_bytes ", max, " (",
        memory_bytes_, " bytes in use by applications): free memory, or raise [limits] "
        "max_memory_bytes"));
  }
  memory_bytes_ += bytes;
  session.memory_bytes += bytes;
  return absl::OkStatus();
}

void AppSessions::Refund(Session& session, uint64_t bytes) {
  memory_bytes_ -= std::min(bytes, memory_bytes_);
  session.memory_bytes -= std::min(bytes, session.memory_bytes);
}

absl::StatusOr<std::shared_ptr<api::SharedMapping>> AppSessions::NewSharedBlock(
    const char* memfd_name, std::string_view what, size_t bytes, const ClientInfo& client,
    Session& session) {
  if (shared_blocks_ >= kMaxSharedBlocks) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "metaroced shares ", kMaxSharedBlocks, " blocks with applications already (its limit): "
        "free memory blocks, completion queues or connections first"));
  }
  const size_t rounded = api::RoundUpToPage(bytes);
  if (absl::Status s = Charge(session, rounded, what); !s.ok()) return s;
  absl::StatusOr<api::UniqueFd> fd = api::CreateSealedMemfd(memfd_name, rounded);
  absl::StatusOr<std::shared_ptr<api::SharedMapping>> mapping =
      fd.ok() ? api::SharedMapping::Map(fd->get(), rounded) : fd.status();
  if (!mapping.ok()) {
    Refund(session, rounded);
    return mapping.status();
  }
  ++shared_blocks_;
  client.reply_fds.push_back(fd->Release());  // the server closes it once sent
  return mapping;
}

absl::StatusOr<Json> AppSessions::AllocateMemory(const Json& params, const ClientInfo& client) {
  if (absl::Status s = OnlyKeys(params, {"bytes"}); !s.ok()) return s;
  absl::StatusOr<uint64_t> bytes = UintIn(params, "bytes", 1, kMaxBlockBytes);
  if (!bytes.ok()) return bytes.status();
  return InSession(client, [&](Session& s) -> absl::StatusOr<Json> {
    absl::StatusOr<std::shared_ptr<api::SharedMapping>> mapping =
        NewSharedBlock("metaroce-memory", "a memory block", *bytes, client, s);
    if (!mapping.ok()) return mapping.status();
    const uint64_t id = s.next_id++;
    const size_t size = (*mapping)->size();
    s.blocks[id] = MemoryBlock{*std::move(mapping), 0};
    Json r = Json::MakeObject();
    r["mem"] = id;
    r["bytes"] = static_cast<uint64_t>(size);
    return r;
  });
}

absl::StatusOr<Json> AppSessions::FreeMemory(const Json& params, const ClientInfo& client) {
  if (absl::Status s = OnlyKeys(params, {"mem"}); !s.ok()) return s;
  absl::StatusOr<uint64_t> mem = params.GetUint("mem");
  if (!mem.ok()) return mem.status();
  return InSession(client, [&](Session& s) -> absl::StatusOr<Json> {
    auto it = s.blocks.find(*mem);
    if (it == s.blocks.end()) {
      return absl::NotFoundError(absl::StrCat("no memory block ", *mem, " in this session"));
    }
    if (it->second.regions > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("memory block ", *mem, " holds ", it->second.regions,
                       " registered region(s): mr.dereg first"));
    }
    RetireBlock(s, *mem);
    ReleaseRetiredBlocks();
    return Json::MakeObject();
  });
}

void AppSessions::RetireBlock(Session& session, uint64_t mem) {
  auto it = session.blocks.find(mem);
  std::shared_ptr<api::SharedMapping> mapping = std::move(it->second.mapping);
  session.blocks.erase(it);
  Refund(session, mapping->size());
  // Outstanding work may still hold pointers into the block (the core keeps them for posted
  // receives and unacknowledged sends): from now on they land in private anonymous memory,
  // and the application's pages are no longer the daemon's to hold or to write.
  mmap(mapping->data(), mapping->size(), PROT_READ | PROT_WRITE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  retired_.push_back(RetiredBlock{std::move(mapping), next_serial_ - 1});
}

void AppSessions::ReleaseRetiredBlocks() {
  const uint64_t oldest_live =
      live_serials_.empty() ? std::numeric_limits<uint64_t>::max() : *live_serials_.begin();
  const size_t before = retired_.size();
  std::erase_if(retired_, [oldest_live](const RetiredBlock& r) {
    return r.last_serial < oldest_live;  // every connection that could point into it is gone
  });
  shared_blocks_ -= before - retired_.size();
}

// ---- regions ----

absl::StatusOr<Json> AppSessions::RegisterRegion(const Json& params, const ClientInfo& client) {
  if (absl::Status s = OnlyKeys(params, {"mem", "offset", "length", "access", "addr"}); !s.ok()) {
    return s;
  }
  absl::StatusOr<uint64_t> mem = params.GetUint("mem");
  absl::StatusOr<uint64_t> offset = params.GetUint("offset");
  absl::StatusOr<uint64_t> length = UintIn(params, "length", 1, kMaxBlockBytes);
  absl::StatusOr<uint64_t> access = params.GetUint("access");
  absl::StatusOr<uint64_t> addr = params.GetUint("addr");
  for (const auto* v : {&mem, &offset, &length, &access, &addr}) {
    if (!v->ok()) return v->status();
  }
  constexpr uint64_t kAll = core::access::kLocalWrite | core::access::kRemoteWrite |
                            core::access::kRemoteRead;
  if ((*access & ~kAll) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("access ", *access, " has unknown bits; "
                                                   "known: ", kAll));
  }
  if ((*access & core::access::kRemoteWrite) && !(*access & core::access::kLocalWrite)) {
    return absl::InvalidArgumentError("REMOTE_WRITE requires LOCAL_WRITE (as ibv_reg_mr)");
  }
  if (*addr == 0 || *addr + *length < *addr) {
    return absl::InvalidArgumentError("addr must be non-zero and addr + length must not wrap");
  }
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Session*> session = SessionOf(client);
  if (!session.ok()) return session.status();
  Session& s = **session;
  auto block = s.blocks.find(*mem);
  if (block == s.blocks.end()) {
    return absl::NotFoundError(absl::StrCat("no memory block ", *mem, " in this session"));
  }
  const size_t size = block->second.mapping->size();
  if (*offset > size || *length > size - *offset) {
    return absl::InvalidArgumentError(absl::StrCat("[", *offset, ", ", *offset + *length,
                                                   ") is outside memory block ", *mem, " of ",
                                                   size, " bytes"));
  }
  if (s.regions.size() >= kMaxRegionsPerSession) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this session has ", kMaxRegionsPerSession, " regions (the limit): deregister some"));
  }
  const engine::MappedRegion mapped{*addr, *length, static_cast<uint32_t>(*access),
                                    block->second.mapping->data() + *offset};
  absl::StatusOr<core::MemoryRegion> registered = engine_.RegisterMappedMemory(mapped, s.pd);
  if (!registered.ok()) return registered.status();
  const core::MemoryRegion& r = *registered;
  s.regions[r.lkey] = Region{*mem, r};
  ++block->second.regions;
  Json out = Json::MakeObject();
  out["lkey"] = r.lkey;
  out["rkey"] = r.rkey;
  out["addr"] = r.addr;
  out["length"] = r.length;
  out["access"] = r.access;
  return out;
}

absl::StatusOr<Json> AppSessions::DeregisterRegion(const Json& params, const ClientInfo& client) {
  if (absl::Status s = OnlyKeys(params, {"lkey"}); !s.ok()) return s;
  absl::StatusOr<uint64_t> lkey = params.GetUint("lkey");
  if (!lkey.ok()) return lkey.status();
  return InSession(client, [&](Session& s) -> absl::StatusOr<Json> {
    if (*lkey > std::numeric_limits<uint32_t>::max() ||
        !s.regions.contains(static_cast<uint32_t>(*lkey))) {
      return absl::NotFoundError(
          absl::StrCat("no region with lkey ", *lkey, " in this session"));
    }
    RemoveRegion(s, static_cast<uint32_t>(*lkey));
    return Json::MakeObject();
  });
}

void AppSessions::RemoveRegion(Session& session, uint32_t lkey) {
  auto it = session.regions.find(lkey);
  engine_.DeregisterMemory(lkey).IgnoreError();
  if (auto block = session.blocks.find(it->second.mem); block != session.blocks.end()) {
    --block->second.regions;
  }
  session.regions.erase(it);
}

// ---- completion queues ----

absl::StatusOr<Json> AppSessions::CreateCompletionQueue(const Json& params,
                                                        const ClientInfo& client) {
  if (absl::Status s = OnlyKeys(params, {"depth"}); !s.ok()) return s;
  absl::StatusOr<uint64_t> depth = UintIn(params, "depth", 1, app::kMaxCompletionQueueDepth);
  if (!depth.ok()) return depth.status();
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Session*> session = SessionOf(client);
  if (!session.ok()) return session.status();
  Session& s = **session;
  const int workers = engine_.workers();
  absl::StatusOr<std::shared_ptr<api::SharedMapping>> mapping = NewSharedBlock(
      "metaroce-cq", "a completion queue", engine::CompletionChannel::BytesFor(workers, *depth),
      client, s);
  if (!mapping.ok()) return mapping.status();
  const uint64_t bytes = (*mapping)->size();
  engine::BlockMemory memory{(*mapping)->data(), (*mapping)->size(), *mapping};
  absl::StatusOr<std::shared_ptr<engine::CompletionChannel>> channel =
      engine::CompletionChannel::PlaceAt(std::move(memory), workers, *depth);
  if (!channel.ok()) {
    Refund(s, bytes);
    --shared_blocks_;
    return channel.status();
  }
  const uint64_t id = s.next_id++;
  const size_t placed_depth = (*channel)->depth();
  s.cqs[id] = CompletionQueue{*std::move(channel), bytes, 0};
  Json r = Json::MakeObject();
  r["cq"] = id;
  r["workers"] = workers;
  r["depth"] = static_cast<uint64_t>(placed_depth);
  return r;
}

absl::StatusOr<Json> AppSessions::DestroyCompletionQueue(const Json& params,
                                                         const ClientInfo& client) {
  if (absl::Status s = OnlyKeys(params, {"cq"}); !s.ok()) return s;
  absl::StatusOr<uint64_t> id = params.GetUint("cq");
  if (!id.ok()) return id.status();
  return InSession(client, [&](Session& s) -> absl::StatusOr<Json> {
    auto it = s.cqs.find(*id);
    if (it == s.cqs.end()) {
      return absl::NotFoundError(absl::StrCat("no completion queue ", *id, " in this session"));
    }
    if (it->second.users > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("completion queue ", *id, " is used by ", it->second.users,
                       " connection(s): qp.destroy them first"));
    }
    Refund(s, it->second.bytes);
    --shared_blocks_;
    s.cqs.erase(it);
    return Json::MakeObject();
  });
}

// ---- connections ----

absl::StatusOr<Json> AppSessions::PrepareConnection(const Json& params, const ClientInfo& client) {
  if (absl::Status s = OnlyKeys(params, {}); !s.ok()) return s;
  uint32_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Session*> session = SessionOf(client);
    if (!session.ok()) return session.status();
    id = engine_.AllocateConnectionId();
    std::deque<uint32_t>& prepared = (*session)->prepared;
    prepared.push_back(id);
    if (prepared.size() > kMaxPreparedPerSession) prepared.pop_front();
  }
  Json r = Json::MakeObject();
  r["conn_id"] = id;
  // Asked of the connection's worker (it waits for that thread): not under the sessions' lock.
  r["offer"] = std::min<uint64_t>(engine_.InitialOffer(id), UINT32_MAX);
  return r;
}

absl::StatusOr<api::ConnectionParameters> AppSessions::DecodeRequest(const Json& params,
                                                                     std::string_view key) {
  absl::StatusOr<std::string> hex = params.GetString(key);
  if (!hex.ok()) return hex.status();
  absl::StatusOr<api::ExchangeMessage> m = api::DecodeExchangeHex(*hex);
  if (!m.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(control::AbslView(key), ": ", m.status().message()));
  }
  if (m->kind != api::ExchangeKind::kRequest) {
    return absl::InvalidArgumentError(
        absl::StrCat(control::AbslView(key), ": expected an exchange REQUEST carrying the parameters"));
  }
  return m->params;
}

// Our half must be what the daemon's engine is: its planes' addresses, MTU and UDP port, source
// ports in its rotation range, and a connection id this session prepared.
absl::Status AppSessions::CheckOurs(const Session& session,
                                    const api::ConnectionParameters& ours) const {
  if (std::find(session.prepared.begin(), session.prepared.end(), ours.conn_id) ==
      session.prepared.end()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "connection id ", ours.conn_id, " was not prepared by this session: use qp.prepare's"));
  }
  if (ours.plane_addresses.size() > addresses_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ours has ", ours.plane_addresses.size(),
                                                   " planes; metaroced has ", addresses_.size()));
  }
  for (size_t p = 0; p < ours.plane_addresses.size(); ++p) {
    if (!(ours.plane_addresses[p] == addresses_[p])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ours names ", ours.plane_addresses[p].ToString(), " on plane ", p,
          "; metaroced's address there is ", addresses_[p].ToString()));
    }
  }
  if (ours.mtu != context_.options().mtu || ours.udp_port != context_.options().udp_port) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ours has mtu ", ours.mtu, " and udp port ", ours.udp_port, "; metaroced's are ",
        context_.options().mtu, " and ", context_.options().udp_port, " (app.attach says so)"));
  }
  const uint16_t lo = options_.tuning.rotate_port_lo, hi = options_.tuning.rotate_port_hi;
  for (uint16_t port : ours.initial_ports) {
    if (port < lo || port > hi || port == ours.udp_port) {
      return absl::InvalidArgumentError(absl::StrCat("source port ", port, " is outside ", lo,
                                                     "..", hi, " (app.attach's rotate_port_lo..hi)"
                                                     " or is the MetaRoCE port"));
    }
  }
  return absl::OkStatus();
}

size_t AppSessions::ConnectionCountLocked() const {
  size_t n = 0;
  for (const auto& [id, s] : sessions_) n += s->connections.size();
  return n;
}

absl::Status AppSessions::CheckLimits(const api::ConnectionParameters& ours) const {
  if (ours.path_count > options_.limits.max_paths) {
    return absl::ResourceExhaustedError(absl::StrCat("paths ", ours.path_count,
                                                     " is above max_paths ",
                                                     options_.limits.max_paths));
  }
  const size_t total = ConnectionCountLocked() + options_.other_connections();
  if (total >= options_.limits.max_connections) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "connection limit reached: max_connections ", options_.limits.max_connections,
        " (applications' and the daemon's together)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> AppSessions::CreateConnection(const Json& params, const ClientInfo& client) {
  if (absl::Status s =
          OnlyKeys(params, {"conn_id", "ours", "peer", "send_cq", "recv_cq", "depths"});
      !s.ok()) {
    return s;
  }
  absl::StatusOr<uint64_t> conn_id = UintIn(params, "conn_id", 1,
                                            std::numeric_limits<uint32_t>::max());
  absl::StatusOr<uint64_t> send_cq = params.GetUint("send_cq");
  absl::StatusOr<uint64_t> recv_cq = params.GetUint("recv_cq");
  for (const auto* v : {&conn_id, &send_cq, &recv_cq}) {
    if (!v->ok()) return v->status();
  }
  const Json* depths_json = params.Find("depths");
  if (depths_json == nullptr || !depths_json->is_object()) {
    return absl::InvalidArgumentError("depths: expected an object {send, recv, event}");
  }
  absl::StatusOr<uint64_t> event = UintIn(*depths_json, "event", 1, app::kMaxEventDepth);
  absl::StatusOr<uint64_t> send_depth = depths_json->GetUint("send");
  absl::StatusOr<uint64_t> recv_depth = depths_json->GetUint("recv");
  for (const auto* v : {&event, &send_depth, &recv_depth}) {
    if (!v->ok()) return v->status();
  }
  absl::StatusOr<api::ConnectionParameters> ours = DecodeRequest(params, "ours");
  if (!ours.ok()) return ours.status();
  absl::StatusOr<api::ConnectionParameters> peer = DecodeRequest(params, "peer");
  if (!peer.ok()) return peer.status();
  if (ours->conn_id != *conn_id) {
    return absl::InvalidArgumentError(absl::StrCat("conn_id ", *conn_id, " is not ours' (",
                                                   ours->conn_id, ")"));
  }
  if (*send_depth != ours->max_send_queue || *recv_depth != ours->max_recv_queue) {
    return absl::InvalidArgumentError(absl::StrCat(
        "depths send ", *send_depth, " and recv ", *recv_depth, " must be ours' queue depths (",
        ours->max_send_queue, ", ", ours->max_recv_queue, ")"));
  }
  if (absl::Status s = api::CheckCompatible(*ours, *peer); !s.ok()) return s;

  absl::MutexLock lock(&mu_);
  absl::StatusOr<Session*> session = SessionOf(client);
  if (!session.ok()) return session.status();
  Session& s = **session;
  if (absl::Status st = CheckOurs(s, *ours); !st.ok()) return st;
  if (absl::Status st = CheckLimits(*ours); !st.ok()) return st;
  auto scq = s.cqs.find(*send_cq), rcq = s.cqs.find(*recv_cq);
  if (scq == s.cqs.end() || rcq == s.cqs.end()) {
    return absl::NotFoundError(absl::StrCat("no completion queue ",
                                            scq == s.cqs.end() ? *send_cq : *recv_cq,
                                            " in this session"));
  }
  // The core's reorder buffer (a baseline profile) is daemon memory the application asked for.
  const uint64_t reorder_bytes = ours->profile.reorder_buffer_bytes;
  if (absl::Status st = Charge(s, reorder_bytes, "a reorder buffer"); !st.ok()) return st;
  const engine::ConnectionChannel::Depths depths{ours->max_send_queue, ours->max_recv_queue,
                                                 *event};
  absl::StatusOr<std::shared_ptr<api::SharedMapping>> mapping = NewSharedBlock(
      "metaroce-qp", "a connection's rings", engine::ConnectionChannel::BytesFor(depths), client,
      s);
  if (!mapping.ok()) {
    Refund(s, reorder_bytes);
    return mapping.status();
  }
  const uint64_t block_bytes = (*mapping)->size();
  auto undo = [&](const absl::Status& why) {
    Refund(s, reorder_bytes + block_bytes);
    --shared_blocks_;
    return why;
  };
  const uint32_t id = ours->conn_id;
  const int owner = engine_.OwnerOf(id);
  engine::BlockMemory memory{(*mapping)->data(), (*mapping)->size(), *mapping};
  absl::StatusOr<std::shared_ptr<engine::ConnectionChannel>> channel =
      engine::ConnectionChannel::PlaceAt(std::move(memory), depths, id, owner,
                                         scq->second.channel, rcq->second.channel);
  if (!channel.ok()) return undo(channel.status());
  core::ConnectionConfig config = api::MakeConnectionConfig(*ours, *peer, options_.tuning);
  config.pd = s.pd;  // its memory accesses find this session's regions only
  // The application consumes its connection's path events; the operator's path.events gets
  // copies (PollPathEvents). Its posts mark the connection's slot in its doorbell of the owner
  // worker (posted_slot below), so that the worker looks at these rings only when they have work.
  if (absl::Status st = engine_.CreateConnectionOnChannel(
          config, engine::PeerRoute{peer->plane_addresses}, *channel,
          engine::ObservePathEvents::kYes, s.doorbells[owner]);
      !st.ok()) {
    return undo(st);
  }
  std::erase(s.prepared, id);
  AppConnection c;
  c.id = id;
  c.serial = next_serial_++;
  c.send_cq = *send_cq;
  c.recv_cq = *recv_cq;
  const uint32_t posted_slot = (*channel)->posted_slot();
  c.channel = *std::move(channel);
  c.bytes = reorder_bytes + block_bytes;
  c.peer = peer->plane_addresses.empty() ? std::string() : peer->plane_addresses[0].ToString();
  c.peer_id = peer->conn_id;
  c.paths = ours->path_count;
  c.planes = static_cast<int>(ours->plane_addresses.size());
  c.profile = std::string(ours->profile.Name());
  c.created_s = absl::ToDoubleSeconds(absl::Now() - options_.started);
  live_serials_.insert(c.serial);
  ++scq->second.users;
  ++rcq->second.users;
  s.connections[id] = std::move(c);
  Json r = Json::MakeObject();
  r["conn_id"] = id;
  r["owner"] = owner;
  // Absent when the doorbell's slots are all taken: the worker then looks at the rings anyway.
  if (posted_slot != engine::Doorbell::kNoSlot) r["posted_slot"] = posted_slot;
  Json& d = r["depths"] = Json::MakeObject();
  d["send"] = static_cast<uint64_t>(depths.send);
  d["recv"] = static_cast<uint64_t>(depths.recv);
  d["event"] = static_cast<uint64_t>(depths.event);
  return r;
}

absl::StatusOr<AppSessions::AppConnection*> AppSessions::ConnectionOf(Session& session,
                                                                      const Json& params) {
  absl::StatusOr<uint64_t> id = params.GetUint("conn_id");
  if (!id.ok()) return id.status();
  auto it = *id <= std::numeric_limits<uint32_t>::max()
                ? session.connections.find(static_cast<uint32_t>(*id))
                : session.connections.end();
  if (it == session.connections.end()) {
    return absl::NotFoundError(absl::StrCat("no connection ", *id, " in this session"));
  }
  return &it->second;
}

void AppSessions::RemoveConnection(Session& session, uint32_t conn_id, bool abort) {
  auto it = session.connections.find(conn_id);
  AppConnection& c = it->second;
  if (abort) engine_.AbortConnection(conn_id).IgnoreError();
  engine_.DestroyConnection(conn_id).IgnoreError();
  for (uint64_t cq : {c.send_cq, c.recv_cq}) {
    if (auto q = session.cqs.find(cq); q != session.cqs.end() && q->second.users > 0) {
      --q->second.users;
    }
  }
  Refund(session, c.bytes);
  --shared_blocks_;
  live_serials_.erase(c.serial);
  session.connections.erase(it);  // the worker let go of the channel: its block is unmapped
}

absl::StatusOr<Json> AppSessions::DestroyConnection(const Json& params, const ClientInfo& client) {
  if (absl::Status s = OnlyKeys(params, {"conn_id"}); !s.ok()) return s;
  return OnConnection(params, client, [&](Session& s, AppConnection& c) -> absl::StatusOr<Json> {
    RemoveConnection(s, c.id, /*abort=*/false);
    ReleaseRetiredBlocks();
    return Json::MakeObject();
  });
}

absl::StatusOr<Json> AppSessions::ConnectionStats(const Json& params, const ClientInfo& client) {
  if (absl::Status s = OnlyKeys(params, {"conn_id"}); !s.ok()) return s;
  return OnConnection(params, client, [&](Session&, AppConnection& c) -> absl::StatusOr<Json> {
    absl::StatusOr<api::ConnectionStats> stats = engine_.Snapshot(c.id);
    if (!stats.ok()) return stats.status();
    return api::ConnectionStatsJson(*stats);
  });
}

absl::StatusOr<Json> AppSessions::RotatePath(const Json& params, const ClientInfo& client) {
  if (absl::Status s = OnlyKeys(params, {"conn_id", "path"}); !s.ok()) return s;
  absl::StatusOr<uint64_t> path = UintIn(params, "path", 0, 65535);
  if (!path.ok()) return path.status();
  return OnConnection(params, client, [&](Session&, AppConnection& c) -> absl::StatusOr<Json> {
    if (absl::Status s = engine_.RequestRotation(c.id, static_cast<uint16_t>(*path)); !s.ok()) {
      return s;
    }
    return Json::MakeObject();
  });
}

absl::StatusOr<Json> AppSessions::AbortConnection(const Json& params, const ClientInfo& client) {
  if (absl::Status s = OnlyKeys(params, {"conn_id"}); !s.ok()) return s;
  return OnConnection(params, client, [&](Session&, AppConnection& c) -> absl::StatusOr<Json> {
    if (absl::Status s = engine_.AbortConnection(c.id); !s.ok()) return s;
    return Json::MakeObject();
  });
}

// ---- listing ----

Json AppSessions::DescribeConnection(const Session& session, const AppConnection& c) {
  Json j = Json::MakeObject();
  j["id"] = c.id;
  j["peer"] = c.peer;
  j["peer_id"] = c.peer_id;
  absl::StatusOr<api::ConnectionStats> st = engine_.Snapshot(c.id);
  const bool error = !st.ok() || st->state == core::Connection::State::kError;
  j["state"] = error ? "error" : "ready";
  const core::WcStatus status = st.ok() ? st->error_status : core::WcStatus::kGeneralErr;
  j["error_status"] = static_cast<int>(status);
  j["error_status_name"] = core::StatusName(status);
  j["paths"] = c.paths;
  Json& planes = j["planes"] = Json::MakeArray();
  for (int p = 0; p < c.planes; ++p) planes.Push(p);
  j["profile"] = c.profile;
  Json& owner = j["owner"] = Json::MakeObject();
  owner["pid"] = static_cast<int64_t>(session.pid);
  owner["name"] = session.name;
  owner["session"] = session.id;
  j["deleted_by_operator"] = c.deleted_by_operator;
  j["created_s"] = c.created_s;
  j["counters"] = st.ok() ? api::CountersJson(st->counters) : Json::MakeObject();
  return j;
}

std::vector<Json> AppSessions::Describe(std::optional<uint32_t> id, std::string_view peer) {
  absl::MutexLock lock(&mu_);
  std::vector<Json> out;
  for (const auto& [sid, s] : sessions_) {
    for (const auto& [cid, c] : s->connections) {
      if (id && cid != *id) continue;
      if (!peer.empty() && c.peer != peer) continue;
      out.push_back(DescribeConnection(*s, c));
    }
  }
  return out;
}

std::vector<uint32_t> AppSessions::Ids(std::string_view peer) const {
  absl::MutexLock lock(&mu_);
  std::vector<uint32_t> ids;
  for (const auto& [sid, s] : sessions_) {
    for (const auto& [cid, c] : s->connections) {
      if (peer.empty() || c.peer == peer) ids.push_back(cid);
    }
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::optional<Json> AppSessions::Describe(uint32_t id) {
  absl::MutexLock lock(&mu_);
  for (const auto& [sid, s] : sessions_) {
    if (auto it = s->connections.find(id); it != s->connections.end()) {
      return DescribeConnection(*s, it->second);
    }
  }
  return std::nullopt;
}

bool AppSessions::HasConnection(uint32_t id) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [sid, s] : sessions_) {
    if (s->connections.contains(id)) return true;
  }
  return false;
}

// ---- the operator's view ----

absl::StatusOr<std::pair<AppSessions::Session*, AppSessions::AppConnection*>>
AppSessions::AnyConnection(uint32_t id) {
  for (auto& [sid, s] : sessions_) {
    if (auto it = s->connections.find(id); it != s->connections.end()) {
      return std::make_pair(s.get(), &it->second);
    }
  }
  return NoConnection(id);
}

absl::StatusOr<api::ConnectionStats> AppSessions::Snapshot(uint32_t id) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = AnyConnection(id).status(); !s.ok()) return s;
  return engine_.Snapshot(id);
}

absl::Status AppSessions::RequestRotation(uint32_t id, uint16_t path_id) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = AnyConnection(id).status(); !s.ok()) return s;
  return engine_.RequestRotation(id, path_id);
}

absl::Status AppSessions::DeleteByOperator(uint32_t id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::pair<Session*, AppConnection*>> found = AnyConnection(id);
  if (!found.ok()) return found.status();
  auto [session, c] = *found;
  if (c->deleted_by_operator) return absl::OkStatus();
  if (absl::Status s = engine_.AbortConnection(id); !s.ok()) return s;
  c->deleted_by_operator = true;
  options_.log(absl::StrCat("connection ", id, " of application ",
                            session->name.empty() ? "(unnamed)" : session->name, " (pid ",
                            session->pid, ", session ", session->id,
                            ") deleted by the operator: aborted, its work flushed; the "
                            "application destroys it"));
  return absl::OkStatus();
}

size_t AppSessions::PollPathEvents(std::span<core::PathEvent> out) {
  return engine_.PollObservedEvents(out);
}

void AppSessions::AddCounters(Json& sum) {
  absl::MutexLock lock(&mu_);
  for (const auto& [sid, s] : sessions_) {
    for (const auto& [cid, c] : s->connections) {
      absl::StatusOr<api::ConnectionStats> st = engine_.Snapshot(cid);
      if (st.ok()) api::AddCounters(st->counters, sum);
    }
  }
}

// ---- limits ----

void AppSessions::SetLimits(const AppLimits& limits) {
  absl::MutexLock lock(&mu_);
  options_.limits = limits;
}

void AppSessions::SetTuning(const core::ConnectionConfig& tuning) {
  absl::MutexLock lock(&mu_);
  options_.tuning = tuning;
}

Json AppSessions::Summary() const {
  absl::MutexLock lock(&mu_);
  Json j = Json::MakeObject();
  j["sessions"] = static_cast<uint64_t>(sessions_.size());
  j["connections"] = static_cast<uint64_t>(ConnectionCountLocked());
  j["memory_bytes"] = memory_bytes_;
  j["retired_blocks"] = static_cast<uint64_t>(retired_.size());
  return j;
}

size_t AppSessions::sessions() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

size_t AppSessions::connections() const {
  absl::MutexLock lock(&mu_);
  return ConnectionCountLocked();
}

uint64_t AppSessions::paths_held() const {
  absl::MutexLock lock(&mu_);
  uint64_t n = 0;
  for (const auto& [id, s] : sessions_) {
    for (const auto& [conn_id, c] : s->connections) n += c.paths;
  }
  return n;
}

uint64_t AppSessions::memory_bytes() const {
  absl::MutexLock lock(&mu_);
  return memory_bytes_;
}

}  // namespace metaroce::daemon
