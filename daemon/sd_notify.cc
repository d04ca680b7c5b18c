#include "daemon/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace metaroce::daemon {
namespace {

uint64_t MonotonicMicros() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

}  // namespace

SdNotifier::SdNotifier() {
  if (const char* env = std::getenv("NOTIFY_SOCKET")) socket_ = env;
}

absl::Status SdNotifier::Notify(absl::string_view state) const {
  if (!enabled()) return absl::OkStatus();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if ((socket_.front() != '/' && socket_.front() != '@') ||
      socket_.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("NOTIFY_SOCKET '", socket_, "' is not a socket path or abstract name"));
  }
  std::memcpy(addr.sun_path, socket_.data(), socket_.size());
  socklen_t length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_.size());
  if (socket_.front() == '@') {
    addr.sun_path[0] = '\0';  // abstract namespace: the name is not NUL-terminated
  } else {
    ++length;
  }
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::ErrnoToStatus(errno, "sd_notify: socket");
  const ssize_t n = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                           reinterpret_cast<const sockaddr*>(&addr), length);
  const int err = errno;
  close(fd);
  if (n < 0) return absl::ErrnoToStatus(err, absl::StrCat("sd_notify to ", socket_));
  return absl::OkStatus();
}

absl::Status SdNotifier::Ready(absl::string_view status) {
  return Notify(absl::StrCat("READY=1\nSTATUS=", status));
}

absl::Status SdNotifier::Reloading() {
  return Notify(absl::StrCat("RELOADING=1\nMONOTONIC_USEC=", MonotonicMicros()));
}

absl::Status SdNotifier::Stopping() { return Notify("STOPPING=1\nSTATUS=stopping"); }

absl::Status SdNotifier::SetStatus(absl::string_view status) {
  return Notify(absl::StrCat("STATUS=", status));
}

}  // namespace metaroce::daemon
