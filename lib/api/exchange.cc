#include "lib/api/exchange.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace metaroce::api {
namespace {

constexpr uint8_t kMagic[4] = {'M', 'R', 'C', 'X'};
constexpr size_t kHeaderBytes = 8;
constexpr size_t kParamsFixedBytes = 4 + 8 + 2 + 1 + 1 + 1 + 1 + 1 + 1 + 4 + 4 + 4 + 4 + 2 + 2 + 4;
constexpr size_t kPlaneBytes = 17;

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(std::byte{v}); }
  void U16(uint16_t v) {
    U8(static_cast<uint8_t>(v >> 8));
    U8(static_cast<uint8_t>(v));
  }
  void U32(uint32_t v) {
    U16(static_cast<uint16_t>(v >> 16));
    U16(static_cast<uint16_t>(v));
  }
  void U64(uint64_t v) {
    U32(static_cast<uint32_t>(v >> 32));
    U32(static_cast<uint32_t>(v));
  }
  void Bytes(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  std::vector<std::byte> Take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

// Reads within the span only; every read after a failed one is a no-op returning zero.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  bool ok() const { return ok_; }
  size_t remaining() const { return in_.size() - pos_; }
  uint8_t U8() {
    if (!Need(1)) return 0;
    return static_cast<uint8_t>(in_[pos_++]);
  }
  // Operands are read in separate statements: the order of evaluation within `|` is unspecified.
  uint16_t U16() {
    const uint16_t hi = U8();
    return static_cast<uint16_t>((hi << 8) | U8());
  }
  uint32_t U32() {
    const uint32_t hi = U16();
    return (hi << 16) | U16();
  }
  uint64_t U64() {
    const uint64_t hi = U32();
    return (hi << 32) | U32();
  }
  std::span<const std::byte> Bytes(size_t n) {
    if (!Need(n)) return {};
    auto s = in_.subspan(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  bool Need(size_t n) {
    if (!ok_ || remaining() < n) ok_ = false;
    return ok_;
  }
  std::span<const std::byte> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed connection exchange: ", std::string(what)));
}

}  // namespace

std::string_view SetupCodeName(SetupCode code) {
  switch (code) {
    case SetupCode::kNone: return "none";
    case SetupCode::kMalformed: return "malformed";
    case SetupCode::kUnsupportedVersion: return "unsupported_version";
    case SetupCode::kUnexpectedMessage: return "unexpected_message";
    case SetupCode::kIncompatible: return "incompatible";
    case SetupCode::kUnsupported: return "unsupported";
    case SetupCode::kResources: return "resources";
    case SetupCode::kRefused: return "refused";
    case SetupCode::kInternal: return "internal";
    case SetupCode::kError: return "error";
  }
  return "unknown";
}

std::vector<std::byte> EncodeExchange(const ExchangeMessage& m) {
  Writer w;
  w.Bytes(kMagic, 4);
  w.U16(kExchangeVersion);
  w.U8(static_cast<uint8_t>(m.kind));
  w.U8(0);
  switch (m.kind) {
    case ExchangeKind::kRequest:
    case ExchangeKind::kReply: {
      const ConnectionParameters& p = m.params;
      w.U32(p.conn_id);
      w.U64(p.token);
      w.U16(p.path_count);
      w.U8(static_cast<uint8_t>(p.plane_addresses.size()));
      w.U8(static_cast<uint8_t>(p.profile.recovery));
      w.U8(static_cast<uint8_t>(p.profile.placement));
      w.U8(static_cast<uint8_t>(p.profile.spray));
      w.U8(p.ordered_completion ? 1 : 0);
      w.U8(0);
      w.U32(p.profile.reorder_buffer_bytes);
      w.U32(p.mtu);
      w.U32(p.max_send_queue);
      w.U32(p.max_recv_queue);
      w.U16(p.udp_port);
      w.U16(static_cast<uint16_t>(p.private_data.size()));
      w.U32(p.offer);
      for (uint16_t port : p.initial_ports) w.U16(port);
      for (const io::IpAddress& a : p.plane_addresses) {
        w.U8(a.v6 ? 6 : 4);
        w.Bytes(a.bytes.data(), a.bytes.size());
      }
      w.Bytes(p.private_data.data(), p.private_data.size());
      break;
    }
    case ExchangeKind::kReject:
    case ExchangeKind::kClose: {
      const size_t n = std::min(m.reason.size(), kMaxReasonBytes);
      w.U16(static_cast<uint16_t>(m.code));
      w.U16(static_cast<uint16_t>(n));
      w.Bytes(m.reason.data(), n);
      break;
    }
    case ExchangeKind::kConfirm:
    case ExchangeKind::kKeepalive: break;
  }
  return w.Take();
}

absl::StatusOr<ExchangeMessage> DecodeExchange(std::span<const std::byte> body) {
  if (body.size() < kHeaderBytes) return Bad("shorter than its 8-byte header");
  if (std::memcmp(body.data(), kMagic, 4) != 0) {
    return Bad("bad magic (the peer is not a MetaRoCE connection exchange)");
  }
  Reader r(body.subspan(4));
  ExchangeMessage m;
  m.version = r.U16();
  const uint8_t kind = r.U8();
  r.U8();  // reserved: sent as 0, ignored
  // A REJECT has the same layout in every version: a client learns why, and which version the
  // server speaks, whatever it sent (setup.md §7).
  if (m.version != kExchangeVersion && kind != static_cast<uint8_t>(ExchangeKind::kReject)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the peer speaks set-up protocol version ", m.version, "; this side speaks version ",
        kExchangeVersion));
  }
  if (kind < 1 || kind > 6) return Bad(absl::StrCat("unknown message kind ", kind));
  m.kind = static_cast<ExchangeKind>(kind);
  switch (m.kind) {
    case ExchangeKind::kConfirm:
    case ExchangeKind::kKeepalive:
      break;
    case ExchangeKind::kReject:
    case ExchangeKind::kClose: {
      const uint16_t code = r.U16();
      const uint16_t len = r.U16();
      auto text = r.Bytes(len);
      if (!r.ok()) return Bad("reason is truncated");
      if (len > kMaxReasonBytes) {
        return Bad(absl::StrCat("reason of ", len, " bytes exceeds ", kMaxReasonBytes));
      }
      m.code = static_cast<SetupCode>(code);  // a code of a later revision is kept as it came
      m.reason.assign(reinterpret_cast<const char*>(text.data()), text.size());
      break;
    }
    case ExchangeKind::kRequest:
    case ExchangeKind::kReply: {
      if (r.remaining() < kParamsFixedBytes) return Bad("parameters are truncated");
      ConnectionParameters& p = m.params;
      p.conn_id = r.U32();
      p.token = r.U64();
      p.path_count = r.U16();
      const uint8_t planes = r.U8();
      const uint8_t recovery = r.U8(), placement = r.U8(), spray = r.U8(), ordered = r.U8();
      r.U8();  // reserved: sent as 0, ignored
      const uint32_t reorder_buffer_bytes = r.U32();
      p.mtu = r.U32();
      p.max_send_queue = r.U32();
      p.max_recv_queue = r.U32();
      p.udp_port = r.U16();
      const uint16_t private_len = r.U16();
      p.offer = r.U32();
      if (p.conn_id == 0) return Bad("connection id 0");
      if (p.token == 0) return Bad("token 0");
      if (p.path_count < 1 || p.path_count > 256) {
        return Bad(absl::StrCat("path count ", p.path_count, " is outside 1..256"));
      }
      if (planes < 1 || planes > kMaxPlanes) {
        return Bad(absl::StrCat("plane count ", planes, " is outside 1..", kMaxPlanes));
      }
      // The three profiles of baselines.md; no other combination of the policies exists.
      const core::TransportProfile profile{static_cast<core::RecoveryPolicy>(recovery),
                                           static_cast<core::PlacementPolicy>(placement),
                                           static_cast<core::SprayPolicy>(spray), 0};
      const bool metaroce = recovery == 0 && placement == 0 && spray == 0;
      const bool gbn = recovery == 1 && placement == 1 && spray == 1;
      const bool reorder = recovery == 0 && placement == 2 && spray == 0;
      if (!metaroce && !gbn && !reorder) {
        return Bad(absl::StrCat("transport profile (recovery ", recovery, ", placement ",
                                placement, ", spray ", spray, ") is none of the three"));
      }
      if (ordered > 1) return Bad(absl::StrCat("ordered_completion ", ordered, " is not 0 or 1"));
      p.profile = profile;
      p.ordered_completion = ordered != 0;
      if (reorder) {
        if (reorder_buffer_bytes == 0) return Bad("reorder buffer of 0 bytes");
        p.profile.reorder_buffer_bytes = reorder_buffer_bytes;
      }  // other profiles: sent as 0, ignored
      if (p.max_send_queue == 0 || p.max_recv_queue == 0 || p.max_send_queue > (1u << 20) ||
          p.max_recv_queue > (1u << 20)) {
        return Bad("queue depths must be 1..2^20");
      }
      if (p.udp_port == 0) return Bad("UDP port 0");
      if (private_len > kMaxPrivateDataBytes) {
        return Bad(absl::StrCat("private data of ", private_len, " bytes exceeds ",
                                kMaxPrivateDataBytes));
      }
      const size_t rest = size_t{p.path_count} * 2 + size_t{planes} * kPlaneBytes + private_len;
      if (r.remaining() != rest) {
        return Bad(absl::StrCat("length: ", r.remaining(), " bytes follow the fixed parameters, ",
                                rest, " expected"));
      }
      for (uint16_t i = 0; i < p.path_count; ++i) {
        const uint16_t port = r.U16();
        if (port == 0 || port == p.udp_port) {
          return Bad(absl::StrCat("path ", i, " source port ", port, " is 0 or the UDP port"));
        }
        for (uint16_t j = 0; j < i; ++j) {
          if (p.initial_ports[j] == port) {
            return Bad(absl::StrCat("paths ", j, " and ", i, " have the same source port ", port));
          }
        }
        p.initial_ports.push_back(port);
      }
      bool any_ipv4 = false;
      for (uint8_t i = 0; i < planes; ++i) {
        const uint8_t family = r.U8();
        if (family != 4 && family != 6) {
          return Bad(absl::StrCat("plane ", i, " address family ", family));
        }
        io::IpAddress a;
        a.v6 = family == 6;
        auto bytes = r.Bytes(16);
        std::memcpy(a.bytes.data(), bytes.data(), 16);
        const auto nonzero = [&a](size_t from, size_t to) {
          for (size_t k = from; k < to; ++k) {
            if (a.bytes[k] != 0) return true;
          }
          return false;
        };
        if (!a.v6 && nonzero(4, 16)) {
          return Bad(absl::StrCat("plane ", i, " IPv4 address has nonzero bytes after its four"));
        }
        if (!nonzero(0, a.v6 ? 16 : 4)) {
          return Bad(absl::StrCat("plane ", i, " address is unspecified"));
        }
        any_ipv4 |= !a.v6;
        p.plane_addresses.push_back(a);
      }
      const uint32_t max_mtu = any_ipv4 ? kMaxMtuIpv4 : kMaxMtuIpv6;
      if (p.mtu < kMinMtu || p.mtu > max_mtu) {
        return Bad(absl::StrCat("mtu ", p.mtu, " is outside ", kMinMtu, "..", max_mtu,
                                any_ipv4 ? " (a plane is IPv4)" : ""));
      }
      auto priv = r.Bytes(private_len);
      p.private_data.assign(priv.begin(), priv.end());
      break;
    }
  }
  if (!r.ok()) return Bad("truncated");
  if (r.remaining() != 0) return Bad(absl::StrCat(r.remaining(), " trailing bytes"));
  return m;
}

absl::Status CheckCompatible(const ConnectionParameters& ours, const ConnectionParameters& peer) {
  auto differ = [](const std::string& what, const auto& mine, const auto& theirs) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " differ: this side ", mine, ", the peer ", theirs, ": configure both alike"));
  };
  if (ours.path_count != peer.path_count) {
    return differ("path counts", ours.path_count, peer.path_count);
  }
  if (ours.plane_addresses.size() != peer.plane_addresses.size()) {
    return differ("plane counts", ours.plane_addresses.size(), peer.plane_addresses.size());
  }
  for (size_t i = 0; i < ours.plane_addresses.size(); ++i) {
    if (ours.plane_addresses[i].v6 != peer.plane_addresses[i].v6) {
      return differ(absl::StrCat("plane ", i, " address families"),
                    ours.plane_addresses[i].v6 ? "IPv6" : "IPv4",
                    peer.plane_addresses[i].v6 ? "IPv6" : "IPv4");
    }
  }
  if (ours.mtu != peer.mtu) return differ("MTUs", ours.mtu, peer.mtu);
  if (ours.udp_port != peer.udp_port) return differ("UDP ports", ours.udp_port, peer.udp_port);
  const core::TransportProfile& a = ours.profile;
  const core::TransportProfile& b = peer.profile;
  if (a.recovery != b.recovery || a.placement != b.placement || a.spray != b.spray ||
      a.reorder_buffer_bytes != b.reorder_buffer_bytes) {
    return differ("transport profiles", std::string(a.Name()), std::string(b.Name()));
  }
  if (ours.ordered_completion != peer.ordered_completion) {
    return differ("completion orderings", ours.ordered_completion ? "ordered" : "unordered",
                  peer.ordered_completion ? "ordered" : "unordered");
  }
  return absl::OkStatus();
}

core::ConnectionConfig MakeConnectionConfig(const ConnectionParameters& ours,
                                            const ConnectionParameters& peer,
                                            const core::ConnectionConfig& tuning) {
  core::ConnectionConfig c = tuning;
  c.local_conn_id = ours.conn_id;
  c.remote_conn_id = peer.conn_id;
  c.rx_token = ours.token;
  c.tx_token = peer.token;
  c.path_count = ours.path_count;
  c.plane_count = static_cast<uint8_t>(ours.plane_addresses.size());
  c.initial_ports = ours.initial_ports;
  c.udp_port = ours.udp_port;
  c.seed = ours.token;
  c.profile = ours.profile;
  c.ordered_completion = ours.ordered_completion;
  c.mtu = ours.mtu;
  c.max_send_queue = ours.max_send_queue;
  c.max_recv_queue = ours.max_recv_queue;
  c.peer_max_send_queue = peer.max_send_queue;
  c.initial_window_hint_bytes = peer.offer;
  return c;
}

namespace {

int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string EncodeExchangeHex(const ExchangeMessage& message) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const std::vector<std::byte> body = EncodeExchange(message);
  std::string hex;
  hex.reserve(body.size() * 2);
  for (std::byte b : body) {
    const auto v = static_cast<uint8_t>(b);
    hex.push_back(kDigits[v >> 4]);
    hex.push_back(kDigits[v & 0xf]);
  }
  return hex;
}

absl::StatusOr<ExchangeMessage> DecodeExchangeHex(std::string_view hex) {
  if (hex.size() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("exchange text has ", hex.size(), " hex digits: expected an even number"));
  }
  if (hex.size() / 2 > kMaxExchangeBytes) {
    return absl::InvalidArgumentError(absl::StrCat("exchange text of ", hex.size() / 2,
                                                   " bytes exceeds ", kMaxExchangeBytes));
  }
  std::vector<std::byte> body(hex.size() / 2);
  for (size_t i = 0; i < body.size(); ++i) {
    const int hi = HexDigitValue(hex[2 * i]), lo = HexDigitValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "exchange text has a non-hex character at offset ", 2 * i + (hi < 0 ? 0 : 1)));
    }
    body[i] = std::byte(static_cast<uint8_t>(hi << 4 | lo));
  }
  return DecodeExchange(body);
}

}  // namespace metaroce::api
