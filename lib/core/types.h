// Vocabulary of the protocol core: time, work requests, completions and their ibverbs status codes.
//
// The core never reads a clock: every entry point takes `now` (an Instant) from its caller, which
// may be a real clock (engine), a simulated one (mrsim) or a mock (tests).
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

namespace metaroce::core {

// Durations and instants in nanoseconds. The epoch of Instant is the caller's choice (simulation
// start, CLOCK_MONOTONIC, ...); only differences are meaningful.
using Duration = std::chrono::nanoseconds;
struct Instant {
  int64_t ns = 0;
  friend constexpr auto operator<=>(Instant, Instant) = default;
  friend constexpr Instant operator+(Instant t, Duration d) { return {t.ns + d.count()}; }
  friend constexpr Duration operator-(Instant a, Instant b) { return Duration(a.ns - b.ns); }
};
inline constexpr Instant kNever{INT64_MAX};

// ibv_wc_status: same names and numbers as ibverbs (docs/spec/messages-and-memory.md).
enum class WcStatus : uint8_t {
  kSuccess = 0,
  kLocLenErr = 1,
  kLocQpOpErr = 2,
  kLocProtErr = 4,
  kWrFlushErr = 5,
  kRemInvReqErr = 9,
  kRemAccessErr = 10,
  kRemOpErr = 11,
  kRetryExcErr = 12,
  kRnrRetryExcErr = 13,
  kGeneralErr = 21,
};
// ibv_wc_status_str()-style text, e.g. "transport retry counter exceeded".
std::string_view StatusStr(WcStatus s);
// Short enumerator name, e.g. "RETRY_EXC_ERR".
std::string_view StatusName(WcStatus s);

// ibv_wc_opcode values.
enum class WcOpcode : uint8_t {
  kSend = 0,
  kRdmaWrite = 1,
  kRecv = 128,
  kRecvRdmaWithImm = 129,
};

// ibv_wr_opcode subset.
enum class WrOpcode : uint8_t { kWrite, kWriteWithImm, kSend, kSendWithImm };
std::string_view WrOpcodeName(WrOpcode op);

// ibv_access_flags subset.
namespace access {
inline constexpr uint32_t kLocalWrite = 1u << 0;
inline constexpr uint32_t kRemoteWrite = 1u << 1;
inline constexpr uint32_t kRemoteRead = 1u << 2;
}  // namespace access

// ibv_send_flags subset.
namespace send_flags {
inline constexpr uint32_t kSignaled = 1u << 1;  // generate a completion on success
inline constexpr uint32_t kFence = 1u << 0;     // start only after every earlier request completed
}  // namespace send_flags

// A scatter/gather element: `length` bytes at `addr` inside the region named by `lkey`.
struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

struct SendWorkRequest {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kWrite;
  uint32_t flags = send_flags::kSignaled;
  Sge local;
  uint64_t remote_addr = 0;  // WRITE*: destination address at the peer
  uint32_t rkey = 0;         // WRITE*: the peer's remote key
  uint32_t imm = 0;          // *_WITH_IMM
};

struct RecvWorkRequest {
  uint64_t wr_id = 0;
  Sge local;
};

struct Completion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  uint32_t byte_len = 0;  // receive completions: bytes received
  uint32_t imm = 0;
  bool has_imm = false;
  uint32_t conn_id = 0;   // local id of the connection
};

}  // namespace metaroce::core
