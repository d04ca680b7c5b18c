// Wrap-safe arithmetic on 32-bit sequence numbers (PSNs, message and receive sequence numbers).
//
// Sequence numbers wrap modulo 2^32. Two numbers compare by their signed 32-bit distance, which is
// meaningful while they are less than 2^31 apart; every window in the protocol is far smaller.
#pragma once

#include <cstdint>

namespace metaroce::core {

// b - a as a signed distance: positive when b is after a.
constexpr int32_t SeqDistance(uint32_t a, uint32_t b) { return static_cast<int32_t>(b - a); }
constexpr bool SeqLess(uint32_t a, uint32_t b) { return SeqDistance(a, b) > 0; }
constexpr bool SeqLessEq(uint32_t a, uint32_t b) { return SeqDistance(a, b) >= 0; }
constexpr uint32_t SeqMax(uint32_t a, uint32_t b) { return SeqLess(a, b) ? b : a; }

}  // namespace metaroce::core
