// Rendering of a ScenarioResult: JSON (a contract: stable keys, deterministic, no wall-clock) and a
// human summary (free to change).
#pragma once

#include <optional>
#include <string>

#include "tools/sim/scenario.h"

namespace metaroce::sim {

// One JSON object, newline-terminated. Same result -> byte-identical text. Field meanings are
// those of ScenarioResult; rates in Gbit/s, times in microseconds.
std::string ResultToJson(const ScenarioResult& result);

// A readable block of the key figures. `wall_seconds`, if given, is shown (it never enters JSON).
std::string ResultSummary(const ScenarioResult& result, std::optional<double> wall_seconds);

}  // namespace metaroce::sim
