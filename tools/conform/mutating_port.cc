#include "tools/conform/mutating_port.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace metaroce::conform {
namespace {

// The wire format's offsets and values (docs/spec/wire-format.md §2-§7).
constexpr size_t kBase = 24;
constexpr size_t kVersion = 0, kOpcode = 1, kFlags = 2, kDestConn = 4, kPath = 8, kPsn = 12,
                 kToken = 16;
constexpr size_t kAckCum = kBase + 0, kAckCe = kBase + 8, kAckHint = kBase + 12,
                 kAckSyndrome = kBase + 16,
                 kAckRnr = kBase + 18, kAckSack = kBase + 24;
constexpr size_t kDataRecvSeq = kBase + 24;
constexpr uint8_t kOpAck = 0x10, kOpProbe = 0x11, kOpSend = 0x03, kOpSendImm = 0x04;
constexpr uint16_t kRetransmit = 0x0002, kProbeReply = 0x0020;

const std::pair<Mutation, std::string_view> kNames[] = {
    {Mutation::kNone, "none"},
    {Mutation::kSackReversed, "sack_reversed"},
    {Mutation::kCumOffByOne, "cum_off_by_one"},
    {Mutation::kNoProbeReplyFlag, "no_probe_reply_flag"},
    {Mutation::kCeNotCounted, "ce_not_counted"},
    {Mutation::kResendOnAnotherPath, "resend_on_another_path"},
    {Mutation::kNoRetransmissions, "no_retransmissions"},
    {Mutation::kWrongTokenOut, "wrong_token_out"},
    {Mutation::kNakAsAck, "nak_as_ack"},
    {Mutation::kMalformedAccepted, "malformed_accepted"},
    {Mutation::kBadTokenAccepted, "bad_token_accepted"},
    {Mutation::kRnrDelayIgnored, "rnr_delay_ignored"},
    {Mutation::kNakSyndromeSwapped, "nak_syndrome_swapped"},
    {Mutation::kProbePsnIgnored, "probe_psn_ignored"},
    {Mutation::kRecvSeqIgnored, "recv_seq_ignored"},
    {Mutation::kWindowHintIgnored, "window_hint_ignored"},
};

uint64_t Get(const std::vector<std::byte>& d, size_t off, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = v << 8 | static_cast<uint8_t>(d[off + i]);
  return v;
}

void Put(std::vector<std::byte>& d, size_t off, size_t n, uint64_t v) {
  for (size_t i = n; i-- > 0;) {
    d[off + i] = std::byte(static_cast<uint8_t>(v));
    v >>= 8;
  }
}

absl::Mutex tokens_mu;
std::map<uint32_t, uint64_t>& Tokens() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tokens_mu) {
  static auto* tokens = new std::map<uint32_t, uint64_t>;
  return *tokens;
}

}  // namespace

void RememberToken(uint32_t conn_id, uint64_t token) {
  absl::MutexLock lock(&tokens_mu);
  Tokens()[conn_id] = token;
}

absl::StatusOr<Mutation> ParseMutation(std::string_view name) {
  for (const auto& [m, n] : kNames) {
    if (n == name) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown mutation '", std::string(name), "': ", MutationNames()));
}

std::string MutationNames() {
  std::string out;
  for (const auto& [m, n] : kNames) absl::StrAppend(&out, out.empty() ? "" : ", ", std::string(n));
  return out;
}

bool MutatingPort::Send(const io::TxPacket& packet) {
  out_.assign(packet.headers.begin(), packet.headers.end());
  out_.insert(out_.end(), packet.payload.begin(), packet.payload.end());
  std::vector<std::byte>& d = out_;
  const bool ack = d.size() >= kBase + 56 && static_cast<uint8_t>(d[kOpcode]) == kOpAck;
  const bool data = d.size() >= kBase + 32 && static_cast<uint8_t>(d[kOpcode]) <= kOpSendImm;
  const uint16_t flags = static_cast<uint16_t>(Get(d, kFlags, 2));
  io::TxPacket p = packet;
  switch (mutation_) {
    case Mutation::kSackReversed:
      if (ack) std::reverse(d.begin() + kAckSack, d.begin() + kAckSack + 32);
      break;
    case Mutation::kCumOffByOne:
      if (ack) Put(d, kAckCum, 4, Get(d, kAckCum, 4) + 1);
      break;
    case Mutation::kNoProbeReplyFlag:
      if (ack) Put(d, kFlags, 2, flags & ~kProbeReply);
      break;
    case Mutation::kCeNotCounted:
      if (ack) Put(d, kAckCe, 4, 0);
      break;
    case Mutation::kResendOnAnotherPath:
      if (data && (flags & kRetransmit)) Put(d, kPath, 2, Get(d, kPath, 2) ^ 1);
      break;
    case Mutation::kNoRetransmissions:
      if (data && (flags & kRetransmit)) return true;  // "sent", never leaves
      break;
    case Mutation::kWrongTokenOut:
      if (data) Put(d, kToken, 8, Get(d, kToken, 8) ^ 1);
      break;
    case Mutation::kNakAsAck:
      if (ack) d[kAckSyndrome] = std::byte{0};
      break;
    default:
      break;
  }
  p.headers = std::span<const std::byte>(d);
  p.payload = {};
  return inner_->Send(p);
}

size_t MutatingPort::Receive(std::span<io::RxPacket> out) {
  const size_t n = inner_->Receive(out);
  for (size_t i = 0; i < n; ++i) {
    io::RxPacket& r = out[i];
    std::vector<std::byte> d(r.payload.begin(), r.payload.end());
    if (d.size() < kBase) continue;
    const uint8_t op = static_cast<uint8_t>(d[kOpcode]);
    const uint32_t conn = static_cast<uint32_t>(Get(d, kDestConn, 4));
    bool changed = false;
    switch (mutation_) {
      case Mutation::kMalformedAccepted:
        if (static_cast<uint8_t>(d[kVersion]) != 1) {
          d[kVersion] = std::byte{1};
          changed = true;
        }
        break;
      case Mutation::kBadTokenAccepted: {
        absl::MutexLock lock(&tokens_mu);
        if (auto it = Tokens().find(conn); it != Tokens().end() && Get(d, kToken, 8) != it->second) {
          Put(d, kToken, 8, it->second);  // any token taken for the connection's
          changed = true;
        }
        break;
      }
      case Mutation::kRnrDelayIgnored:
        if (op == kOpAck && d.size() >= kBase + 56 && static_cast<uint8_t>(d[kAckSyndrome]) == 1) {
          Put(d, kAckRnr, 2, 0);
          changed = true;
        }
        break;
      case Mutation::kNakSyndromeSwapped:
        if (op == kOpAck && d.size() >= kBase + 56) {
          const uint8_t s = static_cast<uint8_t>(d[kAckSyndrome]);
          if (s == 3 || s == 4) {
            d[kAckSyndrome] = std::byte(static_cast<uint8_t>(s == 3 ? 4 : 3));
            changed = true;
          }
        }
        break;
      case Mutation::kProbePsnIgnored:
        if (op == kOpProbe) {
          Put(d, kPsn, 4, 0);
          changed = true;
        }
        break;
      case Mutation::kWindowHintIgnored:
        if (op == kOpAck && d.size() >= kBase + 56) {
          Put(d, kAckHint, 4, 0);
          changed = true;
        }
        break;
      case Mutation::kRecvSeqIgnored:
        if ((op == kOpSend || op == kOpSendImm) && d.size() >= kBase + 32) {
          Put(d, kDataRecvSeq, 4, 0);
          changed = true;
        }
        break;
      default:
        break;
    }
    if (changed) {
      std::vector<std::byte>& copy = copies_[r.cookie] = std::move(d);
      r.payload = std::span<const std::byte>(copy);
    }
  }
  return n;
}

void MutatingPort::Release(std::span<const io::RxPacket> packets) {
  for (const io::RxPacket& r : packets) copies_.erase(r.cookie);
  inner_->Release(packets);
}

}  // namespace metaroce::conform
