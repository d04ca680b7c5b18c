// mrctl's command line: every command's translation to a method and its parameters, the
// options, help, and every kind of bad usage with its message (tools/ctl/command.h).
#include "tools/ctl/command.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaroce::ctl {
namespace {

using ::testing::HasSubstr;

constexpr std::string_view kSocket = "/run/metaroce/metaroced.sock";

absl::StatusOr<Invocation> Parse(const std::vector<std::string>& args) {
  return ParseCommandLine(args, kSocket);
}

struct Translation {
  std::vector<std::string> args;
  std::string method;
  std::string params;  // compact JSON
};

TEST(MrctlCommand, TranslatesEveryCommandToItsMethod) {
  const Translation cases[] = {
      {{"link", "show"}, "link.show", "{}"},
      {{"link", "show", "pl0"}, "link.show", R"({"name":"pl0"})"},
      {{"link", "show", "dev", "pl0"}, "link.show", R"({"name":"pl0"})"},
      {{"conn", "add", "198.18.0.6"}, "conn.add", R"({"peer":"198.18.0.6"})"},
      {{"conn", "add", "198.18.0.6:4792", "paths", "4", "planes", "0,1", "profile", "gbn"},
       "conn.add", R"({"peer":"198.18.0.6:4792","paths":4,"planes":[0,1],"profile":"gbn"})"},
      {{"conn", "add", "profile", "reorder", "fd00::6", "planes", "1"}, "conn.add",
       R"({"profile":"reorder","peer":"fd00::6","planes":[1]})"},
      {{"conn", "add", "198.18.0.6", "profile", "metaroce"}, "conn.add",
       R"({"peer":"198.18.0.6","profile":"metaroce"})"},
      {{"conn", "del", "3"}, "conn.del", R"({"id":3})"},
      {{"conn", "delete", "3"}, "conn.del", R"({"id":3})"},
      {{"conn", "show"}, "conn.show", "{}"},
      {{"conn", "show", "3"}, "conn.show", R"({"id":3})"},
      {{"conn", "show", "peer", "198.18.0.6"}, "conn.show", R"({"peer":"198.18.0.6"})"},
      {{"conn", "show", "3", "peer", "198.18.0.6"}, "conn.show",
       R"({"id":3,"peer":"198.18.0.6"})"},
      {{"path", "show", "3"}, "path.show", R"({"conn":3})"},
      {{"path", "show", "3", "7"}, "path.show", R"({"conn":3,"path":7})"},
      {{"path", "rotate", "3", "7"}, "path.rotate", R"({"conn":3,"path":7})"},
      {{"path", "events"}, "path.events", "{}"},
      {{"path", "events", "3"}, "path.events", R"({"conn":3})"},
      {{"stat", "show"}, "stat.show", "{}"},
      {{"stat", "show", "pl1"}, "stat.show", R"({"name":"pl1"})"},
      {{"stat", "show", "dev", "pl1"}, "stat.show", R"({"name":"pl1"})"},
      {{"stat", "show", "link", "pl1"}, "stat.show", R"({"name":"pl1"})"},
      {{"daemon", "show"}, "daemon.show", "{}"},
      {{"conn", "del", "18446744073709551615"}, "conn.del", R"({"id":18446744073709551615})"},
  };
  for (const Translation& c : cases) {
    absl::StatusOr<Invocation> inv = Parse(c.args);
    ASSERT_TRUE(inv.ok()) << ::testing::PrintToString(c.args) << ": " << inv.status();
    EXPECT_EQ(inv->action, Invocation::Action::kCall);
    EXPECT_EQ(inv->method, c.method) << ::testing::PrintToString(c.args);
    EXPECT_EQ(inv->params.Dump(), c.params) << ::testing::PrintToString(c.args);
  }
}

TEST(MrctlCommand, AcceptsAbbreviationsAliasesAndADefaultShow) {
  const Translation cases[] = {
      {{"link"}, "link.show", "{}"},
      {{"l"}, "link.show", "{}"},
      {{"l", "s"}, "link.show", "{}"},
      {{"link", "list"}, "link.show", "{}"},
      {{"link", "ls"}, "link.show", "{}"},
      {{"link", "l"}, "link.show", "{}"},
      {{"c", "d", "3"}, "conn.del", R"({"id":3})"},
      {{"co", "a", "h1"}, "conn.add", R"({"peer":"h1"})"},
      {{"conn"}, "conn.show", "{}"},
      {{"conn", "sh", "4"}, "conn.show", R"({"id":4})"},
      {{"p", "r", "1", "2"}, "path.rotate", R"({"conn":1,"path":2})"},
      {{"p", "e"}, "path.events", "{}"},
      {{"path", "s", "1"}, "path.show", R"({"conn":1})"},
      {{"s"}, "stat.show", "{}"},
      {{"st", "sh"}, "stat.show", "{}"},
      {{"statistic", "show", "pl0"}, "stat.show", R"({"name":"pl0"})"},
      {{"d"}, "daemon.show", "{}"},
      {{"daemon"}, "daemon.show", "{}"},
  };
  for (const Translation& c : cases) {
    absl::StatusOr<Invocation> inv = Parse(c.args);
    ASSERT_TRUE(inv.ok()) << ::testing::PrintToString(c.args) << ": " << inv.status();
    EXPECT_EQ(inv->method, c.method) << ::testing::PrintToString(c.args);
    EXPECT_EQ(inv->params.Dump(), c.params) << ::testing::PrintToString(c.args);
  }
}

TEST(MrctlCommand, ReadsOptionsAnywhere) {
  absl::StatusOr<Invocation> inv = Parse({"conn", "show"});
  ASSERT_TRUE(inv.ok());
  EXPECT_FALSE(inv->options.json);
  EXPECT_FALSE(inv->options.pretty);
  EXPECT_FALSE(inv->options.details);
  EXPECT_EQ(inv->options.socket_path, kSocket);

  inv = Parse({"-j", "conn", "show"});
  ASSERT_TRUE(inv.ok());
  EXPECT_TRUE(inv->options.json);
  EXPECT_FALSE(inv->options.pretty);

  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"-j", "-p", "conn", "show"},
                                             {"-p", "conn", "show"},
                                             {"-jp", "conn", "show"},
                                             {"--json", "--pretty", "conn", "show"},
                                             {"conn", "show", "-j", "-p"}}) {
    inv = Parse(args);
    ASSERT_TRUE(inv.ok()) << ::testing::PrintToString(args);
    EXPECT_TRUE(inv->options.json) << ::testing::PrintToString(args);
    EXPECT_TRUE(inv->options.pretty) << ::testing::PrintToString(args);
    EXPECT_EQ(inv->method, "conn.show");
  }

  inv = Parse({"-s", "/tmp/other.sock", "-d", "conn", "show"});
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->options.socket_path, "/tmp/other.sock");
  EXPECT_TRUE(inv->options.details);
  inv = Parse({"conn", "show", "--socket", "/tmp/a.sock"});
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->options.socket_path, "/tmp/a.sock");
  inv = Parse({"--socket=/tmp/b.sock", "--details", "conn", "show"});
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->options.socket_path, "/tmp/b.sock");
  EXPECT_TRUE(inv->options.details);

  inv = ParseCommandLine({"conn", "show"}, "/tmp/from-env.sock");
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->options.socket_path, "/tmp/from-env.sock");
}

TEST(MrctlCommand, HelpAndVersion) {
  struct HelpCase {
    std::vector<std::string> args;
    std::string object;
  };
  const HelpCase cases[] = {
      {{"help"}, ""},         {{"h"}, ""},
      {{"-h"}, ""},           {{"--help"}, ""},
      {{"conn", "help"}, "conn"},
      {{"conn", "-h"}, "conn"},
      {{"help", "conn"}, "conn"},
      {{"help", "p"}, "path"},
      {{"conn", "add", "help"}, "conn"},
      {{"path", "rotate", "help"}, "path"},
      {{"-j", "stat", "help"}, "stat"},
      {{"daemon", "h"}, "daemon"},
      {{"-h", "conn", "del", "x"}, "conn"},
  };
  for (const HelpCase& c : cases) {
    absl::StatusOr<Invocation> inv = Parse(c.args);
    ASSERT_TRUE(inv.ok()) << ::testing::PrintToString(c.args) << ": " << inv.status();
    EXPECT_EQ(inv->action, Invocation::Action::kHelp) << ::testing::PrintToString(c.args);
    EXPECT_EQ(inv->help_object, c.object) << ::testing::PrintToString(c.args);
  }
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"-V"}, {"--version"}, {"-V", "conn", "show"}}) {
    absl::StatusOr<Invocation> inv = Parse(args);
    ASSERT_TRUE(inv.ok()) << ::testing::PrintToString(args);
    EXPECT_EQ(inv->action, Invocation::Action::kVersion);
  }
}

struct BadUsage {
  std::vector<std::string> args;
  std::string message;
};

TEST(MrctlCommand, RefusesBadUsageWithOneLine) {
  const BadUsage cases[] = {
      {{}, "missing OBJECT (expected link, conn, path, stat, daemon or help)"},
      {{"foo"}, "unknown object \"foo\" (expected link, conn, path, stat, daemon or help)"},
      {{"x", "show"}, "unknown object \"x\" (expected link, conn, path, stat, daemon or help)"},
      {{"help", "foo"}, "unknown object \"foo\" (expected link, conn, path, stat, daemon or help)"},
      {{"conn", "foo"}, "unknown command \"foo\" for conn (expected add, del, show or help)"},
      {{"path", "add"}, "unknown command \"add\" for path (expected show, rotate, events or help)"},
      {{"daemon", "stop"}, "unknown command \"stop\" for daemon (expected show or help)"},
      {{"link", "set"}, "unknown command \"set\" for link (expected show or help)"},
      {{"conn", "del"}, "conn del needs ID"},
      {{"conn", "del", "abc"}, "ID must be an unsigned integer, not \"abc\""},
      {{"conn", "del", "3x"}, "ID must be an unsigned integer, not \"3x\""},
      {{"conn", "del", "99999999999999999999"},
       "ID must be an unsigned integer, not \"99999999999999999999\""},
      {{"conn", "del", "-1"}, "unknown option \"-1\""},
      {{"conn", "del", "3", "4"}, "unexpected argument \"4\" for conn del"},
      {{"conn", "add"}, "conn add needs PEER"},
      {{"conn", "add", "paths", "4"}, "conn add needs PEER"},
      {{"conn", "add", "h1", "pahts", "4"},
       "unknown keyword \"pahts\" for conn add (expected paths, planes or profile)"},
      {{"conn", "add", "h1", "h2"},
       "unknown keyword \"h2\" for conn add (expected paths, planes or profile)"},
      {{"conn", "add", "h1", "paths", "4", "paths", "5"}, "duplicate keyword \"paths\""},
      {{"conn", "add", "h1", "paths"}, "keyword \"paths\" needs a value"},
      {{"conn", "add", "h1", "paths", "x"}, "paths must be an unsigned integer, not \"x\""},
      {{"conn", "add", "h1", "paths", "0"}, "paths must be at least 1, not \"0\""},
      {{"conn", "add", "h1", "planes", "0,,1"},
       "planes must be plane numbers separated by commas (e.g. 0,1), not \"0,,1\""},
      {{"conn", "add", "h1", "planes", "a"},
       "planes must be plane numbers separated by commas (e.g. 0,1), not \"a\""},
      {{"conn", "add", "h1", "profile", "tcp"},
       "profile must be metaroce, gbn or reorder, not \"tcp\""},
      {{"conn", "add", ""}, "PEER must not be empty"},
      {{"conn", "show", "pear", "h1"}, "unknown keyword \"pear\" for conn show (expected peer)"},
      {{"conn", "show", "3", "4"}, "unexpected argument \"4\" for conn show"},
      {{"conn", "show", "peer", "a", "peer", "b"}, "duplicate keyword \"peer\""},
      {{"conn", "show", "peer"}, "keyword \"peer\" needs a value"},
      {{"path", "show"}, "path show needs CONN"},
      {{"path", "show", "x"}, "CONN must be an unsigned integer, not \"x\""},
      {{"path", "show", "1", "y"}, "PATH must be an unsigned integer, not \"y\""},
      {{"path", "show", "1", "2", "3"}, "unexpected argument \"3\" for path show"},
      {{"path", "rotate"}, "path rotate needs CONN and PATH"},
      {{"path", "rotate", "3"}, "path rotate needs PATH"},
      {{"path", "events", "3", "4"}, "unexpected argument \"4\" for path events"},
      {{"link", "show", "pl0", "dev", "pl1"}, "NAME given twice (as \"dev\" too)"},
      {{"link", "show", "dev", "pl0", "dev", "pl1"}, "duplicate keyword \"dev\""},
      {{"link", "show", "dev", "pl0", "pl1"}, "unknown keyword \"pl1\" for link show (expected dev)"},
      {{"stat", "show", "dev", "pl0", "link", "pl1"}, "NAME given twice (as \"link\" too)"},
      {{"daemon", "show", "x"}, "unexpected argument \"x\" for daemon show"},
      {{"-x", "conn"}, "unknown option \"-x\""},
      {{"-jx", "conn"}, "unknown option \"-jx\""},
      {{"--foo", "conn"}, "unknown option \"--foo\""},
      {{"conn", "-s"}, "option -s needs a PATH"},
      {{"--socket"}, "option --socket needs a PATH"},
      {{"--socket=", "conn"}, "the socket PATH must not be empty"},
  };
  for (const BadUsage& c : cases) {
    absl::StatusOr<Invocation> inv = Parse(c.args);
    ASSERT_FALSE(inv.ok()) << ::testing::PrintToString(c.args);
    EXPECT_EQ(inv.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(inv.status().message(), c.message) << ::testing::PrintToString(c.args);
  }
}

TEST(MrctlCommand, UsageListsEveryCommand) {
  const std::string usage = Usage();
  for (const char* line : {
           "mrctl link show [ [dev] NAME ]",
           "mrctl conn add PEER [ paths N ] [ planes P[,P...] ] [ profile { metaroce | gbn | "
           "reorder } ]",
           "mrctl conn del ID",
           "mrctl conn show [ ID ] [ peer ADDR ]",
           "mrctl path show CONN [ PATH ]",
           "mrctl path rotate CONN PATH",
           "mrctl path events [ CONN ]",
           "mrctl stat show [ [dev] NAME ]",
           "mrctl daemon show\n",
           "-s, --socket PATH",
           "/run/metaroce/metaroced.sock",
       }) {
    EXPECT_THAT(usage, HasSubstr(line));
  }
  EXPECT_EQ(ObjectUsage("path"),
            "Usage: mrctl path show CONN [ PATH ]\n"
            "       mrctl path rotate CONN PATH\n"
            "       mrctl path events [ CONN ]\n"
            "       mrctl path help\n");
  EXPECT_EQ(ObjectUsage("daemon"),
            "Usage: mrctl daemon show\n"
            "       mrctl daemon help\n");
}

}  // namespace
}  // namespace metaroce::ctl
