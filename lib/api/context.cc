#include "lib/api/context.h"

#include <poll.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "lib/api/attached_backend.h"
#include "lib/api/backend.h"
#include "lib/api/embedded_backend.h"

namespace metaroce::api {
namespace {

absl::Status FillRandom(void* out, size_t n) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    const ssize_t got = getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, "getrandom for connection tokens");
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::Status CheckConnectOptions(const ConnectOptions& o) {
  if (o.send_cq == nullptr || o.recv_cq == nullptr) {
    return absl::InvalidArgumentError("ConnectOptions needs send_cq and recv_cq");
  }
  if (o.private_data.size() > kMaxPrivateDataBytes) {
    return absl::InvalidArgumentError(absl::StrCat("private_data of ", o.private_data.size(),
                                                   " bytes exceeds ", kMaxPrivateDataBytes));
  }
  if (o.path_count < 1 || o.path_count > 256) {
    return absl::InvalidArgumentError("path_count must be 1..256");
  }
  if (o.max_send_queue < 1 || o.max_send_queue > (1u << 20) || o.max_recv_queue < 1 ||
      o.max_recv_queue > (1u << 20)) {
    return absl::InvalidArgumentError("queue depths must be 1..2^20");
  }
  return absl::OkStatus();
}

// Sends a REJECT with `code` and `why` as its reason (best effort: the peer may be gone) and
// returns `why`.
absl::Status Refuse(ExchangeSocket& socket, SetupCode code, absl::Status why,
                    absl::Time deadline) {
  ExchangeMessage m;
  m.kind = ExchangeKind::kReject;
  m.code = code;
  m.reason = std::string(why.message());
  socket.SendMessage(EncodeExchange(m), deadline).IgnoreError();
  return why;
}

// The REJECT code that answers a message DecodeExchange refused (setup.md §6).
SetupCode CodeOfDecodeError(const absl::Status& s) {
  return s.code() == absl::StatusCode::kFailedPrecondition ? SetupCode::kUnsupportedVersion
                                                           : SetupCode::kMalformed;
}

// The REJECT code for a local failure to take the connection: out of something, or not.
SetupCode CodeOfLocalError(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kResourceExhausted: return SetupCode::kResources;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kUnimplemented: return SetupCode::kUnsupported;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kPermissionDenied: return SetupCode::kRefused;
    default: return SetupCode::kInternal;
  }
}

// Receives and decodes one message. `readable` false: the frame itself failed (peer gone,
// deadline), nothing to answer; otherwise a message that does not decode is answered with a
// REJECT of CodeOfDecodeError(message.status()).
struct Received {
  absl::StatusOr<ExchangeMessage> message;
  bool readable = true;  // false: the frame itself failed (peer gone, timeout): nothing to answer
};

Received ReceiveExchange(ExchangeSocket& socket, absl::Time deadline) {
  absl::StatusOr<std::vector<std::byte>> body = socket.ReceiveMessage(deadline);
  if (!body.ok()) return {body.status(), false};
  return {DecodeExchange(*body), true};
}

absl::Status PeerRefused(const ExchangeMessage& m) {
  if (m.code == SetupCode::kUnsupportedVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the peer refused the connection (unsupported_version: it speaks set-up protocol version ",
        m.version, ", this side ", kExchangeVersion, "): ", m.reason));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the peer refused the connection (", std::string(SetupCodeName(m.code)), "): ", m.reason));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Context>> Context::Create(const ContextOptions& options,
                                                         PortFactory factory) {
  if (options.workers < 0 || options.workers > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("workers ", options.workers, " is out of range: 0 (inline mode) .. 256"));
  }
  if (options.planes.empty() || options.planes.size() > kMaxPlanes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a context needs 1..", kMaxPlanes, " planes, got ", options.planes.size()));
  }
  if (!factory) return absl::InvalidArgumentError("a context needs a port factory");
  if (options.udp_port == 0) return absl::InvalidArgumentError("udp_port must not be 0");
  if (options.observed_event_depth < 1 || options.observed_event_depth > (uint32_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "observed_event_depth ", options.observed_event_depth, " is out of range: 1..16777216"));
  }
  if (!std::isfinite(options.pull_rate_gbps) || options.pull_rate_gbps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pull_rate_gbps ", options.pull_rate_gbps,
        " is out of range: a rate in Gb/s >= 0 (0: no pulls)"));
  }
  std::vector<io::IpAddress> addresses;
  for (size_t i = 0; i < options.planes.size(); ++i) {
    absl::StatusOr<io::IpAddress> a = io::IpAddress::Parse(options.planes[i].local_ip);
    if (!a.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("plane ", i, " local_ip '",
                                                     options.planes[i].local_ip, "': ",
                                                     a.status().message()));
    }
    addresses.push_back(*a);
  }
  // Every packet must fit one UDP datagram of the planes' families (setup.md §4).
  const bool any_ipv4 = std::any_of(addresses.begin(), addresses.end(),
                                    [](const io::IpAddress& a) { return !a.v6; });
  const uint32_t max_mtu = any_ipv4 ? kMaxMtuIpv4 : kMaxMtuIpv6;
  if (options.mtu < kMinMtu || options.mtu > max_mtu) {
    return absl::InvalidArgumentError(absl::StrCat("mtu ", options.mtu, " is out of range: ",
                                                   kMinMtu, "..", max_mtu,
                                                   any_ipv4 ? " (a plane is IPv4)" : ""));
  }
  engine::EngineOptions eo;
  eo.workers = options.workers;
  eo.planes = static_cast<int>(options.planes.size());
  eo.cpus = options.cpus;
  eo.idle = options.idle;
  eo.spins_before_sleep = options.spins_before_sleep;
  eo.observed_event_depth = options.observed_event_depth;
  eo.receive_budget_bytes = options.receive_budget_bytes;
  eo.pull_rate_gbps = options.pull_rate_gbps;
  eo.mtu = options.mtu;
  eo.max_datagram_bytes = static_cast<uint32_t>(
      std::max<size_t>(options.mtu + wire::kDataHeadersSize, wire::kMaxHeadersSize) + 64);
  auto engine_factory = [&options, &addresses, &factory](int worker, int plane) {
    PortSpec spec;
    spec.worker = worker;
    spec.plane = plane;
    spec.queue = options.first_queue + static_cast<uint32_t>(worker);
    spec.ifname = options.planes[plane].ifname;
    spec.local_ip = addresses[plane];
    spec.kind = options.port_kind;
    spec.udp_port = options.udp_port;
    spec.mtu = options.mtu;
    return factory(spec);
  };
  absl::StatusOr<std::unique_ptr<engine::Engine>> e = engine::Engine::Create(eo, engine_factory);
  if (!e.ok()) return e.status();
  return std::unique_ptr<Context>(
      new Context(options, addresses, std::make_unique<EmbeddedBackend>(*std::move(e))));
}

absl::StatusOr<std::unique_ptr<Context>> Context::Create(const ContextOptions& options) {
  DatapathOptions d;
  d.kind = options.port_kind;
  d.planes = options.planes;
  d.udp_port = options.udp_port;
  d.queues = static_cast<uint32_t>(std::max(options.workers, 1));
  d.first_queue = options.first_queue;
  absl::StatusOr<std::unique_ptr<Datapath>> datapath = Datapath::Create(d);
  if (!datapath.ok()) return datapath.status();
  return Create(options, *std::move(datapath));
}

absl::StatusOr<std::unique_ptr<Context>> Context::Create(const ContextOptions& options,
                                                         std::unique_ptr<Datapath> datapath) {
  if (datapath == nullptr) return absl::InvalidArgumentError("null datapath");
  if (datapath->kind() != options.port_kind ||
      datapath->planes().size() != options.planes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the datapath has ", datapath->planes().size(), " planes of another port kind than "
        "ContextOptions' ", options.planes.size(), ": build both from the same settings"));
  }
  ContextOptions resolved = options;
  for (size_t p = 0; p < resolved.planes.size(); ++p) {
    if (resolved.planes[p].local_ip.empty()) {
      resolved.planes[p].local_ip = datapath->planes()[p].local_ip.ToString();
    }
  }
  if (resolved.mtu == 0) resolved.mtu = datapath->DefaultMtu();
  Datapath& dp = *datapath;
  absl::StatusOr<std::unique_ptr<Context>> ctx = Create(resolved, dp.Factory());
  if (!ctx.ok()) return ctx.status();  // the engine and its ports went first
  (*ctx)->embedded_->AdoptDatapath(std::move(datapath));
  return ctx;
}

absl::StatusOr<std::unique_ptr<Context>> Context::Attach(const AttachOptions& options) {
  absl::StatusOr<std::unique_ptr<AttachedBackend>> backend = AttachedBackend::Attach(options);
  if (!backend.ok()) return backend.status();
  const AttachedBackend::Facts& facts = (*backend)->facts();
  ContextOptions o;
  for (const io::IpAddress& a : facts.addresses) o.planes.push_back({"", a.ToString()});
  o.workers = facts.workers;
  o.mtu = facts.mtu;
  o.udp_port = facts.udp_port;
  const std::vector<io::IpAddress> addresses = facts.addresses;
  return std::unique_ptr<Context>(new Context(o, addresses, *std::move(backend)));
}

Context::Context(const ContextOptions& options, std::vector<io::IpAddress> addresses,
                 std::unique_ptr<ContextBackend> backend)
    : options_(options),
      addresses_(std::move(addresses)),
      backend_(std::move(backend)),
      embedded_(dynamic_cast<EmbeddedBackend*>(backend_.get())),
      engine_(embedded_ != nullptr ? &embedded_->engine() : nullptr) {}

Context::~Context() = default;

const Datapath* Context::datapath() const {
  return embedded_ != nullptr ? embedded_->datapath() : nullptr;
}

std::vector<engine::WorkerStats> Context::Stats() { return backend_->Stats(); }

absl::StatusOr<std::span<std::byte>> Context::AllocateMemory(size_t bytes) {
  return backend_->AllocateMemory(bytes);
}

absl::Status Context::FreeMemory(std::span<std::byte> block) {
  return backend_->FreeMemory(block);
}

absl::StatusOr<MemoryRegion> Context::RegisterMemory(void* addr, size_t length, uint32_t access) {
  return backend_->RegisterMemory(addr, length, access);
}

absl::Status Context::DeregisterMemory(const MemoryRegion& region) {
  return backend_->DeregisterMemory(region);
}

absl::StatusOr<std::unique_ptr<CompletionQueue>> Context::CreateCompletionQueue(size_t depth) {
  if (depth < 1 || depth > (1u << 24)) {
    return absl::InvalidArgumentError("completion queue depth must be 1..2^24");
  }
  return backend_->CreateCompletionQueue(depth);
}

absl::StatusOr<std::unique_ptr<Listener>> Context::Listen(uint16_t tcp_port,
                                                          std::string_view bind_address) {
  absl::StatusOr<ExchangeSocket> s = ExchangeSocket::Listen(bind_address, tcp_port);
  if (!s.ok()) return s.status();
  return std::unique_ptr<Listener>(new Listener(*this, *std::move(s)));
}

absl::Status Context::CheckLocalParameters(const ConnectOptions& o) const {
  if (absl::Status s = CheckConnectOptions(o); !s.ok()) return s;
  const PortRange ports = backend_->SourcePorts(o.tuning);
  const uint32_t lo = ports.lo, hi = ports.hi;
  if (hi < lo || hi - lo + 1 < uint32_t{o.path_count} + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "source ports ", lo, "..", hi, " are too few for path_count ", o.path_count,
        is_attached() ? " (metaroced's rotation range)" : " (tuning.rotate_port_lo..hi)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ConnectionParameters> Context::MakeLocalParameters(const ConnectOptions& o) {
  if (absl::Status s = CheckLocalParameters(o); !s.ok()) return s;
  ConnectionParameters p;
  absl::StatusOr<ConnectionSlot> slot = backend_->PrepareConnection();
  if (!slot.ok()) return slot.status();
  p.conn_id = slot->conn_id;
  p.offer = slot->offer;
  do {
    if (absl::Status s = FillRandom(&p.token, sizeof(p.token)); !s.ok()) return s;
  } while (p.token == 0);
  p.path_count = o.path_count;
  // Consecutive source ports from a random base inside the rotation range, avoiding the
  // protocol's own UDP port.
  const PortRange ports = backend_->SourcePorts(o.tuning);
  const uint32_t lo = ports.lo, hi = ports.hi;
  uint32_t r = 0;
  if (absl::Status s = FillRandom(&r, sizeof(r)); !s.ok()) return s;
  uint32_t base = lo + r % (hi - lo + 1 - o.path_count);
  if (options_.udp_port >= base && options_.udp_port < base + o.path_count) {
    base = uint32_t{options_.udp_port} + 1 + o.path_count <= hi + 1 ? options_.udp_port + 1u : lo;
  }
  for (uint16_t i = 0; i < o.path_count; ++i) p.initial_ports.push_back(uint16_t(base + i));
  p.plane_addresses = addresses_;
  p.profile = o.profile;
  p.ordered_completion = o.ordered_completion;
  p.mtu = options_.mtu;
  p.max_send_queue = o.max_send_queue;
  p.max_recv_queue = o.max_recv_queue;
  p.udp_port = options_.udp_port;
  p.private_data = o.private_data;
  return p;
}

absl::StatusOr<std::unique_ptr<Connection>> Context::CreateConnection(
    const ConnectOptions& o, const ConnectionParameters& ours, const ConnectionParameters& peer) {
  absl::StatusOr<ConnectionBinding> b = backend_->CreateConnection(o, ours, peer);
  if (!b.ok()) return b.status();
  return std::unique_ptr<Connection>(new Connection(std::move(b->channel), b->wake,
                                                    std::move(b->control), ours, peer));
}

absl::StatusOr<std::unique_ptr<Connection>> Context::Connect(std::string_view host,
                                                             uint16_t tcp_port,
                                                             const ConnectOptions& options) {
  const absl::Time deadline = absl::Now() + options.timeout;
  absl::StatusOr<ConnectionParameters> ours = MakeLocalParameters(options);
  if (!ours.ok()) return ours.status();
  absl::StatusOr<ExchangeSocket> socket = ExchangeSocket::Connect(host, tcp_port, deadline);
  if (!socket.ok()) return socket.status();
  ExchangeMessage request;
  request.kind = ExchangeKind::kRequest;
  request.params = *ours;
  if (absl::Status s = socket->SendMessage(EncodeExchange(request), deadline); !s.ok()) return s;
  Received reply = ReceiveExchange(*socket, deadline);
  if (!reply.message.ok()) {
    if (!reply.readable) return reply.message.status();
    return Refuse(*socket, CodeOfDecodeError(reply.message.status()), reply.message.status(),
                  deadline);
  }
  if (reply.message->kind == ExchangeKind::kReject) return PeerRefused(*reply.message);
  if (reply.message->kind != ExchangeKind::kReply) {
    return Refuse(*socket, SetupCode::kUnexpectedMessage,
                  absl::InvalidArgumentError(absl::StrCat(
                      "set-up protocol: expected a REPLY or REJECT from the server, got kind ",
                      static_cast<int>(reply.message->kind))),
                  deadline);
  }
  const ConnectionParameters& peer = reply.message->params;
  if (absl::Status s = CheckCompatible(*ours, peer); !s.ok()) {
    return Refuse(*socket, SetupCode::kIncompatible, s, deadline);
  }
  absl::StatusOr<std::unique_ptr<Connection>> conn = CreateConnection(options, *ours, peer);
  if (!conn.ok()) {
    return Refuse(*socket, CodeOfLocalError(conn.status()), conn.status(), deadline);
  }
  ExchangeMessage confirm;
  confirm.kind = ExchangeKind::kConfirm;
  if (absl::Status s = socket->SendMessage(EncodeExchange(confirm), deadline); !s.ok()) return s;
  if (options.keep_exchange_socket) (*conn)->exchange_socket_ = *std::move(socket);
  return conn;
}

absl::StatusOr<std::unique_ptr<Connection>> Listener::Accept(const ConnectOptions& options) {
  // Parameters are checked before a client is taken, so a bad option never costs a client.
  if (absl::Status s = context_.CheckLocalParameters(options); !s.ok()) return s;
  return Accept([&options](const ConnectionParameters&) { return options; }, options.timeout);
}

absl::StatusOr<bool> Listener::WaitForClient(absl::Duration timeout) {
  pollfd p{socket_.fd(), POLLIN, 0};
  const int ms = static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 0,
                                                      int64_t{1} << 30));
  const int rc = poll(&p, 1, ms);
  if (rc < 0 && errno != EINTR) return absl::ErrnoToStatus(errno, "poll on the listener");
  return rc > 0;
}

absl::StatusOr<std::unique_ptr<Connection>> Listener::Accept(const AcceptDecision& decide,
                                                             absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<ExchangeSocket> client = socket_.Accept(deadline);
  if (!client.ok()) return client.status();
  const std::string who = client->peer_name();
  auto from = [&who](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("connection from ", who, ": ", s.message()));
  };
  Received request = ReceiveExchange(*client, deadline);
  if (!request.message.ok()) {
    if (!request.readable) return from(request.message.status());
    return from(Refuse(*client, CodeOfDecodeError(request.message.status()),
                       request.message.status(), deadline));
  }
  if (request.message->kind != ExchangeKind::kRequest) {
    return from(Refuse(*client, SetupCode::kUnexpectedMessage,
                       absl::InvalidArgumentError(absl::StrCat(
                           "set-up protocol: expected a REQUEST, got kind ",
                           static_cast<int>(request.message->kind))),
                       deadline));
  }
  const ConnectionParameters& peer = request.message->params;
  absl::StatusOr<ConnectOptions> decided = decide(peer);
  if (!decided.ok()) return from(Refuse(*client, SetupCode::kRefused, decided.status(), deadline));
  const ConnectOptions& options = *decided;
  absl::StatusOr<ConnectionParameters> ours = context_.MakeLocalParameters(options);
  if (!ours.ok()) {
    return from(Refuse(*client, CodeOfLocalError(ours.status()), ours.status(), deadline));
  }
  if (absl::Status s = CheckCompatible(*ours, peer); !s.ok()) {
    return from(Refuse(*client, SetupCode::kIncompatible, s, deadline));
  }
  // Our connection exists before the client learns our parameters, so its first packets find it.
  absl::StatusOr<std::unique_ptr<Connection>> conn =
      context_.CreateConnection(options, *ours, peer);
  if (!conn.ok()) {
    return from(Refuse(*client, CodeOfLocalError(conn.status()), conn.status(), deadline));
  }
  ExchangeMessage reply;
  reply.kind = ExchangeKind::kReply;
  reply.params = *ours;
  if (absl::Status s = client->SendMessage(EncodeExchange(reply), deadline); !s.ok()) {
    return from(s);  // `conn` is destroyed on return
  }
  // Until CONFIRM the client may still refuse: on a REJECT, anything else, a closed socket or
  // the deadline, `conn` is destroyed on return (setup.md §3).
  Received confirm = ReceiveExchange(*client, deadline);
  if (!confirm.message.ok()) {
    if (!confirm.readable) return from(confirm.message.status());
    return from(Refuse(*client, CodeOfDecodeError(confirm.message.status()),
                       confirm.message.status(), deadline));
  }
  if (confirm.message->kind == ExchangeKind::kReject) return from(PeerRefused(*confirm.message));
  if (confirm.message->kind != ExchangeKind::kConfirm) {
    return from(Refuse(*client, SetupCode::kUnexpectedMessage,
                       absl::InvalidArgumentError(absl::StrCat(
                           "set-up protocol: expected a CONFIRM or REJECT, got kind ",
                           static_cast<int>(confirm.message->kind))),
                       deadline));
  }
  if (options.keep_exchange_socket) (*conn)->exchange_socket_ = *std::move(client);
  return conn;
}

}  // namespace metaroce::api
