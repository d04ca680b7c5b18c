// mriut: this stack as an implementation under test. It hosts a context (embedded over this
// host's interfaces, or attached to metaroced) and serves the driver protocol of
// docs/spec/driver.md on a TCP port, so that a black-box compliance suite (mrconform) can make
// it set up connections, register memory, post work and read back what landed.
//
// A test build's tool: whoever reaches the driver port can read and write the regions it
// registers. Bind it to a test network (the conformance fabric's namespaces).
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "lib/api/context.h"
#include "lib/api/stats_json.h"
#include "lib/control/json.h"
#include "lib/core/types.h"
#include "lib/engine/engine.h"
#include "tools/conform/mutating_port.h"

namespace metaroce::conform {
namespace {

using control::Json;

// docs/spec/driver.md §1: a line (request or response) is at most 4 MiB; `read_mr` and
// `write_mr` move at most 2^20 bytes, 2^21 hex digits, so that their lines fit.
constexpr size_t kMaxLineBytes = 4 << 20;
constexpr uint64_t kMaxDataBytes = 1 << 20;

// SIGTERM and SIGINT end the process cleanly: the context goes, and with it the XDP program it
// attached (a killed AF_XDP IUT would leave it on the interface).
volatile sig_atomic_t g_stop = 0;
void OnStopSignal(int) { g_stop = 1; }
constexpr uint32_t kCqDepth = 1 << 14;

const char kUsage[] = R"(usage: mriut --driver ADDR:PORT [options]
Serves the driver protocol (docs/spec/driver.md) for this MetaRoCE stack as an implementation
under test.
  --driver ADDR:PORT      where the driver listens (TCP); PORT 0: any free port (printed)
  --plane IFNAME[=IP]     a plane: its interface and this host's address on it (repeatable;
                          default address: the interface's first IPv4 one)
  --port-kind udp|af_xdp  the packet port of an embedded context (default udp)
  --udp-port PORT         the MetaRoCE UDP port (default 4792)
  --mtu BYTES             payload per packet (default: the largest the planes' interfaces fit)
  --attach [SOCKET]       through metaroced instead (its planes, port and mtu)
  --setup-address ADDR    where `listen` takes set-ups (default: plane 0's address)
  --mutate NAME           deviate from the specification on purpose, to prove that mrconform
                          catches it (embedded only; tools/conform/mutations), one of:
)";

struct Options {
  std::string driver_host;
  uint16_t driver_port = 0;
  std::vector<api::PlaneOptions> planes;
  api::PortKind port_kind = api::PortKind::kUdp;
  uint16_t udp_port = wire::kDefaultUdpPort;
  uint32_t mtu = 0;  // Context::Create: the interfaces' largest
  std::optional<std::string> attach;
  std::string setup_address;
  std::optional<Mutation> mutate;
};

absl::Status SplitHostPort(const std::string& text, std::string* host, uint16_t* port) {
  const size_t colon = text.rfind(':');
  uint32_t p = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(text.substr(colon + 1), &p) ||
      p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not ADDR:PORT"));
  }
  *host = std::string(text.substr(0, colon));
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  *port = static_cast<uint16_t>(p);
  return absl::OkStatus();
}

absl::StatusOr<Options> ParseOptions(int argc, char** argv) {
  Options o;
  bool driver = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> absl::StatusOr<std::string> {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(a, " needs a value"));
      return std::string(argv[++i]);
    };
    uint32_t n = 0;
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::printf("                          %s\n", MutationNames().c_str());
      std::exit(0);
    } else if (a == "--driver") {
      auto v = value();
      if (!v.ok()) return v.status();
      if (absl::Status s = SplitHostPort(*v, &o.driver_host, &o.driver_port); !s.ok()) return s;
      driver = true;
    } else if (a == "--plane") {
      auto v = value();
      if (!v.ok()) return v.status();
      const size_t eq = v->find('=');
      o.planes.push_back({v->substr(0, eq), eq == std::string::npos ? "" : v->substr(eq + 1)});
    } else if (a == "--port-kind") {
      auto v = value();
      if (!v.ok()) return v.status();
      if (*v == "udp") {
        o.port_kind = api::PortKind::kUdp;
      } else if (*v == "af_xdp") {
        o.port_kind = api::PortKind::kAfXdp;
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--port-kind ", *v, ": udp or af_xdp"));
      }
    } else if (a == "--udp-port" || a == "--mtu") {
      auto v = value();
      if (!v.ok()) return v.status();
      if (!absl::SimpleAtoi(*v, &n) || n == 0 || (a == "--udp-port" && n > 65535)) {
        return absl::InvalidArgumentError(absl::StrCat(a, " ", *v, " is out of range"));
      }
      if (a == "--udp-port") {
        o.udp_port = static_cast<uint16_t>(n);
      } else {
        o.mtu = n;
      }
    } else if (a == "--attach") {
      o.attach = std::string(control::kDefaultSocketPath);
      if (i + 1 < argc && argv[i + 1][0] != '-') o.attach = argv[++i];
    } else if (a == "--mutate") {
      auto v = value();
      if (!v.ok()) return v.status();
      absl::StatusOr<Mutation> m = ParseMutation(*v);
      if (!m.ok()) return m.status();
      o.mutate = *m;
    } else if (a == "--setup-address") {
      auto v = value();
      if (!v.ok()) return v.status();
      o.setup_address = std::string(*v);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown argument ", a, " (see --help)"));
    }
  }
  if (!driver) return absl::InvalidArgumentError("--driver ADDR:PORT is required (see --help)");
  if (o.attach && o.mutate) {
    return absl::InvalidArgumentError("--mutate needs an embedded context (not --attach)");
  }
  if (!o.attach && o.planes.empty()) {
    return absl::InvalidArgumentError("an embedded context needs --plane IFNAME[=IP]");
  }
  return o;
}

std::string Hex(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::byte b : bytes) {
    out.push_back(kDigits[static_cast<uint8_t>(b) >> 4]);
    out.push_back(kDigits[static_cast<uint8_t>(b) & 0xf]);
  }
  return out;
}

absl::StatusOr<std::vector<std::byte>> Unhex(std::string_view hex, const std::string& what) {
  if (hex.size() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": an odd number of hex digits"));
  }
  std::vector<std::byte> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    int v = 0;
    for (int k = 0; k < 2; ++k) {
      const char c = hex[2 * i + k];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": not lowercase hex"));
      v = v * 16 + d;
    }
    out[i] = std::byte(static_cast<uint8_t>(v));
  }
  return out;
}

// Request parameters, each checked: a missing, mistyped or out-of-range one names itself.
class Params {
 public:
  explicit Params(const Json& j) : j_(j) {}
  absl::StatusOr<uint64_t> Uint(const std::string& key, uint64_t lo, uint64_t hi,
                                std::optional<uint64_t> fallback = std::nullopt) const {
    const Json* v = j_.Find(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return absl::InvalidArgumentError(absl::StrCat("missing parameter ", key));
    }
    const std::optional<uint64_t> n = v->AsUint();
    if (!n || *n < lo || *n > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter ", key, " must be an integer in ", lo, "..", hi));
    }
    return *n;
  }
  absl::StatusOr<std::string> String(const std::string& key,
                                     std::optional<std::string> fallback = std::nullopt) const {
    const Json* v = j_.Find(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return absl::InvalidArgumentError(absl::StrCat("missing parameter ", key));
    }
    const auto s = v->AsString();
    if (!s) return absl::InvalidArgumentError(absl::StrCat("parameter ", key, " must be text"));
    return std::string(*s);
  }
  absl::StatusOr<bool> Bool(const std::string& key, bool fallback) const {
    const Json* v = j_.Find(key);
    if (v == nullptr) return fallback;
    const auto b = v->AsBool();
    if (!b) return absl::InvalidArgumentError(absl::StrCat("parameter ", key, " must be boolean"));
    return *b;
  }
  const Json* Find(std::string_view key) const { return j_.Find(key); }

 private:
  const Json& j_;
};

#define MR_ASSIGN(lhs, expr)            \
  auto lhs##_or = (expr);               \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = *std::move(lhs##_or)

std::string_view OpcodeName(core::WcOpcode op) {
  switch (op) {
    case core::WcOpcode::kSend: return "SEND";
    case core::WcOpcode::kRdmaWrite: return "RDMA_WRITE";
    case core::WcOpcode::kRecv: return "RECV";
    case core::WcOpcode::kRecvRdmaWithImm: return "RECV_RDMA_WITH_IMM";
  }
  return "UNKNOWN";
}

Json HalfJson(const api::ConnectionParameters& p) {
  Json j = Json::MakeObject();
  j["conn_id"] = p.conn_id;
  char token[17];
  std::snprintf(token, sizeof token, "%016llx", static_cast<unsigned long long>(p.token));
  j["token"] = std::string(token);
  j["path_count"] = p.path_count;
  Json& ports = j["initial_ports"] = Json::MakeArray();
  for (uint16_t port : p.initial_ports) ports.Push(Json(static_cast<unsigned>(port)));
  Json& planes = j["planes"] = Json::MakeArray();
  for (const io::IpAddress& a : p.plane_addresses) {
    Json pl = Json::MakeObject();
    pl["address"] = a.ToString();
    planes.Push(std::move(pl));
  }
  j["mtu"] = p.mtu;
  j["udp_port"] = static_cast<unsigned>(p.udp_port);
  j["max_send_queue"] = p.max_send_queue;
  j["max_recv_queue"] = p.max_recv_queue;
  j["offer"] = p.offer;
  j["private_data"] = Hex(p.private_data);
  return j;
}

class Driver {
 public:
  // `attach`: the options `ctx` was attached with (a second session is another protection
  // domain); nullopt for an embedded context.
  // `datapath`: the embedded context's ports (its XDP steering programs count the drops they
  // make before the engine sees a datagram); null when attached. Must outlive the driver.
  Driver(std::unique_ptr<api::Context> ctx, std::unique_ptr<api::CompletionQueue> cq,
         std::string setup_address, std::optional<api::AttachOptions> attach,
         const api::Datapath* datapath)
      : ctx_(std::move(ctx)),
        cq_(std::move(cq)),
        setup_address_(std::move(setup_address)),
        attach_(std::move(attach)),
        datapath_(datapath) {}

  // One request: the response object (with "ok"; "id" is added by the caller).
  Json Handle(const Json& request) {
    absl::StatusOr<Json> r = Dispatch(request);
    if (!r.ok()) {
      Json e = Json::MakeObject();
      e["ok"] = false;
      e["error"] = std::string(r.status().message());
      return e;
    }
    Json out = *std::move(r);
    out["ok"] = true;
    return out;
  }

 private:
  struct Region {
    std::span<std::byte> block;
    api::MemoryRegion mr;
  };

  absl::StatusOr<Json> Dispatch(const Json& request) {
    const Json* op = request.Find("op");
    const auto name = op != nullptr ? op->AsString() : std::nullopt;
    if (!name) return absl::InvalidArgumentError("missing op");
    const std::string op_name(*name);
    const Params p(request);
    if (*name == "hello") return Hello();
    if (*name == "listen") return Listen();
    if (*name == "accept") return Accept(p);
    if (*name == "connect") return Connect(p);
    if (*name == "reg_mr") return RegMr(p);
    if (*name == "write_mr") return WriteMr(p);
    if (*name == "read_mr") return ReadMr(p);
    if (*name == "post_send") return PostSend(p);
    if (*name == "post_recv") return PostRecv(p);
    if (*name == "poll") return Poll(p);
    if (*name == "stats") return Stats(p);
    if (*name == "destroy") return Destroy(p);
    return absl::InvalidArgumentError(absl::StrCat("unknown op ", op_name));
  }

  absl::StatusOr<Json> Hello() {
    Json r = Json::MakeObject();
    r["driver_version"] = 1;
    r["implementation"] = ctx_->is_attached() ? "metaroce reference (through metaroced)"
                                              : "metaroce reference (embedded)";
    Json& v = r["setup_versions"] = Json::MakeArray();
    v.Push(Json(static_cast<unsigned>(api::kExchangeVersion)));
    Json& profiles = r["profiles"] = Json::MakeArray();
    for (const char* name : {"metaroce", "gbn", "reorder"}) profiles.Push(Json(name));
    r["udp_port"] = static_cast<unsigned>(ctx_->options().udp_port);
    r["mtu"] = ctx_->options().mtu;
    Json& planes = r["planes"] = Json::MakeArray();
    for (const api::PlaneOptions& pl : ctx_->options().planes) {
      Json j = Json::MakeObject();
      j["address"] = pl.local_ip;
      planes.Push(std::move(j));
    }
    r["setup_address"] = setup_address_;
    Json& features = r["features"] = Json::MakeArray();
    features.Push(Json("other_domain"));
    if (!ctx_->is_attached()) {
      features.Push(Json("min_timeout_ms"));
      features.Push(Json("rnr_retry"));
      features.Push(Json("host_counters"));  // `stats` without `conn` (the engine's endpoints)
      // driver.md §2: the local ACK policy ([R10]), which the set-up does not carry. Through
      // metaroced its path policy decides it, and this driver does not know it.
      const core::ConnectionConfig tuning = api::ConnectOptions().tuning;
      Json& ack = r["ack_policy"] = Json::MakeObject();
      ack["ack_every"] = tuning.ack_every;
      ack["delayed_ack_us"] = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(tuning.delayed_ack).count());
    }
    return r;
  }

  absl::StatusOr<Json> Listen() {
    listener_.reset();
    absl::StatusOr<std::unique_ptr<api::Listener>> l = ctx_->Listen(0, setup_address_);
    if (!l.ok()) return l.status();
    listener_ = *std::move(l);
    Json r = Json::MakeObject();
    r["port"] = static_cast<unsigned>(listener_->port());
    return r;
  }

  absl::StatusOr<api::ConnectOptions> ConnectOptionsOf(const Params& p) {
    api::ConnectOptions o;
    o.send_cq = o.recv_cq = cq_.get();
    MR_ASSIGN(paths, p.Uint("paths", 1, 256, 8));
    MR_ASSIGN(profile, p.String("profile", "metaroce"));
    MR_ASSIGN(ordered, p.Bool("ordered", false));
    MR_ASSIGN(sq, p.Uint("max_send_queue", 1, 1u << 20, 64));
    MR_ASSIGN(rq, p.Uint("max_recv_queue", 1, 1u << 20, 64));
    MR_ASSIGN(priv, p.String("private_data", ""));
    MR_ASSIGN(timeout_ms, p.Uint("timeout_ms", 1, 600'000, 5'000));
    MR_ASSIGN(min_timeout_ms, p.Uint("min_timeout_ms", 0, 60'000, 0));
    MR_ASSIGN(rnr_retry, p.Uint("rnr_retry", 0, 7, 7));
    if (profile == "metaroce") {
      o.profile = core::TransportProfile::MetaRoce();
    } else if (profile == "gbn") {
      o.profile = core::TransportProfile::GoBackN();
    } else if (profile == "reorder") {
      o.profile = core::TransportProfile::ReorderBuffer();
    } else {
      return absl::InvalidArgumentError(absl::StrCat("profile ", profile,
                                                     ": metaroce, gbn or reorder"));
    }
    MR_ASSIGN(private_data, Unhex(priv, "private_data"));
    o.path_count = static_cast<uint16_t>(paths);
    o.ordered_completion = ordered;
    o.max_send_queue = static_cast<uint32_t>(sq);
    o.max_recv_queue = static_cast<uint32_t>(rq);
    o.private_data = std::move(private_data);
    o.timeout = absl::Milliseconds(timeout_ms);
    if (rnr_retry != 7) {
      if (ctx_->is_attached()) {
        return absl::UnimplementedError(
            "rnr_retry: unsupported through metaroced (its path policy sets it)");
      }
      o.tuning.rnr_retry = static_cast<uint32_t>(rnr_retry);
    }
    if (min_timeout_ms > 0) {
      // A tester slower than this host's timers: no loss by timeout before min_timeout_ms, and
      // the connection's silence limit well beyond it (docs/spec/driver.md).
      if (ctx_->is_attached()) {
        return absl::UnimplementedError(
            "min_timeout_ms: unsupported through metaroced (its path policy sets the timers)");
      }
      const auto floor = std::chrono::milliseconds(min_timeout_ms);
      o.tuning.min_probe_timeout = std::max<core::Duration>(o.tuning.min_probe_timeout, floor);
      o.tuning.initial_rtt = std::max<core::Duration>(o.tuning.initial_rtt, floor);
      o.tuning.no_progress_timeout =
          std::max<core::Duration>(o.tuning.no_progress_timeout, 20 * floor);
    }
    return o;
  }

  absl::StatusOr<Json> Took(absl::StatusOr<std::unique_ptr<api::Connection>> conn) {
    if (!conn.ok()) return conn.status();
    Json r = Json::MakeObject();
    const uint32_t id = (*conn)->local_id();
    RememberToken(id, (*conn)->local_parameters().token);
    r["conn"] = id;
    r["peer"] = HalfJson((*conn)->peer_parameters());
    conns_[id] = *std::move(conn);
    return r;
  }

  absl::StatusOr<Json> Accept(const Params& p) {
    if (listener_ == nullptr) return absl::FailedPreconditionError("accept before listen");
    MR_ASSIGN(o, ConnectOptionsOf(p));
    return Took(listener_->Accept(o));
  }

  absl::StatusOr<Json> Connect(const Params& p) {
    MR_ASSIGN(host, p.String("host"));
    MR_ASSIGN(port, p.Uint("port", 1, 65535));
    MR_ASSIGN(o, ConnectOptionsOf(p));
    return Took(ctx_->Connect(host, static_cast<uint16_t>(port), o));
  }

  absl::StatusOr<Json> RegMr(const Params& p) {
    MR_ASSIGN(length, p.Uint("length", 1, 1u << 30));
    uint32_t access = 0;
    if (const Json* a = p.Find("access"); a != nullptr) {
      if (!a->is_array()) return absl::InvalidArgumentError("parameter access must be an array");
      for (const Json& flag : a->array()) {
        const auto f = flag.AsString();
        if (f && *f == "local_write") {
          access |= api::access::kLocalWrite;
        } else if (f && *f == "remote_write") {
          access |= api::access::kRemoteWrite;
        } else {
          return absl::InvalidArgumentError("access flags: local_write, remote_write");
        }
      }
    }
    MR_ASSIGN(domain, p.String("domain", "own"));
    if (domain != "own" && domain != "other") {
      return absl::InvalidArgumentError("parameter domain: own or other");
    }
    api::Context* owner = ctx_.get();
    if (domain == "other") {
      MR_ASSIGN(other, OtherDomain());
      owner = other;
    }
    absl::StatusOr<std::span<std::byte>> block = owner->AllocateMemory(length);
    if (!block.ok()) return block.status();
    std::memset(block->data(), 0, block->size());
    absl::StatusOr<api::MemoryRegion> mr =
        domain == "own" || owner != ctx_.get()
            ? owner->RegisterMemory(block->data(), length, access)
            : ctx_->engine().RegisterMemory(block->data(), length, access, kOtherDomain);
    if (!mr.ok()) {
      owner->FreeMemory(*block).IgnoreError();
      return mr.status();
    }
    regions_[mr->lkey] = Region{*block, *mr};
    Json r = Json::MakeObject();
    r["lkey"] = mr->lkey;
    r["rkey"] = mr->rkey;
    r["addr"] = static_cast<uint64_t>(mr->addr);
    return r;
  }

  // Where `reg_mr` with domain "other" registers: embedded, the engine's protection domain
  // kOtherDomain (every connection of this driver is in domain 0); attached, a second session
  // with metaroced (each session is a domain of its own).
  absl::StatusOr<api::Context*> OtherDomain() {
    if (!attach_) return ctx_.get();
    if (other_ == nullptr) {
      api::AttachOptions a = *attach_;
      a.name = "mriut-other-domain";
      absl::StatusOr<std::unique_ptr<api::Context>> other = api::Context::Attach(a);
      if (!other.ok()) return other.status();
      other_ = *std::move(other);
    }
    return other_.get();
  }

  // The region named by `lkey` and the range [offset, offset + length) inside it.
  absl::StatusOr<std::span<std::byte>> RangeOf(const Params& p, uint64_t length) {
    MR_ASSIGN(lkey, p.Uint("lkey", 0, UINT32_MAX));
    MR_ASSIGN(offset, p.Uint("offset", 0, 1u << 30));
    auto it = regions_.find(static_cast<uint32_t>(lkey));
    if (it == regions_.end()) {
      return absl::NotFoundError(absl::StrCat("no region with lkey ", lkey, " (reg_mr first)"));
    }
    if (offset + length > it->second.block.size()) {
      return absl::OutOfRangeError(absl::StrCat("range ", offset, "+", length,
                                                " is outside the region of ",
                                                it->second.block.size(), " bytes"));
    }
    return it->second.block.subspan(offset, length);
  }

  absl::StatusOr<Json> WriteMr(const Params& p) {
    MR_ASSIGN(text, p.String("data"));
    if (text.size() > 2 * kMaxDataBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter data: at most ", kMaxDataBytes, " bytes (", 2 * kMaxDataBytes,
          " hex digits) per write_mr; write a larger range in parts"));
    }
    MR_ASSIGN(data, Unhex(text, "data"));
    MR_ASSIGN(range, RangeOf(p, data.size()));
    std::memcpy(range.data(), data.data(), data.size());
    return Json::MakeObject();
  }

  absl::StatusOr<Json> ReadMr(const Params& p) {
    MR_ASSIGN(length, p.Uint("length", 0, kMaxDataBytes));
    MR_ASSIGN(range, RangeOf(p, length));
    Json r = Json::MakeObject();
    r["data"] = Hex(range);
    return r;
  }

  absl::StatusOr<api::Connection*> ConnOf(const Params& p) {
    MR_ASSIGN(id, p.Uint("conn", 1, UINT32_MAX));
    auto it = conns_.find(static_cast<uint32_t>(id));
    if (it == conns_.end()) return absl::NotFoundError(absl::StrCat("no connection ", id));
    return it->second.get();
  }

  absl::StatusOr<core::Sge> SgeOf(const Params& p) {
    MR_ASSIGN(length, p.Uint("length", 0, 1u << 30));
    MR_ASSIGN(lkey, p.Uint("lkey", 0, UINT32_MAX));
    MR_ASSIGN(offset, p.Uint("offset", 0, 1u << 30));
    // Not checked against the region here: the IUT's own checks are what is under test.
    auto it = regions_.find(static_cast<uint32_t>(lkey));
    const uint64_t base = it != regions_.end() ? it->second.mr.addr : 0;
    return core::Sge{base + offset, static_cast<uint32_t>(length), static_cast<uint32_t>(lkey)};
  }

  absl::StatusOr<Json> PostSend(const Params& p) {
    MR_ASSIGN(conn, ConnOf(p));
    MR_ASSIGN(wr_id, p.Uint("wr_id", 0, UINT64_MAX));
    MR_ASSIGN(opcode, p.String("opcode"));
    MR_ASSIGN(signaled, p.Bool("signaled", true));
    MR_ASSIGN(fence, p.Bool("fence", false));
    MR_ASSIGN(sge, SgeOf(p));
    core::SendWorkRequest wr;
    wr.wr_id = wr_id;
    wr.local = sge;
    wr.flags = (signaled ? api::send_flags::kSignaled : 0u) | (fence ? api::send_flags::kFence : 0u);
    const bool write = opcode == "write" || opcode == "write_imm";
    if (opcode == "write") {
      wr.opcode = core::WrOpcode::kWrite;
    } else if (opcode == "write_imm") {
      wr.opcode = core::WrOpcode::kWriteWithImm;
    } else if (opcode == "send") {
      wr.opcode = core::WrOpcode::kSend;
    } else if (opcode == "send_imm") {
      wr.opcode = core::WrOpcode::kSendWithImm;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("opcode ", opcode, ": write, write_imm, send or send_imm"));
    }
    if (write) {
      MR_ASSIGN(remote_addr, p.Uint("remote_addr", 0, UINT64_MAX));
      MR_ASSIGN(rkey, p.Uint("rkey", 0, UINT32_MAX));
      wr.remote_addr = remote_addr;
      wr.rkey = static_cast<uint32_t>(rkey);
    }
    if (opcode == "write_imm" || opcode == "send_imm") {
      MR_ASSIGN(imm, p.Uint("imm", 0, UINT32_MAX));
      wr.imm = static_cast<uint32_t>(imm);
    }
    if (absl::Status s = conn->PostSend(wr); !s.ok()) return s;
    return Json::MakeObject();
  }

  absl::StatusOr<Json> PostRecv(const Params& p) {
    MR_ASSIGN(conn, ConnOf(p));
    MR_ASSIGN(wr_id, p.Uint("wr_id", 0, UINT64_MAX));
    MR_ASSIGN(sge, SgeOf(p));
    if (absl::Status s = conn->PostRecv(core::RecvWorkRequest{wr_id, sge}); !s.ok()) return s;
    return Json::MakeObject();
  }

  absl::StatusOr<Json> Poll(const Params& p) {
    MR_ASSIGN(max, p.Uint("max", 1, 1024, 64));
    MR_ASSIGN(timeout_ms, p.Uint("timeout_ms", 0, 60'000, 0));
    const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);
    std::vector<api::WorkCompletion> wc(max);
    size_t n = 0;
    while (true) {
      if (ctx_->is_inline()) ctx_->Poll();
      n = cq_->Poll(wc);
      if (n > 0 || absl::Now() >= deadline) break;
      absl::SleepFor(absl::Microseconds(100));
    }
    Json r = Json::MakeObject();
    Json& out = r["completions"] = Json::MakeArray();
    for (size_t i = 0; i < n; ++i) {
      const api::WorkCompletion& c = wc[i];
      Json j = Json::MakeObject();
      j["conn"] = c.conn_id;
      j["wr_id"] = c.wr_id;
      j["status"] = std::string(core::StatusName(c.status));
      j["status_code"] = static_cast<unsigned>(c.status);
      j["opcode"] = std::string(OpcodeName(c.opcode));
      j["byte_len"] = c.byte_len;
      if (c.has_imm) j["imm"] = c.imm;
      out.Push(std::move(j));
    }
    return r;
  }

  absl::StatusOr<Json> Stats(const Params& p) {
    if (p.Find("conn") == nullptr) return HostStats();
    MR_ASSIGN(conn, ConnOf(p));
    absl::StatusOr<api::ConnectionStats> s = conn->Stats();
    if (!s.ok()) return s.status();
    Json r = Json::MakeObject();
    r["stats"] = api::ConnectionStatsJson(*s);
    return r;
  }

  // driver.md §2, `stats` without `conn`: the host-level drops of wire-format §9 (checks 1-9),
  // summed over the engine's workers, under the spec's names. Over AF_XDP the steering program
  // makes checks 1 and 2 itself (bpf/xdp_steer.bpf.c: shorter than the base header, version not
  // 1) and those datagrams never reach the engine: its counters are added.
  absl::StatusOr<Json> HostStats() {
    if (ctx_->is_attached()) {
      return absl::UnimplementedError(
          "stats without conn: host counters are metaroced's through an attached context "
          "(mrctl stat show); no host_counters in this driver's features");
    }
    static_assert(static_cast<size_t>(wire::ParseError::kCount) == 7,
                  "a new parse error: name it here as wire-format.md §9 does");
    constexpr std::pair<wire::ParseError, const char*> kReasons[] = {
        {wire::ParseError::kTruncated, "truncated"},
        {wire::ParseError::kBadVersion, "bad_version"},
        {wire::ParseError::kBadOpcode, "bad_opcode"},
        {wire::ParseError::kLengthMismatch, "length_mismatch"},
        {wire::ParseError::kBadRange, "bad_range"},
        {wire::ParseError::kBadSyndrome, "bad_syndrome"},
    };
    std::map<std::string, uint64_t> sum;
    for (const engine::WorkerStats& w : ctx_->Stats()) {
      for (const auto& [reason, name] : kReasons) {
        sum[name] += w.endpoint.malformed_by_reason[static_cast<size_t>(reason)];
      }
      sum["unknown_connection"] += w.endpoint.unknown_connection;
      sum["rx_datagrams"] += w.endpoint.rx_datagrams;
    }
    if (datapath_ != nullptr) {
      for (const auto& [ifname, c] : datapath_->SteeringCounters()) {
        sum["truncated"] += c.drop_truncated;
        sum["bad_version"] += c.drop_bad_version;
      }
    }
    Json r = Json::MakeObject();
    Json& host = r["host"] = Json::MakeObject();
    for (const auto& [name, n] : sum) host[name] = n;
    return r;
  }

  absl::StatusOr<Json> Destroy(const Params& p) {
    MR_ASSIGN(id, p.Uint("conn", 1, UINT32_MAX));
    auto it = conns_.find(static_cast<uint32_t>(id));
    if (it == conns_.end()) return absl::NotFoundError(absl::StrCat("no connection ", id));
    it->second->Abort().IgnoreError();
    conns_.erase(it);
    return Json::MakeObject();
  }

  static constexpr uint32_t kOtherDomain = 1;

  std::unique_ptr<api::Context> ctx_;
  std::unique_ptr<api::CompletionQueue> cq_;
  std::string setup_address_;
  std::optional<api::AttachOptions> attach_;
  const api::Datapath* datapath_;
  std::unique_ptr<api::Context> other_;  // attached: the second session (domain "other")
  std::unique_ptr<api::Listener> listener_;
  std::map<uint32_t, std::unique_ptr<api::Connection>> conns_;
  std::map<uint32_t, Region> regions_;
};

// Reads one '\n'-terminated line (without it) into `line`; false at EOF or on an error.
bool ReadLine(int fd, std::string& buffer, std::string& line) {
  while (true) {
    if (const size_t nl = buffer.find('\n'); nl != std::string::npos) {
      line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      return true;
    }
    if (buffer.size() > kMaxLineBytes) return false;
    char chunk[65536];
    const ssize_t n = read(fd, chunk, sizeof chunk);
    if (g_stop) return false;
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buffer.append(chunk, static_cast<size_t>(n));
  }
}

bool WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

void Serve(Driver& driver, int fd) {
  // The session is served one request at a time: blocking reads and writes (ExchangeSocket's
  // are non-blocking, for its deadlines).
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string buffer, line;
  while (ReadLine(fd, buffer, line)) {
    Json response = Json::MakeObject();
    absl::StatusOr<Json> request = Json::Parse(line);
    const Json* id = request.ok() ? request->Find("id") : nullptr;
    if (!request.ok() || !request->is_object() || id == nullptr || !id->AsUint()) {
      response["id"] = nullptr;
      response["ok"] = false;
      response["error"] = request.ok() ? "a request is a JSON object with an unsigned id and op"
                                       : std::string(request.status().message());
    } else {
      response = driver.Handle(*request);
      response["id"] = *id->AsUint();
    }
    std::string text = response.Dump();
    if (text.size() + 1 > kMaxLineBytes) {  // driver.md §1: never a longer line
      Json e = Json::MakeObject();
      e["id"] = nullptr;
      if (id != nullptr && id->AsUint()) e["id"] = *id->AsUint();
      e["ok"] = false;
      e["error"] = absl::StrCat("the response would be ", text.size(),
                                " bytes, over the driver's line limit of ", kMaxLineBytes,
                                " (driver.md §1): ask for less");
      text = e.Dump();
    }
    if (!WriteAll(fd, text + "\n")) return;
  }
}

int Run(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  struct sigaction stop {};
  stop.sa_handler = OnStopSignal;  // no SA_RESTART: a blocked read returns to see the flag
  sigaction(SIGTERM, &stop, nullptr);
  sigaction(SIGINT, &stop, nullptr);
  absl::StatusOr<Options> o = ParseOptions(argc, argv);
  if (!o.ok()) {
    std::fprintf(stderr, "mriut: %s\n", std::string(o.status().message()).c_str());
    return 2;
  }
  std::unique_ptr<api::Datapath> datapath;  // --mutate: declared first, destroyed last
  absl::StatusOr<std::unique_ptr<api::Context>> ctx;
  std::optional<api::AttachOptions> attached;
  if (o->attach) {
    api::AttachOptions a;
    a.socket_path = *o->attach;
    a.name = "mriut";
    attached = a;
    ctx = api::Context::Attach(a);
  } else {
    api::ContextOptions c;
    c.planes = o->planes;
    c.port_kind = o->port_kind;
    c.udp_port = o->udp_port;
    c.mtu = o->mtu;
    if (!o->mutate) {
      ctx = api::Context::Create(c);
    } else {
      // The datapath's ports, each behind a MutatingPort; the datapath outlives the context.
      api::DatapathOptions d;
      d.kind = c.port_kind;
      d.planes = c.planes;
      d.udp_port = c.udp_port;
      absl::StatusOr<std::unique_ptr<api::Datapath>> dp = api::Datapath::Create(d);
      if (!dp.ok()) {
        std::fprintf(stderr, "mriut: %s\n", std::string(dp.status().message()).c_str());
        return 1;
      }
      datapath = *std::move(dp);
      for (size_t p = 0; p < c.planes.size(); ++p) {
        if (c.planes[p].local_ip.empty()) {
          c.planes[p].local_ip = datapath->planes()[p].local_ip.ToString();
        }
      }
      if (c.mtu == 0) c.mtu = datapath->DefaultMtu();
      const Mutation m = *o->mutate;
      api::PortFactory inner = datapath->Factory();
      ctx = api::Context::Create(
          c, [inner, m](const api::PortSpec& spec)
                 -> absl::StatusOr<std::unique_ptr<io::PacketPort>> {
            absl::StatusOr<std::unique_ptr<io::PacketPort>> port = inner(spec);
            if (!port.ok()) return port.status();
            return std::unique_ptr<io::PacketPort>(new MutatingPort(*std::move(port), m));
          });
    }
  }
  if (!ctx.ok()) {
    std::fprintf(stderr, "mriut: %s\n", std::string(ctx.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<api::CompletionQueue>> cq = (*ctx)->CreateCompletionQueue(kCqDepth);
  if (!cq.ok()) {
    std::fprintf(stderr, "mriut: %s\n", std::string(cq.status().message()).c_str());
    return 1;
  }
  std::string setup_address = o->setup_address;
  if (setup_address.empty()) setup_address = (*ctx)->options().planes.at(0).local_ip;
  absl::StatusOr<api::ExchangeSocket> listen =
      api::ExchangeSocket::Listen(o->driver_host, o->driver_port);
  if (!listen.ok()) {
    std::fprintf(stderr, "mriut: driver: %s\n", std::string(listen.status().message()).c_str());
    return 1;
  }
  const api::Datapath* ports = datapath != nullptr ? datapath.get() : (*ctx)->datapath();
  Driver driver(*std::move(ctx), *std::move(cq), setup_address, std::move(attached), ports);
  std::printf("mriut: driver on %s:%u, set-ups on %s\n", o->driver_host.c_str(),
              listen->local_port(), setup_address.c_str());
  std::fflush(stdout);
  while (!g_stop) {
    absl::StatusOr<api::ExchangeSocket> tester =
        listen->Accept(absl::Now() + absl::Milliseconds(200));
    if (!tester.ok()) {
      if (tester.status().code() != absl::StatusCode::kDeadlineExceeded && !g_stop) {
        std::fprintf(stderr, "mriut: %s\n", std::string(tester.status().message()).c_str());
      }
      continue;
    }
    Serve(driver, tester->fd());
  }
  std::printf("mriut: stopped\n");
  return 0;
}

}  // namespace
}  // namespace metaroce::conform

int main(int argc, char** argv) { return metaroce::conform::Run(argc, argv); }
