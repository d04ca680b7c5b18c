// metaroced's log: one line per event on stderr, for journald.
//
//   text  `LEVEL: message`; under journald (stderr is the journal stream, $JOURNAL_STREAM) each
//         line starts with the syslog priority instead (`<6>message`), so journald records the
//         level and adds its own time stamp; elsewhere lines start with an RFC 3339 UTC time.
//   json  {"ts":"2026-11-29T11:48:00.123456Z","level":"info","msg":"..."} per line.
//
// Threading: every method is safe from any thread (one line is written with one write(2)).
#pragma once

#include <atomic>
#include <cstdio>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/time/time.h"
#include "daemon/config.h"

namespace metaroce::daemon {

enum class LogLevel : uint8_t { kError, kWarning, kInfo };
absl::string_view LogLevelName(LogLevel level);  // "error", "warning", "info"

class Logger {
 public:
  // Writes to `fd` (stderr by default).
  explicit Logger(LogFormat format = LogFormat::kText, int fd = 2);

  void set_format(LogFormat format) { format_.store(format); }
  LogFormat format() const { return format_.load(); }

  void Log(LogLevel level, absl::string_view message);
  void Info(absl::string_view message) { Log(LogLevel::kInfo, message); }
  void Warning(absl::string_view message) { Log(LogLevel::kWarning, message); }
  void Error(absl::string_view message) { Log(LogLevel::kError, message); }

  // The line Log would write at `now` (tests), newline included.
  std::string Format(LogLevel level, absl::string_view message, absl::Time now) const;

 private:
  std::atomic<LogFormat> format_;
  int fd_;
  bool journald_;  // stderr is connected to journald
};

// `s` as a JSON string literal, quotes included.
std::string JsonQuote(absl::string_view s);

}  // namespace metaroce::daemon
