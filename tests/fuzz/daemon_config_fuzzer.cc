// Fuzz target for metaroced's config file parser (daemon/config.h, ParseConfigText): the file
// is written by an administrator, but --check-config and a reload (SIGHUP) read whatever is on
// disk, and neither may take the daemon down.
//
// What must hold for every input:
//   - no crash, no read outside the text (AddressSanitizer);
//   - every error is one non-empty line that names where it is ("fuzz.conf:LINE: ..." for the
//     file's own lines, or the key for checks of the whole);
//   - an accepted file writes back: every key, formatted as FormatConfigValue gives it and quoted,
//     under its section, parses without error to a config that DiffConfig finds identical, and a
//     config always diffs empty against itself.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/config.h"
#include "tests/fuzz/fuzz_check.h"

namespace metaroce::daemon {
namespace {

constexpr absl::string_view kOrigin = "fuzz.conf";  // Debian's Abseil: not std::string_view

void CheckErrors(const LoadedConfig& loaded) {
  for (const std::string& e : loaded.errors) {
    FUZZ_CHECK(!e.empty());
    FUZZ_CHECK(e.find('\n') == std::string::npos);
  }
}

// The whole config as a file: each section once, every key quoted (a value may hold '#' or ';').
std::string WriteBack(const Config& config) {
  std::map<std::string, std::string> sections;  // keeps [daemon], [limits], [paths] together
  for (const ConfigKeyInfo& k : ConfigKeys()) {
    absl::StrAppend(&sections[std::string(k.section)], k.key, " = \"",
                    FormatConfigValue(config, k.key), "\"\n");
  }
  std::string text;
  for (const auto& [section, body] : sections) absl::StrAppend(&text, "[", section, "]\n", body);
  return text;
}

}  // namespace
}  // namespace metaroce::daemon

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace metaroce::daemon;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  const LoadedConfig loaded = ParseConfigText(text, kOrigin);
  CheckErrors(loaded);
  FUZZ_CHECK(DiffConfig(loaded.config, loaded.config).empty());
  if (!loaded.ok()) return 0;

  const std::string written = WriteBack(loaded.config);
  const LoadedConfig again = ParseConfigText(written, kOrigin);
  if (!again.ok()) {
    std::fprintf(stderr, "written back:\n%s\nrefused: %s\n", written.c_str(),
                 again.errors.front().c_str());
  }
  FUZZ_CHECK(again.ok());
  const std::vector<ConfigChange> changes = DiffConfig(loaded.config, again.config);
  for (const ConfigChange& c : changes) {
    std::fprintf(stderr, "%s: '%s' read back as '%s'\n", c.key.c_str(), c.from.c_str(),
                 c.to.c_str());
  }
  FUZZ_CHECK(changes.empty());
  return 0;
}
