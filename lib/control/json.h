// JSON values for the control protocol (lib/control/protocol.h) and the tools' documents.
//
// A Json is null, a bool, an integer (signed or unsigned 64-bit, kept exact), a double, a string,
// an array or an object. Objects keep insertion order (documents read the way they were built)
// and look keys up linearly: they are small. Parse() accepts RFC 8259 text only (no comments,
// no trailing commas, no NaN), bounded in nesting depth, and says where and why it refused;
// Dump() writes RFC 8259 (non-finite doubles become null; strings are escaped, UTF-8 passes
// through as is).
//
// Threading: a value is a plain value type. Errors: absl::Status naming the key or offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace metaroce::control {

class Json {
 public:
  enum class Type { kNull, kBool, kInt, kUint, kDouble, kString, kArray, kObject, kRaw };
  using Object = std::vector<std::pair<std::string, Json>>;
  using Array = std::vector<Json>;

  Json() : v_(nullptr) {}
  Json(std::nullptr_t) : v_(nullptr) {}
  Json(bool b) : v_(b) {}
  Json(int v) : v_(static_cast<int64_t>(v)) {}
  Json(long v) : v_(static_cast<int64_t>(v)) {}
  Json(long long v) : v_(static_cast<int64_t>(v)) {}
  Json(unsigned v) : v_(static_cast<uint64_t>(v)) {}
  Json(unsigned long v) : v_(static_cast<uint64_t>(v)) {}
  Json(unsigned long long v) : v_(static_cast<uint64_t>(v)) {}
  Json(double v) : v_(v) {}
  Json(const char* s) : v_(std::string(s)) {}
  Json(std::string s) : v_(std::move(s)) {}
  Json(std::string_view s) : v_(std::string(s)) {}

  static Json MakeObject() { Json j; j.v_ = Object{}; return j; }
  static Json MakeArray() { Json j; j.v_ = Array{}; return j; }
  // Text that is already JSON (e.g. a peer's document), written by Dump() as is; never produced
  // by Parse().
  static Json Raw(std::string json) { Json j; j.v_ = RawText{std::move(json)}; return j; }

  // Parses one JSON text (surrounding whitespace allowed, nothing else after it). Integers
  // without fraction or exponent that fit int64/uint64 stay integers; others become doubles.
  static absl::StatusOr<Json> Parse(std::string_view text, size_t max_depth = 64);

  Type type() const;
  bool is_null() const { return type() == Type::kNull; }
  bool is_object() const { return type() == Type::kObject; }
  bool is_array() const { return type() == Type::kArray; }
  bool is_string() const { return type() == Type::kString; }

  // Scalar reads: nullopt when the value is not of that kind. AsUint accepts a non-negative
  // kInt, AsInt a kUint up to INT64_MAX, AsDouble any number.
  std::optional<bool> AsBool() const;
  std::optional<int64_t> AsInt() const;
  std::optional<uint64_t> AsUint() const;
  std::optional<double> AsDouble() const;
  std::optional<std::string_view> AsString() const;

  // Object member, created as null when missing (a null value becomes an object first).
  Json& operator[](std::string_view key);
  // Object member or nullptr (missing, or this is not an object).
  const Json* Find(std::string_view key) const;
  // Appends to an array (a null value becomes an array first); returns the new element.
  Json& Push(Json v);
  // Elements / members; empty when the value is not an array / object.
  const Array& array() const;
  const Object& object() const;
  size_t size() const;  // elements or members; 0 for scalars

  // Typed member reads for request parameters: a missing key or a value of another kind is an
  // InvalidArgument naming the key and what was expected.
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<uint64_t> GetUint(std::string_view key) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetDouble(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  // Same, with a default when the key is missing or null (a value of another kind is still an
  // error).
  absl::StatusOr<std::string> GetStringOr(std::string_view key, std::string_view fallback) const;
  absl::StatusOr<uint64_t> GetUintOr(std::string_view key, uint64_t fallback) const;
  absl::StatusOr<bool> GetBoolOr(std::string_view key, bool fallback) const;

  // indent < 0: one line, no spaces (the control protocol's framing relies on it: no newline).
  std::string Dump(int indent = -1) const;

  friend bool operator==(const Json& a, const Json& b);

 private:
  friend class JsonParser;  // json.cc: builds objects member by member, without lookups
  struct RawText {
    std::string text;
    friend bool operator==(const RawText&, const RawText&) = default;
  };
  void DumpTo(std::string& out, int indent, int depth) const;
  std::variant<std::nullptr_t, bool, int64_t, uint64_t, double, std::string, Array, Object,
               RawText>
      v_;
};

}  // namespace metaroce::control
