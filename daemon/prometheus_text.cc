#include "daemon/prometheus_text.h"

#include <charconv>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"

namespace metaroce::daemon {
namespace {

bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Length of the valid UTF-8 sequence at the start of `s`, or 0 when it is not one (overlong
// forms, surrogates and code points above U+10FFFF are invalid, as Go's utf8.ValidString says).
size_t Utf8SequenceLength(absl::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (b(i) < 0x80 || b(i) > 0xBF) return 0;
  }
  return n;
}

}  // namespace

absl::string_view MetricTypeName(MetricType type) {
  return type == MetricType::kCounter ? "counter" : "gauge";
}

bool IsValidMetricName(absl::string_view name) {
  if (name.empty() || !(IsNameStart(name[0]) || name[0] == ':')) return false;
  for (char c : name) {
    if (!(IsNameStart(c) || IsDigit(c) || c == ':')) return false;
  }
  return true;
}

bool IsValidLabelName(absl::string_view name) {
  if (name.empty() || !IsNameStart(name[0])) return false;
  if (name.size() >= 2 && name[0] == '_' && name[1] == '_') return false;
  for (char c : name) {
    if (!(IsNameStart(c) || IsDigit(c))) return false;
  }
  return true;
}

std::string ValidUtf8(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const size_t n = Utf8SequenceLength(text);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      text.remove_prefix(1);
    } else {
      out.append(text.data(), n);
      text.remove_prefix(n);
    }
  }
  return out;
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  for (char c : ValidUtf8(value)) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string EscapeHelp(absl::string_view help) {
  std::string out;
  for (char c : ValidUtf8(help)) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string FormatSampleValue(uint64_t value) { return absl::StrCat(value); }

std::string FormatSampleValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), value);
  if (r.ec != std::errc()) return "NaN";  // cannot happen: 64 bytes hold any double
  return std::string(buf, r.ptr);
}

PrometheusText::Family& PrometheusText::Declare(absl::string_view name, MetricType type,
                                                absl::string_view help) {
  auto reject = [&](std::string why) -> Family& {
    problems_.push_back(std::move(why));
    rejected_.push_back(std::unique_ptr<Family>(
        new Family(this, std::string(name), type, std::string(help))));
    rejected_.back()->rejected_ = true;
    return *rejected_.back();
  };
  if (!IsValidMetricName(name)) return reject(absl::StrCat("invalid metric name '", name, "'"));
  auto it = families_.find(name);
  if (it == families_.end()) {
    auto f = std::unique_ptr<Family>(new Family(this, std::string(name), type, std::string(help)));
    order_.push_back(f.get());
    return *families_.emplace(std::string(name), std::move(f)).first->second;
  }
  if (it->second->type_ != type || it->second->help_ != help) {
    return reject(absl::StrCat("family '", name, "' declared again with another type or help"));
  }
  return *it->second;
}

void PrometheusText::Family::AddFormatted(const Labels& labels, const std::string& value) {
  if (rejected_) return;
  std::string set;
  std::set<absl::string_view> seen;
  for (const auto& [label, v] : labels) {
    if (!IsValidLabelName(label)) {
      owner_->problems_.push_back(absl::StrCat(name_, ": invalid label name '", label, "'"));
      return;
    }
    if (!seen.insert(label).second) {
      owner_->problems_.push_back(absl::StrCat(name_, ": label '", label, "' given twice"));
      return;
    }
    absl::StrAppend(&set, set.empty() ? "" : ",", label, "=\"", EscapeLabelValue(v), "\"");
  }
  if (!label_sets_.insert(set).second) {
    owner_->problems_.push_back(absl::StrCat(name_, ": the series {", set, "} added twice"));
    return;
  }
  lines_.push_back(set.empty() ? absl::StrCat(name_, " ", value)
                               : absl::StrCat(name_, "{", set, "} ", value));
}

void PrometheusText::Family::Add(const Labels& labels, uint64_t value) {
  AddFormatted(labels, FormatSampleValue(value));
}

void PrometheusText::Family::Add(const Labels& labels, double value) {
  AddFormatted(labels, FormatSampleValue(value));
}

std::string PrometheusText::Render() const {
  std::string out;
  for (const Family* f : order_) {
    absl::StrAppend(&out, "# HELP ", f->name_, " ", EscapeHelp(f->help_), "\n# TYPE ", f->name_,
                    " ", MetricTypeName(f->type_), "\n");
    for (const std::string& line : f->lines_) absl::StrAppend(&out, line, "\n");
  }
  return out;
}

}  // namespace metaroce::daemon
