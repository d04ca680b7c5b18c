// Tells ThreadSanitizer what Debian's Abseil synchronization primitives do (docs/building.md,
// "ThreadSanitizer").
//
// Why: Debian's libabsl_synchronization.so is not built with -fsanitize=thread, so the
// annotations absl::Mutex carries for TSan (ABSL_TSAN_MUTEX_* in mutex.cc) are compiled out, and
// its lock word and futex waits are invisible to TSan. Every access guarded by an absl::Mutex then
// looks unsynchronized: a two-thread counter incremented under absl::MutexLock is reported as a
// data race (checked on Debian 12, Abseil 20220623, gcc 12). Suppressing those reports would also
// hide real races on the same data; this restores the missing happens-before edges instead.
//
// How: preloaded (LD_PRELOAD) into the test executables of build-tsan/ only. Each wrapper below
// takes the place of the library's definition (the executable's calls, and the library's own calls
// through its PLT, resolve here first), reports the operation to TSan with its public mutex
// annotation interface (the calls Abseil itself makes when built with TSan), and calls the real
// function found with dlsym(RTLD_NEXT). The file is built without -fsanitize: the __tsan_*
// functions come from the libtsan the executable already loads.
//
// Covered: Mutex Lock/Unlock/TryLock, their reader forms, LockWhen*, Await*, the destructor;
// CondVar::Wait*; Notification::Notify and WaitForNotification* (and HasBeenNotified, an inline
// acquire load in the caller's instrumented code, through a release on the flag's address).
// A program calling anything else of Abseil's synchronization sees no edge for it, as before.

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

// compiler-rt's public interface (sanitizer/tsan_interface.h, not shipped with gcc 12). Weak: in a
// program without TSan (a tool a test starts, which inherits LD_PRELOAD) they are null and the
// wrappers only pass the calls through.
extern "C" {
__attribute__((weak)) void __tsan_mutex_destroy(void* addr, unsigned flags);
__attribute__((weak)) void __tsan_mutex_pre_lock(void* addr, unsigned flags);
__attribute__((weak)) void __tsan_mutex_post_lock(void* addr, unsigned flags, int recursion);
__attribute__((weak)) int __tsan_mutex_pre_unlock(void* addr, unsigned flags);
__attribute__((weak)) void __tsan_mutex_post_unlock(void* addr, unsigned flags);
__attribute__((weak)) void __tsan_acquire(void* addr);
__attribute__((weak)) void __tsan_release(void* addr);
}

namespace {

// All or none: libtsan defines every one of them.
const bool kTsan = &__tsan_mutex_pre_lock != nullptr;

constexpr unsigned kReadLock = 1 << 3;      // __tsan_mutex_read_lock
constexpr unsigned kTryLock = 1 << 4;       // __tsan_mutex_try_lock
constexpr unsigned kTryLockFailed = 1 << 5;  // __tsan_mutex_try_lock_failed

#define STR2(x) #x
#define STR(x) STR2(x)
constexpr const char kNamespace[] = STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);

// The real definition of `absl::<inline namespace>::<rest>` (Itanium mangling; S0_ in `rest`
// stands for the inline namespace, as in the library's own symbols; `K` marks a const member).
template <typename F>
F Real(const char* rest, bool const_member = false) {
  std::string name = std::string(const_member ? "_ZNK" : "_ZN") + "4absl" +
                     std::to_string(sizeof(kNamespace) - 1) + kNamespace + rest;
  void* sym = dlsym(RTLD_NEXT, name.c_str());
  if (sym == nullptr) {
    std::fprintf(stderr,
                 "absl_sync_preload: %s not found after this library (%s); is "
                 "libabsl_synchronization a shared library of this program?\n",
                 name.c_str(), dlerror());
    std::abort();
  }
  return reinterpret_cast<F>(sym);
}

#define REAL(type, rest)                      \
  static const auto real = Real<type>(rest);  \
  (void)0
#define REAL_CONST(type, rest)                      \
  static const auto real = Real<type>(rest, true);  \
  (void)0

using absl::CondVar;
using absl::Condition;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

void PreLock(const void* mu, unsigned flags) {
  if (kTsan) __tsan_mutex_pre_lock(const_cast<void*>(mu), flags);
}
void PostLock(const void* mu, unsigned flags) {
  if (kTsan) __tsan_mutex_post_lock(const_cast<void*>(mu), flags, 0);
}
void PreUnlock(const void* mu, unsigned flags) {
  if (kTsan) __tsan_mutex_pre_unlock(const_cast<void*>(mu), flags);
}
void PostUnlock(const void* mu, unsigned flags) {
  if (kTsan) __tsan_mutex_post_unlock(const_cast<void*>(mu), flags);
}
void Destroyed(const void* mu) {
  if (kTsan) __tsan_mutex_destroy(const_cast<void*>(mu), 0);
}
void Release(const void* addr) {
  if (kTsan) __tsan_release(const_cast<void*>(addr));
}
void Acquire(const void* addr) {
  if (kTsan) __tsan_acquire(const_cast<void*>(addr));
}
// For the waits that drop the mutex and hold it again on return.
void Released(const Mutex* mu) {
  PreUnlock(mu, 0);
  PostUnlock(mu, 0);
}
void Reacquired(const Mutex* mu) {
  PreLock(mu, 0);
  PostLock(mu, 0);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

Mutex::~Mutex() {
  REAL(void (*)(Mutex*), "5MutexD1Ev");
  Destroyed(this);
  real(this);
}

void Mutex::Lock() {
  REAL(void (*)(Mutex*), "5Mutex4LockEv");
  PreLock(this, 0);
  real(this);
  PostLock(this, 0);
}

void Mutex::ReaderLock() {
  REAL(void (*)(Mutex*), "5Mutex10ReaderLockEv");
  PreLock(this, kReadLock);
  real(this);
  PostLock(this, kReadLock);
}

bool Mutex::TryLock() {
  REAL(bool (*)(Mutex*), "5Mutex7TryLockEv");
  PreLock(this, kTryLock);
  const bool locked = real(this);
  PostLock(this, kTryLock | (locked ? 0 : kTryLockFailed));
  return locked;
}

bool Mutex::ReaderTryLock() {
  REAL(bool (*)(Mutex*), "5Mutex13ReaderTryLockEv");
  PreLock(this, kReadLock | kTryLock);
  const bool locked = real(this);
  PostLock(this, kReadLock | kTryLock | (locked ? 0 : kTryLockFailed));
  return locked;
}

void Mutex::Unlock() {
  REAL(void (*)(Mutex*), "5Mutex6UnlockEv");
  PreUnlock(this, 0);
  real(this);
  PostUnlock(this, 0);
}

void Mutex::ReaderUnlock() {
  REAL(void (*)(Mutex*), "5Mutex12ReaderUnlockEv");
  PreUnlock(this, kReadLock);
  real(this);
  PostUnlock(this, kReadLock);
}

// The *When* forms return holding the mutex whatever the timeout's outcome.
void Mutex::LockWhen(const Condition& cond) {
  REAL(void (*)(Mutex*, const Condition&), "5Mutex8LockWhenERKNS0_9ConditionE");
  PreLock(this, 0);
  real(this, cond);
  PostLock(this, 0);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  REAL(void (*)(Mutex*, const Condition&), "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  PreLock(this, kReadLock);
  real(this, cond);
  PostLock(this, kReadLock);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  REAL(bool (*)(Mutex*, const Condition&, Duration),
       "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  PreLock(this, 0);
  const bool met = real(this, cond, timeout);
  PostLock(this, 0);
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  REAL(bool (*)(Mutex*, const Condition&, Time),
       "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  PreLock(this, 0);
  const bool met = real(this, cond, deadline);
  PostLock(this, 0);
  return met;
}

// Await* and CondVar::Wait* release the mutex while they wait and hold it again on return.
void Mutex::Await(const Condition& cond) {
  REAL(void (*)(Mutex*, const Condition&), "5Mutex5AwaitERKNS0_9ConditionE");
  Released(this);
  real(this, cond);
  Reacquired(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  REAL(bool (*)(Mutex*, const Condition&, Duration),
       "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Released(this);
  const bool met = real(this, cond, timeout);
  Reacquired(this);
  return met;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  REAL(bool (*)(Mutex*, const Condition&, Time),
       "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Released(this);
  const bool met = real(this, cond, deadline);
  Reacquired(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  REAL(void (*)(CondVar*, Mutex*), "7CondVar4WaitEPNS0_5MutexE");
  Released(mu);
  real(this, mu);
  Reacquired(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  REAL(bool (*)(CondVar*, Mutex*, Duration),
       "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Released(mu);
  const bool timed_out = real(this, mu, timeout);
  Reacquired(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  REAL(bool (*)(CondVar*, Mutex*, Time), "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Released(mu);
  const bool timed_out = real(this, mu, deadline);
  Reacquired(mu);
  return timed_out;
}

// Notify's release pairs with the waiters' acquire below and with HasBeenNotified's inline
// (instrumented) acquire load of the same flag.
void Notification::Notify() {
  REAL(void (*)(Notification*), "12Notification6NotifyEv");
  Release(&notified_yet_);
  real(this);
}

void Notification::WaitForNotification() const {
  REAL_CONST(void (*)(const Notification*), "12Notification19WaitForNotificationEv");
  real(this);
  Acquire(&notified_yet_);
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  REAL_CONST(bool (*)(const Notification*, Duration),
             "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool notified = real(this, timeout);
  if (notified) Acquire(&notified_yet_);
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  REAL_CONST(bool (*)(const Notification*, Time),
             "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool notified = real(this, deadline);
  if (notified) Acquire(&notified_yet_);
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
