// How a thread that posted work wakes a worker that may be asleep, in this process or another,
// and tells it which connections to look at.
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
// Posted marks. A worker owns thousands of connections and most of them are idle; it must not
// look at every connection's request rings on every loop. So a doorbell also carries one
// *posted mark* per connection slot (kPostedSlots of them, a two-level bitmap: bit s % 64 of
// posted[s / 64], and bit s / 64 of posted_summary saying that word may be non-zero). The worker
// gives each connection whose posters use this doorbell a slot (ConnectionChannel::
// SetPostedMark); a poster pushes a work request into the connection's ring and then marks the
// slot (MarkPosted; the channel's request rings do it on every TryPush). On each loop the worker
// takes the marks (TakePosted) and looks at the rings of the marked connections only, plus those
// it could not finish before (Worker: core queue full, budget used). A poster's cost: one atomic
// OR on a word shared with the worker, and a load of the summary (an OR when its bit is clear).
//
// Why no posted request is missed (every access to posted[] and posted_summary is seq_cst, so
// they and the fences below are in one total order S):
//   poster (MarkPosted, after the push)       worker (TakePosted, then the rings)
//   push: the ring's release store of tail    if summary != 0: summary.exchange(0)
//   posted[w].fetch_or(bit)                   for each bit i taken: posted[i].exchange(0)
//   if (summary & (1 << w)) == 0:             for each slot taken: drain its rings (acquire
//     summary.fetch_or(1 << w)                  loads of tail)
// If the worker's exchange of posted[w] reads our bit, it reads a value at or after our
// fetch_or in posted[w]'s modification order, so it synchronizes with it (the fetch_or is a
// release, RMWs continue release sequences) and its drain sees our push. Otherwise that exchange
// precedes our fetch_or in S, and our bit stays set for a later exchange of posted[w]; one
// happens as long as the summary bit is set after our fetch_or: either we set it (after our
// fetch_or) or we saw it set, by a write our load read, which precedes in S the worker's next
// exchange of the summary (a load reads the last write before it in S), which the worker follows
// with the exchange of posted[w]. A mark seen for a ring already drained costs one look.
//
// Why no wake-up is lost (the same argument in one process or across two: the atomics are
// lock-free, hence address-free, and a seq_cst fence orders the CPU's accesses whatever mapping
// they go through):
//   worker (Worker::Sleep)                  poster (MarkPosted, then RingDoorbell)
//   raise every doorbell (store 1)          publish work (push, then mark: posted, summary)
//   seq_cst fence                           seq_cst fence
//   look for work: every summary, and       read the doorbell's flag
//     the worker's own unfinished rings
//   if none: ppoll() on every wake fd       if raised: write(wake_fd)
// The two fences are totally ordered. If the poster's comes first, the worker's look for work
// sees the summary bit set (by this poster or by the one whose set it saw, both before the fence)
// and does not sleep. If the worker's comes first, the poster reads the raised flag and writes
// the fd, which ends the ppoll() (or makes it return at once). A raised flag seen late costs one
// spurious wake-up, never a lost one.
//
// A hostile process sharing a doorbell can write its flag at will: it can make its own posts skip
// the wake-up (it then waits for the worker's next timeout, at most 100 ms) or make them always
// write the fd (one syscall each, as it could anyway, and each costs the worker a loop). It
// cannot delay the wake-ups of other applications (their doorbells and sockets are theirs), nor
// block the worker (the worker's end is its own open file, read with MSG_DONTWAIT), nor keep it
// from sleeping by closing or shutting down its end (the worker stops waiting on a hung-up
// socket). Its posted marks are its own too: any bit it sets names a slot in [0, kPostedSlots)
// (the layout bounds it), which the worker looks up in its own table of this doorbell's slots;
// a slot with no connection is ignored, and one with a connection names one of this
// application's connections only. Setting marks at will makes the worker look at its own rings
// (as posting would); clearing them starves its own connections only. Why not a pipe or an
// eventfd: writing a pipe whose reader is gone raises SIGPIPE in the application (the daemon may
// exit first); an eventfd is one open file for both sides, so an application holding it could
// read it (stealing other posters' wake-ups) or clear its O_NONBLOCK and block the worker's read.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "absl/status/statusor.h"
#include "lib/engine/spsc_ring.h"

namespace metaroce::engine {

struct Doorbell {
  // "MRBELL" and the layout version (2: posted marks).
  static constexpr uint64_t kMagic = 0x4d52'4245'4c4c'0002;
  // Connections one doorbell can mark; the worker looks at the rings of any more on every loop.
  static constexpr uint32_t kPostedSlots = 4096;
  static constexpr uint32_t kPostedWords = kPostedSlots / 64;
  static constexpr uint32_t kNoSlot = 0xffff'ffff;

  alignas(kCacheLineBytes) uint64_t magic = kMagic;
  // Non-zero while the worker sleeps (or is about to).
  std::atomic<uint32_t> sleeping{0};
  // Posted marks (header): bit w set when posted[w] may hold marks.
  alignas(kCacheLineBytes) std::atomic<uint64_t> posted_summary{0};
  // Bit s % 64 of posted[s / 64]: slot s was posted to since the worker last took it.
  alignas(kCacheLineBytes) std::atomic<uint64_t> posted[kPostedWords] = {};

  // A fresh doorbell in [memory, memory + bytes) (cache-line aligned, at least sizeof(Doorbell)
  // bytes): the daemon's side.
  static absl::StatusOr<Doorbell*> PlaceAt(void* memory, size_t bytes);
  // A doorbell another process placed there: checks alignment, size and magic (the application's
  // side).
  static absl::StatusOr<Doorbell*> AttachAt(void* memory, size_t bytes);

  // Poster (any thread, any process mapping the doorbell), after pushing into a ring of the
  // connection in `slot`: marks it posted. Slots outside [0, kPostedSlots) mark nothing.
  void MarkPosted(uint32_t slot) {
    if (slot >= kPostedSlots) return;
    const uint32_t w = slot / 64;
    posted[w].fetch_or(uint64_t{1} << (slot % 64), std::memory_order_seq_cst);
    const uint64_t summary_bit = uint64_t{1} << w;
    if ((posted_summary.load(std::memory_order_seq_cst) & summary_bit) == 0) {
      posted_summary.fetch_or(summary_bit, std::memory_order_seq_cst);
    }
  }
  // The worker: calls fn(slot) once for every slot marked since its last call and clears those
  // marks. Slots are in [0, kPostedSlots) whatever the shared bytes hold; a slot may be reported
  // whose rings hold nothing (marked again after being drained, or by a hostile poster).
  template <typename Fn>
  void TakePosted(Fn&& fn) {
    if (posted_summary.load(std::memory_order_relaxed) == 0) return;  // seen again next loop
    uint64_t words = posted_summary.exchange(0, std::memory_order_seq_cst);
    while (words != 0) {
      const uint32_t w = static_cast<uint32_t>(std::countr_zero(words));
      words &= words - 1;
      uint64_t bits = posted[w].exchange(0, std::memory_order_seq_cst);
      while (bits != 0) {
        const uint32_t b = static_cast<uint32_t>(std::countr_zero(bits));
        bits &= bits - 1;
        fn(w * 64 + b);
      }
    }
  }
  // The worker, after its seq_cst fence in Sleep(): whether a poster has marked anything not
  // taken yet.
  bool AnyPosted() const { return posted_summary.load(std::memory_order_seq_cst) != 0; }
};
static_assert(sizeof(Doorbell) == (2 + Doorbell::kPostedWords / 8) * kCacheLineBytes);
static_assert(offsetof(Doorbell, sleeping) == 8);
static_assert(offsetof(Doorbell, posted_summary) == kCacheLineBytes);
static_assert(offsetof(Doorbell, posted) == 2 * kCacheLineBytes);
static_assert(std::is_standard_layout_v<Doorbell>);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// Wakes the worker behind `doorbell` if it sleeps: seq_cst fence, read the flag, and if it is
// raised, write 8 bytes to wake_fd, as Worker::Wake() does. Call it after publishing work (a
// ring's TryPush, which also marks the connection posted). Any thread, any process that maps the
// doorbell and holds wake_fd: the socket Engine::AddDoorbell returned (sent with MSG_DONTWAIT |
// MSG_NOSIGNAL: never blocks, never raises SIGPIPE), or a worker's own eventfd (Worker::wake_fd;
// written after send() fails with ENOTSOCK). Errors are ignored (a full socket means a wake-up is
// pending already); errno may change.
inline void RingDoorbell(const Doorbell& doorbell, int wake_fd) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (doorbell.sleeping.load(std::memory_order_relaxed) == 0) return;
  const uint64_t one = 1;
  if (send(wake_fd, &one, sizeof(one), MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == ENOTSOCK) {
    [[maybe_unused]] ssize_t n = write(wake_fd, &one, sizeof(one));
  }
}

}  // namespace metaroce::engine
