#include "lib/control/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/control/absl_view.h"

namespace metaroce::control {
namespace {

// Debian's Abseil has its own string_view type.

// ---------------------------------------------------------------------------------------------
// Dump

void Escape(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// Six significant digits, as mrperf's documents always had (tools/perf/README.md): its tables
// and JSON are read by people and scripts that expect "12.3457", not 17 digits.
void AppendDouble(std::string& out, double d) {
  if (!std::isfinite(d)) {
    out += "null";
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", d);
  out += buf;
}

void Newline(std::string& out, int indent, int depth) {
  if (indent < 0) return;
  out += '\n';
  out.append(static_cast<size_t>(indent) * static_cast<size_t>(depth), ' ');
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Parse: recursive descent over RFC 8259's grammar. Every refusal names the byte offset (from 0)
// where the text stopped being JSON.

class JsonParser {
 public:
  JsonParser(std::string_view text, size_t max_depth) : text_(text), max_depth_(max_depth) {}

  absl::StatusOr<Json> ParseDocument() {
    SkipWhitespace();
    absl::StatusOr<Json> value = ParseValue(0);
    if (!value.ok()) return value;
    SkipWhitespace();
    if (pos_ != text_.size()) return Error("unexpected text after the JSON value");
    return value;
  }

 private:
  absl::Status Error(std::string_view what) const { return ErrorAt(what, pos_); }
  absl::Status ErrorAt(std::string_view what, size_t at) const {
    return absl::InvalidArgumentError(absl::StrCat("JSON: ", AbslView(what), " at byte ", at));
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return text_[pos_]; }

  void SkipWhitespace() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t' || Peek() == '\n' || Peek() == '\r')) {
      ++pos_;
    }
  }

  // What the parser found, for messages: "end of text", "']'", "byte 0x01".
  std::string Found() const {
    if (AtEnd()) return "end of text";
    const unsigned char c = static_cast<unsigned char>(Peek());
    if (c >= 0x20 && c < 0x7f) return absl::StrCat("'", std::string(1, Peek()), "'");
    return absl::StrFormat("byte 0x%02x", c);
  }

  absl::StatusOr<Json> ParseValue(size_t depth) {
    if (AtEnd()) return Error("expected a value, found end of text");
    switch (Peek()) {
      case '{': return ParseObject(depth + 1);
      case '[': return ParseArray(depth + 1);
      case '"': {
        absl::StatusOr<std::string> s = ParseString();
        if (!s.ok()) return s.status();
        return Json(*std::move(s));
      }
      case 't': return ParseLiteral("true", Json(true));
      case 'f': return ParseLiteral("false", Json(false));
      case 'n': return ParseLiteral("null", Json());
      default:
        if (Peek() == '-' || (Peek() >= '0' && Peek() <= '9')) return ParseNumber();
        return Error(absl::StrCat("expected a value, found ", Found()));
    }
  }

  absl::StatusOr<Json> ParseLiteral(std::string_view word, Json value) {
    if (text_.substr(pos_, word.size()) != word) {
      return Error(absl::StrCat("expected '", AbslView(word), "'"));
    }
    pos_ += word.size();
    return value;
  }

  absl::Status CheckDepth(size_t depth) const {
    if (depth <= max_depth_) return absl::OkStatus();
    return Error(absl::StrCat("nesting deeper than ", max_depth_));
  }

  absl::StatusOr<Json> ParseObject(size_t depth) {
    if (absl::Status st = CheckDepth(depth); !st.ok()) return st;
    ++pos_;  // '{'
    Json out = Json::MakeObject();
    SkipWhitespace();
    if (!AtEnd() && Peek() == '}') {
      ++pos_;
      return out;
    }
    DuplicateKeys keys;
    while (true) {
      if (AtEnd() || Peek() != '"') return Error(absl::StrCat("expected a string key, found ",
                                                              Found()));
      const size_t key_at = pos_;
      absl::StatusOr<std::string> key = ParseString();
      if (!key.ok()) return key.status();
      Json::Object& members = std::get<Json::Object>(out.v_);
      if (!keys.Insert(members, *key)) {
        return ErrorAt(absl::StrCat("duplicate key \"", *key, "\""), key_at);
      }
      SkipWhitespace();
      if (AtEnd() || Peek() != ':') return Error("expected ':' after object key");
      ++pos_;
      SkipWhitespace();
      absl::StatusOr<Json> value = ParseValue(depth);
      if (!value.ok()) return value;
      members.emplace_back(*std::move(key), *std::move(value));
      SkipWhitespace();
      if (AtEnd()) return Error("expected ',' or '}' after object member, found end of text");
      if (Peek() == '}') {
        ++pos_;
        return out;
      }
      if (Peek() != ',') return Error(absl::StrCat("expected ',' or '}' after object member, found ",
                                                   Found()));
      ++pos_;
      SkipWhitespace();
      if (!AtEnd() && Peek() == '}') return Error("trailing comma in object");
    }
  }

  absl::StatusOr<Json> ParseArray(size_t depth) {
    if (absl::Status st = CheckDepth(depth); !st.ok()) return st;
    ++pos_;  // '['
    Json out = Json::MakeArray();
    SkipWhitespace();
    if (!AtEnd() && Peek() == ']') {
      ++pos_;
      return out;
    }
    while (true) {
      absl::StatusOr<Json> value = ParseValue(depth);
      if (!value.ok()) return value;
      out.Push(*std::move(value));
      SkipWhitespace();
      if (AtEnd()) return Error("expected ',' or ']' after array element, found end of text");
      if (Peek() == ']') {
        ++pos_;
        return out;
      }
      if (Peek() != ',') return Error(absl::StrCat("expected ',' or ']' after array element, found ",
                                                   Found()));
      ++pos_;
      SkipWhitespace();
      if (!AtEnd() && Peek() == ']') return Error("trailing comma in array");
    }
  }

  // Objects are small, so duplicates are found by a linear scan; a large object (a hostile
  // client's) switches to a hash set so that parsing stays linear.
  class DuplicateKeys {
   public:
    bool Insert(const Json::Object& so_far, const std::string& key) {
      if (so_far.size() < kLinearLimit) {
        for (const auto& [k, v] : so_far) {
          if (k == key) return false;
        }
        return true;
      }
      if (seen_.empty()) {
        for (const auto& [k, v] : so_far) seen_.insert(k);
      }
      return seen_.insert(key).second;
    }

   private:
    static constexpr size_t kLinearLimit = 16;
    std::unordered_set<std::string> seen_;
  };

  absl::StatusOr<Json> ParseNumber() {
    const size_t begin = pos_;
    const bool negative = Peek() == '-';
    if (negative) ++pos_;
    if (AtEnd() || !IsDigit(Peek())) return Error("expected a digit after '-'");
    if (Peek() == '0' && pos_ + 1 < text_.size() && IsDigit(text_[pos_ + 1])) {
      return Error("leading zero in number");
    }
    SkipDigits();
    bool integral = true;
    if (!AtEnd() && Peek() == '.') {
      integral = false;
      ++pos_;
      if (AtEnd() || !IsDigit(Peek())) return Error("expected a digit after '.'");
      SkipDigits();
    }
    if (!AtEnd() && (Peek() == 'e' || Peek() == 'E')) {
      integral = false;
      ++pos_;
      if (!AtEnd() && (Peek() == '+' || Peek() == '-')) ++pos_;
      if (AtEnd() || !IsDigit(Peek())) return Error("expected a digit in exponent");
      SkipDigits();
    }
    const std::string_view number = text_.substr(begin, pos_ - begin);
    if (integral) {
      if (std::optional<Json> exact = ParseInteger(number, negative)) return *exact;
    }
    double d = 0;
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), d);
    if (ec != std::errc() || end != number.data() + number.size()) {
      return ErrorAt("number out of range of a double", begin);
    }
    return Json(d);
  }

  // An integer literal that fits int64 (negative) or uint64 (otherwise); nullopt when it does
  // not, so that the caller reads it as a double.
  static std::optional<Json> ParseInteger(std::string_view number, bool negative) {
    const char* first = number.data();
    const char* last = number.data() + number.size();
    if (negative) {
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(first, last, v);
      if (ec == std::errc() && end == last) return Json(static_cast<long long>(v));
      return std::nullopt;
    }
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(first, last, v);
    if (ec == std::errc() && end == last) return Json(static_cast<unsigned long long>(v));
    return std::nullopt;
  }

  static bool IsDigit(char c) { return c >= '0' && c <= '9'; }
  void SkipDigits() {
    while (!AtEnd() && IsDigit(Peek())) ++pos_;
  }

  absl::StatusOr<std::string> ParseString() {
    const size_t open = pos_;
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (AtEnd()) return ErrorAt("unterminated string", open);
      const unsigned char c = static_cast<unsigned char>(Peek());
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) {
        return Error(absl::StrFormat("control character 0x%02x in string (escape it)", c));
      }
      if (c == '\\') {
        if (absl::Status st = ParseEscape(out); !st.ok()) return st;
      } else if (c < 0x80) {
        out += static_cast<char>(c);
        ++pos_;
      } else if (absl::Status st = CopyUtf8(out); !st.ok()) {
        return st;
      }
    }
  }

  absl::Status ParseEscape(std::string& out) {
    const size_t at = pos_;
    ++pos_;  // '\\'
    if (AtEnd()) return ErrorAt("unterminated string", at);
    const char e = Peek();
    ++pos_;
    switch (e) {
      case '"': out += '"'; return absl::OkStatus();
      case '\\': out += '\\'; return absl::OkStatus();
      case '/': out += '/'; return absl::OkStatus();
      case 'b': out += '\b'; return absl::OkStatus();
      case 'f': out += '\f'; return absl::OkStatus();
      case 'n': out += '\n'; return absl::OkStatus();
      case 'r': out += '\r'; return absl::OkStatus();
      case 't': out += '\t'; return absl::OkStatus();
      case 'u': return ParseUnicodeEscape(out, at);
      default: {
        const unsigned char u = static_cast<unsigned char>(e);
        const std::string shown = (u >= 0x20 && u < 0x7f) ? absl::StrCat("\\", std::string(1, e))
                                                          : absl::StrFormat("byte 0x%02x", u);
        return ErrorAt(absl::StrCat("invalid escape ", shown, " in string"), at);
      }
    }
  }

  // Four hex digits after "\u" (already consumed); nullopt when they are not there.
  std::optional<uint32_t> ReadHex4() {
    if (text_.size() - pos_ < 4) return std::nullopt;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_ + static_cast<size_t>(i)];
      uint32_t digit;
      if (c >= '0' && c <= '9') digit = static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') digit = static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') digit = static_cast<uint32_t>(c - 'A' + 10);
      else return std::nullopt;
      v = v * 16 + digit;
    }
    pos_ += 4;
    return v;
  }

  // \uXXXX, with UTF-16 surrogate pairs joined (RFC 8259 section 7); `at` is the backslash.
  absl::Status ParseUnicodeEscape(std::string& out, size_t at) {
    std::optional<uint32_t> unit = ReadHex4();
    if (!unit) return ErrorAt("invalid \\u escape (four hex digits expected)", at);
    uint32_t code = *unit;
    if (code >= 0xDC00 && code <= 0xDFFF) {
      return ErrorAt(absl::StrFormat("unpaired surrogate \\u%04X in string", code), at);
    }
    if (code >= 0xD800 && code <= 0xDBFF) {
      std::optional<uint32_t> low;
      if (text_.substr(pos_, 2) == "\\u") {
        pos_ += 2;
        low = ReadHex4();
      }
      if (!low || *low < 0xDC00 || *low > 0xDFFF) {
        return ErrorAt(absl::StrFormat("unpaired surrogate \\u%04X in string", code), at);
      }
      code = 0x10000 + ((code - 0xD800) << 10) + (*low - 0xDC00);
    }
    AppendUtf8(out, code);
    return absl::OkStatus();
  }

  static void AppendUtf8(std::string& out, uint32_t code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  // One multi-byte UTF-8 sequence, copied after checking it is well formed (RFC 3629: no
  // overlong forms, no surrogates, nothing above U+10FFFF).
  absl::Status CopyUtf8(std::string& out) {
    const unsigned char lead = static_cast<unsigned char>(Peek());
    size_t length;
    uint32_t code, min;
    if ((lead & 0xE0) == 0xC0) { length = 2; code = lead & 0x1F; min = 0x80; }
    else if ((lead & 0xF0) == 0xE0) { length = 3; code = lead & 0x0F; min = 0x800; }
    else if ((lead & 0xF8) == 0xF0) { length = 4; code = lead & 0x07; min = 0x10000; }
    else return Error("invalid UTF-8 in string");
    if (text_.size() - pos_ < length) return Error("invalid UTF-8 in string");
    for (size_t i = 1; i < length; ++i) {
      const unsigned char c = static_cast<unsigned char>(text_[pos_ + i]);
      if ((c & 0xC0) != 0x80) return Error("invalid UTF-8 in string");
      code = (code << 6) | (c & 0x3F);
    }
    if (code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      return Error("invalid UTF-8 in string");
    }
    out.append(text_.substr(pos_, length));
    pos_ += length;
    return absl::OkStatus();
  }

  std::string_view text_;
  size_t max_depth_;
  size_t pos_ = 0;
};

namespace {

// ---------------------------------------------------------------------------------------------
// Typed member reads

// A value as messages quote it: its JSON, shortened when long.
std::string Shown(const Json& value) {
  std::string text = value.Dump();
  constexpr size_t kMax = 40;
  if (text.size() > kMax) text = absl::StrCat(text.substr(0, kMax), "...");
  return text;
}

absl::Status Missing(std::string_view key, std::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat("missing \"", AbslView(key), "\" (", AbslView(expected), ")"));
}

absl::Status WrongKind(std::string_view key, std::string_view expected, const Json& value) {
  return absl::InvalidArgumentError(
      absl::StrCat("\"", AbslView(key), "\" must be ", AbslView(expected), ", not ", Shown(value)));
}

// The member, or nullptr when it is missing or null (so that "Or" reads take their fallback).
const Json* Present(const Json& object, std::string_view key) {
  const Json* v = object.Find(key);
  return (v == nullptr || v->is_null()) ? nullptr : v;
}

template <typename T, typename Read>
absl::StatusOr<T> Get(const Json& object, std::string_view key, std::string_view expected,
                      Read read) {
  const Json* v = Present(object, key);
  if (v == nullptr) return Missing(key, expected);
  std::optional<T> value = read(*v);
  if (!value) return WrongKind(key, expected, *v);
  return T(*value);
}

template <typename T, typename Read>
absl::StatusOr<T> GetOr(const Json& object, std::string_view key, std::string_view expected,
                        T fallback, Read read) {
  if (Present(object, key) == nullptr) return fallback;
  return Get<T>(object, key, expected, read);
}

constexpr std::string_view kAString = "a string";
constexpr std::string_view kAnUnsigned = "an unsigned integer";
constexpr std::string_view kAnInteger = "an integer";
constexpr std::string_view kANumber = "a number";
constexpr std::string_view kABool = "true or false";

std::optional<std::string> ReadString(const Json& v) {
  std::optional<std::string_view> s = v.AsString();
  if (!s) return std::nullopt;
  return std::string(*s);
}
std::optional<uint64_t> ReadUint(const Json& v) { return v.AsUint(); }
std::optional<int64_t> ReadInt(const Json& v) { return v.AsInt(); }
std::optional<double> ReadDouble(const Json& v) { return v.AsDouble(); }
std::optional<bool> ReadBool(const Json& v) { return v.AsBool(); }

// Numbers compare by value whatever their representation (JSON has one number type): 1, 1u and
// 1.0 are equal; an integer equals a double only when the double is exactly that integer.
bool IntegerEqualsDouble(const Json& integer, double d) {
  if (std::optional<int64_t> i = integer.AsInt()) {
    return d >= -0x1p63 && d < 0x1p63 && std::trunc(d) == d && static_cast<int64_t>(d) == *i;
  }
  const uint64_t u = *integer.AsUint();
  return d >= 0 && d < 0x1p64 && std::trunc(d) == d && static_cast<uint64_t>(d) == u;
}

bool NumbersEqual(const Json& a, const Json& b) {
  const bool a_double = a.type() == Json::Type::kDouble;
  const bool b_double = b.type() == Json::Type::kDouble;
  if (a_double && b_double) return *a.AsDouble() == *b.AsDouble();
  if (a_double) return IntegerEqualsDouble(b, *a.AsDouble());
  if (b_double) return IntegerEqualsDouble(a, *b.AsDouble());
  if (a.AsInt() && b.AsInt()) return *a.AsInt() == *b.AsInt();
  if (a.AsUint() && b.AsUint()) return *a.AsUint() == *b.AsUint();
  return false;  // one negative, one above INT64_MAX
}

bool IsNumber(Json::Type t) {
  return t == Json::Type::kInt || t == Json::Type::kUint || t == Json::Type::kDouble;
}

}  // namespace

absl::StatusOr<Json> Json::Parse(std::string_view text, size_t max_depth) {
  return JsonParser(text, max_depth).ParseDocument();
}

Json::Type Json::type() const {
  switch (v_.index()) {
    case 0: return Type::kNull;
    case 1: return Type::kBool;
    case 2: return Type::kInt;
    case 3: return Type::kUint;
    case 4: return Type::kDouble;
    case 5: return Type::kString;
    case 6: return Type::kArray;
    case 7: return Type::kObject;
    default: return Type::kRaw;
  }
}

std::optional<bool> Json::AsBool() const {
  if (const bool* b = std::get_if<bool>(&v_)) return *b;
  return std::nullopt;
}

std::optional<int64_t> Json::AsInt() const {
  if (const int64_t* i = std::get_if<int64_t>(&v_)) return *i;
  if (const uint64_t* u = std::get_if<uint64_t>(&v_)) {
    if (*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(*u);
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> Json::AsUint() const {
  if (const uint64_t* u = std::get_if<uint64_t>(&v_)) return *u;
  if (const int64_t* i = std::get_if<int64_t>(&v_)) {
    if (*i >= 0) return static_cast<uint64_t>(*i);
  }
  return std::nullopt;
}

std::optional<double> Json::AsDouble() const {
  if (const double* d = std::get_if<double>(&v_)) return *d;
  if (const int64_t* i = std::get_if<int64_t>(&v_)) return static_cast<double>(*i);
  if (const uint64_t* u = std::get_if<uint64_t>(&v_)) return static_cast<double>(*u);
  return std::nullopt;
}

std::optional<std::string_view> Json::AsString() const {
  if (const std::string* s = std::get_if<std::string>(&v_)) return std::string_view(*s);
  return std::nullopt;
}

// A value of another kind than object becomes an empty object: the caller asked to build one.
Json& Json::operator[](std::string_view key) {
  if (!std::holds_alternative<Object>(v_)) v_ = Object{};
  Object& o = std::get<Object>(v_);
  for (auto& [k, v] : o) {
    if (k == key) return v;
  }
  o.emplace_back(std::string(key), Json());
  return o.back().second;
}

const Json* Json::Find(std::string_view key) const {
  const Object* o = std::get_if<Object>(&v_);
  if (o == nullptr) return nullptr;
  for (const auto& [k, v] : *o) {
    if (k == key) return &v;
  }
  return nullptr;
}

// As operator[]: a value of another kind than array becomes an empty array first.
Json& Json::Push(Json v) {
  if (!std::holds_alternative<Array>(v_)) v_ = Array{};
  Array& a = std::get<Array>(v_);
  a.push_back(std::move(v));
  return a.back();
}

const Json::Array& Json::array() const {
  static const Array kEmpty;
  const Array* a = std::get_if<Array>(&v_);
  return a != nullptr ? *a : kEmpty;
}

const Json::Object& Json::object() const {
  static const Object kEmpty;
  const Object* o = std::get_if<Object>(&v_);
  return o != nullptr ? *o : kEmpty;
}

size_t Json::size() const {
  if (const Array* a = std::get_if<Array>(&v_)) return a->size();
  if (const Object* o = std::get_if<Object>(&v_)) return o->size();
  return 0;
}

absl::StatusOr<std::string> Json::GetString(std::string_view key) const {
  return Get<std::string>(*this, key, kAString, ReadString);
}
absl::StatusOr<uint64_t> Json::GetUint(std::string_view key) const {
  return Get<uint64_t>(*this, key, kAnUnsigned, ReadUint);
}
absl::StatusOr<int64_t> Json::GetInt(std::string_view key) const {
  return Get<int64_t>(*this, key, kAnInteger, ReadInt);
}
absl::StatusOr<double> Json::GetDouble(std::string_view key) const {
  return Get<double>(*this, key, kANumber, ReadDouble);
}
absl::StatusOr<bool> Json::GetBool(std::string_view key) const {
  return Get<bool>(*this, key, kABool, ReadBool);
}
absl::StatusOr<std::string> Json::GetStringOr(std::string_view key,
                                              std::string_view fallback) const {
  return GetOr<std::string>(*this, key, kAString, std::string(fallback), ReadString);
}
absl::StatusOr<uint64_t> Json::GetUintOr(std::string_view key, uint64_t fallback) const {
  return GetOr<uint64_t>(*this, key, kAnUnsigned, fallback, ReadUint);
}
absl::StatusOr<bool> Json::GetBoolOr(std::string_view key, bool fallback) const {
  return GetOr<bool>(*this, key, kABool, fallback, ReadBool);
}

std::string Json::Dump(int indent) const {
  std::string out;
  DumpTo(out, indent, 0);
  return out;
}

// Pretty output is byte for byte what mrperf's JSON writer produced ("key": value, members on
// their own lines); compact output has no spaces at all.
void Json::DumpTo(std::string& out, int indent, int depth) const {
  const std::string_view separator = indent < 0 ? ":" : ": ";
  if (std::holds_alternative<std::nullptr_t>(v_)) {
    out += "null";
  } else if (const bool* b = std::get_if<bool>(&v_)) {
    out += *b ? "true" : "false";
  } else if (const int64_t* i = std::get_if<int64_t>(&v_)) {
    out += std::to_string(*i);
  } else if (const uint64_t* u = std::get_if<uint64_t>(&v_)) {
    out += std::to_string(*u);
  } else if (const double* d = std::get_if<double>(&v_)) {
    AppendDouble(out, *d);
  } else if (const std::string* s = std::get_if<std::string>(&v_)) {
    Escape(out, *s);
  } else if (const RawText* r = std::get_if<RawText>(&v_)) {
    out += r->text.empty() ? "null" : r->text;
  } else if (const Object* o = std::get_if<Object>(&v_)) {
    out += '{';
    for (size_t n = 0; n < o->size(); ++n) {
      if (n > 0) out += ',';
      Newline(out, indent, depth + 1);
      Escape(out, (*o)[n].first);
      out += separator;
      (*o)[n].second.DumpTo(out, indent, depth + 1);
    }
    if (!o->empty()) Newline(out, indent, depth);
    out += '}';
  } else if (const Array* a = std::get_if<Array>(&v_)) {
    out += '[';
    for (size_t n = 0; n < a->size(); ++n) {
      if (n > 0) out += ',';
      Newline(out, indent, depth + 1);
      (*a)[n].DumpTo(out, indent, depth + 1);
    }
    if (!a->empty()) Newline(out, indent, depth);
    out += ']';
  }
}

bool operator==(const Json& a, const Json& b) {
  if (IsNumber(a.type()) && IsNumber(b.type())) return NumbersEqual(a, b);
  return a.v_ == b.v_;
}

}  // namespace metaroce::control
