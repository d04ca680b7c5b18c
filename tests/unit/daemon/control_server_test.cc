// A real ControlServer on a socket in a temporary directory, with test handlers, driven by raw
// socket clients (and once by lib/control's Client).
#include "daemon/control_server.h"

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/control/protocol.h"

namespace metaroce::daemon {
namespace {

using control::Json;
using ::testing::HasSubstr;

constexpr int kTimeoutMs = 5000;

// A blocking test client speaking raw lines.
class RawClient {
 public:
  explicit RawClient(const std::string& path) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawClient() {
    if (fd_ >= 0) close(fd_);
  }
  bool connected() const { return connected_; }
  int fd() const { return fd_; }

  // Sends `bytes`, with `fds` attached (SCM_RIGHTS) when given.
  bool Send(const std::string& bytes, const std::vector<int>& fds = {}) {
    size_t off = 0;
    bool first = true;
    while (off < bytes.size()) {
      iovec iov{const_cast<char*>(bytes.data() + off), bytes.size() - off};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      std::vector<char> control;
      if (first && !fds.empty()) {
        control.resize(CMSG_SPACE(sizeof(int) * fds.size()));
        msg.msg_control = control.data();
        msg.msg_controllen = control.size();
        cmsghdr* h = CMSG_FIRSTHDR(&msg);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
        std::memcpy(CMSG_DATA(h), fds.data(), sizeof(int) * fds.size());
      }
      const ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
      first = false;
    }
    return true;
  }

  // The next line (without '\n'), or nullopt at EOF, error or timeout.
  std::optional<std::string> ReadLine(int timeout_ms = kTimeoutMs) {
    while (true) {
      if (size_t nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, timeout_ms) <= 0) return std::nullopt;
      char chunk[65536];
      const ssize_t n = read(fd_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

  // Waits for EOF (the server closed), discarding data; true when it came.
  bool WaitForEof(int timeout_ms = kTimeoutMs) {
    while (true) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, timeout_ms) <= 0) return false;
      char chunk[65536];
      const ssize_t n = read(fd_, chunk, sizeof chunk);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }

  control::Response Call(const std::string& line) {
    EXPECT_TRUE(Send(line + "\n"));
    std::optional<std::string> reply = ReadLine();
    EXPECT_TRUE(reply.has_value()) << "no reply to " << line;
    if (!reply) return {};
    absl::StatusOr<control::Response> r = control::ParseResponse(*reply);
    EXPECT_TRUE(r.ok()) << r.status() << " in " << *reply;
    return r.ok() ? *r : control::Response{};
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

std::string Request(uint64_t id, const std::string& method, const std::string& params = "{}") {
  return absl::StrCat("{\"version\":1,\"id\":", id, ",\"method\":\"", method,
                      "\",\"params\":", params, "}");
}

class ControlServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/control_server_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/run/metaroced.sock";  // the server makes run/
  }
  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    server_.reset();
    unlink(path_.c_str());
    rmdir((dir_ + "/run").c_str());
    rmdir(dir_.c_str());
  }

  ControlServerOptions Options() {
    ControlServerOptions o;
    o.path = path_;
    return o;
  }

  void StartServer(ControlServerOptions o) {
    server_ = std::make_unique<ControlServer>(std::move(o));
    server_->Register("test.echo", [](const Json& params, const ClientInfo&) {
      return absl::StatusOr<Json>(params);
    });
    server_->Register("test.fail", [](const Json&, const ClientInfo&) -> absl::StatusOr<Json> {
      return absl::NotFoundError("no such thing");
    });
    server_->Register("test.who", [](const Json&, const ClientInfo& c) -> absl::StatusOr<Json> {
      Json j = Json::MakeObject();
      j["pid"] = static_cast<int64_t>(c.pid);
      j["uid"] = static_cast<uint64_t>(c.uid);
      j["fds"] = c.fds.size();
      return j;
    });
    // Takes the first descriptor and reads what it holds.
    server_->Register("test.read_fd", [](const Json&, const ClientInfo& c) -> absl::StatusOr<Json> {
      const int fd = c.TakeFd(0);
      if (fd < 0) return absl::InvalidArgumentError("no fd");
      char buf[64] = {};
      const ssize_t n = read(fd, buf, sizeof buf);
      close(fd);
      Json j = Json::MakeObject();
      j["data"] = std::string(buf, n > 0 ? n : 0);
      return j;
    });
    server_->Register("test.big", [](const Json&, const ClientInfo&) -> absl::StatusOr<Json> {
      Json j = Json::MakeObject();
      j["blob"] = std::string(64 * 1024, 'b');
      return j;
    });
    // Waits, on a thread of its own, until the test releases it (a handler waiting on a peer).
    server_->Register(
        "test.slow",
        [this](const Json& params, const ClientInfo&) -> absl::StatusOr<Json> {
          release_.WaitForNotification();
          return params;
        },
        HandlerThread::kOwn);
    absl::Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s;
  }
  void StartServer() { StartServer(Options()); }

  std::string dir_, path_;
  absl::Notification release_;  // lets test.slow return
  std::unique_ptr<ControlServer> server_;
};

TEST_F(ControlServerTest, RequestAndResponse) {
  StartServer();
  RawClient c(path_);
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send(Request(7, "test.echo", R"({"a":1,"b":"x"})") + "\n"));
  EXPECT_EQ(c.ReadLine(), R"({"version":1,"id":7,"result":{"a":1,"b":"x"}})");
}

TEST_F(ControlServerTest, HandlerErrorIsAnErrorResponse) {
  StartServer();
  RawClient c(path_);
  control::Response r = c.Call(Request(3, "test.fail"));
  EXPECT_EQ(r.id, 3u);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status.message(), "no such thing");
}

TEST_F(ControlServerTest, UnknownMethod) {
  StartServer();
  RawClient c(path_);
  control::Response r = c.Call(Request(4, "x.y"));
  EXPECT_EQ(r.id, 4u);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(r.status.message(), "unknown method 'x.y'; see docs/control-protocol.md");
}

TEST_F(ControlServerTest, UnregisteredMethodBecomesUnknown) {
  StartServer();
  server_->Unregister("test.echo");
  RawClient c(path_);
  EXPECT_EQ(c.Call(Request(1, "test.echo")).status.code(), absl::StatusCode::kUnimplemented);
}

TEST_F(ControlServerTest, MalformedJsonKeepsTheConnection) {
  StartServer();
  RawClient c(path_);
  control::Response bad = c.Call("{\"version\":1,\"id\":5,");
  EXPECT_EQ(bad.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(bad.status.message().empty());
  control::Response wrong_version = c.Call(R"({"version":2,"id":6,"method":"test.echo"})");
  EXPECT_EQ(wrong_version.id, 6u);
  EXPECT_EQ(wrong_version.status.code(), absl::StatusCode::kInvalidArgument);
  control::Response good = c.Call(Request(8, "test.echo", R"({"k":true})"));
  EXPECT_TRUE(good.status.ok()) << good.status;
  EXPECT_EQ(good.id, 8u);
}

TEST_F(ControlServerTest, BlankLinesAreIgnored) {
  StartServer();
  RawClient c(path_);
  ASSERT_TRUE(c.Send("\n  \n" + Request(9, "test.echo") + "\n"));
  std::optional<std::string> line = c.ReadLine();
  ASSERT_TRUE(line);
  EXPECT_THAT(*line, HasSubstr("\"id\":9"));
}

TEST_F(ControlServerTest, OverLongLineIsRefusedAndClosed) {
  StartServer();
  RawClient c(path_);
  const std::string huge(control::kMaxMessageBytes + 100, 'x');
  c.Send(huge);  // the server may close before taking all of it
  std::optional<std::string> line = c.ReadLine();
  ASSERT_TRUE(line);
  absl::StatusOr<control::Response> r = control::ParseResponse(*line);
  ASSERT_TRUE(r.ok()) << *line;
  EXPECT_EQ(r->status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(c.WaitForEof());
}

TEST_F(ControlServerTest, SeveralClientsInterleaved) {
  StartServer();
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 5; ++i) {
    clients.push_back(std::make_unique<RawClient>(path_));
    ASSERT_TRUE(clients.back()->connected());
  }
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(clients[i]->Send(Request(100 * i + round, "test.echo",
                                           absl::StrCat("{\"i\":", i, "}")) + "\n"));
    }
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(clients[i]->ReadLine(),
                absl::StrCat("{\"version\":1,\"id\":", 100 * i + round, ",\"result\":{\"i\":", i,
                             "}}"));
    }
  }
}

TEST_F(ControlServerTest, PipelinedRequestsAreAnsweredInOrder) {
  StartServer();
  RawClient c(path_);
  std::string batch;
  for (int i = 1; i <= 20; ++i) batch += Request(i, i % 2 ? "test.echo" : "test.fail") + "\n";
  ASSERT_TRUE(c.Send(batch));
  for (int i = 1; i <= 20; ++i) {
    std::optional<std::string> line = c.ReadLine();
    ASSERT_TRUE(line);
    EXPECT_THAT(*line, HasSubstr(absl::StrCat("\"id\":", i, ",")));
  }
}

// A handler on its own thread (conn.add's kind) holds up only its own client: another client is
// answered meanwhile, and its client's next request, sent behind it, is answered after it.
TEST_F(ControlServerTest, AHandlerOnItsOwnThreadHoldsUpOnlyItsClient) {
  StartServer();
  RawClient waiting(path_), other(path_);
  ASSERT_TRUE(waiting.connected() && other.connected());
  ASSERT_TRUE(waiting.Send(Request(1, "test.slow", R"({"n":1})") + "\n" +
                           Request(2, "test.echo", R"({"n":2})") + "\n"));
  EXPECT_EQ(other.Call(Request(3, "test.echo", R"({"n":3})")).result["n"].AsUint(), 3u);
  EXPECT_EQ(waiting.ReadLine(/*timeout_ms=*/200), std::nullopt);  // nothing before test.slow's
  release_.Notify();
  EXPECT_EQ(waiting.ReadLine(), R"({"version":1,"id":1,"result":{"n":1}})");
  EXPECT_EQ(waiting.ReadLine(), R"({"version":1,"id":2,"result":{"n":2}})");
  EXPECT_EQ(waiting.Call(Request(4, "test.echo", R"({"n":4})")).id, 4u);  // and it goes on
}

TEST_F(ControlServerTest, HandlersOnTheirOwnThreadsAreLimited) {
  ControlServerOptions o = Options();
  o.max_own_thread_requests = 1;
  StartServer(o);
  RawClient first(path_), second(path_);
  ASSERT_TRUE(first.Send(Request(1, "test.slow") + "\n"));
  absl::SleepFor(absl::Milliseconds(100));  // the server has started it
  control::Response refused = second.Call(Request(2, "test.slow"));
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status.message()), HasSubstr("waiting on the network"));
  release_.Notify();
  EXPECT_EQ(first.ReadLine(), R"({"version":1,"id":1,"result":{}})");
  EXPECT_EQ(second.Call(Request(3, "test.slow")).id, 3u);  // room again
}

// A client that sends its request and closes its sending side still gets the answer of a
// handler that takes longer than the linger after close.
TEST_F(ControlServerTest, AHalfClosedClientGetsItsSlowAnswer) {
  StartServer();
  RawClient c(path_);
  ASSERT_TRUE(c.Send(Request(5, "test.slow") + "\n"));
  ASSERT_EQ(shutdown(c.fd(), SHUT_WR), 0);
  absl::SleepFor(absl::Milliseconds(1500));  // longer than the linger (1 s)
  release_.Notify();
  EXPECT_EQ(c.ReadLine(), R"({"version":1,"id":5,"result":{}})");
  EXPECT_TRUE(c.WaitForEof());
}

// Stop() with a handler running waits for it and then closes everything.
TEST_F(ControlServerTest, StopWaitsForAHandlerOnItsOwnThread) {
  StartServer();
  RawClient c(path_);
  ASSERT_TRUE(c.Send(Request(6, "test.slow") + "\n"));
  absl::SleepFor(absl::Milliseconds(100));
  std::thread release([this] {
    absl::SleepFor(absl::Milliseconds(200));
    release_.Notify();
  });
  server_->Stop();
  EXPECT_TRUE(release_.HasBeenNotified());
  release.join();
  EXPECT_TRUE(c.WaitForEof());
}

TEST_F(ControlServerTest, ClientCredentialsReachTheHandler) {
  StartServer();
  RawClient c(path_);
  control::Response r = c.Call(Request(1, "test.who"));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.result.Find("pid")->AsInt(), getpid());
  EXPECT_EQ(r.result.Find("uid")->AsUint(), geteuid());
  EXPECT_EQ(r.result.Find("fds")->AsUint(), 0u);
}

TEST_F(ControlServerTest, FileDescriptorReachesTheHandler) {
  StartServer();
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  ASSERT_EQ(write(p[1], "hello", 5), 5);
  close(p[1]);
  RawClient c(path_);
  ASSERT_TRUE(c.Send(Request(1, "test.read_fd") + "\n", {p[0]}));
  close(p[0]);  // the server holds its own duplicate
  std::optional<std::string> line = c.ReadLine();
  ASSERT_TRUE(line);
  EXPECT_EQ(*line, R"({"version":1,"id":1,"result":{"data":"hello"}})");
}

TEST_F(ControlServerTest, DescriptorsBelongToTheirOwnRequest) {
  StartServer();
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  RawClient c(path_);
  ASSERT_TRUE(c.Send(Request(1, "test.who") + "\n"));
  ASSERT_TRUE(c.ReadLine());
  ASSERT_TRUE(c.Send(Request(2, "test.who") + "\n", {p[0]}));
  std::optional<std::string> line = c.ReadLine();
  ASSERT_TRUE(line);
  EXPECT_THAT(*line, HasSubstr("\"fds\":1"));
  ASSERT_TRUE(c.Send(Request(3, "test.who") + "\n"));
  line = c.ReadLine();
  ASSERT_TRUE(line);
  EXPECT_THAT(*line, HasSubstr("\"fds\":0"));
  close(p[0]);
  close(p[1]);
}

TEST_F(ControlServerTest, DescriptorsTheHandlerDidNotTakeAreClosed) {
  StartServer();
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  RawClient c(path_);
  // Send the write end; test.echo does not take it.
  ASSERT_TRUE(c.Send(Request(1, "test.echo") + "\n", {p[1]}));
  ASSERT_TRUE(c.ReadLine());
  close(p[1]);
  // With the server's copy closed too, the read end sees EOF.
  pollfd pf{p[0], POLLIN, 0};
  ASSERT_EQ(poll(&pf, 1, kTimeoutMs), 1);
  char b;
  EXPECT_EQ(read(p[0], &b, 1), 0);
  close(p[0]);
}

TEST_F(ControlServerTest, LibraryClientInterop) {
  StartServer();
  absl::StatusOr<control::Client> client = control::Client::Connect(path_, absl::Seconds(5));
  ASSERT_TRUE(client.ok()) << client.status();
  Json params = Json::MakeObject();
  params["x"] = 42;
  absl::StatusOr<Json> r = client->Call("test.echo", params);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Find("x")->AsInt(), 42);
  EXPECT_EQ(client->Call("test.fail").status().code(), absl::StatusCode::kNotFound);
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  ASSERT_EQ(write(p[1], "memfd", 5), 5);
  absl::StatusOr<Json> fd_reply =
      client->CallWithFds("test.read_fd", Json::MakeObject(), std::vector<int>{p[0]});
  ASSERT_TRUE(fd_reply.ok()) << fd_reply.status();
  EXPECT_EQ(fd_reply->Find("data")->AsString(), "memfd");
  close(p[0]);
  close(p[1]);
}

// Descriptors a handler gives back travel with its response, and reach lib/control's Client.
TEST_F(ControlServerTest, ReplyDescriptorsReachTheClient) {
  ControlServerOptions o = Options();
  server_ = std::make_unique<ControlServer>(std::move(o));
  server_->Register("test.give", [](const Json& params, const ClientInfo& c) -> absl::StatusOr<Json> {
    for (uint64_t i = 0; i < params.Find("count")->AsUint().value_or(0); ++i) {
      int p[2];
      if (pipe2(p, O_CLOEXEC) != 0) return absl::InternalError("pipe");
      const std::string text = absl::StrCat("pipe ", i);
      if (write(p[1], text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
        return absl::InternalError("write");
      }
      close(p[1]);
      c.reply_fds.push_back(p[0]);
    }
    return Json::MakeObject();
  });
  server_->Register("test.refuse_with_fds",
                    [](const Json&, const ClientInfo& c) -> absl::StatusOr<Json> {
                      c.reply_fds.push_back(dup(0));
                      return absl::FailedPreconditionError("no");
                    });
  ASSERT_TRUE(server_->Start().ok());
  absl::StatusOr<control::Client> client = control::Client::Connect(path_, absl::Seconds(5));
  ASSERT_TRUE(client.ok()) << client.status();
  for (uint64_t count : {1u, 3u, 0u, 2u}) {  // responses with and without descriptors in a row
    Json params = Json::MakeObject();
    params["count"] = count;
    std::vector<int> got;
    absl::StatusOr<Json> r = client->CallWithFds("test.give", params, {}, &got);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(got.size(), count);
    for (uint64_t i = 0; i < count; ++i) {
      char buf[16] = {};
      EXPECT_EQ(read(got[i], buf, sizeof buf), static_cast<ssize_t>(absl::StrCat("pipe ", i).size()));
      EXPECT_EQ(std::string(buf), absl::StrCat("pipe ", i));
      close(got[i]);
    }
  }
  std::vector<int> got;
  EXPECT_EQ(client->CallWithFds("test.refuse_with_fds", Json::MakeObject(), {}, &got).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(got.empty());  // an error response carries none
}

TEST_F(ControlServerTest, EachConnectionHasItsIdAndItsCloseIsReported) {
  server_ = std::make_unique<ControlServer>(Options());
  server_->Register("test.id", [](const Json&, const ClientInfo& c) -> absl::StatusOr<Json> {
    Json j = Json::MakeObject();
    j["id"] = c.client_id;
    return j;
  });
  absl::Mutex mu;
  std::vector<uint64_t> closed;
  server_->OnDisconnect([&](uint64_t id) {
    absl::MutexLock lock(&mu);
    closed.push_back(id);
  });
  ASSERT_TRUE(server_->Start().ok());
  uint64_t first = 0, second = 0;
  {
    RawClient a(path_), b(path_);
    first = *a.Call(Request(1, "test.id")).result.Find("id")->AsUint();
    second = *b.Call(Request(1, "test.id")).result.Find("id")->AsUint();
    EXPECT_EQ(*a.Call(Request(2, "test.id")).result.Find("id")->AsUint(), first);
  }
  EXPECT_NE(first, second);
  for (int i = 0; i < 500; ++i) {
    {
      absl::MutexLock lock(&mu);
      if (closed.size() == 2) break;
    }
    usleep(1000);
  }
  absl::MutexLock lock(&mu);
  EXPECT_THAT(closed, ::testing::UnorderedElementsAre(first, second));
}

TEST_F(ControlServerTest, HalfClosedClientStillGetsItsResponse) {
  StartServer();
  RawClient c(path_);
  ASSERT_TRUE(c.Send(Request(11, "test.echo") + "\n"));
  ASSERT_EQ(shutdown(c.fd(), SHUT_WR), 0);
  std::optional<std::string> line = c.ReadLine();
  ASSERT_TRUE(line);
  EXPECT_THAT(*line, HasSubstr("\"id\":11"));
  EXPECT_TRUE(c.WaitForEof());
}

TEST_F(ControlServerTest, ClientThatDoesNotReadIsDisconnected) {
  ControlServerOptions o = Options();
  o.max_output_bytes = 256 * 1024;
  StartServer(std::move(o));
  RawClient c(path_);
  // 64 responses of 64 KiB: far more than the socket buffers and the output limit hold.
  std::string batch;
  for (int i = 0; i < 64; ++i) batch += Request(i, "test.big") + "\n";
  ASSERT_TRUE(c.Send(batch));
  absl::SleepFor(absl::Milliseconds(300));  // let the server fill up and give up
  size_t responses = 0;
  while (c.ReadLine(2000)) ++responses;
  EXPECT_LT(responses, 64u);
  EXPECT_EQ(server_->client_count(), 0u);
}

TEST_F(ControlServerTest, MaxClients) {
  ControlServerOptions o = Options();
  o.max_clients = 2;
  StartServer(std::move(o));
  RawClient a(path_), b(path_);
  ASSERT_TRUE(a.Call(Request(1, "test.echo")).status.ok());
  ASSERT_TRUE(b.Call(Request(1, "test.echo")).status.ok());
  RawClient third(path_);
  std::optional<std::string> line = third.ReadLine();
  ASSERT_TRUE(line);
  absl::StatusOr<control::Response> r = control::ParseResponse(*line);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r->status.message(), HasSubstr("too many control clients (2)"));
  EXPECT_TRUE(third.WaitForEof());
  EXPECT_TRUE(a.Call(Request(2, "test.echo")).status.ok());  // the others are unaffected
}

TEST_F(ControlServerTest, RefusedPeerGetsOneErrorLineAndIsClosed) {
  ControlServerOptions o = Options();
  PeerPolicy policy;
  policy.allow_root = false;
  policy.daemon_uid = geteuid() + 1;  // not us
  policy.group = 4242424;
  policy.group_name = "metaroce";
  o.policy = policy;
  StartServer(std::move(o));
  RawClient c(path_);
  std::optional<std::string> line = c.ReadLine();
  ASSERT_TRUE(line);
  absl::StatusOr<control::Response> r = control::ParseResponse(*line);
  ASSERT_TRUE(r.ok()) << *line;
  EXPECT_EQ(r->id, 0u);
  EXPECT_EQ(r->status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(r->status.message(), HasSubstr(absl::StrCat("uid ", geteuid(), " is not allowed")));
  EXPECT_TRUE(c.WaitForEof());
}

TEST_F(ControlServerTest, SocketFileModeAndStopUnlinksIt) {
  StartServer();
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  ASSERT_EQ(stat((dir_ + "/run").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  RawClient c(path_);
  ASSERT_TRUE(c.Call(Request(1, "test.echo")).status.ok());
  server_->Stop();
  EXPECT_NE(stat(path_.c_str(), &st), 0);
  EXPECT_TRUE(c.WaitForEof());  // clients are closed
  RawClient late(path_);
  EXPECT_FALSE(late.connected());
  server_->Stop();  // idempotent
}

TEST_F(ControlServerTest, SecondServerOnTheSamePathRefuses) {
  StartServer();
  ControlServer second(Options());
  absl::Status s = second.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("another metaroced is running (" + path_ + ")"));
  second.Stop();
  // The first one's socket survived the refused second one.
  RawClient c(path_);
  EXPECT_TRUE(c.Call(Request(1, "test.echo")).status.ok());
}

TEST_F(ControlServerTest, StaleSocketIsReplaced) {
  ASSERT_EQ(mkdir((dir_ + "/run").c_str(), 0755), 0);
  // A socket file nothing listens on, as a daemon killed with SIGKILL leaves it.
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path_.data(), path_.size());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
  StartServer();
  RawClient c(path_);
  EXPECT_TRUE(c.Call(Request(1, "test.echo")).status.ok());
}

TEST_F(ControlServerTest, SomethingElseAtThePathIsNotTouched) {
  ASSERT_EQ(mkdir((dir_ + "/run").c_str(), 0755), 0);
  { std::FILE* f = std::fopen(path_.c_str(), "w"); std::fclose(f); }
  ControlServer s(Options());
  absl::Status st = s.Start();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("exists and is not a socket"));
  struct stat sb;
  EXPECT_EQ(stat(path_.c_str(), &sb), 0);
}

TEST_F(ControlServerTest, UnknownGroupIsRefusedAtStart) {
  ControlServerOptions o = Options();
  o.group = "no-such-group-metaroce";
  ControlServer s(std::move(o));
  absl::Status st = s.Start();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(st.message(), HasSubstr("groupadd no-such-group-metaroce"));
}

// ---- the pure pieces ----

TEST(CheckPeer, RootAndTheDaemonsUidAreAllowed) {
  PeerPolicy p;
  p.daemon_uid = 0;
  EXPECT_TRUE(CheckPeer({.uid = 0}, p).ok());
  p.daemon_uid = 990;
  EXPECT_TRUE(CheckPeer({.uid = 990}, p).ok());
  EXPECT_TRUE(CheckPeer({.uid = 0}, p).ok());
}

TEST(CheckPeer, GroupMembersByPrimaryOrSupplementaryGroup) {
  PeerPolicy p;
  p.group = 1500;
  p.group_name = "metaroce";
  EXPECT_TRUE(CheckPeer({.uid = 1000, .gid = 1500}, p).ok());
  EXPECT_TRUE(CheckPeer({.uid = 1000, .gid = 1000, .groups = {27, 1500}}, p).ok());
  absl::Status s = CheckPeer({.uid = 1000, .gid = 1000, .groups = {27}}, p);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "uid 1000 is not allowed: root or members of group metaroce only");
}

TEST(CheckPeer, MessagesNameWhoIsAllowed) {
  PeerPolicy p;
  EXPECT_EQ(CheckPeer({.uid = 1000}, p).message(),
            "uid 1000 is not allowed: root only (set socket_group to let a group in)");
  p.daemon_uid = 990;
  EXPECT_EQ(CheckPeer({.uid = 1000}, p).message(),
            "uid 1000 is not allowed: root or uid 990 only (set socket_group to let a group in)");
  p.group = 1500;
  p.group_name = "metaroce";
  EXPECT_EQ(CheckPeer({.uid = 1000}, p).message(),
            "uid 1000 is not allowed: root, uid 990 or members of group metaroce only");
  p.allow_root = false;
  EXPECT_FALSE(CheckPeer({.uid = 0}, p).ok());
}

TEST(ParseStatusGroups, ReadsTheGroupsLine) {
  EXPECT_EQ(ParseStatusGroups("Name:\tx\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 27 1500 \n"
                              "NStgid:\t1\n"),
            (std::vector<gid_t>{4, 27, 1500}));
  EXPECT_TRUE(ParseStatusGroups("Groups:\t\n").empty());
  EXPECT_TRUE(ParseStatusGroups("Name:\tx\n").empty());
}

TEST(ClientInfo, TakeFdOnce) {
  ClientInfo c;
  c.fds = {5, 6};
  EXPECT_EQ(c.TakeFd(1), 6);
  EXPECT_EQ(c.TakeFd(1), -1);
  EXPECT_EQ(c.TakeFd(7), -1);
  EXPECT_EQ(c.fds[0], 5);
}

}  // namespace
}  // namespace metaroce::daemon
