// What two metaroce providers say to each other over one MetaRoCE connection: libfabric's
// messages, tagged messages and RMA writes built from the connection's Sends and
// Writes-with-immediate (docs/ofi.md, "Protocol").
//
// Every Send carries a MessageHeader (kHeaderBytes) and, for kEager and kWrite, the payload after
// it. The receiver keeps receive buffers posted per connection, each kHeaderBytes + eager_size
// bytes: `recv_slots` (told in the set-up's PeerHello) for data, and Endpoint::kControlSlots
// more; a Send or a Write-with-immediate consumes one (in order: the connections complete in
// order, ConnectOptions::ordered_completion). Data (kEager, kRts, kWrite, kWriteRts, and the
// chunk Writes) spends a credit, and the sender never sends data without one, so that data never
// meets a receiver without a buffer; the receiver returns a credit for each buffer data took, in
// the `credits` field of whatever it sends next, or in a kCredit message once half its data
// slots wait to be returned. Control messages (kCts, kAck, kCredit) spend none and are never held
// back by credits (so that two peers out of credits still tell each other): the control slots
// absorb them, and a burst beyond those meets the transport's RNR retry.
//
//   kEager     a message (tagged if flags & kTagged) whose `length` bytes follow the header
//   kRts       request to send: a message of `length` bytes waits at the sender under `send_id`
//   kCts       clear to send: write `chunk` bytes of message `send_id` from `offset` to (`addr`,
//              `key`) with a Write-with-immediate whose immediate is `recv_id`
//   kWrite     RMA write of the `length` bytes that follow to (`addr`, `key`) of the receiver's
//              memory registrations; answered by kAck
//   kWriteRts  RMA write of `length` bytes by rendezvous (then kCts ... as for kRts); kAck when
//              the last byte is in place
//   kAck       the write `send_id` ended with `status` (a core::WcStatus number: 0 success,
//              REM_ACCESS_ERR for a key, range or access the receiver refuses)
//   kCredit    nothing but credits
// flags: kTagged, kRemoteData (`data` is the sender's FI_REMOTE_CQ_DATA), kSourceRegistered
// (kRts, kWriteRts: the sender writes straight from its registered application buffer, so a
// kCts may ask for any part of the message at once, not only `chunk_size` bytes: a receiver that
// can take the whole message straight into its own buffer asks for it with one kCts).
//
// Both providers of a connection run on hosts of the same byte order; the header is stored
// little-endian all the same (Encode/Decode), so that a capture reads the same everywhere.
// Pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/statusor.h"

namespace metaroce::ofi {

// The provider protocol's version, carried in the set-up exchange's private data.
inline constexpr uint16_t kPeerProtocolVersion = 1;
inline constexpr size_t kHeaderBytes = 72;

enum class MessageKind : uint8_t {
  kEager = 1,
  kRts = 2,
  kCts = 3,
  kWrite = 4,
  kWriteRts = 5,
  kAck = 6,
  kCredit = 7,
};

namespace header_flags {
inline constexpr uint8_t kTagged = 1u << 0;
inline constexpr uint8_t kRemoteData = 1u << 1;
inline constexpr uint8_t kSourceRegistered = 1u << 2;
inline constexpr uint8_t kAll = kTagged | kRemoteData | kSourceRegistered;
}  // namespace header_flags

struct MessageHeader {
  MessageKind kind = MessageKind::kEager;
  uint8_t flags = 0;
  uint16_t credits = 0;
  uint32_t status = 0;    // kAck
  uint64_t tag = 0;       // kEager, kRts (tagged)
  uint64_t data = 0;      // with kRemoteData
  uint64_t length = 0;    // the whole message or write
  uint64_t send_id = 0;   // kRts, kCts, kWrite, kWriteRts, kAck
  uint64_t addr = 0;      // kCts: where to write; kWrite, kWriteRts: the target address
  uint64_t key = 0;       // kCts: the rkey; kWrite, kWriteRts: the target's MR key
  uint64_t offset = 0;    // kCts: the first byte of the message to write
  uint32_t recv_id = 0;   // kCts: the immediate to write with
  uint32_t chunk = 0;     // kCts: bytes to write (at most chunk_size, or kLargestCts)
};

// The most a kCts asks for when the sender said kSourceRegistered (a Write's length is 32-bit).
inline constexpr uint32_t kLargestCts = 1u << 30;

void EncodeHeader(const MessageHeader& h, std::span<std::byte, kHeaderBytes> out);
// InvalidArgument naming the field for a short buffer, an unknown kind or unknown flag bits.
absl::StatusOr<MessageHeader> DecodeHeader(std::span<const std::byte> in);

}  // namespace metaroce::ofi
