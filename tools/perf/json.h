// A small JSON document builder for mrperf's result document (the contract for scripts).
// Values keep insertion order; Dump() writes RFC 8259 JSON (non-finite numbers become null).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace metaroce::perf {

class JsonValue {
 public:
  using Object = std::vector<std::pair<std::string, JsonValue>>;
  using Array = std::vector<JsonValue>;

  JsonValue() : v_(nullptr) {}
  JsonValue(std::nullptr_t) : v_(nullptr) {}
  JsonValue(bool b) : v_(b) {}
  JsonValue(int v) : v_(static_cast<int64_t>(v)) {}
  JsonValue(long v) : v_(static_cast<int64_t>(v)) {}
  JsonValue(long long v) : v_(static_cast<int64_t>(v)) {}
  JsonValue(unsigned v) : v_(static_cast<uint64_t>(v)) {}
  JsonValue(unsigned long v) : v_(static_cast<uint64_t>(v)) {}
  JsonValue(unsigned long long v) : v_(static_cast<uint64_t>(v)) {}
  JsonValue(double v) : v_(v) {}
  JsonValue(const char* s) : v_(std::string(s)) {}
  JsonValue(std::string s) : v_(std::move(s)) {}
  JsonValue(std::string_view s) : v_(std::string(s)) {}

  // Text that is already JSON (e.g. the peer's document), inserted as is.
  static JsonValue Raw(std::string json) { JsonValue j; j.v_ = RawText{std::move(json)}; return j; }
  static JsonValue MakeObject() { JsonValue j; j.v_ = Object{}; return j; }
  static JsonValue MakeArray() { JsonValue j; j.v_ = Array{}; return j; }

  // Object member (created as null when missing; the value becomes an object if null).
  JsonValue& operator[](std::string_view key);
  // Appends to an array (the value becomes an array if null).
  JsonValue& Push(JsonValue v);
  bool is_null() const { return std::holds_alternative<std::nullptr_t>(v_); }

  // indent < 0: one line.
  std::string Dump(int indent = -1) const;

 private:
  struct RawText {
    std::string text;
  };
  void DumpTo(std::string& out, int indent, int depth) const;
  std::variant<std::nullptr_t, bool, int64_t, uint64_t, double, std::string, Object, Array,
               RawText>
      v_;
};

}  // namespace metaroce::perf
