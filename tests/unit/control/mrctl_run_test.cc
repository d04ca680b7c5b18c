// mrctl's whole run against a fake metaroced on a temporary socket: what it asks, what it
// prints, where, and its exit status (tools/ctl/run.h).
#include "tools/ctl/run.h"

#include <stdlib.h>

#include <algorithm>
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

// A listing by pages (docs/control-protocol.md, "Listings"): mrctl asks for the next page with
// `after` = the previous page's `next` until a page has none, and prints all of it as one
// result, as one reply used to hold it.
TEST(MrctlRun, ConnShowWalksEveryPage) {
  std::vector<Request> seen;
  const std::vector<Json> pages = {
      J(R"({"connections":[{"id":3,"state":"ready"},{"id":5,"state":"ready"}],"next":5})"),
      J(R"({"connections":[{"id":8,"state":"error"}],"next":8})"),
      J(R"({"connections":[{"id":9,"state":"ready"}]})"),
  };
  auto serve = [&](int fd) {
    for (const Json& page : pages) {
      std::optional<Request> r = FakeDaemon::AnswerOne(fd, page);
      if (!r) return;
      seen.push_back(*r);
    }
  };
  {
    FakeDaemon daemon(serve);
    const Outcome run = Mrctl({"-j", "-s", daemon.path(), "conn", "show"});
    EXPECT_EQ(run.status, kExitOk) << run.err;
    EXPECT_EQ(run.out,
              R"({"version":1,"connections":[{"id":3,"state":"ready"},{"id":5,"state":"ready"},)"
              R"({"id":8,"state":"error"},{"id":9,"state":"ready"}]})"
              "\n");
  }
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].params.Dump(), "{}");  // what an older daemon understands too
  EXPECT_EQ(seen[1].params.Dump(), R"({"after":5})");
  EXPECT_EQ(seen[2].params.Dump(), R"({"after":8})");

  seen.clear();
  {
    FakeDaemon daemon(serve);
    const Outcome run = Mrctl({"-s", daemon.path(), "conn", "show", "peer", "198.18.0.6"});
    EXPECT_EQ(run.status, kExitOk) << run.err;
    EXPECT_EQ(run.out.substr(0, 7), "conn 3 ");
    EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 4);
    EXPECT_THAT(run.out, HasSubstr("conn 9 "));
  }
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[2].params.Dump(), R"({"peer":"198.18.0.6","after":8})");  // filters kept
}

TEST(MrctlRun, PathEventsWalkEveryPage) {
  std::vector<Request> seen;
  {
    FakeDaemon daemon([&](int fd) {
      seen.push_back(*FakeDaemon::AnswerOne(
          fd, J(R"({"events":[{"time_s":1,"conn":3,"path_id":0,"kind":"state","from":"active",)"
                R"("to":"failed","reason":"timeout","seq":41}],"next":41})")));
      seen.push_back(*FakeDaemon::AnswerOne(
          fd, J(R"({"events":[{"time_s":1,"conn":3,"path_id":0,"kind":"rotation",)"
                R"("old_port":1,"new_port":2,"reason":"failed","seq":42}]})")));
    });
    const Outcome run = Mrctl({"-s", daemon.path(), "path", "events", "3"});
    EXPECT_EQ(run.status, kExitOk) << run.err;
    EXPECT_EQ(run.out,
              "time_s 1 conn 3 path 0 state active -> failed reason timeout\n"
              "time_s 1 conn 3 path 0 rotation 1 -> 2 reason failed\n");
  }
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].params.Dump(), R"({"conn":3,"after":41})");
}

// A page that fails fails the command: no partial listing is printed.
TEST(MrctlRun, AFailedPageFailsTheWholeListing) {
  FakeDaemon daemon([](int fd) {
    FakeDaemon::AnswerOne(fd, J(R"({"connections":[{"id":3}],"next":3})"));
    FakeDaemon::AnswerOne(fd, Json(), absl::InvalidArgumentError("limit 0 is not in 1..10000"));
  });
  const Outcome run = Mrctl({"-j", "-s", daemon.path(), "conn", "show"});
  EXPECT_EQ(run.status, kExitFailed);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err, "Error: limit 0 is not in 1..10000\n");
}

// A daemon that answers a page with the cursor it was given would be asked forever.
TEST(MrctlRun, ACursorThatDoesNotMoveIsAnError) {
  FakeDaemon daemon([](int fd) {
    FakeDaemon::AnswerOne(fd, J(R"({"connections":[{"id":3}],"next":3})"));
    FakeDaemon::AnswerOne(fd, J(R"({"connections":[],"next":3})"));
  });
  const Outcome run = Mrctl({"-s", daemon.path(), "conn", "show"});
  EXPECT_EQ(run.status, kExitFailed);
  EXPECT_EQ(run.out, "");
  EXPECT_THAT(run.err, HasSubstr("the same `next`"));
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
