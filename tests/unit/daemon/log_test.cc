#include "daemon/log.h"

#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaroce::daemon {
namespace {

const absl::Time kWhen = absl::FromUnixMicros(1795953296123456);  // 2026-11-29T11:54:56.123456Z

TEST(Logger, TextLine) {
  unsetenv("JOURNAL_STREAM");
  Logger log(LogFormat::kText);
  EXPECT_EQ(log.Format(LogLevel::kWarning, "queue busy\nretrying", kWhen),
            "2026-11-29T11:54:56.123456Z warning: queue busy retrying\n");
}

TEST(Logger, JsonLine) {
  Logger log(LogFormat::kJson);
  EXPECT_EQ(log.Format(LogLevel::kInfo, "a \"quoted\" \\ line\n", kWhen),
            "{\"ts\":\"2026-11-29T11:54:56.123456Z\",\"level\":\"info\",\"msg\":\"a "
            "\\\"quoted\\\" \\\\ line\\n\"}\n");
  log.set_format(LogFormat::kText);
  EXPECT_EQ(log.format(), LogFormat::kText);
}

TEST(Logger, JournaldGetsSyslogPriorities) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  struct stat st;
  ASSERT_EQ(fstat(fds[1], &st), 0);
  const std::string stream = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  setenv("JOURNAL_STREAM", stream.c_str(), 1);
  Logger log(LogFormat::kText, fds[1]);
  EXPECT_EQ(log.Format(LogLevel::kError, "boom", kWhen), "<3>boom\n");
  log.Info("hello");
  char buf[64] = {};
  ASSERT_EQ(read(fds[0], buf, sizeof buf), 9);
  EXPECT_STREQ(buf, "<6>hello\n");
  unsetenv("JOURNAL_STREAM");
  close(fds[0]);
  close(fds[1]);
}

TEST(JsonQuote, ControlCharacters) {
  EXPECT_EQ(JsonQuote(std::string("\x01\t", 2)), "\"\\u0001\\t\"");
  EXPECT_EQ(JsonQuote("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
}

}  // namespace
}  // namespace metaroce::daemon
