#include "lib/api/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace metaroce::api {

void UniqueFd::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

std::vector<UniqueFd> AdoptFds(const std::vector<int>& fds) {
  std::vector<UniqueFd> out;
  out.reserve(fds.size());
  for (int fd : fds) out.emplace_back(fd);
  return out;
}

size_t PageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t RoundUpToPage(size_t bytes) {
  const size_t page = PageBytes();
  return (bytes + page - 1) / page * page;
}

absl::StatusOr<std::shared_ptr<SharedMapping>> SharedMapping::Map(int fd, size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("cannot map 0 bytes");
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mmap of ", bytes, " shared bytes"));
  }
  return std::shared_ptr<SharedMapping>(new SharedMapping(static_cast<std::byte*>(p), bytes));
}

SharedMapping::~SharedMapping() { munmap(base_, bytes_); }

absl::StatusOr<UniqueFd> CreateSealedMemfd(const char* name, size_t bytes) {
  if (bytes == 0 || bytes % PageBytes() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a shared block is a whole number of pages, not ", bytes, " bytes"));
  }
  UniqueFd fd(memfd_create(name, MFD_ALLOW_SEALING | MFD_CLOEXEC));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, "memfd_create");
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("ftruncate of a memfd to ", bytes, " bytes"));
  }
  if (fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return absl::ErrnoToStatus(errno, "sealing a memfd (F_ADD_SEALS)");
  }
  return fd;
}

absl::StatusOr<size_t> FileBytes(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, "fstat");
  if (st.st_size < 0) return absl::InternalError("negative file size");
  return static_cast<size_t>(st.st_size);
}

}  // namespace metaroce::api
