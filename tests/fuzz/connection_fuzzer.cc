// Fuzz target for the protocol core: one core::Endpoint with one connection, fed datagrams, clock
// advances and work requests decoded from the fuzz input (format: connection_fuzz_input.h).
//
// What must hold for every input:
//   - the core never crashes and never reads or writes outside the buffers it was given (each
//     buffer is its own exactly-sized heap block, so AddressSanitizer sees any overrun);
//   - memory registered without write access is never modified;
//   - every packet the core emits parses, is addressed to the peer with the peer's token and
//     fits the MTU;
//   - OnTimer(now) leaves no timer due at or before `now`.
//
// Speed: the registered buffers (132 KiB) are allocated and filled once per process, not per
// input, and checked with memcmp against a reference copy. Allocating, zeroing and filling them
// byte by byte for every input cost more than the code under test (perf, cpu-clock: memset,
// page faults and the fill/check loops were ~45 % of the time; docs/fuzzing.md has the figures).
// Reusing them weakens nothing: read-only memory is checked after every input, so an input that
// changes it fails itself, and no input can see another's writes to read-only memory.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "lib/core/config.h"
#include "lib/core/connection.h"
#include "lib/core/endpoint.h"
#include "lib/core/memory_table.h"
#include "lib/core/packet_sink.h"
#include "lib/core/types.h"
#include "lib/wire/big_endian.h"
#include "lib/wire/packet.h"
#include "tests/fuzz/connection_fuzz_input.h"
#include "tests/fuzz/fuzz_check.h"

namespace metaroce::fuzz {
namespace {

using core::Instant;

constexpr uint32_t kMtu = 1024;
constexpr size_t kRecvRegionSize = 64 * 1024;  // target of incoming Writes and Sends
constexpr size_t kSrcRegionSize = 64 * 1024;   // source of our Writes and Sends (read-only)
constexpr size_t kGuardRegionSize = 4096;      // registered read-only, never named by a request
constexpr uint32_t kPeerRkey = 0x5a5a0100u;    // the (imaginary) peer's region
constexpr uint64_t kPeerAddr = 0x10000;
constexpr wire::Opcode kOpcodes[] = {wire::Opcode::kWrite, wire::Opcode::kWriteImm,
                                     wire::Opcode::kSend,  wire::Opcode::kSendImm,
                                     wire::Opcode::kAck,   wire::Opcode::kProbe};

uint8_t PatternByte(size_t i) { return static_cast<uint8_t>(i * 131 + 7); }

// Discards every packet after checking that it is well formed and addressed to the peer.
class CheckingSink : public core::PacketSink {
 public:
  explicit CheckingSink(uint16_t path_count) : path_count_(path_count) {}

  void Transmit(const core::TxMeta& meta, std::span<const std::byte> headers,
                std::span<const std::byte> payload) override {
    buf_.assign(headers.begin(), headers.end());
    buf_.insert(buf_.end(), payload.begin(), payload.end());
    const wire::ParseResult r = wire::Parse(buf_);
    FUZZ_CHECK(r.ok());
    FUZZ_CHECK(r.packet.dest_conn == kRemoteConnId);
    FUZZ_CHECK(r.packet.token == kTxToken);
    FUZZ_CHECK(r.packet.path_id < path_count_);
    FUZZ_CHECK(meta.conn_id == kLocalConnId);
    FUZZ_CHECK(r.packet.payload.size() <= kMtu);
    ++packets_;
  }

 private:
  uint16_t path_count_;
  std::vector<std::byte> buf_;
  uint64_t packets_ = 0;
};

// Reads the fuzz input front to back; reads past the end give zeros.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() {
    const uint16_t lo = U8();
    return static_cast<uint16_t>(lo | (U8() << 8));
  }
  std::span<const uint8_t> Take(size_t n) {
    n = std::min(n, size_ - pos_);
    std::span<const uint8_t> out(data_ + pos_, n);
    pos_ += n;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

template <typename Be>
typename Be::HostType Get(const std::byte* p) {
  Be v;
  std::memcpy(&v, p, sizeof v);
  return v.value();
}
template <typename Be>
void Put(std::byte* p, typename Be::HostType host) {
  const Be v = Be::FromHost(host);
  std::memcpy(p, &v, sizeof v);
}

bool KnownOpcode(std::byte b) {
  for (wire::Opcode k : kOpcodes) {
    if (static_cast<uint8_t>(k) == static_cast<uint8_t>(b)) return true;
  }
  return false;
}

// Rewrites the fields named by `mask` (kPatch*) so that the datagram passes the checks it would
// otherwise fail by chance. Byte offsets are those of docs/spec/wire-format.md.
void Patch(std::byte* d, size_t n, uint8_t mask, uint16_t path_count,
           const core::MemoryRegion& target) {
  using wire::Be16, wire::Be32, wire::Be64;
  constexpr size_t kBase = sizeof(wire::BaseHeader);
  if (n < kBase) return;
  if (mask & kPatchIdentity) {
    d[0] = std::byte{wire::kVersion};
    Put<Be32>(d + 4, kLocalConnId);
    Put<Be64>(d + 16, kRxToken);
  }
  if ((mask & kPatchOpcode) && !KnownOpcode(d[1])) {
    d[1] = std::byte(static_cast<uint8_t>(kOpcodes[static_cast<uint8_t>(d[1]) % 6]));
  }
  if (mask & kPatchPathId) Put<Be16>(d + 8, Get<Be16>(d + 8) % path_count);

  if (!KnownOpcode(d[1])) return;
  const auto op = static_cast<wire::Opcode>(d[1]);
  const size_t headers = wire::HeadersSize(op);
  if (n < headers) return;
  const size_t payload = wire::IsData(op) ? std::min<size_t>(n - headers, 0xffff) : 0;
  if (mask & kPatchPayloadLen) Put<Be16>(d + 10, static_cast<uint16_t>(payload));

  std::byte* ext = d + kBase;
  if (wire::IsData(op)) {
    if ((mask & kPatchWriteTarget) && wire::IsWrite(op)) {
      Put<Be32>(ext + 12, target.rkey);
      // Mostly inside the region, sometimes across its end: both must be handled.
      Put<Be64>(ext + 16, target.addr + Get<Be64>(ext + 16) % (target.length + 512));
    }
    if (mask & kPatchRange) {
      const uint32_t offset = Get<Be32>(ext + 8) % (1u << 16);
      Put<Be32>(ext + 8, offset);
      Put<Be32>(ext + 4, std::max<uint32_t>(Get<Be32>(ext + 4) % (1u << 17),
                                            offset + static_cast<uint32_t>(payload)));
    }
  } else if (op == wire::Opcode::kAck && (mask & kPatchSyndrome)) {
    ext[16] = std::byte(static_cast<uint8_t>(ext[16]) % 6);
  }
}

core::TransportProfile ProfileFor(uint8_t b) {
  switch (b % 3) {
    case 0: return core::TransportProfile::MetaRoce();
    case 1: return core::TransportProfile::GoBackN();
    default: return core::TransportProfile::ReorderBuffer(256 * 1024);
  }
}

// The registered buffers, each its own exactly-sized heap block, made once per process; the
// read-only ones with their expected contents beside them.
struct Buffers {
  Buffers()
      : recv(new std::byte[kRecvRegionSize]()),
        src(new std::byte[kSrcRegionSize]),
        guard(new std::byte[kGuardRegionSize]),
        src_expected(new std::byte[kSrcRegionSize]),
        guard_expected(new std::byte[kGuardRegionSize]) {
    for (size_t i = 0; i < kSrcRegionSize; ++i) src_expected[i] = std::byte{PatternByte(i)};
    for (size_t i = 0; i < kGuardRegionSize; ++i) {
      guard_expected[i] = std::byte{PatternByte(i + 1)};
    }
    std::memcpy(src.get(), src_expected.get(), kSrcRegionSize);
    std::memcpy(guard.get(), guard_expected.get(), kGuardRegionSize);
  }
  std::unique_ptr<std::byte[]> recv, src, guard, src_expected, guard_expected;
};

Buffers& SharedBuffers() {
  static Buffers* buffers = new Buffers();  // never freed: lives as long as the process
  return *buffers;
}

class Harness {
 public:
  Harness(uint8_t profile, uint16_t path_count)
      : sink_(path_count), endpoint_(sink_), path_count_(path_count), buf_(SharedBuffers()) {
    auto recv = endpoint_.memory().Register(buf_.recv.get(), kRecvRegionSize,
                                            core::access::kLocalWrite | core::access::kRemoteWrite);
    auto src = endpoint_.memory().Register(buf_.src.get(), kSrcRegionSize, 0);
    auto guard = endpoint_.memory().Register(buf_.guard.get(), kGuardRegionSize, 0);
    FUZZ_CHECK(recv.ok() && src.ok() && guard.ok());
    recv_mr_ = *recv;
    src_mr_ = *src;

    core::ConnectionConfig config;
    config.local_conn_id = kLocalConnId;
    config.remote_conn_id = kRemoteConnId;
    config.rx_token = kRxToken;
    config.tx_token = kTxToken;
    config.path_count = path_count;
    config.profile = ProfileFor(profile);
    config.mtu = kMtu;
    auto conn = endpoint_.CreateConnection(config);
    if (!conn.ok()) std::fprintf(stderr, "CreateConnection: %s\n", conn.status().ToString().c_str());
    FUZZ_CHECK(conn.ok());
    conn_ = *conn;

    // Four receives of 4 KiB at the start of the receive region, then three requests of ours.
    for (uint16_t i = 0; i < 4; ++i) Post(/*kind=*/4, static_cast<uint16_t>(i * 4096), 4096);
    Post(0, 0, 16 * 1024);
    Post(2, 16 * 1024, 2048);
    Post(1, 20 * 1024, 100);
  }

  // kind % 5: WRITE, WRITE_IMM, SEND, SEND_IMM, receive. Refusals are fine; they are tested too.
  void Post(uint8_t kind, uint16_t offset, uint16_t length) {
    if (kind % 5 == 4) {
      core::RecvWorkRequest wr;
      wr.wr_id = next_wr_id_++;
      wr.local = {recv_mr_.addr + offset, length, recv_mr_.lkey};
      (void)conn_->PostRecv(now_, wr);
      return;
    }
    static constexpr core::WrOpcode kWr[] = {core::WrOpcode::kWrite, core::WrOpcode::kWriteWithImm,
                                             core::WrOpcode::kSend, core::WrOpcode::kSendWithImm};
    core::SendWorkRequest wr;
    wr.wr_id = next_wr_id_++;
    wr.opcode = kWr[kind % 5];
    wr.flags = (kind & 0x80) ? 0 : core::send_flags::kSignaled;
    wr.local = {src_mr_.addr + offset, length, src_mr_.lkey};
    wr.remote_addr = kPeerAddr + offset;
    wr.rkey = kPeerRkey;
    wr.imm = 0xabcd0000u + kind;
    (void)conn_->PostSend(now_, wr);
  }

  void Deliver(std::span<const uint8_t> bytes, uint8_t patch_mask, bool ce) {
    // An exactly-sized copy: the core must not read past the datagram.
    auto d = std::make_unique<std::byte[]>(bytes.size());
    if (!bytes.empty()) std::memcpy(d.get(), bytes.data(), bytes.size());
    Patch(d.get(), bytes.size(), patch_mask, path_count_, recv_mr_);
    core::RxMeta meta;
    meta.src_port = 49152;
    meta.dst_port = wire::kDefaultUdpPort;
    meta.ce = ce;
    endpoint_.OnDatagram(now_, std::span<const std::byte>(d.get(), bytes.size()), meta);
  }

  void Advance(core::Duration d) {
    now_ = now_ + d;
    RunDueTimers();
  }

  void RunDueTimers() {
    if (endpoint_.NextDeadline() > now_) return;
    endpoint_.OnTimer(now_);
    FUZZ_CHECK(endpoint_.NextDeadline() > now_);
  }

  // Lets every pending timer fire (bounded: a connection may keep retrying for a long time).
  void RunOutTimers() {
    for (int i = 0; i < 64; ++i) {
      const Instant next = endpoint_.NextDeadline();
      if (next == core::kNever) break;
      now_ = std::max(now_, next);
      RunDueTimers();
      Drain();
    }
  }

  void Drain() {
    std::array<core::Completion, 32> completions;
    while (size_t n = conn_->PollCompletions(completions)) {
      for (size_t i = 0; i < n; ++i) FUZZ_CHECK(completions[i].conn_id == kLocalConnId);
    }
    std::array<core::PathEvent, 32> events;
    while (size_t n = conn_->PollEvents(events)) {
      for (size_t i = 0; i < n; ++i) FUZZ_CHECK(events[i].path_id < path_count_);
    }
  }

  void CheckReadOnlyMemoryUntouched() const {
    FUZZ_CHECK(std::memcmp(buf_.src.get(), buf_.src_expected.get(), kSrcRegionSize) == 0);
    FUZZ_CHECK(std::memcmp(buf_.guard.get(), buf_.guard_expected.get(), kGuardRegionSize) == 0);
  }

 private:
  CheckingSink sink_;
  core::Endpoint endpoint_;
  uint16_t path_count_;
  Buffers& buf_;
  core::MemoryRegion recv_mr_, src_mr_;
  core::Connection* conn_ = nullptr;
  Instant now_{1'000'000};
  uint64_t next_wr_id_ = 1;
};

}  // namespace
}  // namespace metaroce::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace metaroce::fuzz;
  Reader in(data, size);
  const uint8_t patch_mask = in.U8();
  const uint8_t profile = in.U8();
  const uint16_t paths = static_cast<uint16_t>(1 + in.U8() % kMaxPaths);
  Harness h(profile, paths);
  while (!in.done()) {
    const uint8_t tag = in.U8();
    if (tag < kTagAdvance) {
      const uint16_t len = in.U16();
      h.Deliver(in.Take(len), patch_mask, (tag & kTagCeBit) != 0);
    } else if (tag < kTagPost) {
      h.Advance(std::chrono::nanoseconds((in.U16() + 1) * 100));
    } else {
      const uint8_t kind = in.U8();
      const uint16_t offset = in.U16();
      h.Post(kind, offset, in.U16());
    }
    h.Drain();
  }
  h.RunOutTimers();
  h.CheckReadOnlyMemoryUntouched();
  return 0;
}
