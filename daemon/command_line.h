// metaroced's command line (daemon/README.md):
//
//   metaroced [--config PATH] [--check-config] [--interface IF[,IF...]] [--local-ip IP[,IP...]]
//             [--socket PATH] [--port-kind af_xdp|udp] [--workers N] [--log-format text|json]
//             [--metrics-listen IP:PORT|off] [--version] [--help]
//
// Flags that set a config key become ConfigOverrides, checked by LoadConfig with the same rules
// as the file (so --check-config reports a bad flag value too) and re-applied on every reload,
// so that a flag keeps overriding the file. `--flag value` and `--flag=value` are both accepted.
// Pure parsing: no I/O; errors are one line for the caller to print (exit 2).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "daemon/config.h"

namespace metaroce::daemon {

struct CommandLine {
  ConfigSource config;       // path (--config), whether it must exist, overrides
  bool check_config = false;
  bool version = false;
  bool help = false;
};

absl::StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv);
std::string Usage();

}  // namespace metaroce::daemon
