// mrctl's whole run, as a function that main() calls and tests drive: parse the command line
// (tools/ctl/command.h), ask metaroced over its control socket (lib/control/protocol.h), print
// the result (tools/ctl/format.h).
//
// `args` are the words after the program name. The result goes to `out` in one piece (never a
// partial JSON document); a failure prints exactly one line to `err`, "Error: <message>", plus
// `Try "mrctl help".` after a usage error. Returns the exit status: 0 success, 1 metaroced
// refused the request or could not be reached, 2 bad usage. Reads $METAROCE_SOCKET (the socket
// when -s is not given). Blocks up to kCallTimeout for the daemon.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace metaroce::ctl {

// Longer than the daemon's own timeouts (conn.add waits for the peer daemon), so that its
// reason, not ours, is what the user reads.
inline constexpr absl::Duration kCallTimeout = absl::Seconds(30);

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

int RunMrctl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace metaroce::ctl
