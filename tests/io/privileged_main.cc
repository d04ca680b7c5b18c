// main() of the privileged io tests: exit 77 (meson: skipped) when this machine cannot create
// network namespaces (not root, no iproute2) or, with --needs-af-xdp, has no AF_XDP sockets.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "tests/io/netns_fixture.h"

#ifndef AF_XDP
#define AF_XDP 44
#endif

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  bool needs_af_xdp = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--needs-af-xdp") == 0) needs_af_xdp = true;
  }
  std::string why = metaroce::io::testing::PrivilegedTestsUnavailableReason();
  if (why.empty() && needs_af_xdp) {
    const int fd = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      why = std::string("no AF_XDP sockets: ") + std::strerror(errno);
    } else {
      close(fd);
    }
  }
  if (!why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 77;
  }
  return RUN_ALL_TESTS();
}
