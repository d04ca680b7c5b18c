// The connection parameter exchange: what two processes tell each other over TCP before a
// MetaRoCE connection exists (the role rdma_cm or perftest's socket exchange plays for verbs).
//
// Conversation (each message framed as a 4-byte big-endian length and the body below):
//   client -> server  REQUEST  the client's parameters
//   server -> client  REPLY    the server's parameters (its connection already exists), or REJECT
//   client -> server  CONFIRM  the client's connection exists too, or REJECT
// A REJECT carries a human-readable reason, which the other side returns in its Status.
//
// Body, version 1, all integers big-endian:
//   0  magic "MRCX" | 4 version u16 | 6 kind u8 | 7 reserved u8 (0)
//   REQUEST/REPLY: 8 conn_id u32 | token u64 | path_count u16 | plane_count u8 | recovery u8 |
//     placement u8 | spray u8 | ordered_completion u8 | reserved u8 | reorder_buffer_bytes u32 |
//     mtu u32 | max_send_queue u32 | max_recv_queue u32 | udp_port u16 | private_len u16 |
//     initial_ports u16 x path_count | planes x plane_count: (family u8 4|6, address 16 bytes) |
//     private_data
//   REJECT: reason_len u16 | reason
//   CONFIRM: nothing
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

enum class ExchangeKind : uint8_t { kRequest = 1, kReply = 2, kConfirm = 3, kReject = 4 };

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
  std::vector<std::byte> private_data;           // opaque to us (e.g. rkey, addr, length)
};

struct ExchangeMessage {
  ExchangeKind kind = ExchangeKind::kRequest;
  ConnectionParameters params;  // kRequest, kReply
  std::string reason;           // kReject
};

std::vector<std::byte> EncodeExchange(const ExchangeMessage& message);
// InvalidArgument naming the field for anything malformed, unknown or out of range;
// FailedPrecondition for another exchange version.
absl::StatusOr<ExchangeMessage> DecodeExchange(std::span<const std::byte> body);

// The same body as lowercase hexadecimal text (two digits per byte), as the control protocol
// carries it (docs/control-protocol.md, qp.create). DecodeExchangeHex refuses text that is not
// an even number of hex digits, or longer than kMaxExchangeBytes, before DecodeExchange runs.
std::string EncodeExchangeHex(const ExchangeMessage& message);
absl::StatusOr<ExchangeMessage> DecodeExchangeHex(std::string_view hex);

// Whether a connection between `ours` and `peer` can work: both must agree on path count,
// planes (count and address family per plane), mtu, UDP port, transport profile and completion
// ordering. FailedPrecondition names the first difference, with both values.
absl::Status CheckCompatible(const ConnectionParameters& ours, const ConnectionParameters& peer);

// The core config of our side: identity from both halves, tunables from `tuning` (its identity,
// path and profile fields are overwritten).
core::ConnectionConfig MakeConnectionConfig(const ConnectionParameters& ours,
                                            const ConnectionParameters& peer,
                                            const core::ConnectionConfig& tuning);

}  // namespace metaroce::api
