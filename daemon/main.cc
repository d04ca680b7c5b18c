// metaroced: the MetaRoCE daemon (daemon/README.md). Flags and config, then daemon/daemon.h.
//
// Exit status: 0 after a clean stop (SIGTERM/SIGINT) or a successful --check-config/--help/
// --version; 1 when the config is invalid or start-up was refused; 2 for a bad command line.
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/build_info.h"
#include "daemon/command_line.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/log.h"
#include "daemon/sd_notify.h"

namespace {

using namespace metaroce::daemon;

int CheckConfig(const ConfigSource& source, const LoadedConfig& loaded) {
  if (!loaded.ok()) {
    for (const std::string& e : loaded.errors) std::fprintf(stderr, "%s\n", e.c_str());
    return 1;
  }
  if (loaded.config.path.empty()) {
    std::printf("config OK: no config file (%s is missing): defaults and flags\n",
                source.path.c_str());
  } else {
    std::printf("config OK: %s\n", loaded.config.path.c_str());
  }
  return 0;
}

// Blocks the signals the main loop takes from a signalfd, before any thread starts (threads
// inherit the mask, so none of them is picked to run a default handler).
int BlockSignals() {
  signal(SIGPIPE, SIG_IGN);  // a control client that goes away must not kill the daemon
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return signalfd(-1, &set, SFD_CLOEXEC);
}

int Run(const ConfigSource& source, const LoadedConfig& loaded) {
  Logger log(loaded.config.daemon.log_format);
  SdNotifier notifier;
  if (!loaded.ok()) {
    for (const std::string& e : loaded.errors) log.Error(e);
    log.Error("not started: fix the configuration (metaroced --check-config)");
    notifier.SetStatus("not started: configuration errors").IgnoreError();
    return 1;
  }
  const int signal_fd = BlockSignals();
  if (signal_fd < 0) {
    log.Error(absl::StrCat("signalfd: ", std::strerror(errno)));
    return 1;
  }
  absl::StatusOr<std::unique_ptr<Daemon>> daemon =
      Daemon::Start(source, loaded.config, log, notifier);
  if (!daemon.ok()) {
    for (absl::string_view line : absl::StrSplit(daemon.status().message(), '\n')) {
      log.Error(absl::StrCat("start-up refused: ", line));
    }
    const absl::string_view message = daemon.status().message();
    notifier.SetStatus(absl::StrCat("start-up refused: ", message.substr(0, message.find('\n'))))
        .IgnoreError();
    close(signal_fd);
    return 1;
  }
  (*daemon)->Run(signal_fd);
  daemon->reset();  // Stop(): socket, connections, then the Context (XDP detached)
  close(signal_fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<CommandLine> cl = ParseCommandLine(argc, argv);
  if (!cl.ok()) {
    std::fprintf(stderr, "metaroced: %s\n", std::string(cl.status().message()).c_str());
    return 2;
  }
  if (cl->help) {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  if (cl->version) {
    std::printf("metaroced %s\n", METAROCE_VERSION);
    return 0;
  }
  const LoadedConfig loaded = LoadConfig(cl->config);
  if (cl->check_config) return CheckConfig(cl->config, loaded);
  return Run(cl->config, loaded);
}
