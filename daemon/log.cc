#include "daemon/log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace metaroce::daemon {
namespace {

// $JOURNAL_STREAM is "DEV:INODE" of the stream systemd connected; it is inherited, so compare it
// with what `fd` really is.
bool IsJournalStream(int fd) {
  const char* env = std::getenv("JOURNAL_STREAM");
  if (env == nullptr) return false;
  std::vector<std::string> parts = absl::StrSplit(env, ':');
  unsigned long long dev = 0, ino = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &dev) ||
      !absl::SimpleAtoi(parts[1], &ino)) {
    return false;
  }
  struct stat st;
  return fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

int SyslogPriority(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return 3;
    case LogLevel::kWarning: return 4;
    case LogLevel::kInfo: return 6;
  }
  return 6;
}

// Newlines would split one event into several lines.
std::string OneLine(absl::string_view message) {
  std::string out(message);
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

}  // namespace

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kInfo: return "info";
  }
  return "info";
}

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

Logger::Logger(LogFormat format, int fd)
    : format_(format), fd_(fd), journald_(IsJournalStream(fd)) {}

std::string Logger::Format(LogLevel level, absl::string_view message, absl::Time now) const {
  const std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", now, absl::UTCTimeZone());
  if (format_.load() == LogFormat::kJson) {
    return absl::StrCat("{\"ts\":", JsonQuote(ts), ",\"level\":\"", LogLevelName(level),
                        "\",\"msg\":", JsonQuote(message), "}\n");
  }
  if (journald_) return absl::StrCat("<", SyslogPriority(level), ">", OneLine(message), "\n");
  return absl::StrCat(ts, " ", LogLevelName(level), ": ", OneLine(message), "\n");
}

void Logger::Log(LogLevel level, absl::string_view message) {
  const std::string line = Format(level, message, absl::Now());
  // One write per line so that lines from several threads never interleave.
  [[maybe_unused]] ssize_t n = write(fd_, line.data(), line.size());
}

}  // namespace metaroce::daemon
