// The simulator's JSON output: a minimal streaming writer with fixed number formatting, so that
// the same run always prints the same bytes (mrsim's determinism contract).
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace metaroce::sim {

// A minimal streaming JSON writer: objects and arrays, commas handled, keys in call order.
class JsonWriter {
 public:
  std::string Take() { return std::move(out_); }

  JsonWriter& BeginObject(std::string_view key = {}) { return Open(key, '{'); }
  JsonWriter& EndObject() { return Close('}'); }
  JsonWriter& BeginArray(std::string_view key = {}) { return Open(key, '['); }
  JsonWriter& EndArray() { return Close(']'); }

  JsonWriter& Field(std::string_view key, std::string_view value) {
    Key(key);
    Quoted(value);
    return *this;
  }
  JsonWriter& Field(std::string_view key, const char* value) {
    return Field(key, std::string_view(value));
  }
  JsonWriter& Field(std::string_view key, bool value) {
    Key(key);
    out_ += value ? "true" : "false";
    return *this;
  }
  JsonWriter& Field(std::string_view key, uint64_t value) {
    Key(key);
    absl::StrAppend(&out_, value);
    return *this;
  }
  JsonWriter& Field(std::string_view key, int64_t value) {
    Key(key);
    absl::StrAppend(&out_, value);
    return *this;
  }
  JsonWriter& Field(std::string_view key, uint32_t value) { return Field(key, uint64_t{value}); }
  JsonWriter& Field(std::string_view key, uint16_t value) { return Field(key, uint64_t{value}); }
  JsonWriter& Field(std::string_view key, double value) {
    Key(key);
    Number(value);
    return *this;
  }
  JsonWriter& Field(std::string_view key, std::optional<double> value) {
    if (!value) {
      Key(key);
      out_ += "null";
      return *this;
    }
    return Field(key, *value);
  }
  JsonWriter& Element(double value) {
    Key({});
    Number(value);
    return *this;
  }
  JsonWriter& Element(std::string_view value) {
    Key({});
    Quoted(value);
    return *this;
  }

 private:
  JsonWriter& Open(std::string_view key, char bracket) {
    Key(key);
    out_ += bracket;
    first_.push_back(true);
    return *this;
  }
  JsonWriter& Close(char bracket) {
    out_ += bracket;
    first_.pop_back();
    return *this;
  }
  // Writes the separator and, inside an object, the key.
  void Key(std::string_view key) {
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = false;
    }
    if (!key.empty()) {
      Quoted(key);
      out_ += ':';
    }
  }
  void Number(double value) {
    if (!std::isfinite(value)) {
      out_ += "null";
      return;
    }
    // Fixed precision keeps output identical across runs; trailing zeros trimmed for reading.
    std::string text = absl::StrFormat("%.6f", value);
    while (!text.empty() && text.back() == '0') text.pop_back();
    if (!text.empty() && text.back() == '.') text.pop_back();
    if (text == "-0") text = "0";
    out_ += text;
  }
  void Quoted(std::string_view s) {
    out_ += '"';
    for (char ch : s) {
      switch (ch) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\n': out_ += "\\n"; break;
        case '\t': out_ += "\\t"; break;
        default:
          if (static_cast<unsigned char>(ch) < 0x20) {
            out_ += absl::StrFormat("\\u%04x", static_cast<unsigned char>(ch));
          } else {
            out_ += ch;
          }
      }
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<bool> first_;
};

}  // namespace metaroce::sim
