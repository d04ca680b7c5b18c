#include "tools/perf/json.h"

#include <cmath>
#include <cstdio>

namespace metaroce::perf {
namespace {

void Escape(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
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

void Newline(std::string& out, int indent, int depth) {
  if (indent < 0) return;
  out += '\n';
  out.append(static_cast<size_t>(indent * depth), ' ');
}

}  // namespace

JsonValue& JsonValue::operator[](std::string_view key) {
  if (is_null()) v_ = Object{};
  Object& o = std::get<Object>(v_);
  for (auto& [k, v] : o) {
    if (k == key) return v;
  }
  o.emplace_back(std::string(key), JsonValue());
  return o.back().second;
}

JsonValue& JsonValue::Push(JsonValue v) {
  if (is_null()) v_ = Array{};
  Array& a = std::get<Array>(v_);
  a.push_back(std::move(v));
  return a.back();
}

std::string JsonValue::Dump(int indent) const {
  std::string out;
  DumpTo(out, indent, 0);
  return out;
}

void JsonValue::DumpTo(std::string& out, int indent, int depth) const {
  if (std::holds_alternative<std::nullptr_t>(v_)) {
    out += "null";
  } else if (const bool* b = std::get_if<bool>(&v_)) {
    out += *b ? "true" : "false";
  } else if (const int64_t* i = std::get_if<int64_t>(&v_)) {
    out += std::to_string(*i);
  } else if (const uint64_t* u = std::get_if<uint64_t>(&v_)) {
    out += std::to_string(*u);
  } else if (const double* d = std::get_if<double>(&v_)) {
    if (!std::isfinite(*d)) {
      out += "null";
    } else {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.6g", *d);
      out += buf;
    }
  } else if (const RawText* r = std::get_if<RawText>(&v_)) {
    out += r->text.empty() ? "null" : r->text;
  } else if (const std::string* s = std::get_if<std::string>(&v_)) {
    Escape(out, *s);
  } else if (const Object* o = std::get_if<Object>(&v_)) {
    out += '{';
    bool first = true;
    for (const auto& [k, v] : *o) {
      if (!first) out += indent < 0 ? ", " : ",";
      first = false;
      Newline(out, indent, depth + 1);
      Escape(out, k);
      out += ": ";
      v.DumpTo(out, indent, depth + 1);
    }
    if (!o->empty()) Newline(out, indent, depth);
    out += '}';
  } else if (const Array* a = std::get_if<Array>(&v_)) {
    out += '[';
    bool first = true;
    for (const auto& v : *a) {
      if (!first) out += indent < 0 ? ", " : ",";
      first = false;
      Newline(out, indent, depth + 1);
      v.DumpTo(out, indent, depth + 1);
    }
    if (!a->empty()) Newline(out, indent, depth);
    out += ']';
  }
}

}  // namespace metaroce::perf
