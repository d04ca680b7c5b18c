// Results and their two presentations: perftest's tables (for people; an 87-dash line, then the
// header and one row per size) and the JSON document (the contract for scripts, version 1).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/perf/json.h"

namespace metaroce::perf {

inline constexpr int kJsonVersion = 1;

struct BwResult {
  uint64_t size = 0;
  uint64_t iterations = 0;    // messages completed (counted in the average)
  uint64_t bytes = 0;
  double seconds = 0;         // measurement interval
  double peak_bytes_per_s = 0;
  double avg_bytes_per_s = 0;
  double msg_rate_per_s = 0;
  uint64_t failed_ops = 0;    // completions with an error status, or never completed
  uint64_t data_errors = 0;   // messages whose data pattern did not verify
  uint64_t verified = 0;      // messages whose data pattern was checked
  uint64_t sent = 0;          // raw/udp: datagrams the sender handed to the port
};

struct LatResult {
  uint64_t size = 0;
  uint64_t iterations = 0;
  double t_min = 0, t_max = 0, t_typical = 0, t_avg = 0, t_stdev = 0, p99 = 0, p999 = 0;  // usec
  uint64_t failed_ops = 0;
  uint64_t data_errors = 0;
  uint64_t verified = 0;
};

// Half round trips in nanoseconds -> latency statistics (microseconds). Sorts `half_rtt_ns`.
LatResult ComputeLatency(uint64_t size, std::vector<int64_t>& half_rtt_ns);

// Bytes and messages over time, in fixed windows, for the per-window peak.
class RateMeter {
 public:
  using Clock = std::chrono::steady_clock;
  void Start(Clock::time_point t0, std::chrono::nanoseconds window);
  void Add(Clock::time_point t, uint64_t bytes, uint64_t messages = 1);
  // Highest rate over complete windows up to `end` (the average when none is complete).
  double PeakBytesPerSecond(Clock::time_point end, double average) const;

 private:
  Clock::time_point t0_;
  std::chrono::nanoseconds window_{std::chrono::seconds(1)};
  std::vector<uint64_t> bytes_;
};

// Table output of the calling thread on or off (in-process runs silence their server thread).
void SetTablesQuiet(bool quiet);
bool TablesQuiet();

void PrintBwHeader(bool report_gbits);
void PrintBwRow(const BwResult& r, bool report_gbits);
void PrintLatHeader();
void PrintLatRow(const LatResult& r);
void PrintDashes();

JsonValue ToJson(const BwResult& r);
JsonValue ToJson(const LatResult& r);

}  // namespace metaroce::perf
