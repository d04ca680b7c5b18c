#include "lib/ofi/connection_manager.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/ofi/peer_protocol.h"

namespace metaroce::ofi {
namespace {

constexpr size_t kHelloBytes = 14 + kAddressBytes;

void PutBe(std::byte* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<std::byte>(v >> (8 * (bytes - 1 - i)));
}
uint64_t GetBe(const std::byte* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = v << 8 | std::to_integer<uint8_t>(p[i]);
  return v;
}

}  // namespace

std::vector<std::byte> PeerHello::Encode() const {
  std::vector<std::byte> b(kHelloBytes);
  PutBe(b.data(), version, 2);
  PutBe(b.data() + 2, eager_size, 4);
  PutBe(b.data() + 6, recv_slots, 4);
  PutBe(b.data() + 10, target_nonce, 4);
  std::memcpy(b.data() + 14, address.data(), kAddressBytes);
  return b;
}

absl::StatusOr<PeerHello> PeerHello::Decode(std::span<const std::byte> b) {
  if (b.size() != kHelloBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a metaroce provider's request: private data of ", b.size(), " bytes, not ",
        kHelloBytes));
  }
  PeerHello h;
  h.version = static_cast<uint16_t>(GetBe(b.data(), 2));
  h.eager_size = static_cast<uint32_t>(GetBe(b.data() + 2, 4));
  h.recv_slots = static_cast<uint32_t>(GetBe(b.data() + 6, 4));
  h.target_nonce = static_cast<uint32_t>(GetBe(b.data() + 10, 4));
  std::memcpy(h.address.data(), b.data() + 14, kAddressBytes);
  absl::StatusOr<EndpointAddress> a = EndpointAddress::Decode(h.address);
  if (!a.ok()) return a.status();
  if (h.recv_slots < 2) {
    return absl::InvalidArgumentError(absl::StrCat("peer offers ", h.recv_slots,
                                                   " receive slots: 2 at least are needed"));
  }
  return h;
}

ConnectionManager::ConnectionManager(api::Context& context,
                                     std::unique_ptr<api::Listener> listener,
                                     api::ConnectOptions options, PeerHello hello)
    : context_(context),
      listener_(std::move(listener)),
      options_(std::move(options)),
      hello_(hello),
      port_(listener_->port()) {
  acceptor_ = std::thread([this] { AcceptLoop(); });
  connector_ = std::thread([this] { ConnectLoop(); });
}

ConnectionManager::~ConnectionManager() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  acceptor_.join();
  connector_.join();
}

void ConnectionManager::Connect(const EndpointAddress& peer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(peer);
  }
  wake_.notify_all();
}

std::vector<ConnectionManager::Result> ConnectionManager::TakeResults() {
  // Called on every progress; results are rare: no lock while there are none.
  if (!has_results_.load(std::memory_order_acquire)) return {};
  std::lock_guard<std::mutex> lock(mu_);
  has_results_.store(false, std::memory_order_relaxed);
  return std::exchange(results_, {});
}

void ConnectionManager::Deliver(Result r) {
  std::lock_guard<std::mutex> lock(mu_);
  results_.push_back(std::move(r));
  has_results_.store(true, std::memory_order_release);
}

void ConnectionManager::AcceptLoop() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    absl::StatusOr<bool> pending = listener_->WaitForClient(absl::Milliseconds(100));
    if (!pending.ok() || !*pending) continue;
    PeerHello theirs;
    auto decide = [&](const api::ConnectionParameters& request)
        -> absl::StatusOr<api::ConnectOptions> {
      absl::StatusOr<PeerHello> h = PeerHello::Decode(request.private_data);
      if (!h.ok()) return h.status();
      if (h->version != kPeerProtocolVersion) {
        return absl::FailedPreconditionError(
            absl::StrCat("metaroce provider protocol version ", h->version, ": this one speaks ",
                         kPeerProtocolVersion));
      }
      if (h->eager_size != hello_.eager_size) {
        return absl::FailedPreconditionError(
            absl::StrCat("eager size ", h->eager_size, " against this endpoint's ",
                         hello_.eager_size, ": set FI_METAROCE_EAGER_SIZE alike everywhere"));
      }
      // Nonce 0: "whichever endpoint listens here" (an address made of a node and service,
      // address.h).
      if (h->target_nonce != 0 && h->target_nonce != EndpointAddress::Decode(hello_.address)->nonce) {
        return absl::FailedPreconditionError(
            "the request names an endpoint that is no longer here (its nonce differs)");
      }
      theirs = *h;
      api::ConnectOptions o = options_;
      o.path_count = request.path_count;
      PeerHello reply = hello_;
      reply.target_nonce = EndpointAddress::Decode(h->address)->nonce;
      o.private_data = reply.Encode();
      return o;
    };
    absl::StatusOr<std::unique_ptr<api::Connection>> conn =
        listener_->Accept(decide, options_.timeout);
    if (!conn.ok()) continue;  // refused or failed: the requester was told why
    Result r;
    r.peer = theirs.address;
    r.connection = std::move(*conn);
    r.peer_recv_slots = theirs.recv_slots;
    r.accepted = true;
    Deliver(std::move(r));
  }
}

void ConnectionManager::ConnectLoop() {
  for (;;) {
    EndpointAddress peer;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || !requests_.empty(); });
      if (stop_) return;
      peer = requests_.front();
      requests_.pop_front();
    }
    PeerHello ours = hello_;
    ours.target_nonce = peer.nonce;
    api::ConnectOptions o = options_;
    o.private_data = ours.Encode();
    Result r;
    r.peer = peer.Encode();
    // A peer that is not listening yet (refused: Unavailable) is asked again until the set-up
    // timeout: a client commonly starts before its server is up (fabtests starts the client a
    // second after the server, whose embedded engine may take longer to open; MPI ranks start
    // in any order), and TCP providers retry the same way.
    const absl::Time deadline = absl::Now() + options_.timeout;
    absl::StatusOr<std::unique_ptr<api::Connection>> conn =
        context_.Connect(peer.planes[0].ToString(), peer.tcp_port, o);
    while (!conn.ok() && conn.status().code() == absl::StatusCode::kUnavailable &&
           absl::Now() + kRefusedRetry < deadline) {
      std::unique_lock<std::mutex> lock(mu_);
      if (wake_.wait_for(lock, absl::ToChronoMilliseconds(kRefusedRetry), [&] { return stop_; })) {
        break;
      }
      lock.unlock();
      conn = context_.Connect(peer.planes[0].ToString(), peer.tcp_port, o);
    }
    absl::StatusOr<PeerHello> h;
    if (conn.ok()) {
      h = PeerHello::Decode((*conn)->peer_private_data());
      // A peer named with nonce 0 is whichever endpoint answers; the connection keeps the
      // name it was asked under (the application's AV entry).
      if (h.ok() && peer.nonce != 0 && h->address != r.peer) {
        h = absl::FailedPreconditionError("another endpoint answered at that address");
      }
    }
    if (conn.ok() && h.ok()) {
      r.connection = std::move(*conn);
      r.peer_recv_slots = h->recv_slots;
    } else {
      const absl::Status& why = conn.ok() ? h.status() : conn.status();
      r.status = absl::Status(why.code(), absl::StrCat("connecting to ", peer.ToString(), ": ",
                                                       why.message()));
    }
    Deliver(std::move(r));
  }
}

}  // namespace metaroce::ofi
