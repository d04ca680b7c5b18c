// The Prometheus text exposition format, version 0.0.4 (what `GET /metrics` returns; served
// with Content-Type kPrometheusContentType).
//
// PrometheusText collects samples into metric families (Declare, then Family::Add) and renders
// them:
//   - every family gets one `# HELP` and one `# TYPE` line, then all its samples together, in the
//     order families were declared (samples may be added in any order: per connection, per
//     path, ...; the format requires a family's lines to be contiguous, Render groups them);
//   - label values are escaped (`\` -> `\\`, `"` -> `\"`, newline -> `\n`) and made valid UTF-8
//     (each invalid byte becomes U+FFFD: a value from an application, e.g. its name, cannot
//     make the whole scrape unparseable); HELP text escapes `\` and newline;
//   - integer values are written exactly (a uint64 counter never goes through a double);
//     doubles in the shortest form that reads back to the same double; NaN, +Inf, -Inf as the
//     format spells them.
// A sample the format cannot carry is not written and is recorded in problems() instead: an
// invalid metric or label name, a label given twice, the same label set twice in one family, a
// family declared again with another type or help. Names are the daemon's constants, so a problem
// is a bug (the unit tests require none); the scrape stays valid meanwhile.
//
// Threading: one thread at a time per PrometheusText; the functions are pure.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace metaroce::daemon {

inline constexpr absl::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";

enum class MetricType : uint8_t { kCounter, kGauge };
absl::string_view MetricTypeName(MetricType type);  // "counter", "gauge"

// Label name and value, in the order they are written.
using Labels = std::vector<std::pair<std::string, std::string>>;

class PrometheusText {
 public:
  // One metric family; a handle valid as long as its PrometheusText.
  class Family {
   public:
    void Add(const Labels& labels, uint64_t value);
    void Add(const Labels& labels, double value);

   private:
    friend class PrometheusText;
    Family(PrometheusText* owner, std::string name, MetricType type, std::string help)
        : owner_(owner), name_(std::move(name)), type_(type), help_(std::move(help)) {}
    void AddFormatted(const Labels& labels, const std::string& value);

    PrometheusText* owner_;
    std::string name_;
    MetricType type_;
    std::string help_;
    bool rejected_ = false;  // samples are dropped (the reason is in problems())
    std::vector<std::string> lines_;  // "name{labels} value"
    std::set<std::string> label_sets_;
  };

  PrometheusText() = default;
  PrometheusText(const PrometheusText&) = delete;
  PrometheusText& operator=(const PrometheusText&) = delete;

  // Family `name`: declared now (HELP and TYPE are written even if it gets no sample), or the
  // one declared before under that name (then `type` and `help` must be the same).
  Family& Declare(absl::string_view name, MetricType type, absl::string_view help);

  // Every family, in the order of their first Declare.
  std::string Render() const;
  const std::vector<std::string>& problems() const { return problems_; }
  size_t families() const { return order_.size(); }

 private:
  std::map<std::string, std::unique_ptr<Family>, std::less<>> families_;
  std::vector<const Family*> order_;
  std::vector<std::unique_ptr<Family>> rejected_;  // invalid names and mismatched re-declarations
  std::vector<std::string> problems_;
};

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(absl::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved for Prometheus itself).
bool IsValidLabelName(absl::string_view name);
// The escaped forms (no surrounding quotes).
std::string EscapeLabelValue(absl::string_view value);
std::string EscapeHelp(absl::string_view help);
// `text` with each byte that is not part of a valid UTF-8 sequence replaced by U+FFFD.
std::string ValidUtf8(absl::string_view text);
// Sample values: "123", "0.25", "1e-06", "NaN", "+Inf", "-Inf".
std::string FormatSampleValue(uint64_t value);
std::string FormatSampleValue(double value);

}  // namespace metaroce::daemon
