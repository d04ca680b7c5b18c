// A packet port that makes this stack deviate from the specification on purpose, for the proof
// that mrconform can fail (tools/conform/mutations): it sits between the engine and the real port
// and rewrites chosen fields of the datagrams going out or coming in, as a buggy implementation
// would send or treat them. Only mriut --mutate uses it; nothing else links it.
//
// Offsets are the wire format's (docs/spec/wire-format.md): BaseHeader 24 bytes, DataHeader or
// AckHeader after it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lib/io/packet_port.h"

namespace metaroce::conform {

enum class Mutation {
  kNone,                  // nothing changed: the wrapper itself, which must pass every test
  kSackReversed,          // out: an ACK's SACK bytes in reverse order
  kCumOffByOne,           // out: an ACK's cum_psn one too high
  kNoProbeReplyFlag,      // out: probe replies without PROBE_REPLY
  kCeNotCounted,          // out: an ACK's ce_count always 0
  kResendOnAnotherPath,   // out: a retransmission on the neighbouring path id
  kNoRetransmissions,     // out: retransmissions never leave
  kWrongTokenOut,         // out: data packets carry the wrong token
  kNakAsAck,              // out: NAKs sent as ACKs (syndrome 0)
  kMalformedAccepted,     // in: a datagram of another version processed as version 1
  kBadTokenAccepted,      // in: a wrong token replaced by the connection's (learned) one
  kRnrDelayIgnored,       // in: an RNR NAK's delay read as 0
  kNakSyndromeSwapped,    // in: REM_ACCESS_NAK read as INV_REQ_NAK and back
  kProbePsnIgnored,       // in: a PROBE's psn read as 0
  kRecvSeqIgnored,        // in: every Send matched to receive 0
  kWindowHintIgnored,     // in: an ACK's window_hint read as 0 (no hint)
};

// The token a local connection expects (its rx_token), told by mriut once a set-up completes:
// kBadTokenAccepted puts it into datagrams that carry another. Thread-safe.
void RememberToken(uint32_t conn_id, uint64_t token);

// "sack_reversed", ... (the names above in snake case); InvalidArgument lists them all.
absl::StatusOr<Mutation> ParseMutation(std::string_view name);
std::string MutationNames();

class MutatingPort : public io::PacketPort {
 public:
  MutatingPort(std::unique_ptr<io::PacketPort> inner, Mutation mutation)
      : inner_(std::move(inner)), mutation_(mutation) {}

  bool Send(const io::TxPacket& packet) override;
  void Flush() override { inner_->Flush(); }
  size_t Receive(std::span<io::RxPacket> out) override;
  void Release(std::span<const io::RxPacket> packets) override;
  int wait_fd() const override { return inner_->wait_fd(); }
  io::PortStats stats() const override { return inner_->stats(); }
  std::string description() const override {
    return inner_->description() + " (mutated: " + std::string(name_) + ")";
  }

 private:
  std::unique_ptr<io::PacketPort> inner_;
  Mutation mutation_;
  std::string_view name_ = "";
  std::vector<std::byte> out_;
  // Incoming datagrams rewritten: our copies, by the inner port's cookie, until released.
  std::map<uint64_t, std::vector<std::byte>> copies_;
};

}  // namespace metaroce::conform
