#include "lib/control/protocol.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/control/fake_daemon.h"

namespace metaroce::control {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::FakeDaemon;

// --- error codes -----------------------------------------------------------------------------

TEST(ErrorCode, NamesEveryStatusCodeAndReadsItBack) {
  const std::pair<absl::StatusCode, std::string_view> expected[] = {
      {absl::StatusCode::kOk, "ok"},
      {absl::StatusCode::kCancelled, "cancelled"},
      {absl::StatusCode::kUnknown, "unknown"},
      {absl::StatusCode::kInvalidArgument, "invalid_argument"},
      {absl::StatusCode::kDeadlineExceeded, "deadline_exceeded"},
      {absl::StatusCode::kNotFound, "not_found"},
      {absl::StatusCode::kAlreadyExists, "already_exists"},
      {absl::StatusCode::kPermissionDenied, "permission_denied"},
      {absl::StatusCode::kResourceExhausted, "resource_exhausted"},
      {absl::StatusCode::kFailedPrecondition, "failed_precondition"},
      {absl::StatusCode::kAborted, "aborted"},
      {absl::StatusCode::kOutOfRange, "out_of_range"},
      {absl::StatusCode::kUnimplemented, "unimplemented"},
      {absl::StatusCode::kInternal, "internal"},
      {absl::StatusCode::kUnavailable, "unavailable"},
      {absl::StatusCode::kDataLoss, "data_loss"},
      {absl::StatusCode::kUnauthenticated, "unauthenticated"},
  };
  for (const auto& [code, name] : expected) {
    EXPECT_EQ(ErrorCodeName(code), name);
    EXPECT_EQ(ErrorCodeFromName(name), code) << name;
  }
  EXPECT_EQ(ErrorCodeFromName("no_such_code"), absl::StatusCode::kUnknown);
  EXPECT_EQ(ErrorCodeFromName("NOT_FOUND"), absl::StatusCode::kUnknown);
  EXPECT_EQ(ErrorCodeName(static_cast<absl::StatusCode>(99)), "unknown");
}

// --- requests --------------------------------------------------------------------------------

TEST(Request, SerializesAsOneLine) {
  Request r;
  r.id = 7;
  r.method = "conn.show";
  r.params["id"] = 3;
  EXPECT_EQ(SerializeRequest(r),
            "{\"version\":1,\"id\":7,\"method\":\"conn.show\",\"params\":{\"id\":3}}\n");
  Request empty;
  empty.method = "daemon.show";
  EXPECT_EQ(SerializeRequest(empty),
            "{\"version\":1,\"id\":0,\"method\":\"daemon.show\",\"params\":{}}\n");
}

TEST(Request, ParsesWhatItSerialized) {
  Request r;
  r.id = 18446744073709551615u;
  r.method = "conn.add";
  r.params["peer"] = "198.18.0.6";
  r.params["planes"].Push(0);
  std::string line = SerializeRequest(r);
  line.pop_back();
  uint64_t id = 1;
  absl::StatusOr<Request> back = ParseRequest(line, &id);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->id, r.id);
  EXPECT_EQ(id, r.id);
  EXPECT_EQ(back->method, "conn.add");
  EXPECT_EQ(back->params, r.params);
}

TEST(Request, MissingParamsReadAsEmptyObject) {
  absl::StatusOr<Request> r = ParseRequest(R"({"version":1,"id":2,"method":"daemon.show"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->params.is_object());
  EXPECT_EQ(r->params.size(), 0u);
}

struct BadRequest {
  std::string line;
  std::string message;  // a substring of the refusal
  uint64_t id;          // what id_out must hold
};

TEST(Request, RefusesWithAReasonAndKeepsTheIdWhenReadable) {
  const BadRequest cases[] = {
      {R"({"version":2,"id":5,"method":"daemon.show"})",
       "protocol version 2 is not spoken here (versions spoken: 1)", 5},
      {R"({"version":"1","id":5,"method":"daemon.show"})",
       "protocol version \"1\" is not spoken here", 5},
      {R"({"id":5,"method":"daemon.show"})",
       "request has no \"version\"; metaroced and its clients speak protocol version 1", 5},
      {R"({"version":1,"method":"daemon.show"})", "request has no \"id\" (an unsigned integer)", 0},
      {R"({"version":1,"id":"7","method":"daemon.show"})",
       "\"id\" must be an unsigned integer, not \"7\"", 0},
      {R"({"version":1,"id":-1,"method":"daemon.show"})",
       "\"id\" must be an unsigned integer, not -1", 0},
      {R"({"version":1,"id":1.5,"method":"daemon.show"})",
       "\"id\" must be an unsigned integer, not 1.5", 0},
      {R"({"version":1,"id":9})", "\"method\" must be a non-empty string such as \"conn.show\"", 9},
      {R"({"version":1,"id":9,"method":""})", "\"method\" must be a non-empty string", 9},
      {R"({"version":1,"id":9,"method":3})", "\"method\" must be a non-empty string", 9},
      {R"({"version":1,"id":9,"method":"conn.show","params":[1]})",
       "\"params\" must be an object, not [1]", 9},
      {R"({"version":1,"id":9,"method":"conn.show","params":null})",
       "\"params\" must be an object, not null", 9},
      {R"({"version":1,"id":9,"method":"conn.show","param":{"id":1}})",
       "unknown key \"param\" in request (expected version, id, method, params)", 9},
      {R"([1,2])", "a request must be a JSON object", 0},
      {R"({"version":1,"id":9,)", "JSON: expected a string key, found end of text at byte 20", 0},
      {"", "JSON: expected a value, found end of text at byte 0", 0},
  };
  for (const BadRequest& c : cases) {
    uint64_t id = 12345;
    absl::StatusOr<Request> r = ParseRequest(c.line, &id);
    ASSERT_FALSE(r.ok()) << c.line;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.line;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.message)) << c.line;
    EXPECT_EQ(id, c.id) << c.line;
  }
  EXPECT_FALSE(ParseRequest("{}").ok());  // id_out may be null
}

// --- responses -------------------------------------------------------------------------------

TEST(Response, SerializesResultsAndErrors) {
  Response ok;
  ok.id = 7;
  ok.result["links"] = Json::MakeArray();
  EXPECT_EQ(SerializeResponse(ok), "{\"version\":1,\"id\":7,\"result\":{\"links\":[]}}\n");

  Response error;
  error.id = 7;
  error.status = absl::NotFoundError("no connection 3");
  EXPECT_EQ(SerializeResponse(error),
            "{\"version\":1,\"id\":7,\"error\":{\"code\":\"not_found\",\"message\":\"no "
            "connection 3\"}}\n");

  Response multi_line;
  multi_line.status = absl::InternalError("two\nlines");
  const std::string line = SerializeResponse(multi_line);
  EXPECT_EQ(line.find('\n'), line.size() - 1);
}

TEST(Response, ParsesWhatItSerialized) {
  Response ok;
  ok.id = 3;
  ok.result["conn"]["id"] = 4;
  std::string line = SerializeResponse(ok);
  line.pop_back();
  absl::StatusOr<Response> back = ParseResponse(line);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->id, 3u);
  EXPECT_TRUE(back->status.ok());
  EXPECT_EQ(back->result, ok.result);

  Response error;
  error.id = 4;
  error.status = absl::ResourceExhaustedError("max_connections (16) reached");
  line = SerializeResponse(error);
  line.pop_back();
  back = ParseResponse(line);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->id, 4u);
  EXPECT_EQ(back->status, error.status);
}

TEST(Response, UnknownErrorCodesReadAsUnknownAndExtraKeysAreIgnored) {
  absl::StatusOr<Response> r = ParseResponse(
      R"({"version":1,"id":1,"error":{"code":"on_fire","message":"m"},"trace":"x"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, absl::UnknownError("m"));
}

TEST(Response, RefusesMalformedResponses) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"version":1,"id":1})", "exactly one of \"result\" and \"error\""},
      {R"({"version":1,"id":1,"result":{},"error":{"code":"internal","message":"m"}})",
       "exactly one of \"result\" and \"error\""},
      {R"({"version":1,"id":1,"result":[]})", "\"result\" must be an object, not []"},
      {R"({"version":1,"id":1,"error":"bad"})", "\"error\" must be an object"},
      {R"({"version":1,"id":1,"error":{"code":"internal"}})", "a string \"message\""},
      {R"({"version":1,"id":1,"error":{"code":"ok","message":"m"}})", "code \"ok\""},
      {R"({"version":2,"id":1,"result":{}})", "protocol version 2 is not spoken here"},
      {R"({"version":1,"result":{}})", "response has no \"id\""},
      {R"("text")", "a response must be a JSON object"},
  };
  for (const auto& [line, message] : cases) {
    absl::StatusOr<Response> r = ParseResponse(line);
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(message)) << line;
  }
}

TEST(Response, AResultOverTheLineLimitBecomesResourceExhausted) {
  Response big;
  big.id = 9;
  big.result["blob"] = std::string(kMaxMessageBytes, 'x');
  const std::string line = SerializeResponse(big);
  EXPECT_LE(line.size(), kMaxMessageBytes);
  absl::StatusOr<Response> back = ParseResponse(line.substr(0, line.size() - 1));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->id, 9u);
  EXPECT_EQ(back->status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(back->status.message()), HasSubstr("over the protocol's limit"));
}

// --- LineBuffer ------------------------------------------------------------------------------

absl::Status Append(LineBuffer& b, std::string_view s) {
  return b.Append(std::span<const char>(s.data(), s.size()));
}

TEST(LineBuffer, ReassemblesLinesSplitAcrossAppends) {
  LineBuffer b;
  ASSERT_TRUE(Append(b, "{\"a\"").ok());
  EXPECT_EQ(b.NextLine(), std::nullopt);
  ASSERT_TRUE(Append(b, ":1}").ok());
  EXPECT_EQ(b.NextLine(), std::nullopt);
  ASSERT_TRUE(Append(b, "\n{").ok());
  EXPECT_EQ(b.NextLine(), "{\"a\":1}");
  EXPECT_EQ(b.NextLine(), std::nullopt);
  ASSERT_TRUE(Append(b, "}\n").ok());
  EXPECT_EQ(b.NextLine(), "{}");
}

TEST(LineBuffer, SplitsSeveralLinesOfOneAppendAndKeepsCarriageReturns) {
  LineBuffer b;
  ASSERT_TRUE(Append(b, "one\ntwo\r\n\nthree\npart").ok());
  EXPECT_EQ(b.NextLine(), "one");
  EXPECT_EQ(b.NextLine(), "two\r");
  EXPECT_EQ(b.NextLine(), "");
  EXPECT_EQ(b.NextLine(), "three");
  EXPECT_EQ(b.NextLine(), std::nullopt);
  ASSERT_TRUE(Append(b, "ial\n").ok());
  EXPECT_EQ(b.NextLine(), "partial");
}

TEST(LineBuffer, LimitCountsTheNewline) {
  LineBuffer b(8);
  ASSERT_TRUE(Append(b, "1234567").ok());  // 7 + newline = 8: still possible
  ASSERT_TRUE(Append(b, "\n").ok());
  EXPECT_EQ(b.NextLine(), "1234567");

  LineBuffer partial(8);
  absl::Status st = Append(partial, "12345678");  // can no longer end within 8
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()), HasSubstr("line longer than 8 bytes"));
}

TEST(LineBuffer, OverLongLineIsRefusedButEarlierLinesSurvive) {
  LineBuffer b(8);
  absl::Status st = Append(b, "ok\n123456789\nlater\n");
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(b.NextLine(), "ok");
  EXPECT_EQ(b.NextLine(), std::nullopt);

  LineBuffer growing(16);
  ASSERT_TRUE(Append(growing, "0123456789").ok());
  EXPECT_EQ(Append(growing, "abcdef").code(), absl::StatusCode::kResourceExhausted);
}

TEST(LineBuffer, DefaultLimitIsTheProtocols) {
  LineBuffer b;
  const std::string max(kMaxMessageBytes - 1, 'x');
  ASSERT_TRUE(Append(b, max).ok());
  ASSERT_TRUE(Append(b, "\n").ok());
  EXPECT_EQ(b.NextLine()->size(), kMaxMessageBytes - 1);
  EXPECT_EQ(Append(b, std::string(kMaxMessageBytes, 'y')).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(LineBuffer, ManyLinesInOddChunksComeOutIntact) {
  std::string stream;
  for (int i = 0; i < 20000; ++i) stream += "line " + std::to_string(i) + std::string(i % 97, '.') + "\n";
  LineBuffer b(256);
  int next = 0;
  for (size_t at = 0; at < stream.size();) {
    const size_t n = std::min<size_t>(1 + (at * 7919) % 5000, stream.size() - at);
    ASSERT_TRUE(Append(b, std::string_view(stream).substr(at, n)).ok());
    at += n;
    while (std::optional<std::string> line = b.NextLine()) {
      ASSERT_EQ(*line, "line " + std::to_string(next) + std::string(next % 97, '.'));
      ++next;
    }
  }
  EXPECT_EQ(next, 20000);
}

// --- Client against a real socket ------------------------------------------------------------

Json Result(std::string_view key, Json value) {
  Json j = Json::MakeObject();
  j[key] = std::move(value);
  return j;
}

TEST(Client, CallsAndReceivesTheResult) {
  std::optional<Request> seen;
  {
    FakeDaemon daemon([&](int fd) {
      seen = FakeDaemon::AnswerOne(fd, Result("connections", Json::MakeArray()));
      seen = FakeDaemon::AnswerOne(fd, Result("second", true));
    });
    absl::StatusOr<Client> client = Client::Connect(daemon.path());
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_GE(client->fd(), 0);
    Json params;
    params["id"] = 3;
    absl::StatusOr<Json> result = client->Call("conn.show", params);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->Dump(), R"({"connections":[]})");
    result = client->Call("daemon.show");
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->Dump(), R"({"second":true})");
  }
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->method, "daemon.show");
  EXPECT_EQ(seen->id, 2u);  // ids count up from 1
}

TEST(Client, SendsParamsAsGiven) {
  std::optional<Request> seen;
  {
    FakeDaemon daemon([&](int fd) { seen = FakeDaemon::AnswerOne(fd, Json::MakeObject()); });
    absl::StatusOr<Client> client = Client::Connect(daemon.path());
    ASSERT_TRUE(client.ok()) << client.status();
    Json params;
    params["peer"] = "198.18.0.6";
    params["paths"] = 4;
    ASSERT_TRUE(client->Call("conn.add", params).ok());
  }
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->id, 1u);
  EXPECT_EQ(seen->params.Dump(), R"({"peer":"198.18.0.6","paths":4})");
}

TEST(Client, DaemonErrorsBecomeStatusesOfTheirCode) {
  FakeDaemon daemon([](int fd) {
    FakeDaemon::AnswerOne(fd, Json(), absl::NotFoundError("no connection 3"));
    FakeDaemon::AnswerOne(fd, Json(), absl::ResourceExhaustedError("max_paths is 64"));
  });
  absl::StatusOr<Client> client = Client::Connect(daemon.path());
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ(client->Call("conn.show").status(), absl::NotFoundError("no connection 3"));
  EXPECT_EQ(client->Call("conn.add").status(), absl::ResourceExhaustedError("max_paths is 64"));
}

TEST(Client, SkipsAnswersToOtherRequests) {
  FakeDaemon daemon([](int fd) {
    std::optional<std::string> line = FakeDaemon::ReadLine(fd);
    FakeDaemon::WriteAll(fd, "{\"version\":1,\"id\":999,\"result\":{\"stale\":true}}\n");
    absl::StatusOr<Request> r = ParseRequest(*line);
    FakeDaemon::WriteAll(fd, "{\"version\":1,\"id\":" + std::to_string(r->id) +
                                 ",\"result\":{\"fresh\":true}}\n");
  });
  absl::StatusOr<Client> client = Client::Connect(daemon.path());
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<Json> result = client->Call("daemon.show");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->Dump(), R"({"fresh":true})");
}

// The daemon refuses a peer before reading anything: one error line with id 0, then close.
TEST(Client, ReportsTheDaemonsRefusalOfTheConnection) {
  FakeDaemon daemon([](int fd) {
    FakeDaemon::WriteAll(fd, "{\"version\":1,\"id\":0,\"error\":{\"code\":\"permission_denied\","
                             "\"message\":\"uid 1000 may not use metaroced\"}}\n");
  });
  absl::StatusOr<Client> client = Client::Connect(daemon.path());
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<Json> result = client->Call("daemon.show");
  EXPECT_EQ(result.status(), absl::PermissionDeniedError("uid 1000 may not use metaroced"));
}

TEST(Client, EndOfStreamIsUnavailable) {
  FakeDaemon daemon([](int fd) { FakeDaemon::ReadLine(fd); });
  absl::StatusOr<Client> client = Client::Connect(daemon.path());
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<Json> result = client->Call("daemon.show");
  EXPECT_EQ(result.status(), absl::UnavailableError("metaroced closed the connection"));
}

TEST(Client, GivesUpAfterTheTimeout) {
  FakeDaemon daemon([](int fd) { FakeDaemon::WaitForEof(fd); });
  {
    absl::StatusOr<Client> client = Client::Connect(daemon.path(), absl::Milliseconds(200));
    ASSERT_TRUE(client.ok()) << client.status();
    const absl::Time start = absl::Now();
    absl::StatusOr<Json> result = client->Call("conn.show");
    EXPECT_EQ(result.status(),
              absl::DeadlineExceededError("metaroced did not answer conn.show within 200ms"));
    EXPECT_GE(absl::Now() - start, absl::Milliseconds(190));
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  }
}

TEST(Client, RefusesAMalformedOrOverLongResponse) {
  FakeDaemon daemon([](int fd) {
    FakeDaemon::ReadLine(fd);
    FakeDaemon::WriteAll(fd, "{\"version\":1,\"id\":1,\"result\":[]}\n");
    FakeDaemon::ReadLine(fd);
    FakeDaemon::WriteAll(fd, std::string(kMaxMessageBytes + 10, 'x'));
    FakeDaemon::WaitForEof(fd);
  });
  {
    absl::StatusOr<Client> client = Client::Connect(daemon.path());
    ASSERT_TRUE(client.ok()) << client.status();
    absl::StatusOr<Json> result = client->Call("daemon.show");
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
    EXPECT_THAT(std::string(result.status().message()),
                StartsWith("metaroced sent a malformed response to daemon.show: "));
    result = client->Call("daemon.show");
    EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("line longer than 1048576"));
  }
}

TEST(Client, RefusesParamsThatAreNotAnObject) {
  FakeDaemon daemon([](int fd) { FakeDaemon::WaitForEof(fd); });
  {
    absl::StatusOr<Client> client = Client::Connect(daemon.path());
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_EQ(client->Call("conn.show", Json(3)).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(client->Call("conn.show", Json::MakeArray()).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

// Server side of CallWithFds: receives the line with its SCM_RIGHTS descriptors.
struct Received {
  std::string line;
  std::vector<int> fds;
};

Received ReceiveWithFds(int fd) {
  Received out;
  while (out.line.empty() || out.line.back() != '\n') {
    char data[4096];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
    iovec iov{data, sizeof data};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0) break;
    out.line.append(data, static_cast<size_t>(n));
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        out.fds.push_back(received);
      }
    }
  }
  return out;
}

TEST(Client, CallWithFdsDeliversUsableDescriptors) {
  const int memfd = memfd_create("mrctl-test", MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  const std::string content = "registered memory";
  ASSERT_EQ(pwrite(memfd, content.data(), content.size(), 0),
            static_cast<ssize_t>(content.size()));

  std::string read_back;
  size_t fds_received = 0;
  auto serve = [&](int fd) {
    Received r = ReceiveWithFds(fd);
    fds_received = r.fds.size();
    if (!r.fds.empty()) {
      char buf[64] = {};
      const ssize_t n = pread(r.fds[0], buf, sizeof buf, 0);
      if (n > 0) read_back.assign(buf, static_cast<size_t>(n));
    }
    for (int f : r.fds) close(f);
    r.line.pop_back();
    absl::StatusOr<Request> request = ParseRequest(r.line);
    Response response;
    response.id = request.ok() ? request->id : 0;
    response.result["fds"] = fds_received;
    FakeDaemon::WriteAll(fd, SerializeResponse(response));
  };
  {
    FakeDaemon daemon(serve);
    absl::StatusOr<Client> client = Client::Connect(daemon.path());
    ASSERT_TRUE(client.ok()) << client.status();
    const int fds[] = {memfd, memfd};
    absl::StatusOr<Json> result =
        client->CallWithFds("mr.register", Result("length", 17), std::span<const int>(fds));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->Dump(), R"({"fds":2})");
  }
  EXPECT_EQ(fds_received, 2u);
  EXPECT_EQ(read_back, content);
  char buf[8] = {};
  EXPECT_EQ(pread(memfd, buf, 4, 0), 4);  // the caller still owns its descriptor
  close(memfd);
}

TEST(Client, ConnectToAMissingSocketSaysIsMetarocedRunning) {
  const std::string path = "/tmp/mrctl-test-no-such-dir/metaroced.sock";
  absl::StatusOr<Client> client = Client::Connect(path, absl::Milliseconds(100));
  EXPECT_EQ(client.status(),
            absl::UnavailableError("cannot reach metaroced at " + path +
                                   ": No such file or directory (is metaroced running?)"));
}

TEST(Client, ConnectToASocketNobodyListensOnIsUnavailable) {
  char dir_template[] = "/tmp/mrctl-test-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string path = dir + "/dead.sock";
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  absl::StatusOr<Client> client = Client::Connect(path, absl::Milliseconds(100));
  EXPECT_EQ(client.status(),
            absl::UnavailableError("cannot reach metaroced at " + path +
                                   ": Connection refused (is metaroced running?)"));
  close(fd);
  unlink(path.c_str());
  rmdir(dir.c_str());
}

TEST(Client, ConnectRefusedByTheSocketsModeIsPermissionDenied) {
  if (geteuid() == 0) GTEST_SKIP() << "root is never refused by a socket's mode";
  FakeDaemon daemon([](int) {});
  ASSERT_EQ(chmod(daemon.path().c_str(), 0), 0);
  absl::StatusOr<Client> client = Client::Connect(daemon.path(), absl::Milliseconds(100));
  EXPECT_EQ(client.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(client.status().message()),
              HasSubstr("run as root or as a member of the socket's group"));
  // Let the daemon's thread finish accepting.
  chmod(daemon.path().c_str(), 0600);
  absl::StatusOr<Client> unblock = Client::Connect(daemon.path());
}

TEST(Client, RefusesAnImpossibleSocketPath) {
  EXPECT_EQ(Client::Connect(std::string(200, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Client::Connect("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Client, MovedFromClientRefusesCalls) {
  FakeDaemon daemon([](int fd) { FakeDaemon::AnswerOne(fd, Result("ok", true)); });
  absl::StatusOr<Client> client = Client::Connect(daemon.path());
  ASSERT_TRUE(client.ok()) << client.status();
  Client moved = *std::move(client);
  EXPECT_EQ(client->Call("daemon.show").status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<Json> result = moved.Call("daemon.show");
  ASSERT_TRUE(result.ok()) << result.status();
}

}  // namespace
}  // namespace metaroce::control
