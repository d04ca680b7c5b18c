// mrperf's result document (the contract for scripts, tools/perf/README.md) is built with the
// control library's JSON value: insertion order kept; Dump(2) writes the --out_json file and
// Dump() one compact line; doubles with six significant digits.
#pragma once

#include "lib/control/json.h"

namespace metaroce::perf {

using JsonValue = control::Json;

}  // namespace metaroce::perf
