// The input format of connection_fuzzer.cc, shared with the seed generator (make_seed_corpus.cc)
// so that both sides agree on it.
//
// An input is a 3-byte preamble followed by records until the bytes run out:
//
//   preamble  byte 0: patch mask (kPatch* bits below)
//             byte 1: transport profile (value % 3: MetaRoCE, go-back-N, reorder buffer)
//             byte 2: path count - 1 (value % kMaxPaths, so 1..kMaxPaths paths)
//   record    tag byte, then by tag:
//     tag < kTagAdvance         datagram: u16 length (little-endian) then that many bytes (fewer
//                               if the input ends). Bit kTagCeBit of the tag marks it CE.
//     kTagAdvance..kTagPost-1   advance the clock: u16 (LE) n, now += (n + 1) * 100 ns; run the
//                               timers that are due
//     kTagPost..255             post a work request: 5 bytes (kind, u16 offset, u16 length);
//                               kind % 5: WRITE, WRITE_IMM, SEND, SEND_IMM, or a receive
//
// The patch mask makes random bytes pass the checks a random packet would almost never pass, so
// that the fuzzer spends its time in the receiver and sender rather than in the token check:
// each set bit rewrites fields of every datagram of at least the size of the headers involved.
#pragma once

#include <cstdint>
#include <vector>

namespace metaroce::fuzz {

inline constexpr uint8_t kPatchIdentity = 1u << 0;     // version, dest_conn, token
inline constexpr uint8_t kPatchOpcode = 1u << 1;       // unknown opcode byte -> one of the six opcodes
inline constexpr uint8_t kPatchPayloadLen = 1u << 2;   // payload_len = datagram - headers
inline constexpr uint8_t kPatchPathId = 1u << 3;       // path_id %= path count
inline constexpr uint8_t kPatchWriteTarget = 1u << 4;  // WRITE*: rkey and remote_addr near the region
inline constexpr uint8_t kPatchRange = 1u << 5;        // data: msg_len covers offset + payload
inline constexpr uint8_t kPatchSyndrome = 1u << 6;     // ACK: syndrome % 6
inline constexpr uint8_t kPatchAll = 0x7f;

inline constexpr uint8_t kTagCeBit = 0x40;
inline constexpr uint8_t kTagAdvance = 0x80;
inline constexpr uint8_t kTagPost = 0xc0;
inline constexpr uint32_t kMaxPaths = 8;

// Identity of the fuzzed connection (what kPatchIdentity writes).
inline constexpr uint32_t kLocalConnId = 7;
inline constexpr uint32_t kRemoteConnId = 9;
inline constexpr uint64_t kRxToken = 0x0123456789abcdefull;
inline constexpr uint64_t kTxToken = 0xfedcba9876543210ull;

// Builds inputs in this format (used by the seed generator and by tests).
class ConnectionFuzzInput {
 public:
  ConnectionFuzzInput(uint8_t patch_mask, uint8_t profile, uint8_t paths) {
    bytes_ = {patch_mask, profile, static_cast<uint8_t>(paths - 1)};
  }
  void Datagram(const std::vector<uint8_t>& d, bool ce = false) {
    bytes_.push_back(ce ? kTagCeBit : 0);
    PutU16(static_cast<uint16_t>(d.size()));
    bytes_.insert(bytes_.end(), d.begin(), d.end());
  }
  void Advance(uint16_t n) {
    bytes_.push_back(kTagAdvance);
    PutU16(n);
  }
  void Post(uint8_t kind, uint16_t offset, uint16_t length) {
    bytes_.push_back(kTagPost);
    bytes_.push_back(kind);
    PutU16(offset);
    PutU16(length);
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  void PutU16(uint16_t v) {
    bytes_.push_back(static_cast<uint8_t>(v));
    bytes_.push_back(static_cast<uint8_t>(v >> 8));
  }
  std::vector<uint8_t> bytes_;
};

}  // namespace metaroce::fuzz
