#include "lib/ofi/peer_protocol.h"

#include "absl/strings/str_cat.h"

namespace metaroce::ofi {
namespace {

template <typename T>
void Put(std::byte* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<std::byte>(uint64_t{v} >> (8 * i));
}

template <typename T>
T Get(const std::byte* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= uint64_t{std::to_integer<uint8_t>(p[i])} << (8 * i);
  return static_cast<T>(v);
}

}  // namespace

void EncodeHeader(const MessageHeader& h, std::span<std::byte, kHeaderBytes> out) {
  std::byte* p = out.data();
  Put<uint8_t>(p + 0, static_cast<uint8_t>(h.kind));
  Put<uint8_t>(p + 1, h.flags);
  Put<uint16_t>(p + 2, h.credits);
  Put<uint32_t>(p + 4, h.status);
  Put<uint64_t>(p + 8, h.tag);
  Put<uint64_t>(p + 16, h.data);
  Put<uint64_t>(p + 24, h.length);
  Put<uint64_t>(p + 32, h.send_id);
  Put<uint64_t>(p + 40, h.addr);
  Put<uint64_t>(p + 48, h.key);
  Put<uint64_t>(p + 56, h.offset);
  Put<uint32_t>(p + 64, h.recv_id);
  Put<uint32_t>(p + 68, h.chunk);
}

absl::StatusOr<MessageHeader> DecodeHeader(std::span<const std::byte> in) {
  if (in.size() < kHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("provider message of ", in.size(),
                                                   " bytes: shorter than its ", kHeaderBytes,
                                                   "-byte header"));
  }
  const std::byte* p = in.data();
  MessageHeader h;
  const uint8_t kind = Get<uint8_t>(p);
  if (kind < static_cast<uint8_t>(MessageKind::kEager) ||
      kind > static_cast<uint8_t>(MessageKind::kCredit)) {
    return absl::InvalidArgumentError(absl::StrCat("provider message of unknown kind ", kind));
  }
  h.kind = static_cast<MessageKind>(kind);
  h.flags = Get<uint8_t>(p + 1);
  if ((h.flags & ~header_flags::kAll) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("provider message with unknown flag bits 0x", absl::Hex(h.flags)));
  }
  h.credits = Get<uint16_t>(p + 2);
  h.status = Get<uint32_t>(p + 4);
  h.tag = Get<uint64_t>(p + 8);
  h.data = Get<uint64_t>(p + 16);
  h.length = Get<uint64_t>(p + 24);
  h.send_id = Get<uint64_t>(p + 32);
  h.addr = Get<uint64_t>(p + 40);
  h.key = Get<uint64_t>(p + 48);
  h.offset = Get<uint64_t>(p + 56);
  h.recv_id = Get<uint32_t>(p + 64);
  h.chunk = Get<uint32_t>(p + 68);
  return h;
}

}  // namespace metaroce::ofi
