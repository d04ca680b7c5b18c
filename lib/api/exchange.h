// The connection set-up protocol (docs/spec/setup.md, normative): what two processes tell each
// other over TCP before a MetaRoCE connection exists (the role rdma_cm or perftest's socket
// exchange plays for verbs).
//
// Conversation (each message framed as a 4-byte big-endian length and the body below):
//   client -> server  REQUEST  the client's parameters
//   server -> client  REPLY    the server's parameters (its connection already exists), or REJECT
//   client -> server  CONFIRM  the client's connection exists too, or REJECT
// and then, on a channel kept open, KEEPALIVE and CLOSE either way. A REJECT or CLOSE carries a
// code (SetupCode) and a human-readable reason.
//
// Body, version 1, all integers big-endian (setup.md §4 has every range):
//   0  magic "MRCX" | 4 version u16 | 6 kind u8 | 7 reserved u8 (0, ignored)
//   REQUEST/REPLY: 8 conn_id u32 | token u64 | path_count u16 | plane_count u8 | recovery u8 |
//     placement u8 | spray u8 | ordered_completion u8 | reserved u8 | reorder_buffer_bytes u32 |
//     mtu u32 | max_send_queue u32 | max_recv_queue u32 | udp_port u16 | private_len u16 |
//     offer u32 | initial_ports u16 x path_count |
//     planes x plane_count: (family u8 4|6, address 16 bytes) | private_data
//   REJECT, CLOSE: 8 code u16 | reason_len u16 | reason
//   CONFIRM, KEEPALIVE: nothing
// Decode() validates every length and value before use and names what it refuses.
//
// Pure functions: no I/O, safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/core/config.h"
#include "lib/io/ip_address.h"

namespace metaroce::api {

inline constexpr uint16_t kExchangeVersion = 1;
inline constexpr size_t kMaxPrivateDataBytes = 1024;
inline constexpr size_t kMaxPlanes = 16;
inline constexpr size_t kMaxExchangeBytes = 16 * 1024;

enum class ExchangeKind : uint8_t {
  kRequest = 1,
  kReply = 2,
  kConfirm = 3,
  kReject = 4,
  kClose = 5,
  kKeepalive = 6,
};

// Why a set-up was refused (REJECT) or a connection closed (CLOSE): setup.md §6.
enum class SetupCode : uint16_t {
  kNone = 0,                // CLOSE: the application destroyed the connection
  kMalformed = 1,           // a message failed the checks of setup.md §4
  kUnsupportedVersion = 2,  // the header's version is one this side does not speak
  kUnexpectedMessage = 3,   // a valid message of a kind not allowed at this point
  kIncompatible = 4,        // an agreed parameter differs (setup.md §5)
  kUnsupported = 5,         // a value this side does not implement (profile, a limit)
  kResources = 6,           // no connection id, memory, ports or room for the connection
  kRefused = 7,             // the application or listener declined
  kInternal = 8,            // a local failure while creating the connection
  kError = 9,               // CLOSE: the connection went to the error state
};
// "malformed", "unsupported_version", ...; "unknown" for a code this revision does not define.
std::string_view SetupCodeName(SetupCode code);

// One side's half of a connection.
struct ConnectionParameters {
  uint32_t conn_id = 0;          // the id the peer must put in dest_conn
  uint64_t token = 0;            // the token the peer must put in every packet to us
  uint16_t path_count = 0;
  std::vector<uint16_t> initial_ports;           // this side's source port per path
  std::vector<io::IpAddress> plane_addresses;    // this side's address per plane
  core::TransportProfile profile;
  bool ordered_completion = false;
  uint32_t mtu = 0;
  uint32_t max_send_queue = 0;
  uint32_t max_recv_queue = 0;
  uint16_t udp_port = 0;
  // This side's offer: bytes of its receive budget the peer may send on the whole connection in
  // its first RTT (congestion.md §5.3); 0: no offer.
  uint32_t offer = 0;
  std::vector<std::byte> private_data;           // opaque to us (e.g. rkey, addr, length)
};

struct ExchangeMessage {
  ExchangeKind kind = ExchangeKind::kRequest;
  // The header's version: what EncodeExchange writes is always kExchangeVersion; decoded, the
  // sender's (a REJECT of another version is decoded: its layout is the same in every version).
  uint16_t version = kExchangeVersion;
  ConnectionParameters params;  // kRequest, kReply
  SetupCode code = SetupCode::kNone;  // kReject, kClose
  std::string reason;                 // kReject, kClose (at most kMaxReasonBytes)
};
inline constexpr size_t kMaxReasonBytes = 1024;

// The largest payload per packet (mtu) whose packets fit in one UDP datagram: 65,507 bytes of
// UDP payload over IPv4, 65,527 over IPv6, less the 56 bytes of data headers.
inline constexpr uint32_t kMaxMtuIpv4 = 65451;
inline constexpr uint32_t kMaxMtuIpv6 = 65471;
inline constexpr uint32_t kMinMtu = 64;

std::vector<std::byte> EncodeExchange(const ExchangeMessage& message);
// InvalidArgument naming the field for anything malformed, unknown or out of range (a REJECT of
// code kMalformed answers it); FailedPrecondition for another version (kUnsupportedVersion), but
// for a REJECT, whose layout every version shares.
absl::StatusOr<ExchangeMessage> DecodeExchange(std::span<const std::byte> body);

// The same body as lowercase hexadecimal text (two digits per byte), as the control protocol
// carries it (docs/control-protocol.md, qp.create). DecodeExchangeHex refuses text that is not
// an even number of hex digits, or longer than kMaxExchangeBytes, before DecodeExchange runs.
std::string EncodeExchangeHex(const ExchangeMessage& message);
absl::StatusOr<ExchangeMessage> DecodeExchangeHex(std::string_view hex);

// Whether a connection between `ours` and `peer` can work: both must agree on path count,
// planes (count and address family per plane), mtu, UDP port, transport profile and completion
// ordering (setup.md §5). FailedPrecondition names the first difference, with both values (a
// REJECT of code kIncompatible answers it).
absl::Status CheckCompatible(const ConnectionParameters& ours, const ConnectionParameters& peer);

// The core config of our side: identity from both halves, the peer's offer as the initial
// window_hint, tunables from `tuning` (its identity, path and profile fields are overwritten).
core::ConnectionConfig MakeConnectionConfig(const ConnectionParameters& ours,
                                            const ConnectionParameters& peer,
                                            const core::ConnectionConfig& tuning);

}  // namespace metaroce::api
