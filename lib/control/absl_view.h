// The bridge from std::string_view to absl::string_view.
//
// Debian 12's Abseil is built without ABSL_USES_STD_STRING_VIEW, so absl::string_view is a type
// of its own: absl::StrCat, absl::Status messages and absl's parsers take it and not
// std::string_view, which the project's interfaces use. AbslView converts without copying.
#pragma once

#include <string_view>

#include "absl/strings/string_view.h"

namespace metaroce::control {

inline absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }

}  // namespace metaroce::control
