// mrsim's command line: a table of flags mapped onto a ScenarioConfig (the two-host model,
// `--topology pair`, the default) or, with `--topology leaf-spine`, a second table mapped onto a
// ClusterConfig (cluster.h).
//
// Syntax: --name=value or --name value; boolean flags also as bare --name. --slow, --blackhole,
// --path-loss and --ce-mark may be repeated and take comma-separated lists. Sizes accept K, M, G suffixes (powers of 1024).
// Errors are one line naming the flag; the caller prints it and exits 2.
#pragma once

#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "tools/sim/cluster.h"
#include "tools/sim/scenario.h"

namespace metaroce::sim {

struct CommandLine {
  ScenarioConfig config;
  bool cluster = false;  // --topology leaf-spine: cluster_config applies, config does not
  ClusterConfig cluster_config;
  bool ecn_marking_set = false;  // --ecn-kb or --ecn-red given: --cc dcqcn keeps that marking
  bool json = false;
  bool quiet = false;  // no progress on stderr (only the leaf-spine model prints any)
  bool help = false;
};

// `args` excludes the program name.
absl::StatusOr<CommandLine> ParseCommandLine(std::span<const char* const> args);

// The --help text: every flag with its default (the two-host model; the cluster model's).
std::string UsageText();
std::string ClusterUsageText();

}  // namespace metaroce::sim
