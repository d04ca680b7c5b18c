// USDT probes of the provider `metaroce` (docs/tracing.md lists every probe, its arguments and
// their meaning). A probe site is one NOP in the instruction stream plus an ELF note
// (.note.stapsdt) that names it; a tracer (bpftrace, perf, SystemTap) turns the NOP into a trap
// only while it is attached. Not traced, a probe costs the NOP and keeping its arguments in
// registers or memory, so arguments must be values the code already has: no computation, no
// calls, integers only. Probes observe: nothing a probe does may change what the code does.
//
//   MR_PROBE(name)                       a probe without arguments
//   MR_PROBE1(name, a) .. MR_PROBE8(...) a probe with 1..8 integer arguments
//
// Semaphores (for a probe whose arguments cost something to gather, e.g. a syscall): the tracer
// increments a per-probe counter while attached. A translation unit that wants them defines
// MR_PROBES_WITH_SEMAPHORES before including this header, and then EVERY probe fired in that unit
// needs its semaphore defined once, at global scope, with MR_PROBE_SEMAPHORE(name);
// MR_PROBE_ENABLED(name) is true while a tracer is attached to the probe.
//
// Without <sys/sdt.h> (meson defines METAROCE_HAVE_SDT when `cc.has_header('sys/sdt.h')`) every
// macro compiles to nothing and MR_PROBE_ENABLED to false.
#pragma once

#if defined(METAROCE_HAVE_SDT) && METAROCE_HAVE_SDT

#if defined(MR_PROBES_WITH_SEMAPHORES)
#define _SDT_HAS_SEMAPHORES 1
#endif
#include <sys/sdt.h>

#define MR_PROBE(name) STAP_PROBE(metaroce, name)
#define MR_PROBE1(name, a) STAP_PROBE1(metaroce, name, a)
#define MR_PROBE2(name, a, b) STAP_PROBE2(metaroce, name, a, b)
#define MR_PROBE3(name, a, b, c) STAP_PROBE3(metaroce, name, a, b, c)
#define MR_PROBE4(name, a, b, c, d) STAP_PROBE4(metaroce, name, a, b, c, d)
#define MR_PROBE5(name, a, b, c, d, e) STAP_PROBE5(metaroce, name, a, b, c, d, e)
#define MR_PROBE6(name, a, b, c, d, e, f) STAP_PROBE6(metaroce, name, a, b, c, d, e, f)
#define MR_PROBE7(name, a, b, c, d, e, f, g) STAP_PROBE7(metaroce, name, a, b, c, d, e, f, g)
#define MR_PROBE8(name, a, b, c, d, e, f, g, h) \
  STAP_PROBE8(metaroce, name, a, b, c, d, e, f, g, h)

// The symbol the note names must be unmangled: global scope, C linkage, in the .probes section
// (where SystemTap and bpftrace look for it).
#define MR_PROBE_SEMAPHORE(name)                                                 \
  extern "C" {                                                                   \
  __attribute__((used, section(".probes"))) volatile unsigned short              \
      metaroce_##name##_semaphore = 0;                                           \
  }
#define MR_PROBE_ENABLED(name) __builtin_expect(metaroce_##name##_semaphore != 0, 0)

#else  // no <sys/sdt.h>: probes compile to nothing

#define MR_PROBE(name) \
  do {                 \
  } while (0)
#define MR_PROBE1(name, ...) \
  do {                       \
  } while (0)
#define MR_PROBE2(name, ...) MR_PROBE1(name)
#define MR_PROBE3(name, ...) MR_PROBE1(name)
#define MR_PROBE4(name, ...) MR_PROBE1(name)
#define MR_PROBE5(name, ...) MR_PROBE1(name)
#define MR_PROBE6(name, ...) MR_PROBE1(name)
#define MR_PROBE7(name, ...) MR_PROBE1(name)
#define MR_PROBE8(name, ...) MR_PROBE1(name)
#define MR_PROBE_SEMAPHORE(name)
#define MR_PROBE_ENABLED(name) false

#endif

// Argument codes shared by several probes (docs/tracing.md has the tables).
namespace metaroce::probe {

// retransmit: why a PSN is sent again. 0..3 and 6 are Sender::Why's values.
inline constexpr int kRetransmitGap = 0;      // [R4] a later transmission on the path arrived
inline constexpr int kRetransmitTimeout = 1;  // [R5] probe timeout: tail loss probe
inline constexpr int kRetransmitGoBackN = 2;  // [B1] go-back-N resend
inline constexpr int kRetransmitRnr = 3;      // [M5] RNR wait over
inline constexpr int kRetransmitReroute = 4;  // [R5] moved off a failed path
inline constexpr int kRetransmitHedge = 5;    // [R5b] copied off an overtaken path
inline constexpr int kRetransmitTailProbe = 6;  // [R5d] the tail's newest packet, once overdue

// timer_fired: which timer.
inline constexpr int kTimerPathTimeout = 0;   // a path's probe timeout (PTO)
inline constexpr int kTimerRotation = 1;      // a rotation held down or rate-limited is due
inline constexpr int kTimerProbe = 2;         // a probing path's probe interval
inline constexpr int kTimerRnr = 3;           // an RNR wait ended: the PSN is retried
inline constexpr int kTimerDelayedAck = 4;    // the responder's delayed ACK
inline constexpr int kTimerNoProgress = 5;    // the connection's no-progress limit (path 65535)

// worker_drop: what the engine dropped.
inline constexpr int kDropTxBacklog = 0;      // the per-plane transmit backlog was full
inline constexpr int kDropHandoffNoSlot = 1;  // the owner worker's handoff ring was full
inline constexpr int kDropHandoffTooLarge = 2;  // a datagram larger than a handoff slot

}  // namespace metaroce::probe
