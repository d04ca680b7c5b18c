#include "tools/ctl/run.h"

#include <cstdlib>

#include "lib/control/protocol.h"
#include "tools/ctl/command.h"
#include "tools/ctl/format.h"

#ifndef METAROCE_VERSION
#define METAROCE_VERSION "unknown"
#endif

namespace metaroce::ctl {
namespace {

std::string DefaultSocket() {
  const char* env = std::getenv("METAROCE_SOCKET");
  return env != nullptr && env[0] != '\0' ? std::string(env)
                                          : std::string(control::kDefaultSocketPath);
}

// The promise is one line on stderr, whatever the daemon's message holds.
std::string OneLine(std::string_view message) {
  std::string line(message);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return line;
}

int Fail(std::ostream& err, std::string_view message) {
  err << "Error: " << OneLine(message) << "\n";
  err.flush();
  return kExitFailed;
}

int Help(const Invocation& inv, std::ostream& out) {
  out << (inv.help_object.empty() ? Usage() : ObjectUsage(inv.help_object));
  out.flush();
  return kExitOk;
}

int Call(const Invocation& inv, std::ostream& out, std::ostream& err) {
  absl::StatusOr<control::Client> client =
      control::Client::Connect(inv.options.socket_path, kCallTimeout);
  if (!client.ok()) return Fail(err, std::string(client.status().message()));
  absl::StatusOr<control::Json> result = client->Call(inv.method, inv.params);
  if (!result.ok()) return Fail(err, std::string(result.status().message()));
  out << (inv.options.json ? FormatJson(*result, inv.options.pretty)
                           : FormatText(inv.method, *result, inv.options.details));
  out.flush();
  return kExitOk;
}

}  // namespace

int RunMrctl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<Invocation> inv = ParseCommandLine(args, DefaultSocket());
  if (!inv.ok()) {
    err << "Error: " << OneLine(std::string(inv.status().message())) << "\n"
        << "Try \"mrctl help\".\n";
    err.flush();
    return kExitUsage;
  }
  switch (inv->action) {
    case Invocation::Action::kHelp:
      return Help(*inv, out);
    case Invocation::Action::kVersion:
      out << "mrctl " << METAROCE_VERSION << " (control protocol " << control::kProtocolVersion
          << ")\n";
      out.flush();
      return kExitOk;
    case Invocation::Action::kCall:
      break;
  }
  return Call(*inv, out, err);
}

}  // namespace metaroce::ctl
