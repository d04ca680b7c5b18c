// Pieces every mrperf test shares: the stop flag (SIGINT/SIGTERM), the data pattern of
// --verify, the app thread's idle policy, and JSON renderings of configuration and counters.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "lib/api/connection.h"
#include "lib/api/port_factory.h"
#include "lib/engine/worker.h"
#include "lib/io/packet_port.h"
#include "tools/perf/json.h"
#include "tools/perf/options.h"

namespace metaroce::perf {

// Set by the SIGINT/SIGTERM handler (main.cc); every loop checks it and unwinds, so that the
// XDP programs are detached by their owners' destructors.
std::atomic<bool>& StopFlag();
inline bool StopRequested() { return StopFlag().load(std::memory_order_relaxed); }

// --verify data pattern. Word j (8 bytes) of message `seq` on connection `qp`:
// seq in the high 32 bits, j ^ (qp << 24) in the low 32; the size % 8 tail bytes depend on
// `tail_key` (the message for sends, the slot for writes, whose slot may be overwritten by a
// later message before the target looks).
void FillPattern(std::byte* p, size_t size, uint64_t seq, uint32_t qp, uint64_t tail_key);
// slots == 0: every word must be message `seq`'s. slots > 0 (writes into a ring of `slots`
// slots): a word may also belong to a later message of the same slot (seq + k * slots).
bool CheckPattern(const std::byte* p, size_t size, uint64_t seq, uint32_t qp, uint64_t tail_key,
                  uint64_t slots);

void YieldCpu();                  // sched_yield() (MRPERF_APP_IDLE=sleep: a 2 us nanosleep)
void SleepCpu(uint32_t micros);   // nanosleep

// The app thread found nothing to do: spin a little, then give the CPU away, since the engine
// worker may share it (ENVIRONMENT.md: 2 vCPUs). Latency loops yield (the answer is due within
// microseconds); bandwidth loops sleep, because a deep send queue covers a 50 us nap and a
// yield loop steals a shared CPU from the worker (measured: ~40 % of it in sched_yield).
// Inline engine (--workers 0): the app thread is the engine, nothing else needs the CPU, and
// every nap delays packets: it only spins.
inline void IdleWait(uint32_t& idle, bool latency = true, bool inline_engine = false) {
  if (inline_engine || ++idle < 64) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    return;
  }
  if (latency) {
    YieldCpu();
  } else {
    SleepCpu(50);
  }
}

JsonValue WorkerStatsJson(const std::vector<engine::WorkerStats>& stats);
// `dp`: the embedded engine's datapath, or null when attached to metaroced.
JsonValue ConfigJson(const PerfOptions& o, const api::Datapath* dp, uint32_t mtu);
// The datapath the flags describe (--port-kind, --interface, --local-ip, --udp-port, --workers);
// `broker` and `side` for memory ports.
api::DatapathOptions DatapathOptionsFor(const PerfOptions& o,
                                        std::shared_ptr<api::MemoryPairBroker> broker, int side);
// Writes the document to --out_json and/or stdout (--json). Returns false on a write error.
bool EmitJson(const PerfOptions& o, const JsonValue& doc);

// How the ports a run opened are bound, asked of each port as it opens (AfXdpPort::zero_copy()),
// never read back from their descriptions, which are prose for people.
// Thread-safe: an engine opens its ports on its worker threads.
class PortModes {
 public:
  void Record(const io::PacketPort& port);
  // The JSON `zero_copy`: true when the run has AF_XDP ports and every one is bound in zero-copy
  // mode; false otherwise (copy mode, or ports of another kind: UDP, memory).
  bool zero_copy() const;
  int af_xdp_ports() const;

 private:
  mutable absl::Mutex mu_;
  int af_xdp_ ABSL_GUARDED_BY(mu_) = 0;
  int zero_copy_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace metaroce::perf
