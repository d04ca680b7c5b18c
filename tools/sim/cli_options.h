// mrsim's command line: a table of flags mapped onto a ScenarioConfig.
//
// Syntax: --name=value or --name value; boolean flags also as bare --name. --slow, --blackhole,
// --path-loss and --ce-mark may be repeated and take comma-separated lists. Sizes accept K, M, G suffixes (powers of 1024).
// Errors are one line naming the flag; the caller prints it and exits 2.
#pragma once

#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "tools/sim/scenario.h"

namespace metaroce::sim {

struct CommandLine {
  ScenarioConfig config;
  bool json = false;
  bool help = false;
};

// `args` excludes the program name.
absl::StatusOr<CommandLine> ParseCommandLine(std::span<const char* const> args);

// The --help text: every flag with its default.
std::string UsageText();

}  // namespace metaroce::sim
