#include "tools/perf/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace metaroce::perf {
namespace {

double Percentile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  // Nearest rank, as perftest: the value below which q of the samples fall.
  size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size()))) ;
  i = std::clamp<size_t>(i, 1, sorted.size()) - 1;
  return static_cast<double>(sorted[i]) / 1000.0;
}

thread_local bool quiet = false;

}  // namespace

void SetTablesQuiet(bool q) { quiet = q; }
bool TablesQuiet() { return quiet; }

LatResult ComputeLatency(uint64_t size, std::vector<int64_t>& v) {
  LatResult r;
  r.size = size;
  r.iterations = v.size();
  if (v.empty()) return r;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (int64_t x : v) sum += static_cast<double>(x);
  const double mean = sum / static_cast<double>(v.size());
  double var = 0;
  for (int64_t x : v) var += (static_cast<double>(x) - mean) * (static_cast<double>(x) - mean);
  var /= static_cast<double>(v.size());
  r.t_min = static_cast<double>(v.front()) / 1000.0;
  r.t_max = static_cast<double>(v.back()) / 1000.0;
  r.t_typical = static_cast<double>(v[v.size() / 2]) / 1000.0;
  r.t_avg = mean / 1000.0;
  r.t_stdev = std::sqrt(var) / 1000.0;
  r.p99 = Percentile(v, 0.99);
  r.p999 = Percentile(v, 0.999);
  return r;
}

void RateMeter::Start(Clock::time_point t0, std::chrono::nanoseconds window) {
  t0_ = t0;
  window_ = window;
  bytes_.clear();
}

void RateMeter::Add(Clock::time_point t, uint64_t bytes, uint64_t) {
  if (t < t0_) return;
  const size_t i = static_cast<size_t>((t - t0_) / window_);
  if (i >= bytes_.size()) bytes_.resize(i + 1, 0);
  bytes_[i] += bytes;
}

double RateMeter::PeakBytesPerSecond(Clock::time_point end, double average) const {
  const size_t complete = end > t0_ ? static_cast<size_t>((end - t0_) / window_) : 0;
  double peak = 0;
  bool any = false;
  for (size_t i = 0; i < complete && i < bytes_.size(); ++i) {
    peak = std::max(peak, static_cast<double>(bytes_[i]) /
                              std::chrono::duration<double>(window_).count());
    any = true;
  }
  return any ? std::max(peak, average) : average;
}

void PrintDashes() {
  if (quiet) return;
  std::printf("---------------------------------------------------------------------------------------\n");
}

void PrintBwHeader(bool gbits) {
  if (quiet) return;
  PrintDashes();
  if (gbits) {
    std::printf(" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n");
  } else {
    std::printf(" #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n");
  }
}

void PrintBwRow(const BwResult& r, bool gbits) {
  if (quiet) return;
  const double scale = gbits ? 8.0 / 1e9 : 1.0 / 1048576.0;
  // perftest's REPORT_FMT.
  std::printf(" %-7lu    %-7lu          %-7.2lf            %-7.2lf\t\t   %-7.6lf\n",
              static_cast<unsigned long>(r.size), static_cast<unsigned long>(r.iterations),
              r.peak_bytes_per_s * scale, r.avg_bytes_per_s * scale, r.msg_rate_per_s / 1e6);
  std::fflush(stdout);
}

void PrintLatHeader() {
  if (quiet) return;
  PrintDashes();
  std::printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
              "t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec] \n");
}

void PrintLatRow(const LatResult& r) {
  if (quiet) return;
  // perftest's REPORT_FMT_LAT.
  std::printf(" %-7lu %-7lu          %-7.2f        %-7.2f      %-7.2f  \t%-7.2f     \t%-7.2f\t\t%-7.2f  "
              "\t\t%-7.2f\n",
              static_cast<unsigned long>(r.size), static_cast<unsigned long>(r.iterations), r.t_min,
              r.t_max, r.t_typical, r.t_avg, r.t_stdev, r.p99, r.p999);
  std::fflush(stdout);
}

JsonValue ToJson(const BwResult& r) {
  JsonValue j;
  j["size"] = r.size;
  j["iterations"] = r.iterations;
  j["bytes"] = r.bytes;
  j["seconds"] = r.seconds;
  j["bw_peak_gbps"] = r.peak_bytes_per_s * 8 / 1e9;
  j["bw_avg_gbps"] = r.avg_bytes_per_s * 8 / 1e9;
  j["bw_peak_mibps"] = r.peak_bytes_per_s / 1048576.0;
  j["bw_avg_mibps"] = r.avg_bytes_per_s / 1048576.0;
  j["msg_rate_mpps"] = r.msg_rate_per_s / 1e6;
  j["failed_ops"] = r.failed_ops;
  j["data_errors"] = r.data_errors;
  j["verified"] = r.verified;
  if (r.sent > 0) j["sent"] = r.sent;
  return j;
}

JsonValue ToJson(const LatResult& r) {
  JsonValue j;
  j["size"] = r.size;
  j["iterations"] = r.iterations;
  j["t_min_us"] = r.t_min;
  j["t_max_us"] = r.t_max;
  j["t_typical_us"] = r.t_typical;
  j["t_avg_us"] = r.t_avg;
  j["t_stdev_us"] = r.t_stdev;
  j["p99_us"] = r.p99;
  j["p999_us"] = r.p999;
  j["failed_ops"] = r.failed_ops;
  j["data_errors"] = r.data_errors;
  j["verified"] = r.verified;
  return j;
}

}  // namespace metaroce::perf
