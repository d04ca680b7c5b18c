#include "lib/ofi/endpoint.h"

#include <sys/random.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/ofi/entry_points.h"

namespace metaroce::ofi {

// ---- The endpoint's records ------------------------------------------------------------------

struct Endpoint::Link {
  std::unique_ptr<api::Connection> conn;
  Peer* peer = nullptr;
  uint32_t conn_id = 0;
  uint32_t credits = 0;    // data messages (and chunk Writes) we may post now
  uint32_t to_return = 0;  // slots data took and we reposted, that the peer has not been told of
  uint32_t slots = 0;      // receive slots we keep posted for data (the peer's credits)
  std::deque<WrContext*> blocked;          // data waiting for a credit, in order
  std::deque<WrContext*> control_blocked;  // control messages waiting for room in the ring
  std::vector<WrContext*> slot_contexts;
  uint64_t last_send_id = 0;  // of the peer's operations, the last that arrived
  bool failed = false;
};

struct Endpoint::Peer {
  EndpointAddress::Bytes bytes{};
  EndpointAddress address;
  Link* link = nullptr;  // where sends to it go; null until connected
  bool connecting = false;
  bool self = false;
  std::deque<TxOp*> waiting;            // until the link is up, in order
  std::vector<TxOp*> active;            // started on `link`, not yet freed
  uint64_t av_generation = 0;           // of the cached fi_addr
  fi_addr_t fi_addr = FI_ADDR_NOTAVAIL;
};

struct Endpoint::TxOp {
  enum class Kind : uint8_t { kMessage, kWrite } kind = Kind::kMessage;
  uint64_t id = 0;
  void* context = nullptr;
  uint64_t cq_flags = 0;
  bool report = true;
  bool tagged = false;
  uint64_t tag = 0;
  uint64_t data = 0;
  bool has_data = false;
  IoList src;                   // the application's buffers
  absl::InlinedVector<std::byte, 64> copy;  // FI_INJECT: the bytes, owned (small: inline)
  uint64_t rma_addr = 0;
  uint64_t rma_key = 0;
  Peer* peer = nullptr;
  Link* link = nullptr;
  bool rendezvous = false;
  uint64_t written = 0;         // rendezvous bytes the peer's transport acknowledged
  uint32_t pending_wrs = 0;     // work requests posted or blocked that name this op
  bool acked = false;           // kWrite: the target's kAck arrived
  bool reported = false;        // the application was told (or, inject, need not be)
  std::optional<api::MemoryRegion> region;  // embedded rendezvous: `src` registered, written from
};

struct Endpoint::RxOp {
  void* context = nullptr;
  uint64_t cq_flags = 0;
  IoList dst;
  bool tagged = false;
  bool report = true;
  // FI_DISCARD: the message is taken and its bytes dropped (a rendezvous one is still fetched,
  // so that its sender completes); no completion or count: the peek or claim reported it.
  bool discard = false;
};

struct Endpoint::Arrival {
  bool tagged = false;
  uint64_t tag = 0;
  uint64_t data = 0;
  bool has_data = false;
  uint64_t source = 0;
  fi_addr_t src_addr = FI_ADDR_NOTAVAIL;
  uint64_t length = 0;
  std::vector<std::byte> payload;  // eager
  bool rendezvous = false;
  bool source_registered = false;  // kRts: header_flags::kSourceRegistered
  uint64_t send_id = 0;
  Link* link = nullptr;
  void* claimed_by = nullptr;  // FI_PEEK | FI_CLAIM: the context that claimed it
};

struct Endpoint::RndvRecv {
  Link* link = nullptr;
  uint64_t send_id = 0;
  uint64_t length = 0;
  uint64_t requested = 0;
  uint64_t done = 0;
  uint32_t in_flight = 0;
  bool waiting = false;              // in waiting_chunks_
  std::unique_ptr<RxOp> rx;          // a message's receive
  Arrival arrival;                   // what the completion reports
  std::byte* write_dst = nullptr;    // an RMA write's first byte (rx null)
  // Embedded: the sink (the receive's one buffer, or the write's target) registered, so that
  // the peer writes the chunks straight into it; no chunk buffer, no copy.
  std::byte* direct = nullptr;
  std::optional<api::MemoryRegion> region;
};

struct Endpoint::Chunk {
  RndvRecv* r = nullptr;
  BufferPool::Buffer buf;
  uint64_t offset = 0;
  uint32_t len = 0;
};

struct Endpoint::WrContext {
  enum class What : uint8_t { kSlot, kSend, kWrite } what = What::kSend;
  Link* link = nullptr;
  BufferPool::Buffer buf;
  bool chunk_buffer = false;  // from the chunk pool (else the eager pool, unless `app_buffer`)
  bool app_buffer = false;    // the application's registered memory: nothing to give back
  TxOp* op = nullptr;
  bool control = false;       // kCts, kAck, kCredit: spends no credit (kControlSlots absorb them)
  uint32_t len = 0;
  api::SendWorkRequest wr;
};

// ---- IoList ------------------------------------------------------------------------------------

IoList IoList::Of(const iovec* v, size_t count) {
  IoList l;
  l.iov.assign(v, v + count);
  for (size_t i = 0; i < count; ++i) l.length += v[i].iov_len;
  return l;
}

IoList IoList::Of(const void* buf, size_t len) {
  IoList l;
  l.iov.push_back({const_cast<void*>(buf), len});
  l.length = len;
  return l;
}

size_t IoList::CopyIn(size_t offset, const std::byte* src, size_t n) const {
  size_t copied = 0;
  for (const iovec& v : iov) {
    if (n == 0) break;
    if (offset >= v.iov_len) {
      offset -= v.iov_len;
      continue;
    }
    const size_t k = std::min(n, v.iov_len - offset);
    std::memcpy(static_cast<std::byte*>(v.iov_base) + offset, src, k);
    src += k;
    n -= k;
    copied += k;
    offset = 0;
  }
  return copied;
}

void IoList::CopyOut(size_t offset, std::byte* dst, size_t n) const {
  for (const iovec& v : iov) {
    if (n == 0) break;
    if (offset >= v.iov_len) {
      offset -= v.iov_len;
      continue;
    }
    const size_t k = std::min(n, v.iov_len - offset);
    std::memcpy(dst, static_cast<const std::byte*>(v.iov_base) + offset, k);
    dst += k;
    n -= k;
    offset = 0;
  }
}

// ---- Set-up ------------------------------------------------------------------------------------

Endpoint::Endpoint(Domain& domain, const fi_info& info, void* context)
    : domain_(domain), context_(context) {
  std::memset(&fid, 0, sizeof(fid));
  tx_op_flags_ = info.tx_attr != nullptr ? info.tx_attr->op_flags : 0;
  rx_op_flags_ = info.rx_attr != nullptr ? info.rx_attr->op_flags : 0;
  // Without FI_DIRECTED_RECV a receive's source address is ignored (fi_msg(3)).
  // FI_SOURCE (fi_getinfo's service, or the application's src_addr): the port to listen on.
  if (info.src_addr != nullptr) {
    absl::StatusOr<EndpointAddress> src = EndpointAddress::DecodeSource(
        {static_cast<const uint8_t*>(info.src_addr), info.src_addrlen});
    if (src.ok()) source_port_ = src->tcp_port;
  }
  directed_recv_ = (info.caps & FI_DIRECTED_RECV) != 0 &&
                   (info.rx_attr == nullptr || info.rx_attr->caps == 0 ||
                    (info.rx_attr->caps & FI_DIRECTED_RECV) != 0);
}

void Endpoint::Linger() {
  // fi_close of an endpoint whose last sends are still unacknowledged, or whose ACKs of what it
  // received last have not left (the engine delays and, inline, holds them), would leave its
  // peers retransmitting into a closed connection until they fail RETRY_EXC_ERR (fi_pingpong's
  // server failed that way when its client closed right after the last pong). So: progress until
  // our sends are done (at most a second), then a few milliseconds more for the ACKs.
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  while (tx_outstanding_ > 0 && Clock::now() - start < std::chrono::seconds(1)) {
    domain_.Progress();
  }
  const Clock::time_point acks = Clock::now();
  while (!links_.empty() && Clock::now() - acks < kLingerForAcks) domain_.Progress();
}

Endpoint::~Endpoint() {
  // The connection manager first: no new links while the rest goes.
  manager_.reset();
  for (auto& [id, link] : links_) {
    domain_.RemoveConnection(id);
    link->conn.reset();  // ibv_destroy_qp: outstanding work is discarded without completions
    for (WrContext* c : link->blocked) delete c;
    for (WrContext* c : link->control_blocked) delete c;
    for (WrContext* c : link->slot_contexts) {
      domain_.eager_pool().Put(c->buf);
      delete c;
    }
  }
  for (auto& [key, peer] : peers_) {
    for (TxOp* op : peer->waiting) DeleteOp(op);
    for (TxOp* op : peer->active) DeleteOp(op);
  }
  for (auto& [id, chunk] : chunks_) {
    if (chunk->r->direct == nullptr) domain_.chunk_pool().Put(chunk->buf);
    delete chunk;
  }
  for (std::unique_ptr<RndvRecv>& r : rendezvous_) Unregister(r->region);
  for (const MatchQueue* q : {&tagged_, &untagged_}) {
    for (const PostedReceive& r : q->posted()) delete static_cast<RxOp*>(r.handle);
    for (const ArrivedMessage& m : q->unexpected()) delete static_cast<Arrival*>(m.handle);
  }
  if (av_ != nullptr) --av_->refs;
  for (Cq* cq : {tx_cq_, rx_cq_}) {
    if (cq != nullptr) --cq->refs;
  }
  for (Cntr* c : {send_cntr_, recv_cntr_, write_cntr_, remote_write_cntr_}) {
    if (c != nullptr) --c->refs;
  }
}

int Endpoint::Bind(struct fid* bfid, uint64_t flags) {
  switch (bfid->fclass) {
    case FI_CLASS_AV: {
      if (av_ != nullptr) return -FI_EINVAL;
      av_ = FromFid<Av>(bfid);
      ++av_->refs;
      return 0;
    }
    case FI_CLASS_CQ: {
      Cq* cq = FromFid<Cq>(bfid);
      if ((flags & (FI_TRANSMIT | FI_RECV)) == 0) return -FI_EBADFLAGS;
      if (flags & FI_TRANSMIT) {
        if (tx_cq_ != nullptr) return -FI_EINVAL;
        tx_cq_ = cq;
        ++cq->refs;
        selective_tx_ = (flags & FI_SELECTIVE_COMPLETION) != 0;
      }
      if (flags & FI_RECV) {
        if (rx_cq_ != nullptr) return -FI_EINVAL;
        rx_cq_ = cq;
        ++cq->refs;
        selective_rx_ = (flags & FI_SELECTIVE_COMPLETION) != 0;
      }
      return 0;
    }
    case FI_CLASS_CNTR: {
      Cntr* c = FromFid<Cntr>(bfid);
      if ((flags & (FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE)) == 0) {
        return (flags & (FI_READ | FI_REMOTE_READ)) ? -FI_ENOSYS : -FI_EBADFLAGS;
      }
      if (flags & FI_SEND) send_cntr_ = c, ++c->refs;
      if (flags & FI_RECV) recv_cntr_ = c, ++c->refs;
      if (flags & FI_WRITE) write_cntr_ = c, ++c->refs;
      if (flags & FI_REMOTE_WRITE) remote_write_cntr_ = c, ++c->refs;
      return 0;
    }
    case FI_CLASS_EQ:
      return 0;  // an RDM endpoint reports nothing on an EQ
    default:
      return -FI_EINVAL;
  }
}

int Endpoint::Enable() {
  if (manager_ != nullptr) return 0;
  if (av_ == nullptr) return -FI_ENOAV;
  if (tx_cq_ == nullptr && send_cntr_ == nullptr && write_cntr_ == nullptr) return -FI_ENOCQ;
  if (rx_cq_ == nullptr && recv_cntr_ == nullptr) return -FI_ENOCQ;
  api::Context& ctx = domain_.context();
  const Settings& s = domain_.settings();
  address_.planes.clear();
  for (const api::PlaneOptions& p : ctx.options().planes) {
    absl::StatusOr<io::IpAddress> ip = io::IpAddress::Parse(p.local_ip);
    if (!ip.ok()) return -FI_EADDRNOTAVAIL;
    if (!address_.planes.empty() && ip->v6 != address_.planes[0].v6) break;
    if (address_.planes.size() == (ip->v6 ? kMaxAddressPlanesV6 : kMaxAddressPlanes)) break;
    address_.planes.push_back(*ip);
  }
  if (address_.planes.empty()) return -FI_EADDRNOTAVAIL;
  // The listener on every address of the planes' family (the peer connects to our plane-0
  // address): "::" on an IPv6 fabric, dual-stack (IPV6_V6ONLY is off by default), so that IPv4
  // peers reach it too; "0.0.0.0" on an IPv4 one (a host may have IPv6 off). On the port
  // FI_SOURCE named, else one the kernel picks.
  const char* wildcard = address_.planes[0].v6 ? "::" : "0.0.0.0";
  absl::StatusOr<std::unique_ptr<api::Listener>> listener = ctx.Listen(source_port_, wildcard);
  if (!listener.ok()) {
    Warn(absl::StrCat("endpoint listener on ", wildcard, " port ", source_port_, ": ",
                      listener.status().message()));
    return -FI_EADDRNOTAVAIL;
  }
  address_.tcp_port = (*listener)->port();
  uint32_t nonce = 0;
  while (nonce == 0) {
    if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce)) return -FI_EOTHER;
  }
  address_.nonce = nonce;
  address_bytes_ = address_.Encode();
  api::ConnectOptions o;
  o.send_cq = &domain_.send_cq();
  o.recv_cq = &domain_.recv_cq();
  o.path_count = s.paths;
  o.ordered_completion = true;  // messages complete in the order sent: FI_ORDER_SAS, slots
  o.max_send_queue = 1024;
  o.max_recv_queue = std::max<uint32_t>(1024, s.recv_slots);
  o.timeout = absl::Milliseconds(s.connect_timeout_ms);
  PeerHello hello;
  hello.version = kPeerProtocolVersion;
  hello.eager_size = s.eager_size;
  hello.recv_slots = s.recv_slots;
  hello.address = address_bytes_;
  manager_ = std::make_unique<ConnectionManager>(ctx, std::move(*listener), o, hello);
  return 0;
}

int Endpoint::GetName(void* addr, size_t* addrlen) {
  if (manager_ == nullptr) return -FI_EOPBADSTATE;
  const size_t room = *addrlen;
  *addrlen = kAddressBytes;
  if (room < kAddressBytes) return -FI_ETOOSMALL;
  std::memcpy(addr, address_bytes_.data(), kAddressBytes);
  return 0;
}

// ---- Peers and links ---------------------------------------------------------------------------

Endpoint::Peer& Endpoint::PeerAt(const EndpointAddress::Bytes& address) {
  std::string key(reinterpret_cast<const char*>(address.data()), address.size());
  std::unique_ptr<Peer>& p = peers_[key];
  if (p == nullptr) {
    p = std::make_unique<Peer>();
    p->bytes = address;
    p->address = *EndpointAddress::Decode(address);
    p->self = address == address_bytes_;
  }
  return *p;
}

Endpoint::Peer* Endpoint::PeerOf(fi_addr_t addr, int& err) {
  if (av_ == nullptr || addr >= av_->entries.size() || !av_->valid[addr]) {
    err = -FI_EINVAL;
    return nullptr;
  }
  // Every send names its peer by fi_addr: a vector by fi_addr, rebuilt when the AV changes,
  // spares it hashing the 60-byte address (and allocating the key) each time.
  if (peer_by_addr_generation_ != av_->generation) {
    peer_by_addr_.assign(av_->entries.size(), nullptr);
    peer_by_addr_generation_ = av_->generation;
  }
  Peer*& p = peer_by_addr_[addr];
  if (p == nullptr) p = &PeerAt(av_->entries[addr]);
  return p;
}

fi_addr_t Endpoint::FiAddrOf(const EndpointAddress::Bytes& bytes) const {
  return av_ != nullptr ? av_->Lookup(bytes) : FI_ADDR_NOTAVAIL;
}

uint64_t Endpoint::SourceOf(Link& link) {
  Peer& p = *link.peer;
  if (av_ != nullptr && p.av_generation != av_->generation) {
    p.fi_addr = FiAddrOf(p.bytes);
    p.av_generation = av_->generation;
  }
  return p.fi_addr;
}

void Endpoint::Connect(Peer& peer) {
  if (peer.connecting || peer.link != nullptr) return;
  peer.connecting = true;
  manager_->Connect(peer.address);
}

void Endpoint::TakeConnections() {
  if (manager_ == nullptr) return;
  for (ConnectionManager::Result& r : manager_->TakeResults()) {
    Peer& peer = PeerAt(r.peer);
    if (!r.status.ok()) {
      peer.connecting = false;
      if (peer.link == nullptr) FailPeer(peer, r.status);
      continue;
    }
    AttachLink(std::move(r));
  }
}

void Endpoint::AttachLink(ConnectionManager::Result r) {
  Peer& peer = PeerAt(r.peer);
  auto link = std::make_unique<Link>();
  link->conn = std::move(r.connection);
  link->peer = &peer;
  link->conn_id = link->conn->local_id();
  link->credits = r.peer_recv_slots;
  link->slots = domain_.settings().recv_slots;
  Link* l = link.get();
  links_[l->conn_id] = std::move(link);
  domain_.AddConnection(l->conn_id, this);
  PostSlots(*l);
  if (!r.accepted) peer.connecting = false;
  if (peer.link == nullptr) {
    // Sends to a peer keep to one connection for good (FI_ORDER_SAS): the first one up.
    peer.link = l;
    std::deque<TxOp*> waiting = std::exchange(peer.waiting, {});
    for (TxOp* op : waiting) StartOp(peer, op);
  }
}

void Endpoint::PostSlots(Link& link) {
  const size_t bytes = kHeaderBytes + domain_.settings().eager_size;
  std::vector<api::RecvWorkRequest> wrs;
  for (uint32_t i = 0; i < link.slots + kControlSlots; ++i) {
    std::optional<BufferPool::Buffer> b = domain_.eager_pool().Get();
    if (!b) break;
    auto* c = new WrContext{WrContext::What::kSlot, &link, *b, false, false, nullptr, false,
                            static_cast<uint32_t>(bytes), {}};
    link.slot_contexts.push_back(c);
    api::RecvWorkRequest wr;
    wr.wr_id = reinterpret_cast<uint64_t>(c);
    wr.local = {reinterpret_cast<uint64_t>(b->data), static_cast<uint32_t>(bytes), b->lkey};
    wrs.push_back(wr);
  }
  if (wrs.size() < link.slots + kControlSlots) {
    link.slots = static_cast<uint32_t>(wrs.size() > kControlSlots ? wrs.size() - kControlSlots : 0);
  }
  size_t posted = 0;
  while (posted < wrs.size()) {
    const size_t n = link.conn->PostRecvs(std::span(wrs).subspan(posted));
    if (n == 0) break;
    posted += n;
  }
}

void Endpoint::FailPeer(Peer& peer, const absl::Status& why) {
  Warn(std::string(why.message()));
  std::deque<TxOp*> waiting = std::exchange(peer.waiting, {});
  for (TxOp* op : waiting) {
    --tx_outstanding_;
    CompleteTx(op, FI_EHOSTUNREACH, core::WcStatus::kRetryExcErr);
    DeleteOp(op);
  }
}

void Endpoint::FailLink(Link& link, core::WcStatus status) {
  if (link.failed) return;
  // What the transport saw, for whoever debugs it (FI_LOG_LEVEL=warn).
  if (absl::StatusOr<api::ConnectionStats> st = link.conn->Stats(); st.ok()) {
    const core::ConnectionCounters& c = st->counters;
    Warn(absl::StrCat("connection ", link.conn_id, " to ", link.peer->address.ToString(),
                      " failed: ", std::string(core::StatusName(status)), "; data packets sent ", c.sent_pkts,
                      " (retransmitted ", c.retransmits, ": by timeout ", c.timeout_retransmits,
                      ", tail probes ", c.tail_probes, ", gaps ", c.gap_retransmits,
                      "), received ", c.rcvd_pkts, " (duplicates ", c.duplicate_request,
                      "), ACKs sent ", c.acks_sent, " received ", c.acks_rcvd, ", probes ",
                      c.probes_sent, ", RNR NAKs received ", c.rcvd_rnr_err, "; provider: credits ",
                      link.credits, ", owed ", link.to_return, ", held back ", link.blocked.size(),
                      "+", link.control_blocked.size(), ", ops ", tx_by_id_.size(),
                      ", rendezvous receives ", rendezvous_.size(), ", chunks asked ",
                      chunks_.size(), ", waiting for a chunk buffer ", waiting_chunks_.size(),
                      ", sends outstanding in the engine ", st->outstanding_sends,
                      ", receives posted ", st->posted_receives));
  }
  link.failed = true;
  Peer& peer = *link.peer;
  if (peer.link == &link) peer.link = nullptr;
  // Its blocked work never goes out.
  std::deque<WrContext*> blocked = std::exchange(link.blocked, {});
  for (WrContext* c : std::exchange(link.control_blocked, {})) blocked.push_back(c);
  for (WrContext* c : blocked) {
    if (c->op != nullptr) --c->op->pending_wrs;
    ReleaseBuffer(*c);
    delete c;
  }
  // Operations on it fail.
  std::vector<TxOp*> active = peer.active;
  for (TxOp* op : active) {
    if (op->link != &link) continue;
    if (!op->reported) CompleteTx(op, ErrorOfStatus(status), status);
    op->reported = true;
    if (op->pending_wrs == 0) {
      tx_by_id_.erase(op->id);
      std::erase(peer.active, op);
      --tx_outstanding_;
      DeleteOp(op);
    }
  }
  // Rendezvous receives from it fail.
  for (auto it = rendezvous_.begin(); it != rendezvous_.end();) {
    RndvRecv* r = it->get();
    if (r->link != &link) {
      ++it;
      continue;
    }
    for (auto c = chunks_.begin(); c != chunks_.end();) {
      if (c->second->r == r) {
        if (r->direct == nullptr) domain_.chunk_pool().Put(c->second->buf);
        delete c->second;
        chunks_.erase(c++);
      } else {
        ++c;
      }
    }
    std::erase(waiting_chunks_, r);
    if (r->rx != nullptr) CompleteRx(r->rx.get(), r->arrival, 0, ErrorOfStatus(status));
    Unregister(r->region);
    it = rendezvous_.erase(it);
  }
  // Unexpected rendezvous announcements from it can no longer be fetched.
  for (MatchQueue* q : {&tagged_, &untagged_}) {
    std::vector<void*> dead;
    for (const ArrivedMessage& m : q->unexpected()) {
      auto* a = static_cast<Arrival*>(m.handle);
      if (a->rendezvous && a->link == &link) dead.push_back(a);
    }
    for (void* a : dead) {
      q->RemoveUnexpected(a);
      delete static_cast<Arrival*>(a);
    }
  }
}

// ---- Sending -----------------------------------------------------------------------------------

void Endpoint::Post(Link& link, WrContext* c) {
  if (link.failed) {
    if (c->op != nullptr) --c->op->pending_wrs;
    ReleaseBuffer(*c);
    delete c;
    return;
  }
  (c->control ? link.control_blocked : link.blocked).push_back(c);
  Drain(link);
}

void Endpoint::Drain(Link& link) {
  auto post = [&](WrContext* c) {
    if (c->what == WrContext::What::kSend) {
      // Piggyback the credits we owe (the header's bytes 2..3).
      const uint32_t give = std::min<uint32_t>(link.to_return, 0xffff);
      c->buf.data[2] = static_cast<std::byte>(give);
      c->buf.data[3] = static_cast<std::byte>(give >> 8);
      if (!link.conn->PostSend(c->wr).ok()) {
        c->buf.data[2] = c->buf.data[3] = std::byte{0};
        return false;  // the ring is full: the next progress
      }
      link.to_return -= give;
      return true;
    }
    return link.conn->PostSend(c->wr).ok();
  };
  while (!link.control_blocked.empty() && post(link.control_blocked.front())) {
    link.control_blocked.pop_front();
  }
  while (!link.blocked.empty() && link.credits > 0 && post(link.blocked.front())) {
    --link.credits;
    link.blocked.pop_front();
  }
  // What is left waits for a credit (its return drains it) or for room in a ring (the next
  // progress retries).
  if (!link.control_blocked.empty() || !link.blocked.empty()) links_waiting_ = true;
}

bool Endpoint::SendMessage(Link& link, const MessageHeader& header, const IoList* payload,
                           size_t payload_offset, size_t payload_len, TxOp* op, bool control) {
  std::optional<BufferPool::Buffer> b = domain_.eager_pool().Get();
  if (!b) return false;
  EncodeHeader(header, std::span<std::byte, kHeaderBytes>(b->data, kHeaderBytes));
  if (payload != nullptr && payload_len > 0) {
    if (op != nullptr && !op->copy.empty()) {
      std::memcpy(b->data + kHeaderBytes, op->copy.data() + payload_offset, payload_len);
    } else {
      payload->CopyOut(payload_offset, b->data + kHeaderBytes, payload_len);
    }
  }
  const uint32_t len = static_cast<uint32_t>(kHeaderBytes + payload_len);
  auto* c = new WrContext{WrContext::What::kSend, &link, *b, false, false, op, control, len, {}};
  c->wr.wr_id = reinterpret_cast<uint64_t>(c);
  c->wr.opcode = core::WrOpcode::kSend;
  c->wr.flags = core::send_flags::kSignaled;
  c->wr.local = {reinterpret_cast<uint64_t>(b->data), len, b->lkey};
  if (op != nullptr) ++op->pending_wrs;
  Post(link, c);
  return true;
}

void Endpoint::SendWrite(Link& link, BufferPool::Buffer buf, uint32_t len, uint64_t remote_addr,
                         uint32_t rkey, uint32_t imm, TxOp* op, bool app_buffer) {
  auto* c = new WrContext{WrContext::What::kWrite, &link, buf, !app_buffer, app_buffer, op,
                          false, len, {}};
  c->wr.wr_id = reinterpret_cast<uint64_t>(c);
  c->wr.opcode = core::WrOpcode::kWriteWithImm;
  c->wr.flags = core::send_flags::kSignaled;
  c->wr.local = {reinterpret_cast<uint64_t>(buf.data), len, buf.lkey};
  c->wr.remote_addr = remote_addr;
  c->wr.rkey = rkey;
  c->wr.imm = imm;
  if (op != nullptr) ++op->pending_wrs;
  Post(link, c);
}

void Endpoint::ReturnCredits(Link& link) {
  if (link.failed || link.to_return < std::max<uint32_t>(1, link.slots / 2)) return;
  MessageHeader h;
  h.kind = MessageKind::kCredit;
  SendMessage(link, h, nullptr, 0, 0, nullptr, /*control=*/true);
}

ssize_t Endpoint::CheckTransmit(const IoList& data, void** desc, fi_addr_t dest, uint64_t flags,
                                Peer** peer) {
  if (manager_ == nullptr) return -FI_EOPBADSTATE;
  if (data.iov.size() > kIovLimit) return -FI_EINVAL;
  if ((flags & FI_INJECT) && data.length > domain_.settings().inject_size) return -FI_EMSGSIZE;
  if (data.length > kMaxMessageSize) return -FI_EMSGSIZE;
  if ((domain_.mr_mode() & FI_MR_LOCAL) && !(flags & FI_INJECT)) {
    for (size_t i = 0; i < data.iov.size(); ++i) {
      if (data.iov[i].iov_len == 0) continue;
      if (desc == nullptr ||
          !domain_.CoversLocal(desc[i], data.iov[i].iov_base, data.iov[i].iov_len)) {
        return -FI_EACCES;  // FI_MR_LOCAL: the buffer is not inside the registration given
      }
    }
  }
  int err = 0;
  *peer = PeerOf(dest, err);
  if (*peer == nullptr) return err;
  if (tx_outstanding_ >= kQueueSize) return -FI_EAGAIN;
  return 0;
}

void Endpoint::Launch(Peer& peer, TxOp* op, const IoList& data, uint64_t flags,
                      Report report) {
  op->src = data;
  // fi_msg(3), fi_cq(3): FI_INJECT as an operation's flag frees the buffer on return and still
  // completes; only the fi_inject calls complete silently, and, with FI_SELECTIVE_COMPLETION,
  // a transmit without FI_COMPLETION.
  op->report = report == Report::kByFlags && (!selective_tx_ || (flags & FI_COMPLETION));
  op->has_data = (flags & FI_REMOTE_CQ_DATA) != 0;
  if (flags & FI_INJECT) {
    op->copy.resize(data.length);
    data.CopyOut(0, op->copy.data(), data.length);
  }
  ++tx_outstanding_;
  if (peer.self) {
    DeliverSelf(op);
  } else if (peer.link == nullptr) {
    peer.waiting.push_back(op);
    Connect(peer);
  } else {
    StartOp(peer, op);
  }
}

ssize_t Endpoint::Send(const IoList& data, void** desc, fi_addr_t dest, void* context,
                       uint64_t flags, bool tagged, uint64_t tag, uint64_t cq_data,
                       Report report) {
  Peer* peer = nullptr;
  if (const ssize_t r = CheckTransmit(data, desc, dest, flags, &peer); r != 0) return r;
  auto* op = new TxOp;
  op->kind = TxOp::Kind::kMessage;
  op->context = context;
  op->cq_flags = FI_SEND | (tagged ? FI_TAGGED : FI_MSG);
  op->tagged = tagged;
  op->tag = tag;
  op->data = cq_data;
  Launch(*peer, op, data, flags, report);
  return 0;
}

ssize_t Endpoint::Write(const IoList& data, void** desc, fi_addr_t dest, uint64_t addr,
                        uint64_t key, void* context, uint64_t flags, uint64_t cq_data,
                        Report report) {
  Peer* peer = nullptr;
  if (const ssize_t r = CheckTransmit(data, desc, dest, flags, &peer); r != 0) return r;
  auto* op = new TxOp;
  op->kind = TxOp::Kind::kWrite;
  op->context = context;
  op->cq_flags = FI_RMA | FI_WRITE;
  op->data = cq_data;
  op->rma_addr = addr;
  op->rma_key = key;
  Launch(*peer, op, data, flags, report);
  return 0;
}

void Endpoint::StartOp(Peer& peer, TxOp* op) {
  Link& link = *peer.link;
  op->peer = &peer;
  op->link = &link;
  op->id = next_send_id_++;
  peer.active.push_back(op);
  tx_by_id_[op->id] = op;
  const uint64_t len = op->copy.empty() ? op->src.length : op->copy.size();
  MessageHeader h;
  h.flags = (op->tagged ? header_flags::kTagged : 0) |
            (op->has_data ? header_flags::kRemoteData : 0);
  h.tag = op->tag;
  h.data = op->data;
  h.length = len;
  h.send_id = op->id;
  const bool eager = len <= domain_.settings().eager_size;
  op->rendezvous = !eager;
  if (op->rendezvous && op->copy.empty() && op->src.iov.size() == 1 &&
      domain_.registers_any_memory()) {
    op->region = Register(op->src.iov[0].iov_base, len, api::access::kLocalWrite);
    if (op->region) h.flags |= header_flags::kSourceRegistered;
  }
  if (op->kind == TxOp::Kind::kMessage) {
    h.kind = eager ? MessageKind::kEager : MessageKind::kRts;
  } else {
    h.kind = eager ? MessageKind::kWrite : MessageKind::kWriteRts;
    h.addr = op->rma_addr;
    h.key = op->rma_key;
  }
  if (!SendMessage(link, h, &op->src, 0, eager ? len : 0, op, false)) {
    CompleteTx(op, FI_ENOMEM, core::WcStatus::kGeneralErr);
    op->reported = true;
    tx_by_id_.erase(op->id);
    std::erase(peer.active, op);
    --tx_outstanding_;
    DeleteOp(op);
  }
}

void Endpoint::DeliverSelf(TxOp* op) {
  // A message to this very endpoint: matched and copied here; nothing crosses the fabric.
  const uint64_t len = op->copy.empty() ? op->src.length : op->copy.size();
  std::vector<std::byte> bytes(op->copy.begin(), op->copy.end());
  if (op->copy.empty()) {
    bytes.resize(len);
    op->src.CopyOut(0, bytes.data(), len);
  }
  int err = 0;
  core::WcStatus status = core::WcStatus::kSuccess;
  if (op->kind == TxOp::Kind::kMessage) {
    auto* a = new Arrival;
    a->tagged = op->tagged;
    a->tag = op->tag;
    a->data = op->data;
    a->has_data = op->has_data;
    a->source = FiAddrOf(address_bytes_);
    a->src_addr = a->source;
    a->length = len;
    a->payload = std::move(bytes);
    MatchQueue& q = op->tagged ? tagged_ : untagged_;
    std::optional<PostedReceive> r = q.TakeReceiveFor(a->tag, a->source);
    if (r) {
      Deliver(a, static_cast<RxOp*>(r->handle));
    } else {
      q.AddUnexpected({a->tag, a->source, a});
    }
  } else {
    std::byte* dst = nullptr;
    if (CheckWrite(op->rma_key, op->rma_addr, len, &dst) == nullptr) {
      err = FI_EACCES;
      status = core::WcStatus::kRemAccessErr;
    } else {
      if (len > 0) std::memcpy(dst, bytes.data(), len);
      if (remote_write_cntr_ != nullptr) ++remote_write_cntr_->value;
      if (op->has_data && rx_cq_ != nullptr) {
        CqEntry e;
        e.flags = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
        e.data = op->data;
        e.len = len;
        rx_cq_->Push(e);
      }
    }
  }
  CompleteTx(op, err, status);
  --tx_outstanding_;
  DeleteOp(op);
}

// ---- Receiving ---------------------------------------------------------------------------------

ssize_t Endpoint::Recv(const IoList& buf, void** desc, fi_addr_t src, void* context,
                       uint64_t flags, bool tagged, uint64_t tag, uint64_t ignore) {
  if (manager_ == nullptr) return -FI_EOPBADSTATE;
  if (buf.iov.size() > kIovLimit) return -FI_EINVAL;
  if ((domain_.mr_mode() & FI_MR_LOCAL) && !(flags & (FI_PEEK | FI_DISCARD))) {
    for (size_t i = 0; i < buf.iov.size(); ++i) {
      if (buf.iov[i].iov_len == 0) continue;
      if (desc == nullptr ||
          !domain_.CoversLocal(desc[i], buf.iov[i].iov_base, buf.iov[i].iov_len)) {
        return -FI_EACCES;
      }
    }
  }
  uint64_t source = kAnySource;
  if (directed_recv_ && src != FI_ADDR_UNSPEC) {
    if (av_ == nullptr || src >= av_->entries.size() || !av_->valid[src]) return -FI_EINVAL;
    source = src;
  }
  MatchQueue& q = tagged ? tagged_ : untagged_;
  if (!tagged) {
    tag = 0;
    ignore = ~uint64_t{0};
  }
  if (flags & FI_PEEK) {
    // A probe progresses first: an application that peeks until a message comes may make no
    // other call that would (its CQ holds the last miss's entry, and fi_cq_read progresses only
    // when its CQ is empty), and the peer's messages must still land and take their slots.
    domain_.Progress();
  }
  ResolveUnknownSources();
  PostedReceive pr{tag, ignore, source, nullptr};

  if (flags & FI_PEEK) {
    // A probe: report the first matching message without receiving it (FI_CLAIM: and keep it
    // for a later FI_CLAIM receive with the same context).
    std::optional<ArrivedMessage> m;
    for (const ArrivedMessage& u : q.unexpected()) {
      auto* a = static_cast<Arrival*>(u.handle);
      if (a->claimed_by == nullptr && MatchQueue::Matches(pr, u.tag, u.source)) {
        m = u;
        break;
      }
    }
    if (rx_cq_ == nullptr) return 0;
    CqEntry e;
    e.op_context = context;
    e.flags = FI_RECV | (tagged ? FI_TAGGED : FI_MSG);
    if (!m) {
      e.err = FI_ENOMSG;
      rx_cq_->Push(e);
      return 0;
    }
    auto* a = static_cast<Arrival*>(m->handle);
    if ((flags & FI_CLAIM) && !(flags & FI_DISCARD)) {
      a->claimed_by = context;
      if (context != nullptr) static_cast<fi_context*>(context)->internal[0] = a;
    }
    e.len = a->length;
    e.tag = a->tag;
    e.data = a->data;
    if (a->has_data) e.flags |= FI_REMOTE_CQ_DATA;
    e.source = a->src_addr;
    rx_cq_->Push(e);
    if (flags & FI_DISCARD) {
      // fi_tagged(3): a peek that finds a message with FI_DISCARD discards it.
      q.RemoveUnexpected(a);
      Discard(a);
    }
    return 0;
  }

  auto rx = std::make_unique<RxOp>();
  rx->context = context;
  rx->cq_flags = FI_RECV | (tagged ? FI_TAGGED : FI_MSG);
  rx->dst = buf;
  rx->tagged = tagged;
  rx->report = !selective_rx_ || (flags & FI_COMPLETION);

  if (flags & FI_CLAIM) {
    // The message an earlier FI_PEEK | FI_CLAIM kept for this context.
    Arrival* a = context != nullptr
                     ? static_cast<Arrival*>(static_cast<fi_context*>(context)->internal[0])
                     : nullptr;
    if (a == nullptr || a->claimed_by != context || !q.RemoveUnexpected(a)) return -FI_EINVAL;
    if (flags & FI_DISCARD) {
      rx->dst = IoList{};
      CompleteRx(rx.get(), *a, 0, 0);
      Discard(a);
      return 0;
    }
    Deliver(a, rx.release());
    return 0;
  }
  std::optional<ArrivedMessage> m;
  for (const ArrivedMessage& u : q.unexpected()) {
    auto* a = static_cast<Arrival*>(u.handle);
    if (a->claimed_by == nullptr && MatchQueue::Matches(pr, u.tag, u.source)) {
      m = u;
      break;
    }
  }
  if (m) {
    q.RemoveUnexpected(m->handle);
    Deliver(static_cast<Arrival*>(m->handle), rx.release());
    return 0;
  }
  if (rx_posted_ >= kQueueSize) return -FI_EAGAIN;
  pr.handle = rx.release();
  q.AddPosted(pr);
  ++rx_posted_;
  return 0;
}

ssize_t Endpoint::Cancel(void* context) {
  for (MatchQueue* q : {&tagged_, &untagged_}) {
    for (const PostedReceive& r : q->posted()) {
      auto* rx = static_cast<RxOp*>(r.handle);
      if (rx->context != context) continue;
      q->CancelPosted(rx);
      --rx_posted_;
      if (rx_cq_ != nullptr) {
        CqEntry e;
        e.op_context = context;
        e.flags = rx->cq_flags;
        e.err = FI_ECANCELED;
        rx_cq_->Push(e);
      }
      delete rx;
      return 0;
    }
  }
  return -FI_ENOENT;
}

void Endpoint::OnRecvCompletion(const api::WorkCompletion& wc) {
  auto* c = reinterpret_cast<WrContext*>(wc.wr_id);
  Link& link = *c->link;
  if (wc.status != core::WcStatus::kSuccess) {
    FailLink(link, link.conn->in_error() ? link.conn->error_status() : wc.status);
    return;  // the slot stays with the link until the endpoint goes
  }
  bool data = true;  // the slot was a credit the peer spent (not a control message's)
  if (wc.opcode == core::WcOpcode::kRecvRdmaWithImm) {
    auto it = chunks_.find(wc.imm);
    if (it != chunks_.end() && it->second->r->link == &link) {
      Chunk* ch = it->second;
      chunks_.erase(it);
      RndvRecv* r = ch->r;
      const uint32_t len = std::min<uint32_t>(ch->len, wc.byte_len);
      if (r->direct != nullptr) {
        // Written in place.
      } else if (r->rx != nullptr) {
        r->rx->dst.CopyIn(ch->offset, ch->buf.data, len);
        domain_.chunk_pool().Put(ch->buf);
      } else {
        std::memcpy(r->write_dst + ch->offset, ch->buf.data, len);
        domain_.chunk_pool().Put(ch->buf);
      }
      delete ch;
      r->done += len;
      --r->in_flight;
      if (r->done >= r->length) {
        FinishRendezvous(r);
      } else {
        RequestChunks(r);
      }
    }
  } else {
    const std::span<const std::byte> bytes(c->buf.data, std::min<size_t>(wc.byte_len, c->len));
    absl::StatusOr<MessageHeader> h = DecodeHeader(bytes);
    if (h.ok()) {
      link.credits += h->credits;
      data = h->kind != MessageKind::kCts && h->kind != MessageKind::kAck &&
             h->kind != MessageKind::kCredit;
      OnMessage(link, *h, bytes.subspan(kHeaderBytes));
    }
    // A malformed message is dropped: its slot goes back like any other.
  }
  if (link.failed) return;
  api::RecvWorkRequest wr;
  wr.wr_id = wc.wr_id;
  wr.local = {reinterpret_cast<uint64_t>(c->buf.data), c->len, c->buf.lkey};
  if (link.conn->PostRecv(wr).ok() && data) ++link.to_return;
  Drain(link);
  ReturnCredits(link);
}

void Endpoint::OnMessage(Link& link, const MessageHeader& h, std::span<const std::byte> payload) {
  if (h.kind == MessageKind::kEager || h.kind == MessageKind::kRts ||
      h.kind == MessageKind::kWrite || h.kind == MessageKind::kWriteRts) {
    // A peer numbers its operations in the order it starts them, and a link delivers them in
    // that order: anything else is a transport fault worth shouting about.
    if (h.send_id <= link.last_send_id) {
      Warn(absl::StrCat("connection ", link.conn_id, ": operation ", h.send_id, " after ",
                        link.last_send_id, " (kind ", static_cast<int>(h.kind), ", tag 0x",
                        absl::Hex(h.tag), ", ", h.length, " bytes): out of order"));
    }
    link.last_send_id = h.send_id;
  }
  switch (h.kind) {
    case MessageKind::kEager:
    case MessageKind::kRts: {
      Arrival a;
      a.tagged = (h.flags & header_flags::kTagged) != 0;
      a.tag = a.tagged ? h.tag : 0;
      a.data = h.data;
      a.has_data = (h.flags & header_flags::kRemoteData) != 0;
      a.source = SourceOf(link);
      a.src_addr = a.source;
      a.length = h.length;
      a.link = &link;
      a.send_id = h.send_id;
      a.rendezvous = h.kind == MessageKind::kRts;
      a.source_registered = (h.flags & header_flags::kSourceRegistered) != 0;
      if (!a.rendezvous) {
        payload = payload.first(std::min<size_t>(h.length, payload.size()));
        a.length = payload.size();
      }
      MatchQueue& q = a.tagged ? tagged_ : untagged_;
      std::optional<PostedReceive> r = q.TakeReceiveFor(a.tag, a.source);
      if (r && !a.rendezvous) {
        // Expected: straight from the receive slot into the application's buffer.
        --rx_posted_;
        DeliverEager(a, payload, static_cast<RxOp*>(r->handle));
        return;
      }
      auto* kept = new Arrival(std::move(a));
      if (!kept->rendezvous) kept->payload.assign(payload.begin(), payload.end());
      if (r) {
        --rx_posted_;
        Deliver(kept, static_cast<RxOp*>(r->handle));
      } else {
        q.AddUnexpected({kept->tag, kept->source, kept});
      }
      return;
    }
    case MessageKind::kCts: {
      auto it = tx_by_id_.find(h.send_id);
      if (it == tx_by_id_.end() || it->second->link != &link || !it->second->rendezvous) return;
      TxOp* op = it->second;
      const uint64_t len = op->copy.empty() ? op->src.length : op->copy.size();
      if (h.offset > len || h.chunk > len - h.offset ||
          (!op->region && h.chunk > domain_.settings().chunk_size)) {
        return;  // a request outside the message: ignored (the receiver is broken)
      }
      if (op->region) {
        // Written straight from the application's buffer, registered when the op started.
        const BufferPool::Buffer from{
            static_cast<std::byte*>(op->src.iov[0].iov_base) + h.offset, op->region->lkey, 0};
        SendWrite(link, from, h.chunk, h.addr, static_cast<uint32_t>(h.key), h.recv_id, op,
                  /*app_buffer=*/true);
        return;
      }
      std::optional<BufferPool::Buffer> b = domain_.chunk_pool().Get();
      if (!b) return;  // cannot happen below the pool's maximum; the receiver times out
      if (!op->copy.empty()) {
        std::memcpy(b->data, op->copy.data() + h.offset, h.chunk);
      } else {
        op->src.CopyOut(h.offset, b->data, h.chunk);
      }
      SendWrite(link, *b, h.chunk, h.addr, static_cast<uint32_t>(h.key), h.recv_id, op,
                /*app_buffer=*/false);
      return;
    }
    case MessageKind::kWrite:
    case MessageKind::kWriteRts:
      OnWrite(link, h, payload);
      return;
    case MessageKind::kAck: {
      auto it = tx_by_id_.find(h.send_id);
      if (it == tx_by_id_.end() || it->second->link != &link ||
          it->second->kind != TxOp::Kind::kWrite) {
        return;
      }
      TxOp* op = it->second;
      op->acked = true;
      const auto status = static_cast<core::WcStatus>(h.status);
      if (!op->reported) {
        CompleteTx(op, status == core::WcStatus::kSuccess ? 0 : ErrorOfStatus(status), status);
        op->reported = true;
      }
      if (op->pending_wrs == 0) {
        tx_by_id_.erase(op->id);
        std::erase(op->peer->active, op);
        --tx_outstanding_;
        DeleteOp(op);
      }
      return;
    }
    case MessageKind::kCredit:
      return;
  }
}

void Endpoint::ResolveUnknownSources() {
  if (av_ == nullptr || resolved_generation_ == av_->generation) return;
  resolved_generation_ = av_->generation;
  for (MatchQueue* q : {&tagged_, &untagged_}) {
    q->ResolveUnknownSources([this](void* handle) -> uint64_t {
      auto* a = static_cast<Arrival*>(handle);
      if (a->link == nullptr) return a->source;
      a->source = SourceOf(*a->link);
      a->src_addr = a->source;
      return a->source;
    });
  }
}

void Endpoint::DeliverEager(const Arrival& a, std::span<const std::byte> bytes, RxOp* rx) {
  const size_t n = rx->dst.CopyIn(0, bytes.data(), bytes.size());
  CompleteRx(rx, a, n, n < bytes.size() ? FI_ETRUNC : 0);
  delete rx;
}

void Endpoint::Discard(Arrival* a) {
  if (!a->rendezvous) {
    delete a;
    return;
  }
  // Its sender waits for the bytes to be fetched: fetch them into nothing.
  auto rx = std::make_unique<RxOp>();
  rx->tagged = a->tagged;
  rx->report = false;
  rx->discard = true;
  Deliver(a, rx.release());
}

void Endpoint::Deliver(Arrival* a, RxOp* rx) {
  if (!a->rendezvous) {
    DeliverEager(*a, a->payload, rx);
    delete a;
    return;
  }
  auto r = std::make_unique<RndvRecv>();
  r->link = a->link;
  r->send_id = a->send_id;
  r->length = a->length;
  r->rx.reset(rx);
  r->arrival = std::move(*a);
  delete a;
  RndvRecv* p = r.get();
  rendezvous_.push_back(std::move(r));
  StartRendezvous(p);
}

void Endpoint::StartRendezvous(RndvRecv* r) {
  if (r->length == 0) {
    FinishRendezvous(r);
    return;
  }
  // Straight into the sink when the engine can name it: one contiguous range that holds the
  // whole message.
  std::byte* sink = r->write_dst;
  if (r->rx != nullptr && r->rx->dst.iov.size() == 1 && r->rx->dst.length >= r->length) {
    sink = static_cast<std::byte*>(r->rx->dst.iov[0].iov_base);
  }
  if (sink != nullptr && domain_.registers_any_memory()) {
    r->region = Register(sink, r->length, api::access::kLocalWrite | api::access::kRemoteWrite);
    if (r->region) r->direct = sink;
  }
  RequestChunks(r);
}

void Endpoint::RequestChunks(RndvRecv* r) {
  const Settings& s = domain_.settings();
  // From registered memory into registered memory nothing bounds a Write but its length field:
  // one kCts for the message (each kCts and each Write costs a round of the protocol; 1 MiB in
  // 8 chunks of 128 KiB moved ~9 % less than in one, NetPIPE on the fabric).
  const uint64_t most = r->direct != nullptr && r->arrival.source_registered ? kLargestCts
                                                                              : s.chunk_size;
  while (r->in_flight < s.chunks_in_flight && r->requested < r->length) {
    std::optional<BufferPool::Buffer> b;
    if (r->direct != nullptr) {
      b = BufferPool::Buffer{r->direct + r->requested, r->region->lkey, r->region->rkey};
    } else {
      b = domain_.chunk_pool().Get();
    }
    if (!b) {
      if (!r->waiting) {
        waiting_chunks_.push_back(r);
        r->waiting = true;
      }
      return;
    }
    uint32_t id = next_chunk_id_++;
    while (id == 0 || chunks_.contains(id)) id = next_chunk_id_++;
    auto* ch = new Chunk{r, *b, r->requested,
                         static_cast<uint32_t>(std::min<uint64_t>(most,
                                                                  r->length - r->requested))};
    chunks_[id] = ch;
    MessageHeader h;
    h.kind = MessageKind::kCts;
    h.send_id = r->send_id;
    h.offset = ch->offset;
    h.chunk = ch->len;
    h.addr = reinterpret_cast<uint64_t>(b->data);
    h.key = b->rkey;
    h.recv_id = id;
    if (!SendMessage(*r->link, h, nullptr, 0, 0, nullptr, /*control=*/true)) {
      chunks_.erase(id);
      if (r->direct == nullptr) domain_.chunk_pool().Put(ch->buf);
      delete ch;
      if (!r->waiting) {
        waiting_chunks_.push_back(r);
        r->waiting = true;
      }
      return;
    }
    r->requested += ch->len;
    ++r->in_flight;
  }
}

void Endpoint::FinishRendezvous(RndvRecv* r) {
  if (r->rx != nullptr) {
    const size_t capacity = r->rx->dst.length;
    const size_t n = std::min<uint64_t>(capacity, r->length);
    CompleteRx(r->rx.get(), r->arrival, n, r->length > capacity ? FI_ETRUNC : 0);
  } else {
    // An RMA write by rendezvous: its data is in place.
    if (remote_write_cntr_ != nullptr) ++remote_write_cntr_->value;
    if (r->arrival.has_data && rx_cq_ != nullptr) {
      CqEntry e;
      e.flags = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
      e.data = r->arrival.data;
      e.len = r->length;
      e.source = r->arrival.src_addr;
      rx_cq_->Push(e);
    }
    SendAck(*r->link, r->send_id, core::WcStatus::kSuccess);
  }
  std::erase(waiting_chunks_, r);
  Unregister(r->region);
  rendezvous_.remove_if([r](const std::unique_ptr<RndvRecv>& p) { return p.get() == r; });
}

Mr* Endpoint::CheckWrite(uint64_t key, uint64_t addr, uint64_t len, std::byte** dst) {
  Mr* mr = domain_.FindMr(key);
  if (mr == nullptr || (mr->access & FI_REMOTE_WRITE) == 0) return nullptr;
  if (addr < mr->address_base) return nullptr;
  const uint64_t off = addr - mr->address_base;
  if (off > mr->length || len > mr->length - off) return nullptr;
  *dst = mr->base + off;
  return mr;
}

void Endpoint::OnWrite(Link& link, const MessageHeader& h, std::span<const std::byte> payload) {
  std::byte* dst = nullptr;
  if (CheckWrite(h.key, h.addr, h.length, &dst) == nullptr) {
    SendAck(link, h.send_id, core::WcStatus::kRemAccessErr);
    return;
  }
  if (h.kind == MessageKind::kWrite) {
    if (payload.size() < h.length) {
      SendAck(link, h.send_id, core::WcStatus::kRemInvReqErr);
      return;
    }
    if (h.length > 0) std::memcpy(dst, payload.data(), h.length);
    if (remote_write_cntr_ != nullptr) ++remote_write_cntr_->value;
    if ((h.flags & header_flags::kRemoteData) && rx_cq_ != nullptr) {
      CqEntry e;
      e.flags = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
      e.data = h.data;
      e.len = h.length;
      e.source = SourceOf(link);
      rx_cq_->Push(e);
    }
    SendAck(link, h.send_id, core::WcStatus::kSuccess);
    return;
  }
  auto r = std::make_unique<RndvRecv>();
  r->link = &link;
  r->send_id = h.send_id;
  r->length = h.length;
  r->write_dst = dst;
  r->arrival.source_registered = (h.flags & header_flags::kSourceRegistered) != 0;
  r->arrival.has_data = (h.flags & header_flags::kRemoteData) != 0;
  r->arrival.data = h.data;
  r->arrival.src_addr = SourceOf(link);
  RndvRecv* p = r.get();
  rendezvous_.push_back(std::move(r));
  StartRendezvous(p);
}

void Endpoint::SendAck(Link& link, uint64_t send_id, core::WcStatus status) {
  MessageHeader h;
  h.kind = MessageKind::kAck;
  h.send_id = send_id;
  h.status = static_cast<uint32_t>(status);
  SendMessage(link, h, nullptr, 0, 0, nullptr, /*control=*/true);
}

// ---- Send completions --------------------------------------------------------------------------

void Endpoint::OnSendCompletion(const api::WorkCompletion& wc) {
  auto* c = reinterpret_cast<WrContext*>(wc.wr_id);
  Link& link = *c->link;
  TxOp* op = c->op;
  const uint32_t len = c->len;
  const bool write = c->what == WrContext::What::kWrite;
  ReleaseBuffer(*c);
  delete c;
  if (op == nullptr) {
    if (wc.status != core::WcStatus::kSuccess && link.conn->in_error()) {
      FailLink(link, link.conn->error_status());
    }
    return;
  }
  --op->pending_wrs;
  if (wc.status != core::WcStatus::kSuccess && link.conn->in_error()) {
    if (!link.failed) {
      // The connection failed: FailLink fails every op on it, this one too, and frees those no
      // work request names any more.
      FailLink(link, link.conn->error_status());
    } else if (op->pending_wrs == 0) {
      // Failed (and reported) with the link earlier: its last work request is back.
      tx_by_id_.erase(op->id);
      std::erase(op->peer->active, op);
      --tx_outstanding_;
      DeleteOp(op);
    }
    return;
  }
  if (wc.status != core::WcStatus::kSuccess) {
    if (!op->reported) {
      CompleteTx(op, ErrorOfStatus(wc.status), wc.status);
      op->reported = true;
    }
  } else if (write) {
    op->written += len;
  }
  const uint64_t length = op->copy.empty() ? op->src.length : op->copy.size();
  if (!op->reported && op->kind == TxOp::Kind::kMessage &&
      (!op->rendezvous || op->written >= length)) {
    CompleteTx(op, 0, core::WcStatus::kSuccess);
    op->reported = true;
  }
  const bool finished = op->reported && op->pending_wrs == 0 &&
                        (op->kind == TxOp::Kind::kMessage || op->acked || link.failed ||
                         wc.status != core::WcStatus::kSuccess);
  if (finished) {
    tx_by_id_.erase(op->id);
    std::erase(op->peer->active, op);
    --tx_outstanding_;
    DeleteOp(op);
  }
}

void Endpoint::RetryWaiting() {
  if (waiting_chunks_.empty() && !links_waiting_) return;
  links_waiting_ = false;
  std::deque<RndvRecv*> waiting = std::exchange(waiting_chunks_, {});
  for (RndvRecv* r : waiting) {
    r->waiting = false;
    RequestChunks(r);
  }
  for (auto& [id, link] : links_) {
    if (!link->failed) Drain(*link);
  }
}

// ---- Memory ---------------------------------------------------------------------------------------

void Endpoint::ReleaseBuffer(const WrContext& c) {
  if (c.app_buffer) return;
  (c.chunk_buffer ? domain_.chunk_pool() : domain_.eager_pool()).Put(c.buf);
}

std::optional<api::MemoryRegion> Endpoint::Register(void* base, size_t length, uint32_t access) {
  absl::StatusOr<api::MemoryRegion> r = domain_.context().RegisterMemory(base, length, access);
  if (!r.ok()) return std::nullopt;  // then through the chunk buffers
  return *r;
}

void Endpoint::Unregister(std::optional<api::MemoryRegion>& region) {
  if (region) domain_.context().DeregisterMemory(*region).IgnoreError();
  region.reset();
}

void Endpoint::DeleteOp(TxOp* op) {
  Unregister(op->region);
  delete op;
}

// ---- Completions to the application ------------------------------------------------------------

void Endpoint::CompleteTx(TxOp* op, int err, core::WcStatus status) {
  Cntr* cntr = op->kind == TxOp::Kind::kWrite ? write_cntr_ : send_cntr_;
  if (err != 0) {
    if (cntr != nullptr) ++cntr->errors;
    if (tx_cq_ != nullptr) {
      CqEntry e;
      e.op_context = op->context;
      e.flags = op->cq_flags;
      e.err = err;
      e.prov_errno = static_cast<int>(status);
      tx_cq_->Push(e);
    }
    return;
  }
  if (cntr != nullptr) ++cntr->value;
  if (op->report && tx_cq_ != nullptr) {
    CqEntry e;
    e.op_context = op->context;
    e.flags = op->cq_flags;
    tx_cq_->Push(e);
  }
}

void Endpoint::CompleteRx(RxOp* rx, const Arrival& a, size_t len, int err) {
  if (rx->discard) return;
  if (err != 0 && err != FI_ETRUNC) {
    if (recv_cntr_ != nullptr) ++recv_cntr_->errors;
  } else if (err == 0 && recv_cntr_ != nullptr) {
    ++recv_cntr_->value;
  }
  if (err == FI_ETRUNC && recv_cntr_ != nullptr) ++recv_cntr_->errors;
  if (rx_cq_ == nullptr || (err == 0 && !rx->report)) return;
  CqEntry e;
  e.op_context = rx->context;
  e.flags = rx->cq_flags | (a.has_data ? FI_REMOTE_CQ_DATA : 0);
  e.len = len;
  e.buf = rx->dst.iov.empty() ? nullptr : rx->dst.iov[0].iov_base;
  e.data = a.data;
  e.tag = a.tag;
  e.source = a.src_addr;
  e.err = err;
  if (err == FI_ETRUNC) {
    e.olen = a.length - len;
    e.prov_errno = static_cast<int>(core::WcStatus::kLocLenErr);
  } else if (err != 0) {
    e.prov_errno = static_cast<int>(core::WcStatus::kWrFlushErr);
  }
  rx_cq_->Push(e);
}

}  // namespace metaroce::ofi
