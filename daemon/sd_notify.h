// The systemd notification protocol (sd_notify(3)) without libsystemd: one datagram per state
// change to the Unix socket named by $NOTIFY_SOCKET (a path, or an abstract name when it starts
// with '@'). Without $NOTIFY_SOCKET (not started by systemd with Type=notify) every call is a
// successful no-op.
//
//   READY=1                     start-up finished (after the control socket listens)
//   STATUS=...                  one line for `systemctl status`
//   RELOADING=1 MONOTONIC_USEC  a reload began (SIGHUP); READY=1 again when it is done
//   STOPPING=1                  shutting down
//
// Threading: safe from any thread (each call opens its own socket).
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace metaroce::daemon {

class SdNotifier {
 public:
  // Reads $NOTIFY_SOCKET.
  SdNotifier();
  // An explicit socket address (tests); empty: disabled.
  explicit SdNotifier(std::string socket) : socket_(std::move(socket)) {}

  bool enabled() const { return !socket_.empty(); }
  // Sends `state` (newline-separated assignments) as one datagram. Errors: the address is
  // invalid or the send failed (systemd went away); callers log and carry on.
  absl::Status Notify(absl::string_view state) const;

  absl::Status Ready(absl::string_view status);
  absl::Status Reloading();  // RELOADING=1 and MONOTONIC_USEC=now
  absl::Status Stopping();
  absl::Status SetStatus(absl::string_view status);

 private:
  std::string socket_;
};

}  // namespace metaroce::daemon
