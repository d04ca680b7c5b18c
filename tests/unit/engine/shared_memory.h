// Test support for blocks shared between mappings and processes: a sealed memfd, mappings of it
// with PROT_NONE guard pages around them, and a forked child run under a timeout.
//
// Memfds are sealed against resizing (F_SEAL_SHRINK | F_SEAL_GROW), as the daemon must seal the
// memfds it shares with applications: a process that could shrink a mapped memfd would make
// every access beyond the new end SIGBUS in the other process.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <utility>

namespace metaroce::engine::testing {

inline size_t PageBytes() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// A memfd of `bytes` bytes, zero-filled, sealed against shrinking and growing. fd() < 0 on error.
class SealedMemfd {
 public:
  explicit SealedMemfd(size_t bytes) : bytes_(bytes) {
    fd_ = memfd_create("metaroce-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd_ < 0) return;
    if (ftruncate(fd_, static_cast<off_t>(bytes)) != 0 ||
        fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~SealedMemfd() {
    if (fd_ >= 0) close(fd_);
  }
  SealedMemfd(const SealedMemfd&) = delete;
  SealedMemfd& operator=(const SealedMemfd&) = delete;

  int fd() const { return fd_; }
  size_t bytes() const { return bytes_; }

 private:
  int fd_ = -1;
  size_t bytes_;
};

// A read-write MAP_SHARED mapping of [0, bytes) of `fd` (bytes a multiple of the page size),
// with one PROT_NONE page before and one after it: touching a byte outside the mapping faults.
// data() is null on error.
class GuardedMapping {
 public:
  GuardedMapping(int fd, size_t bytes) : bytes_(bytes) {
    const size_t page = PageBytes();
    void* reserved = mmap(nullptr, bytes + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (reserved == MAP_FAILED) return;
    reserved_ = static_cast<std::byte*>(reserved);
    void* data = mmap(reserved_ + page, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                      fd, 0);
    if (data == MAP_FAILED) return;
    data_ = static_cast<std::byte*>(data);
  }
  ~GuardedMapping() {
    if (reserved_ != nullptr) munmap(reserved_, bytes_ + 2 * PageBytes());
  }
  GuardedMapping(const GuardedMapping&) = delete;
  GuardedMapping& operator=(const GuardedMapping&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return bytes_; }
  // The last `n` bytes of the mapping (n a multiple of 64): a block there ends at the guard page.
  std::byte* Tail(size_t n) const { return data_ + bytes_ - n; }

 private:
  std::byte* reserved_ = nullptr;
  std::byte* data_ = nullptr;
  size_t bytes_;
};

// Runs `child` (returning an exit status) in a forked process and returns its exit status, or
// -1 if it did not exit by itself within `timeout` (it is then killed) or died of a signal. The
// child calls _exit(): no atexit handlers, no gtest teardown, no flush of the parent's buffers.
// `parent` runs in the parent meanwhile (it may be empty).
template <typename Child, typename Parent>
int RunInChild(std::chrono::milliseconds timeout, Child&& child, Parent&& parent) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    alarm(static_cast<unsigned>(timeout.count() / 1000 + 2));  // never outlive a hung parent
    _exit(child());
  }
  parent();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace metaroce::engine::testing
