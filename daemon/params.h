// Reading a control request's params (docs/control-protocol.md: unknown parameters are refused,
// naming them, so that a typo never silently does something else).
#pragma once

#include <initializer_list>
#include <string_view>

#include "absl/status/status.h"
#include "lib/control/json.h"

namespace metaroce::daemon {

// InvalidArgument naming every key of `params` not in `allowed`, and what is allowed.
absl::Status OnlyKeys(const control::Json& params, std::initializer_list<std::string_view> allowed);

}  // namespace metaroce::daemon
