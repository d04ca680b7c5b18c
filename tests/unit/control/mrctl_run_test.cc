// mrctl's whole run against a fake metaroced on a temporary socket: what it asks, what it
// prints, where, and its exit status (tools/ctl/run.h).
#include "tools/ctl/run.h"

#include <stdlib.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/control/fake_daemon.h"

namespace metaroce::ctl {
namespace {

using control::Json;
using control::Request;
using control::testing::FakeDaemon;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Outcome {
  int status;
  std::string out;
  std::string err;
};

Outcome Mrctl(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int status = RunMrctl(args, out, err);
  return {status, out.str(), err.str()};
}

Json J(std::string_view text) { return *Json::Parse(text); }

TEST(MrctlRun, AsksTheDaemonAndPrintsText) {
  std::optional<Request> seen;
  {
    FakeDaemon daemon([&](int fd) {
      seen = FakeDaemon::AnswerOne(fd, J(R"({"conn":3,"path_id":2,"old_port":1,"new_port":9})"));
    });
    const Outcome run = Mrctl({"-s", daemon.path(), "path", "rotate", "3", "2"});
    EXPECT_EQ(run.status, kExitOk);
    EXPECT_EQ(run.out, "conn 3 path 2 port 1 -> 9\n");
    EXPECT_EQ(run.err, "");
  }  // joins the daemon's thread: `seen` is written
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->method, "path.rotate");
  EXPECT_EQ(seen->params.Dump(), R"({"conn":3,"path":2})");
}

TEST(MrctlRun, JsonIsOneDocumentWithVersionFirst) {
  FakeDaemon daemon([](int fd) {
    FakeDaemon::AnswerOne(fd, J(R"({"connections":[{"id":3,"state":"ready"}]})"));
  });
  const Outcome run = Mrctl({"-j", "-s", daemon.path(), "conn", "show"});
  EXPECT_EQ(run.status, kExitOk);
  EXPECT_EQ(run.out, "{\"version\":1,\"connections\":[{\"id\":3,\"state\":\"ready\"}]}\n");
  EXPECT_EQ(run.err, "");
}

TEST(MrctlRun, PrettyJson) {
  FakeDaemon daemon([](int fd) { FakeDaemon::AnswerOne(fd, Json::MakeObject()); });
  const Outcome run = Mrctl({"-p", "-s", daemon.path(), "conn", "del", "3"});
  EXPECT_EQ(run.status, kExitOk);
  EXPECT_EQ(run.out, "{\n  \"version\": 1\n}\n");
}

TEST(MrctlRun, DaemonRefusalIsOneErrorLineAndStatus1) {
  FakeDaemon daemon([](int fd) {
    FakeDaemon::AnswerOne(fd, Json(), absl::NotFoundError("no connection 3"));
  });
  const Outcome run = Mrctl({"-j", "-s", daemon.path(), "conn", "del", "3"});
  EXPECT_EQ(run.status, kExitFailed);
  EXPECT_EQ(run.out, "");  // never a partial document
  EXPECT_EQ(run.err, "Error: no connection 3\n");
}

TEST(MrctlRun, MultiLineMessagesStillPrintOneLine) {
  FakeDaemon daemon([](int fd) {
    FakeDaemon::AnswerOne(fd, Json(), absl::InternalError("first\nsecond"));
  });
  const Outcome run = Mrctl({"-s", daemon.path(), "daemon", "show"});
  EXPECT_EQ(run.status, kExitFailed);
  EXPECT_EQ(run.err, "Error: first second\n");
}

TEST(MrctlRun, UnreachableDaemonIsStatus1WithTheFix) {
  const std::string path = "/tmp/mrctl-test-absent/metaroced.sock";
  const Outcome run = Mrctl({"-s", path, "link", "show"});
  EXPECT_EQ(run.status, kExitFailed);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err, "Error: cannot reach metaroced at " + path +
                         ": No such file or directory (is metaroced running?)\n");
}

TEST(MrctlRun, SocketFromTheEnvironment) {
  std::optional<Request> seen;
  {
    FakeDaemon daemon([&](int fd) { seen = FakeDaemon::AnswerOne(fd, J(R"({"links":[]})")); });
    setenv("METAROCE_SOCKET", daemon.path().c_str(), 1);
    const Outcome run = Mrctl({"stat", "show", "pl0"});
    unsetenv("METAROCE_SOCKET");
    EXPECT_EQ(run.status, kExitOk) << run.err;
    EXPECT_EQ(run.out, "");
  }
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->method, "stat.show");
  EXPECT_EQ(seen->params.Dump(), R"({"name":"pl0"})");
}

TEST(MrctlRun, UsageErrorIsStatus2WithAHint) {
  const Outcome run = Mrctl({"conn", "del"});
  EXPECT_EQ(run.status, kExitUsage);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err, "Error: conn del needs ID\nTry \"mrctl help\".\n");

  const Outcome none = Mrctl({});
  EXPECT_EQ(none.status, kExitUsage);
  EXPECT_THAT(none.err, StartsWith("Error: missing OBJECT"));
}

TEST(MrctlRun, HelpAndVersionGoToStdoutWithStatus0) {
  Outcome run = Mrctl({"help"});
  EXPECT_EQ(run.status, kExitOk);
  EXPECT_THAT(run.out, StartsWith("Usage: mrctl [ OPTIONS ] OBJECT { COMMAND | help }\n"));
  EXPECT_EQ(run.err, "");

  run = Mrctl({"conn", "help"});
  EXPECT_EQ(run.status, kExitOk);
  EXPECT_THAT(run.out, StartsWith("Usage: mrctl conn add PEER"));

  run = Mrctl({"-V"});
  EXPECT_EQ(run.status, kExitOk);
  EXPECT_THAT(run.out, StartsWith("mrctl "));
  EXPECT_THAT(run.out, HasSubstr(" (control protocol 1)\n"));
}

}  // namespace
}  // namespace metaroce::ctl
