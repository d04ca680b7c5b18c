// Tests of lib/wire/big_endian.h: byte order, size and alignment of the strong wire integer types.
#include "lib/wire/big_endian.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gtest/gtest.h"

namespace metaroce::wire {
namespace {

template <typename T>
std::array<uint8_t, sizeof(T)> BytesOf(const T& v) {
  std::array<uint8_t, sizeof(T)> out;
  std::memcpy(out.data(), &v, sizeof(T));
  return out;
}

TEST(BigEndian_Layout, TriviallyCopyableAndUnaligned) {
  static_assert(std::is_trivially_copyable_v<Be16>);
  static_assert(std::is_trivially_copyable_v<Be32>);
  static_assert(std::is_trivially_copyable_v<Be64>);
  EXPECT_EQ(sizeof(Be16), 2u);
  EXPECT_EQ(sizeof(Be32), 4u);
  EXPECT_EQ(sizeof(Be64), 8u);
  EXPECT_EQ(alignof(Be64), 1u);
}

TEST(BigEndian_FromHost, Be16StoresMostSignificantByteFirst) {
  EXPECT_EQ(BytesOf(Be16::FromHost(0x1234)), (std::array<uint8_t, 2>{0x12, 0x34}));
}

TEST(BigEndian_FromHost, Be32StoresMostSignificantByteFirst) {
  EXPECT_EQ(BytesOf(Be32::FromHost(0x01020304u)), (std::array<uint8_t, 4>{1, 2, 3, 4}));
}

TEST(BigEndian_FromHost, Be64StoresMostSignificantByteFirst) {
  EXPECT_EQ(BytesOf(Be64::FromHost(0x0102030405060708ull)),
            (std::array<uint8_t, 8>{1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(BigEndian_Value, ReadsNetworkOrderBytes) {
  const uint8_t raw[8] = {0xde, 0xad, 0xbe, 0xef, 0x00, 0x11, 0x22, 0x33};
  Be64 v64;
  std::memcpy(&v64, raw, 8);
  EXPECT_EQ(v64.value(), 0xdeadbeef00112233ull);
  Be32 v32;
  std::memcpy(&v32, raw, 4);
  EXPECT_EQ(v32.value(), 0xdeadbeefu);
  Be16 v16;
  std::memcpy(&v16, raw + 2, 2);
  EXPECT_EQ(v16.value(), 0xbeefu);
}

TEST(BigEndian_Value, DefaultIsZero) {
  EXPECT_EQ(Be16().value(), 0u);
  EXPECT_EQ(Be32().value(), 0u);
  EXPECT_EQ(Be64().value(), 0u);
}

TEST(BigEndian_RoundTrip, ExtremesAndPatterns) {
  for (uint16_t v : {uint16_t{0}, uint16_t{1}, uint16_t{0x00ff}, uint16_t{0xff00}, uint16_t{0xffff}}) {
    EXPECT_EQ(Be16::FromHost(v).value(), v);
  }
  for (uint32_t v : {0u, 1u, 0x80000000u, 0x7fffffffu, 0xffffffffu, 0x00ff00ffu}) {
    EXPECT_EQ(Be32::FromHost(v).value(), v);
  }
  for (uint64_t v : {0ull, 1ull, 0x8000000000000000ull, 0xffffffffffffffffull,
                     0x0123456789abcdefull}) {
    EXPECT_EQ(Be64::FromHost(v).value(), v);
  }
}

TEST(BigEndian_SetHost, OverwritesPreviousValue) {
  Be32 v = Be32::FromHost(0xffffffffu);
  v.SetHost(0x00000102u);
  EXPECT_EQ(BytesOf(v), (std::array<uint8_t, 4>{0, 0, 1, 2}));
}

TEST(BigEndian_Equality, ComparesValues) {
  EXPECT_EQ(Be32::FromHost(7), Be32::FromHost(7));
  EXPECT_FALSE(Be32::FromHost(7) == Be32::FromHost(0x07000000u));
}

TEST(BigEndian_Constexpr, UsableInConstantExpressions) {
  constexpr Be16 kV = Be16::FromHost(0xabcd);
  static_assert(kV.value() == 0xabcd);
  SUCCEED();
}

}  // namespace
}  // namespace metaroce::wire
