// Parsing of byte counts on tools' command lines: "65536", "64K", "1M", "2G" (K/M/G = x1024).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace metaroce::tools {

// The value of `text`, or nullopt when it is not a non-negative integer with an optional K/M/G
// suffix or when the result does not fit in 64 bits. Callers word the error with their flag.
std::optional<uint64_t> ParseByteSize(std::string_view text);

}  // namespace metaroce::tools
