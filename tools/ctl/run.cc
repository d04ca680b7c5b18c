#include "tools/ctl/run.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

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

// The whole result of a listing that comes in pages (docs/control-protocol.md, "Listings"): a
// result with `next` is a page; the following pages are asked for with `after` = its `next`
// until one has none, and each page's arrays are appended to the first page's. The result has
// no `next`: it is what one reply used to hold. Any method's result may be a page (a newer
// daemon may page more listings); a daemon that does not page sends no `next`, and the first
// request carries no `after`, so an older daemon is asked exactly what it understands.
absl::StatusOr<control::Json> CallAllPages(control::Client& client, const Invocation& inv) {
  absl::StatusOr<control::Json> first = client.Call(inv.method, inv.params);
  if (!first.ok() || first->Find("next") == nullptr) return first;
  control::Json all = control::Json::MakeObject();
  for (const auto& [key, value] : first->object()) {
    if (key != "next") all[key] = value;
  }
  control::Json next = *first->Find("next");
  while (true) {
    control::Json params = inv.params;
    params["after"] = next;
    absl::StatusOr<control::Json> page = client.Call(inv.method, params);
    if (!page.ok()) return page.status();
    for (const auto& [key, value] : page->object()) {
      if (!value.is_array()) continue;
      control::Json& list = all[key];
      for (const control::Json& item : value.array()) list.Push(item);
    }
    const control::Json* more = page->Find("next");
    if (more == nullptr) return all;
    if (*more == next) {  // a daemon that does not move on would be asked forever
      return absl::InternalError(absl::StrCat(inv.method, ": metaroced answered the page after ",
                                              next.Dump(), " with the same `next`"));
    }
    next = *more;
  }
}

int Call(const Invocation& inv, std::ostream& out, std::ostream& err) {
  absl::StatusOr<control::Client> client =
      control::Client::Connect(inv.options.socket_path, kCallTimeout);
  if (!client.ok()) return Fail(err, std::string(client.status().message()));
  absl::StatusOr<control::Json> result = CallAllPages(*client, inv);
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
