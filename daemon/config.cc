#include "daemon/config.h"

#include <arpa/inet.h>
#include <grp.h>
#include <sys/un.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tools/common/byte_size.h"

namespace metaroce::daemon {
namespace {


absl::string_view Trim(absl::string_view s) {
  return absl::StripAsciiWhitespace(s);
}

absl::Status Bad(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

absl::StatusOr<uint64_t> ParseUnsigned(absl::string_view value, uint64_t lo, uint64_t hi) {
  uint64_t v = 0;
  if (!absl::SimpleAtoi(value, &v)) {
    return Bad(absl::StrCat("'", value, "' is not an integer in ", lo, "..", hi));
  }
  if (v < lo || v > hi) return Bad(absl::StrCat(value, " is not in ", lo, "..", hi));
  return v;
}

// Comma-separated list; entries trimmed; an empty entry is an error (a stray comma is a typo).
absl::StatusOr<std::vector<std::string>> ParseList(absl::string_view value) {
  std::vector<std::string> out;
  if (Trim(value).empty()) return out;
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    absl::string_view entry = Trim(part);
    if (entry.empty()) return Bad(absl::StrCat("empty entry in '", value, "'"));
    out.emplace_back(entry);
  }
  return out;
}

bool IsIpLiteral(const std::string& text) {
  unsigned char buf[16];
  return inet_pton(AF_INET, text.c_str(), buf) == 1 || inet_pton(AF_INET6, text.c_str(), buf) == 1;
}

absl::Status CheckInterfaceName(const std::string& name) {
  // IFNAMSIZ is 16 with the terminating NUL; the kernel refuses '/', ':' and whitespace.
  if (name.size() > 15) return Bad(absl::StrCat("'", name, "' is longer than 15 characters"));
  if (name == "." || name == ".." ||
      name.find_first_of("/: \t") != std::string::npos) {
    return Bad(absl::StrCat("'", name, "' is not an interface name"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view value) {
  absl::StatusOr<std::vector<std::string>> entries = ParseList(value);
  if (!entries.ok()) return entries.status();
  std::vector<int> cpus;
  for (const std::string& e : *entries) {
    std::vector<std::string> range = absl::StrSplit(e, absl::MaxSplits('-', 1));
    absl::StatusOr<uint64_t> lo = ParseUnsigned(range[0], 0, 4095);
    if (!lo.ok()) return lo.status();
    uint64_t hi = *lo;
    if (range.size() == 2) {
      absl::StatusOr<uint64_t> h = ParseUnsigned(range[1], 0, 4095);
      if (!h.ok()) return h.status();
      if (*h < *lo) return Bad(absl::StrCat("range '", e, "' runs backwards"));
      hi = *h;
    }
    for (uint64_t c = *lo; c <= hi; ++c) cpus.push_back(static_cast<int>(c));
  }
  return cpus;
}

absl::Status CheckGroupExists(const std::string& name) {
  struct group grp;
  struct group* found = nullptr;
  std::vector<char> buf(16384);
  const int rc = getgrnam_r(name.c_str(), &grp, buf.data(), buf.size(), &found);
  if (rc != 0 && rc != ENOENT && rc != ESRCH) {
    return Bad(absl::StrCat("cannot look up group '", name, "': ", std::strerror(rc)));
  }
  if (found == nullptr) {
    return Bad(absl::StrCat("no group '", name, "': create it (groupadd ", name,
                            ") or remove socket_group"));
  }
  return absl::OkStatus();
}

std::string JoinInts(const std::vector<int>& v) { return absl::StrJoin(v, ","); }

// One key of the file: how to read it into a Config and how to write its value back.
struct KeySpec {
  absl::string_view section;
  absl::string_view key;
  bool reloadable;
  bool may_be_empty;  // an empty value means "none" (optional lists and names)
  absl::Status (*parse)(absl::string_view value, Config& c);
  std::string (*format)(const Config& c);
};

template <typename T>
absl::Status SetUnsigned(absl::string_view value, uint64_t lo, uint64_t hi, T& out) {
  absl::StatusOr<uint64_t> v = ParseUnsigned(value, lo, hi);
  if (!v.ok()) return v.status();
  out = static_cast<T>(*v);
  return absl::OkStatus();
}

const std::vector<KeySpec>& Keys() {
  static const std::vector<KeySpec> keys = {
      {"daemon", "interfaces", false, false,
       [](absl::string_view v, Config& c) -> absl::Status {
         absl::StatusOr<std::vector<std::string>> l = ParseList(v);
         if (!l.ok()) return l.status();
         std::set<std::string> seen;
         for (const std::string& name : *l) {
           if (absl::Status s = CheckInterfaceName(name); !s.ok()) return s;
           if (!seen.insert(name).second) return Bad(absl::StrCat(name, " appears twice"));
         }
         c.daemon.interfaces = *l;
         return absl::OkStatus();
       },
       [](const Config& c) { return absl::StrJoin(c.daemon.interfaces, ","); }},
      {"daemon", "local_ips", false, true,
       [](absl::string_view v, Config& c) -> absl::Status {
         absl::StatusOr<std::vector<std::string>> l = ParseList(v);
         if (!l.ok()) return l.status();
         for (const std::string& ip : *l) {
           if (!IsIpLiteral(ip)) return Bad(absl::StrCat("'", ip, "' is not an IP address"));
         }
         c.daemon.local_ips = *l;
         return absl::OkStatus();
       },
       [](const Config& c) { return absl::StrJoin(c.daemon.local_ips, ","); }},
      {"daemon", "port_kind", false, false,
       [](absl::string_view v, Config& c) -> absl::Status {
         if (v == "af_xdp") {
           c.daemon.port_kind = PortKindSetting::kAfXdp;
         } else if (v == "udp") {
           c.daemon.port_kind = PortKindSetting::kUdp;
         } else {
           return Bad(absl::StrCat("'", v, "' is not one of af_xdp, udp"));
         }
         return absl::OkStatus();
       },
       [](const Config& c) { return std::string(PortKindSettingName(c.daemon.port_kind)); }},
      {"daemon", "udp_port", false, false,
       [](absl::string_view v, Config& c) { return SetUnsigned(v, 1, 65535, c.daemon.udp_port); },
       [](const Config& c) { return absl::StrCat(c.daemon.udp_port); }},
      {"daemon", "control_port", false, false,
       [](absl::string_view v, Config& c) {
         return SetUnsigned(v, 0, 65535, c.daemon.control_port);
       },
       [](const Config& c) { return absl::StrCat(c.daemon.control_port); }},
      {"daemon", "control_bind", false, false,
       [](absl::string_view v, Config& c) -> absl::Status {
         if (!IsIpLiteral(std::string(v))) {
           return Bad(absl::StrCat("'", v, "' is not an IP address (:: for every IPv4 and IPv6 address, 0.0.0.0 for every IPv4 one)"));
         }
         c.daemon.control_bind = std::string(v);
         return absl::OkStatus();
       },
       [](const Config& c) { return c.daemon.control_bind; }},
      {"daemon", "socket", false, false,
       [](absl::string_view v, Config& c) -> absl::Status {
         if (v.front() != '/') return Bad(absl::StrCat("'", v, "' is not an absolute path"));
         if (v.size() >= sizeof(sockaddr_un::sun_path)) {
           return Bad(absl::StrCat("'", v, "' is longer than ",
                                   sizeof(sockaddr_un::sun_path) - 1,
                                   " bytes (the limit of a Unix socket path)"));
         }
         c.daemon.socket = std::string(v);
         return absl::OkStatus();
       },
       [](const Config& c) { return c.daemon.socket; }},
      {"daemon", "socket_group", false, true,
       [](absl::string_view v, Config& c) -> absl::Status {
         if (!v.empty()) {
           if (absl::Status s = CheckGroupExists(std::string(v)); !s.ok()) return s;
         }
         c.daemon.socket_group = std::string(v);
         return absl::OkStatus();
       },
       [](const Config& c) { return c.daemon.socket_group; }},
      {"daemon", "workers", false, false,
       [](absl::string_view v, Config& c) { return SetUnsigned(v, 1, 64, c.daemon.workers); },
       [](const Config& c) { return absl::StrCat(c.daemon.workers); }},
      {"daemon", "cpus", false, true,
       [](absl::string_view v, Config& c) -> absl::Status {
         absl::StatusOr<std::vector<int>> cpus = ParseCpuList(v);
         if (!cpus.ok()) return cpus.status();
         c.daemon.cpus = *cpus;
         return absl::OkStatus();
       },
       [](const Config& c) { return JoinInts(c.daemon.cpus); }},
      {"daemon", "log_format", true, false,
       [](absl::string_view v, Config& c) -> absl::Status {
         if (v == "text") {
           c.daemon.log_format = LogFormat::kText;
         } else if (v == "json") {
           c.daemon.log_format = LogFormat::kJson;
         } else {
           return Bad(absl::StrCat("'", v, "' is not one of text, json"));
         }
         return absl::OkStatus();
       },
       [](const Config& c) { return std::string(LogFormatName(c.daemon.log_format)); }},
      {"daemon", "metrics_listen", false, true,
       [](absl::string_view v, Config& c) -> absl::Status {
         if (v.empty() || v == "off") {
           c.daemon.metrics_listen.clear();
           return absl::OkStatus();
         }
         absl::StatusOr<ListenAddress> a = ParseListenAddress(v);
         if (!a.ok()) return a.status();
         c.daemon.metrics_listen = std::string(v);
         return absl::OkStatus();
       },
       [](const Config& c) {
         return c.daemon.metrics_listen.empty() ? std::string("off") : c.daemon.metrics_listen;
       }},
      {"daemon", "observed_event_depth", false, false,
       [](absl::string_view v, Config& c) -> absl::Status {
         if (v == "auto") {
           c.daemon.observed_event_depth = 0;
           return absl::OkStatus();
         }
         absl::StatusOr<uint64_t> depth = ParseUnsigned(v, 1, kMaxObservedEventDepth);
         if (!depth.ok()) {
           return Bad(absl::StrCat(depth.status().message(), " (events per worker), or auto"));
         }
         c.daemon.observed_event_depth = static_cast<uint32_t>(*depth);
         return absl::OkStatus();
       },
       [](const Config& c) {
         return c.daemon.observed_event_depth == 0 ? std::string("auto")
                                                   : absl::StrCat(c.daemon.observed_event_depth);
       }},
      {"daemon", "receive_budget_bytes", false, false,
       [](absl::string_view v, Config& c) {
         return SetUnsigned(v, 0, uint64_t{1} << 32, c.daemon.receive_budget_bytes);
       },
       [](const Config& c) { return absl::StrCat(c.daemon.receive_budget_bytes); }},
      {"daemon", "pull_rate_gbps", false, false,
       [](absl::string_view v, Config& c) -> absl::Status {
         if (v == "auto") {
           c.daemon.pull_rate_gbps.reset();
           return absl::OkStatus();
         }
         double d = 0;
         if (!absl::SimpleAtod(v, &d) || !std::isfinite(d) ||
             (d != 0 && (d < kMinPullRateGbps || d > kMaxPullRateGbps))) {
           return Bad(absl::StrCat("'", v, "' is not a rate in Gb/s in ", kMinPullRateGbps, "..",
                                   kMaxPullRateGbps, " (0: no pulls), or auto"));
         }
         c.daemon.pull_rate_gbps = d == 0 ? 0.0 : d;  // "-0" is 0
         return absl::OkStatus();
       },
       [](const Config& c) {
         return c.daemon.pull_rate_gbps ? absl::StrCat(*c.daemon.pull_rate_gbps)
                                        : std::string("auto");
       }},
      {"limits", "max_connections", true, false,
       [](absl::string_view v, Config& c) {
         return SetUnsigned(v, 1, 1u << 20, c.limits.max_connections);
       },
       [](const Config& c) { return absl::StrCat(c.limits.max_connections); }},
      {"limits", "max_paths", true, false,
       [](absl::string_view v, Config& c) { return SetUnsigned(v, 1, 256, c.limits.max_paths); },
       [](const Config& c) { return absl::StrCat(c.limits.max_paths); }},
      {"limits", "max_memory", true, false,
       [](absl::string_view v, Config& c) -> absl::Status {
         const std::optional<uint64_t> bytes = tools::ParseByteSize(std::string_view(v.data(), v.size()));
         if (!bytes) {
           return Bad(absl::StrCat("'", v, "' is not a byte count (e.g. 1G; K/M/G suffixes)"));
         }
         if (*bytes < (uint64_t{1} << 20)) return Bad(absl::StrCat(v, " is below 1M"));
         c.limits.max_memory_bytes = *bytes;
         return absl::OkStatus();
       },
       [](const Config& c) { return absl::StrCat(c.limits.max_memory_bytes); }},
      {"paths", "rotation_holddown_ms", true, false,
       [](absl::string_view v, Config& c) {
         return SetUnsigned(v, 0, 60000, c.paths.rotation_holddown_ms);
       },
       [](const Config& c) { return absl::StrCat(c.paths.rotation_holddown_ms); }},
      {"paths", "degraded_hold_ms", true, false,
       [](absl::string_view v, Config& c) {
         return SetUnsigned(v, 0, 60000, c.paths.degraded_hold_ms);
       },
       [](const Config& c) { return absl::StrCat(c.paths.degraded_hold_ms); }},
      {"paths", "rotations_per_second", true, false,
       [](absl::string_view v, Config& c) -> absl::Status {
         double d = 0;
         if (!absl::SimpleAtod(v, &d) || !std::isfinite(d) || d <= 0 || d > 1e6) {
           return Bad(absl::StrCat("'", v, "' is not a number in (0, 1000000]"));
         }
         c.paths.rotations_per_second = d;
         return absl::OkStatus();
       },
       [](const Config& c) { return absl::StrCat(c.paths.rotations_per_second); }},
      {"paths", "rotation_burst", true, false,
       [](absl::string_view v, Config& c) {
         return SetUnsigned(v, 1, 1024, c.paths.rotation_burst);
       },
       [](const Config& c) { return absl::StrCat(c.paths.rotation_burst); }},
  };
  return keys;
}

const KeySpec* FindKey(absl::string_view section, absl::string_view key) {
  for (const KeySpec& k : Keys()) {
    if (k.section == section && k.key == key) return &k;
  }
  return nullptr;
}

const KeySpec* FindKeyAnySection(absl::string_view key) {
  for (const KeySpec& k : Keys()) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

bool IsSection(absl::string_view name) {
  return name == "daemon" || name == "limits" || name == "paths";
}

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string UnknownKeyMessage(absl::string_view section, absl::string_view key) {
  std::string msg = absl::StrCat("unknown key '", key, "' in [", section, "]");
  if (const KeySpec* elsewhere = FindKeyAnySection(key)) {
    absl::StrAppend(&msg, ": it belongs in [", elsewhere->section, "]");
    return msg;
  }
  const KeySpec* best = nullptr;
  size_t best_distance = 3;  // suggest only near misses
  for (const KeySpec& k : Keys()) {
    if (k.section != section) continue;
    const size_t d = EditDistance(key, k.key);
    if (d < best_distance) {
      best_distance = d;
      best = &k;
    }
  }
  if (best != nullptr) absl::StrAppend(&msg, " (did you mean '", best->key, "'?)");
  return msg;
}

// Strips a comment: '#' or ';' at the start or after whitespace.
absl::string_view StripComment(absl::string_view line) {
  for (size_t i = 0; i < line.size(); ++i) {
    if ((line[i] == '#' || line[i] == ';') &&
        (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) {
      return line.substr(0, i);
    }
  }
  return line;
}

absl::string_view Unquote(absl::string_view v) {
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') return v.substr(1, v.size() - 2);
  return v;
}

// Parses and applies one value; the error is "WHERE: KEY: reason".
void ApplyValue(const KeySpec& spec, absl::string_view value, const std::string& where,
                LoadedConfig& out, std::map<std::string, std::string>& origin) {
  if (value.empty() && !spec.may_be_empty) {
    out.errors.push_back(absl::StrCat(where, ": ", spec.key,
                                      ": empty value (remove the line for the default)"));
    return;
  }
  if (absl::Status s = spec.parse(value, out.config); !s.ok()) {
    out.errors.push_back(absl::StrCat(where, ": ", spec.key, ": ", s.message()));
    return;
  }
  origin[std::string(spec.key)] = where;
}

void ParseLines(absl::string_view text, absl::string_view file, LoadedConfig& out,
                std::map<std::string, std::string>& origin) {
  enum class Section { kNone, kKnown, kUnknown };  // kUnknown: its keys are not reported
  Section state = Section::kNone;
  std::string section;
  std::map<std::string, size_t> first_line;  // "section.key" -> line
  size_t number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++number;
    const std::string where = absl::StrCat(file, ":", number);
    absl::string_view line = Trim(StripComment(raw));
    if (line.empty()) continue;
    if (line.front() == '[') {
      if (line.back() != ']' || line.size() < 3) {
        out.errors.push_back(absl::StrCat(where, ": malformed section header '", line,
                                          "': expected [daemon], [limits] or [paths]"));
        state = Section::kUnknown;
        continue;
      }
      section = std::string(Trim(line.substr(1, line.size() - 2)));
      state = IsSection(section) ? Section::kKnown : Section::kUnknown;
      if (state == Section::kUnknown) {
        out.errors.push_back(absl::StrCat(where, ": unknown section [", section,
                                          "]: expected [daemon], [limits] or [paths]"));
      }
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      out.errors.push_back(absl::StrCat(where, ": expected 'key = value', got '", line, "'"));
      continue;
    }
    const absl::string_view key = Trim(line.substr(0, eq));
    const absl::string_view value = Unquote(Trim(line.substr(eq + 1)));
    if (state == Section::kNone) {
      out.errors.push_back(absl::StrCat(where, ": key '", key,
                                        "' before any section: put it under [daemon], "
                                        "[limits] or [paths]"));
      continue;
    }
    if (state == Section::kUnknown) continue;  // the section was reported once
    const KeySpec* spec = FindKey(section, key);
    if (spec == nullptr) {
      out.errors.push_back(absl::StrCat(where, ": ", UnknownKeyMessage(section, key)));
      continue;
    }
    const std::string id = absl::StrCat(section, ".", key);
    if (auto [it, fresh] = first_line.emplace(id, number); !fresh) {
      out.errors.push_back(absl::StrCat(where, ": ", key, " set again (first at line ",
                                        it->second, ")"));
      continue;
    }
    ApplyValue(*spec, value, where, out, origin);
  }
}

void ApplyOverrides(const std::vector<ConfigOverride>& overrides, LoadedConfig& out,
                    std::map<std::string, std::string>& origin) {
  for (const ConfigOverride& o : overrides) {
    const KeySpec* spec = FindKeyAnySection(o.key);
    if (spec == nullptr) {
      out.errors.push_back(absl::StrCat(o.flag, ": no config key '", o.key, "'"));
      continue;
    }
    if (o.value.empty() && !spec->may_be_empty) {
      out.errors.push_back(absl::StrCat(o.flag, ": empty value"));
      continue;
    }
    if (absl::Status s = spec->parse(o.value, out.config); !s.ok()) {
      out.errors.push_back(absl::StrCat(o.flag, ": ", s.message()));
      continue;
    }
    origin[o.key] = o.flag;
  }
}

// Checks that need several keys. `file` is the file read (empty: none).
void CheckWhole(absl::string_view file, LoadedConfig& out,
                const std::map<std::string, std::string>& origin) {
  const DaemonSettings& d = out.config.daemon;
  if (d.interfaces.empty()) {
    out.errors.push_back(
        file.empty()
            ? std::string("no interfaces: give --interface IF[,IF...] (one per plane), or set "
                          "interfaces in [daemon] of the config file")
            : absl::StrCat("no interfaces: set interfaces = IF[,IF...] in [daemon] of ", file,
                           ", or give --interface IF[,IF...] (one per plane)"));
  }
  if (!d.local_ips.empty() && !d.interfaces.empty() &&
      d.local_ips.size() != d.interfaces.size()) {
    auto it = origin.find("local_ips");
    const std::string where = it == origin.end() ? std::string("local_ips") : it->second;
    out.errors.push_back(absl::StrCat(where, ": local_ips: ", d.local_ips.size(),
                                      " address(es) for ", d.interfaces.size(),
                                      " interface(s): give one per interface, in the same order"));
  }
  if (d.port_kind == PortKindSetting::kUdp && d.workers > 1) {
    auto it = origin.find("workers");
    const std::string where = it == origin.end() ? std::string("workers") : it->second;
    out.errors.push_back(absl::StrCat(where, ": workers: port_kind udp runs one worker (every "
                                      "port binds udp_port): set workers = 1"));
  }
}

LoadedConfig Load(absl::string_view text, absl::string_view file,
                  const std::vector<ConfigOverride>& overrides) {
  LoadedConfig out;
  out.config.path = std::string(file);
  std::map<std::string, std::string> origin;  // key -> where it was last set
  ParseLines(text, file, out, origin);
  ApplyOverrides(overrides, out, origin);
  CheckWhole(file, out, origin);
  return out;
}

}  // namespace

absl::string_view PortKindSettingName(PortKindSetting kind) {
  return kind == PortKindSetting::kUdp ? "udp" : "af_xdp";
}

absl::string_view LogFormatName(LogFormat format) {
  return format == LogFormat::kJson ? "json" : "text";
}

LoadedConfig ParseConfigText(absl::string_view text, absl::string_view origin,
                             const std::vector<ConfigOverride>& overrides) {
  return Load(text, origin, overrides);
}

LoadedConfig LoadConfig(const ConfigSource& source) {
  std::ifstream in(source.path, std::ios::binary);
  if (!in) {
    const int err = errno;
    if (err == ENOENT && !source.path_required) return Load("", "", source.overrides);
    LoadedConfig out;
    out.errors.push_back(absl::StrCat(source.path, ": cannot read: ", std::strerror(err),
                                      err == ENOENT ? " (check --config)" : ""));
    return out;
  }
  std::ostringstream text;
  text << in.rdbuf();
  return Load(text.str(), source.path, source.overrides);
}

std::vector<ConfigChange> DiffConfig(const Config& running, const Config& next) {
  std::vector<ConfigChange> changes;
  for (const KeySpec& k : Keys()) {
    std::string from = k.format(running), to = k.format(next);
    if (from != to) {
      changes.push_back({std::string(k.key), std::move(from), std::move(to), k.reloadable});
    }
  }
  return changes;
}

Config ApplyReloadable(const Config& running, const Config& next) {
  Config out = running;
  out.path = next.path;
  out.daemon.log_format = next.daemon.log_format;
  out.limits = next.limits;
  out.paths = next.paths;
  return out;
}

absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view text, bool allow_port_zero) {
  const std::string usage = absl::StrCat(
      "'", text, "' is not IP:PORT (e.g. 127.0.0.1:9469 or [::1]:9469; off: no listener)");
  ListenAddress a;
  absl::string_view host, port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return Bad(usage);
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    a.v6 = true;
  } else {
    const size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) return Bad(usage);
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != absl::string_view::npos) {
      return Bad(absl::StrCat("'", text, "': write an IPv6 address in brackets, e.g. [::1]:9469"));
    }
  }
  unsigned char buf[16];
  a.ip = std::string(host);
  if (inet_pton(a.v6 ? AF_INET6 : AF_INET, a.ip.c_str(), buf) != 1) {
    return Bad(absl::StrCat("'", host, "' is not an IP", a.v6 ? "v6" : "v4",
                            " address (a listener needs an address, not a name)"));
  }
  absl::StatusOr<uint64_t> p = ParseUnsigned(port, allow_port_zero ? 0 : 1, 65535);
  if (!p.ok()) return Bad(absl::StrCat("port of '", text, "': ", p.status().message()));
  a.port = static_cast<uint16_t>(*p);
  return a;
}

bool IsLoopback(const ListenAddress& address) {
  unsigned char buf[16] = {};
  if (address.v6) {
    static const unsigned char kLoopback6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return inet_pton(AF_INET6, address.ip.c_str(), buf) == 1 &&
           std::memcmp(buf, kLoopback6, 16) == 0;
  }
  return inet_pton(AF_INET, address.ip.c_str(), buf) == 1 && buf[0] == 127;
}

uint32_t ObservedEventDepth(const Config& config) {
  if (config.daemon.observed_event_depth != 0) return config.daemon.observed_event_depth;
  return ObservedEventDepthForPaths(uint64_t{config.limits.max_connections} *
                                    kAutoPathsPerConnection);
}

uint32_t ObservedEventDepthForPaths(uint64_t paths) {
  const uint64_t burst = paths > kMaxObservedEventDepth ? kMaxObservedEventDepth
                                                        : paths * kAutoEventsPerPath;
  return static_cast<uint32_t>(std::bit_ceil(std::clamp<uint64_t>(
      burst, kMinAutoObservedEventDepth, kMaxObservedEventDepth)));
}

std::vector<ConfigKeyInfo> ConfigKeys() {
  std::vector<ConfigKeyInfo> out;
  for (const KeySpec& k : Keys()) out.push_back({k.section, k.key, k.reloadable});
  return out;
}

std::string FormatConfigValue(const Config& config, absl::string_view key) {
  const KeySpec* spec = FindKeyAnySection(key);
  return spec == nullptr ? std::string() : spec->format(config);
}

}  // namespace metaroce::daemon
