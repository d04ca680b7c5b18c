#include "daemon/params.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace metaroce::daemon {

absl::Status OnlyKeys(const control::Json& params, std::initializer_list<std::string_view> allowed) {
  std::vector<std::string> unknown;
  for (const auto& [key, value] : params.object()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) unknown.push_back(key);
  }
  if (unknown.empty()) return absl::OkStatus();
  std::vector<std::string> expected(allowed.begin(), allowed.end());
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown parameter", unknown.size() > 1 ? "s " : " ", absl::StrJoin(unknown, ", "),
      "; expected ", expected.empty() ? "none" : absl::StrJoin(expected, ", ")));
}

}  // namespace metaroce::daemon
