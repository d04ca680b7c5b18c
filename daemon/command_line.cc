#include "daemon/command_line.h"

#include "absl/strings/string_view.h"

#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace metaroce::daemon {
namespace {

// Flags that set a config key.
struct KeyFlag {
  absl::string_view flag;
  absl::string_view key;
};
constexpr KeyFlag kKeyFlags[] = {
    {"--interface", "interfaces"}, {"--local-ip", "local_ips"},   {"--socket", "socket"},
    {"--port-kind", "port_kind"},  {"--workers", "workers"},      {"--log-format", "log_format"},
    {"--metrics-listen", "metrics_listen"},
};

const KeyFlag* FindKeyFlag(absl::string_view flag) {
  for (const KeyFlag& f : kKeyFlags) {
    if (f.flag == flag) return &f;
  }
  return nullptr;
}

}  // namespace

std::string Usage() {
  return absl::StrCat(R"(usage: metaroced [flags]
The MetaRoCE daemon: owns the NIC queues and the XDP program, hosts the engine, serves the
control socket (mrctl). Runs in the foreground and logs to stderr (daemon/README.md).
  --config PATH            config file ()", kDefaultConfigPath, R"(; a missing default file
                           is fine, a missing --config file is an error)
  --check-config           check the config (and these flags), print `config OK: PATH` or every
                           error, and exit 0 or 1
  --interface IF[,IF...]   interfaces, one per plane (config: interfaces)
  --local-ip IP[,IP...]    this host's address per plane (config: local_ips; default: the
                           interface's first IPv4 address)
  --socket PATH            control socket (config: socket; /run/metaroce/metaroced.sock)
  --port-kind af_xdp|udp   AF_XDP (kernel bypass) or kernel UDP (config: port_kind)
  --workers N              engine worker threads, one AF_XDP queue each (config: workers)
  --log-format text|json   log lines on stderr (config: log_format)
  --metrics-listen IP:PORT|off
                           serve Prometheus metrics at http://IP:PORT/metrics (config:
                           metrics_listen; default off)
  --version                print the version and exit
  --help                   print this and exit
Flags override the config file, also across reloads (SIGHUP).
)");
}

absl::StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv) {
  CommandLine cl;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    absl::string_view name = arg;
    std::optional<absl::string_view> inline_value;
    if (const size_t eq = arg.find('='); absl::StartsWith(arg, "--") && eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    auto no_value = [&]() -> absl::Status {
      if (inline_value) return absl::InvalidArgumentError(absl::StrCat(name, " takes no value"));
      return absl::OkStatus();
    };
    auto value = [&]() -> absl::StatusOr<std::string> {
      if (inline_value) return std::string(*inline_value);
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat(name, " needs a value (metaroced --help)"));
      }
      return std::string(argv[++i]);
    };
    if (name == "--help" || name == "-h") {
      if (absl::Status s = no_value(); !s.ok()) return s;
      cl.help = true;
    } else if (name == "--version") {
      if (absl::Status s = no_value(); !s.ok()) return s;
      cl.version = true;
    } else if (name == "--check-config") {
      if (absl::Status s = no_value(); !s.ok()) return s;
      cl.check_config = true;
    } else if (name == "--config") {
      absl::StatusOr<std::string> v = value();
      if (!v.ok()) return v.status();
      if (v->empty()) return absl::InvalidArgumentError("--config: empty path");
      cl.config.path = *v;
      cl.config.path_required = true;
    } else if (const KeyFlag* f = FindKeyFlag(name)) {
      absl::StatusOr<std::string> v = value();
      if (!v.ok()) return v.status();
      cl.config.overrides.push_back({std::string(f->flag), std::string(f->key), *v});
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown argument '", arg, "' (metaroced --help)"));
    }
  }
  return cl;
}

}  // namespace metaroce::daemon
