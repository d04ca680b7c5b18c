// Strong big-endian integer types for wire headers.
//
// A BeN holds its value in network byte order. It converts to and from host integers only through
// explicit calls (BeN::FromHost / value()), so a header field can never be read or written in the
// wrong byte order by accident. The types are trivially copyable, have the size and alignment of a
// byte array (alignment 1), and can therefore be laid out in packed wire structs and read from any
// address.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace metaroce::wire {

namespace detail {
template <typename T>
constexpr T ByteSwapIfLittle(T v) {
  if constexpr (std::endian::native == std::endian::big || sizeof(T) == 1) {
    return v;
  } else if constexpr (sizeof(T) == 2) {
    return static_cast<T>(__builtin_bswap16(v));
  } else if constexpr (sizeof(T) == 4) {
    return static_cast<T>(__builtin_bswap32(v));
  } else {
    return static_cast<T>(__builtin_bswap64(v));
  }
}
}  // namespace detail

template <typename T>
class BigEndian {
 public:
  using HostType = T;
  constexpr BigEndian() = default;
  static constexpr BigEndian FromHost(T host) {
    BigEndian b;
    b.SetHost(host);
    return b;
  }
  // At run time one load (store) and a byte swap: the loops, unrolled, cost a shift and an or
  // per byte, ~15 fields per packet on every parse and serialize (docs/performance.md).
  constexpr T value() const {
    if (std::is_constant_evaluated()) {
      T raw = 0;
      for (unsigned i = 0; i < sizeof(T); ++i) raw = static_cast<T>((raw << 8) | bytes_[i]);
      return raw;
    }
    T raw;
    std::memcpy(&raw, bytes_, sizeof raw);
    if constexpr (std::endian::native == std::endian::little) raw = detail::ByteSwapIfLittle(raw);
    return raw;
  }
  constexpr void SetHost(T host) {
    if (!std::is_constant_evaluated()) {
      const T raw = detail::ByteSwapIfLittle(host);
      std::memcpy(bytes_, &raw, sizeof raw);
      return;
    }
    for (unsigned i = 0; i < sizeof(T); ++i) {
      bytes_[sizeof(T) - 1 - i] = static_cast<uint8_t>(host & 0xff);
      host = static_cast<T>(host >> 8);
    }
  }
  friend constexpr bool operator==(BigEndian a, BigEndian b) { return a.value() == b.value(); }

 private:
  uint8_t bytes_[sizeof(T)] = {};
};

using Be16 = BigEndian<uint16_t>;
using Be32 = BigEndian<uint32_t>;
using Be64 = BigEndian<uint64_t>;

static_assert(sizeof(Be16) == 2 && alignof(Be16) == 1);
static_assert(sizeof(Be32) == 4 && alignof(Be32) == 1);
static_assert(sizeof(Be64) == 8 && alignof(Be64) == 1);

}  // namespace metaroce::wire
