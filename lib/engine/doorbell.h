// How a thread that posted work wakes a worker that may be asleep, in this process or another.
//
// A Doorbell is one flag on its own cache line: the worker raises it before it sleeps and lowers
// it when it wakes; whoever posts work calls RingDoorbell(), which writes the doorbell's wake fd
// only if the flag is up. Awake workers (the common case under load) therefore cost a poster one
// fence and one load, no syscall. The layout is fixed (no pointer, fixed-width fields), so a
// doorbell can live in memory shared with another process (a memfd mapped at any address).
//
// Every worker has its own doorbell and wake eventfd (Worker::Wake rings them). An application
// attached to the daemon gets doorbells of its own (Engine::AddDoorbell): one per worker, placed
// in memory shared with that application, each with one end of a socket pair whose other end
// only the worker holds. The worker raises all of its doorbells when it sleeps and waits on all
// of their fds.
//
// Why no wake-up is lost (the same argument in one process or across two: the atomics are
// lock-free, hence address-free, and a seq_cst fence orders the CPU's accesses whatever mapping
// they go through):
//   worker (Worker::Sleep)                  poster (RingDoorbell)
//   raise every doorbell (store 1)          publish work (a ring's release store of its tail)
//   seq_cst fence                           seq_cst fence
//   look for work in every ring             read the doorbell's flag
//   if none: ppoll() on every wake fd       if raised: write(wake_fd)
// The two fences are totally ordered. If the poster's comes first, the worker's look for work
// sees the work and does not sleep. If the worker's comes first, the poster reads the raised flag
// and writes the fd, which ends the ppoll() (or makes it return at once). A raised flag seen late
// costs one spurious wake-up, never a lost one.
//
// A hostile process sharing a doorbell can write its flag at will: it can make its own posts skip
// the wake-up (it then waits for the worker's next timeout, at most 100 ms) or make them always
// write the fd (one syscall each, as it could anyway, and each costs the worker a loop). It
// cannot delay the wake-ups of other applications (their doorbells and sockets are theirs), nor
// block the worker (the worker's end is its own open file, read with MSG_DONTWAIT), nor keep it
// from sleeping by closing or shutting down its end (the worker stops waiting on a hung-up
// socket). Why not a pipe or an eventfd: writing a pipe whose reader is gone raises SIGPIPE in
// the application (the daemon may exit first); an eventfd is one open file for both sides, so an
// application holding it could read it (stealing other posters' wake-ups) or clear its
// O_NONBLOCK and block the worker's read.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "absl/status/statusor.h"
#include "lib/engine/spsc_ring.h"

namespace metaroce::engine {

struct Doorbell {
  // "MRBELL" and the layout version (1).
  static constexpr uint64_t kMagic = 0x4d52'4245'4c4c'0001;

  alignas(kCacheLineBytes) uint64_t magic = kMagic;
  // Non-zero while the worker sleeps (or is about to).
  std::atomic<uint32_t> sleeping{0};

  // A fresh doorbell in [memory, memory + bytes) (cache-line aligned, at least sizeof(Doorbell)
  // bytes): the daemon's side.
  static absl::StatusOr<Doorbell*> PlaceAt(void* memory, size_t bytes);
  // A doorbell another process placed there: checks alignment, size and magic (the application's
  // side).
  static absl::StatusOr<Doorbell*> AttachAt(void* memory, size_t bytes);
};
static_assert(sizeof(Doorbell) == kCacheLineBytes);
static_assert(offsetof(Doorbell, sleeping) == 8);
static_assert(std::is_standard_layout_v<Doorbell>);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Wakes the worker behind `doorbell` if it sleeps: seq_cst fence, read the flag, and if it is
// raised, write 8 bytes to wake_fd, as Worker::Wake() does. Call it after publishing work (a
// ring's TryPush). Any thread, any process that maps the doorbell and holds wake_fd: the socket
// Engine::AddDoorbell returned (sent with MSG_DONTWAIT | MSG_NOSIGNAL: never blocks, never raises
// SIGPIPE), or a worker's own eventfd (Worker::wake_fd; written after send() fails with
// ENOTSOCK). Errors are ignored (a full socket means a wake-up is pending already); errno may
// change.
inline void RingDoorbell(const Doorbell& doorbell, int wake_fd) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (doorbell.sleeping.load(std::memory_order_relaxed) == 0) return;
  const uint64_t one = 1;
  if (send(wake_fd, &one, sizeof(one), MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == ENOTSOCK) {
    [[maybe_unused]] ssize_t n = write(wake_fd, &one, sizeof(one));
  }
}

}  // namespace metaroce::engine
