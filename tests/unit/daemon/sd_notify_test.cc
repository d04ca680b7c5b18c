#include "daemon/sd_notify.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaroce::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A datagram socket playing systemd: bound to `name` (a path, or abstract when it starts '@').
class FakeSystemd {
 public:
  explicit FakeSystemd(const std::string& name) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, name.data(), name.size());
    socklen_t len = offsetof(sockaddr_un, sun_path) + name.size();
    if (name[0] == '@') {
      addr.sun_path[0] = '\0';
    } else {
      ++len;
    }
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), len), 0) << std::strerror(errno);
  }
  ~FakeSystemd() { close(fd_); }
  std::string Receive() {
    char buf[4096];
    const ssize_t n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    return n < 0 ? std::string("(nothing)") : std::string(buf, n);
  }

 private:
  int fd_ = -1;
};

TEST(SdNotify, DisabledWithoutSocketIsANoOp) {
  SdNotifier n{std::string()};
  EXPECT_FALSE(n.enabled());
  EXPECT_TRUE(n.Ready("x").ok());
}

TEST(SdNotify, ReadsNotifySocketFromTheEnvironment) {
  setenv("NOTIFY_SOCKET", "@metaroced-test", 1);
  SdNotifier n;
  EXPECT_TRUE(n.enabled());
  unsetenv("NOTIFY_SOCKET");
  SdNotifier off;
  EXPECT_FALSE(off.enabled());
}

TEST(SdNotify, PathSocket) {
  char tmpl[] = "/tmp/sd_notify_test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/notify";
  {
    FakeSystemd systemd(path);
    SdNotifier n(path);
    ASSERT_TRUE(n.Ready("serving pl0").ok());
    EXPECT_EQ(systemd.Receive(), "READY=1\nSTATUS=serving pl0");
    ASSERT_TRUE(n.Reloading().ok());
    EXPECT_THAT(systemd.Receive(), StartsWith("RELOADING=1\nMONOTONIC_USEC="));
    ASSERT_TRUE(n.Stopping().ok());
    EXPECT_THAT(systemd.Receive(), HasSubstr("STOPPING=1"));
    ASSERT_TRUE(n.SetStatus("hello").ok());
    EXPECT_EQ(systemd.Receive(), "STATUS=hello");
  }
  unlink(path.c_str());
  rmdir(tmpl);
}

TEST(SdNotify, AbstractSocket) {
  const std::string name = "@metaroced-sd-notify-test-" + std::to_string(getpid());
  FakeSystemd systemd(name);
  SdNotifier n(name);
  ASSERT_TRUE(n.Notify("READY=1").ok());
  EXPECT_EQ(systemd.Receive(), "READY=1");
}

TEST(SdNotify, ErrorsAreReturnedNotFatal) {
  EXPECT_FALSE(SdNotifier("relative/path").Notify("READY=1").ok());
  EXPECT_FALSE(SdNotifier("/nonexistent/dir/notify").Notify("READY=1").ok());
}

}  // namespace
}  // namespace metaroce::daemon
