#include "tools/common/byte_size.h"

#include "absl/strings/numbers.h"

namespace metaroce::tools {

std::optional<uint64_t> ParseByteSize(std::string_view text) {
  uint64_t scale = 1;
  std::string_view digits = text;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'k': case 'K': scale = uint64_t{1} << 10; break;
      case 'm': case 'M': scale = uint64_t{1} << 20; break;
      case 'g': case 'G': scale = uint64_t{1} << 30; break;
      default: break;
    }
    if (scale != 1) digits.remove_suffix(1);
  }
  uint64_t value = 0;
  if (!absl::SimpleAtoi(absl::string_view(digits.data(), digits.size()), &value) ||
      value > UINT64_MAX / scale) {
    return std::nullopt;
  }
  return value * scale;
}

}  // namespace metaroce::tools
