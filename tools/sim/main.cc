// mrsim: the MetaRoCE discrete-event simulator. See tools/sim/scenario.h for what a run does and
// tools/sim/fabric.h for the network model; `mrsim --help` lists the flags.
//
// Exit status: 0 when the simulation ran (its verdict is in the output: data_errors, failures);
// 2 on a bad flag or a configuration the core refuses.
#include <chrono>
#include <cstdio>
#include <span>

#include "tools/sim/cli_options.h"
#include "tools/sim/report.h"
#include "tools/sim/scenario.h"

int main(int argc, char** argv) {
  using namespace metaroce::sim;
  const std::span<const char* const> args(const_cast<const char* const*>(argv) + 1,
                                          static_cast<size_t>(argc > 0 ? argc - 1 : 0));
  absl::StatusOr<CommandLine> command_line = ParseCommandLine(args);
  if (!command_line.ok()) {
    std::fprintf(stderr, "mrsim: %s\n", std::string(command_line.status().message()).c_str());
    return 2;
  }
  if (command_line->help) {
    std::fputs((command_line->cluster ? ClusterUsageText() : UsageText()).c_str(), stdout);
    return 0;
  }
  if (command_line->cluster) {
    ClusterConfig config = command_line->cluster_config;
    config.progress = !command_line->quiet;
    absl::StatusOr<ClusterResult> result = RunCluster(config);
    if (!result.ok()) {
      std::fprintf(stderr, "mrsim: %s\n", std::string(result.status().message()).c_str());
      return 2;
    }
    const std::string text =
        command_line->json ? ClusterResultToJson(*result) : ClusterResultSummary(*result);
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  const auto wall_start = std::chrono::steady_clock::now();
  absl::StatusOr<ScenarioResult> result = RunScenario(command_line->config);
  if (!result.ok()) {
    std::fprintf(stderr, "mrsim: %s\n", std::string(result.status().message()).c_str());
    return 2;
  }
  const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - wall_start;
  const std::string text =
      command_line->json ? ResultToJson(*result) : ResultSummary(*result, wall.count());
  std::fputs(text.c_str(), stdout);
  return 0;
}
