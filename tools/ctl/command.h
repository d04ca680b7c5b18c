// mrctl's command line (iproute2 / bpftool grammar) and what it asks the daemon:
//
//   mrctl [OPTIONS] OBJECT { COMMAND | help }        e.g.  mrctl -j conn show 3
//
// ParseCommandLine turns the words after "mrctl" into an Invocation: a control-protocol method
// with its parameters (docs/control-protocol.md), or a request for help or the version. Objects
// and commands may be abbreviated to an unambiguous prefix ("l s" is "link show"); "list" and
// "ls" mean "show"; a missing command means "show". Options may stand anywhere. Nothing is
// validated that only the daemon knows (limits, whether an id exists): the daemon refuses those
// itself with a reason.
//
// Pure functions: no I/O, no environment reads (the caller passes the default socket path).
// Errors: a usage error is an InvalidArgument whose message is one line for people, without
// the "Error: " prefix (e.g. `conn del needs ID`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/control/json.h"

namespace metaroce::ctl {

struct Options {
  bool json = false;     // -j: print the result as one JSON document
  bool pretty = false;   // -p: indent it (implies -j)
  bool details = false;  // -d: conn show prints each connection's counters too
  std::string socket_path;
};

struct Invocation {
  enum class Action { kCall, kHelp, kVersion };
  Action action = Action::kCall;
  Options options;
  std::string help_object;  // kHelp: the object whose commands to list; empty for all
  std::string method;       // kCall: "object.command", e.g. "conn.show"
  control::Json params = control::Json::MakeObject();
};

// `args` are the words after the program name; `default_socket` is what -s overrides
// ($METAROCE_SOCKET, else control::kDefaultSocketPath).
absl::StatusOr<Invocation> ParseCommandLine(const std::vector<std::string>& args,
                                            std::string_view default_socket);

// mrctl help: synopsis, every command, options, exit statuses.
std::string Usage();
// mrctl OBJECT help: that object's commands. `object` is a full object name ("conn").
std::string ObjectUsage(std::string_view object);

}  // namespace metaroce::ctl
