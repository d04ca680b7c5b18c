// Memory shared between metaroced and the applications attached to it (lib/api's attached mode,
// daemon/app_session.h): memfds the daemon creates and seals, their mappings, and the descriptors
// that carry them.
//
// Why the daemon makes every memfd it maps: a process holding a memfd it made can shrink it, and
// the daemon's next access to a page that vanished would raise SIGBUS. CreateSealedMemfd sizes the
// file and seals it (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) before anyone else holds it, so the
// pages the daemon maps stay for as long as its mapping does, whatever the application does with
// its own descriptor or mapping.
//
// Threading: UniqueFd and SharedMapping are plain values (one owner; SharedMapping is shared
// through std::shared_ptr, whose last holder unmaps). Functions are safe from any thread.
// Errors: absl::Status from errno, naming the call and the fix where there is one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace metaroce::api {

// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives the descriptor away (the caller closes it).
  int Release() { return std::exchange(fd_, -1); }
  void Reset();

 private:
  int fd_ = -1;
};

// Owns every descriptor in `fds` (e.g. what a control call received).
std::vector<UniqueFd> AdoptFds(const std::vector<int>& fds);

// The system's page size.
size_t PageBytes();
// `bytes` rounded up to a whole number of pages (0 stays 0).
size_t RoundUpToPage(size_t bytes);

// A MAP_SHARED read-write mapping of [0, bytes) of a file; unmapped by its destructor.
class SharedMapping {
 public:
  // Maps `bytes` bytes of `fd` (which must be at least that long: FileBytes). The mapping stays
  // valid after `fd` is closed.
  static absl::StatusOr<std::shared_ptr<SharedMapping>> Map(int fd, size_t bytes);
  ~SharedMapping();
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  std::byte* data() const { return base_; }
  size_t size() const { return bytes_; }
  std::span<std::byte> bytes() const { return {base_, bytes_}; }

 private:
  SharedMapping(std::byte* base, size_t bytes) : base_(base), bytes_(bytes) {}
  std::byte* base_;
  size_t bytes_;
};

// A new memfd of exactly `bytes` bytes (a multiple of the page size, > 0), sealed against
// shrinking, growing and further sealing, close-on-exec. `name` shows in /proc/PID/fd.
absl::StatusOr<UniqueFd> CreateSealedMemfd(const char* name, size_t bytes);
// st_size of the file behind `fd`.
absl::StatusOr<size_t> FileBytes(int fd);

}  // namespace metaroce::api
