#include "tools/common/byte_size.h"

#include <gtest/gtest.h>

namespace metaroce::tools {
namespace {

TEST(ParseByteSize, PlainAndSuffixed) {
  EXPECT_EQ(ParseByteSize("0"), 0u);
  EXPECT_EQ(ParseByteSize("65536"), 65536u);
  EXPECT_EQ(ParseByteSize("64K"), 65536u);
  EXPECT_EQ(ParseByteSize("64k"), 65536u);
  EXPECT_EQ(ParseByteSize("1M"), 1048576u);
  EXPECT_EQ(ParseByteSize("2G"), 2147483648u);
}

TEST(ParseByteSize, RefusesGarbageNegativesAndOverflow) {
  EXPECT_EQ(ParseByteSize(""), std::nullopt);
  EXPECT_EQ(ParseByteSize("K"), std::nullopt);
  EXPECT_EQ(ParseByteSize("-1"), std::nullopt);
  EXPECT_EQ(ParseByteSize("12T"), std::nullopt);
  EXPECT_EQ(ParseByteSize("1.5M"), std::nullopt);
  EXPECT_EQ(ParseByteSize("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(ParseByteSize("18446744073709551616"), std::nullopt);
  EXPECT_EQ(ParseByteSize("17179869184G"), std::nullopt);  // 2^34 x 2^30 overflows
}

}  // namespace
}  // namespace metaroce::tools
