#include "lib/ofi/settings.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace metaroce::ofi {
namespace {

absl::Status ReadUint(const char* name, const char* text, uint64_t lo, uint64_t hi,
                      uint64_t& out) {
  uint64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < lo || v > hi) {
    return absl::InvalidArgumentError(absl::StrCat("FI_METAROCE_", absl::AsciiStrToUpper(name),
                                                   "=", text, ": an integer from ", lo, " to ",
                                                   hi, " is expected"));
  }
  out = v;
  return absl::OkStatus();
}

std::vector<std::string> SplitList(absl::string_view text) {
  std::vector<std::string> out;
  for (absl::string_view s : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    out.emplace_back(absl::StripAsciiWhitespace(s));
  }
  return out;
}

}  // namespace

const std::vector<Settings::Parameter>& Settings::Parameters() {
  static const std::vector<Parameter> kParameters = {
      {"mode", "auto | attached | embedded: where the MetaRoCE engine runs (auto: metaroced when "
               "it answers on its socket, else in this process)"},
      {"socket", "metaroced's control socket (default /run/metaroce/metaroced.sock)"},
      {"interfaces", "embedded: the planes' interfaces, comma-separated (default: interfaces of "
                     "/etc/metaroce/metaroced.conf)"},
      {"port_kind", "embedded: af_xdp or udp (default: af_xdp when privileged, else udp)"},
      {"engine_threads", "embedded: engine threads (default 1); 0: the engine runs in the "
                         "application's progress calls, which must then come at least every 2 s"},
      {"paths", "paths per connection (default 8)"},
      {"eager_size", "messages up to this many bytes are sent eagerly, larger ones by "
                     "rendezvous with RDMA Write (default 8192)"},
      {"inject_size", "largest fi_inject (default 4096, at most eager_size)"},
      {"chunk_size", "bytes per rendezvous RDMA Write (default 131072)"},
      {"chunks_in_flight", "rendezvous Writes a receiver asks for at once, per message "
                           "(default 4)"},
      {"recv_slots", "receive buffers per connection: the peer's credits (default 32)"},
      {"connect_timeout_ms", "a connection set-up's whole exchange, in ms (default 5000)"},
      {"zero_copy", "embedded: 1 (default) rendezvous writes from and into the application's "
                    "buffers, registered with the engine; 0: through the provider's buffers"},
  };
  return kParameters;
}

absl::StatusOr<Settings> Settings::Read(const std::function<const char*(const char*)>& get) {
  Settings s;
  uint64_t v = 0;
  if (const char* t = get("mode")) {
    const std::string m = absl::AsciiStrToLower(t);
    if (m == "auto") {
      s.mode = Mode::kAuto;
    } else if (m == "attached") {
      s.mode = Mode::kAttached;
    } else if (m == "embedded") {
      s.mode = Mode::kEmbedded;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("FI_METAROCE_MODE=", t, ": auto, attached or embedded is expected"));
    }
  }
  if (const char* t = get("socket")) s.socket_path = t;
  if (const char* t = get("interfaces")) s.interfaces = SplitList(t);
  if (const char* t = get("port_kind")) {
    const std::string k = absl::AsciiStrToLower(t);
    if (k != "af_xdp" && k != "udp") {
      return absl::InvalidArgumentError(
          absl::StrCat("FI_METAROCE_PORT_KIND=", t, ": af_xdp or udp is expected"));
    }
    s.udp_port_kind = k == "udp";
    s.port_kind_set = true;
  }
  struct Field {
    const char* name;
    uint64_t lo, hi;
    std::function<void(uint64_t)> set;
  };
  const Field fields[] = {
      {"engine_threads", 0, 64, [&](uint64_t x) { s.engine_threads = static_cast<int>(x); }},
      {"paths", 1, 256, [&](uint64_t x) { s.paths = static_cast<uint16_t>(x); }},
      {"eager_size", 64, 1u << 20, [&](uint64_t x) { s.eager_size = static_cast<uint32_t>(x); }},
      {"inject_size", 0, 1u << 20, [&](uint64_t x) { s.inject_size = static_cast<uint32_t>(x); }},
      {"chunk_size", 4096, 64u << 20,
       [&](uint64_t x) { s.chunk_size = static_cast<uint32_t>(x); }},
      {"chunks_in_flight", 1, 64,
       [&](uint64_t x) { s.chunks_in_flight = static_cast<uint32_t>(x); }},
      {"recv_slots", 4, 4096, [&](uint64_t x) { s.recv_slots = static_cast<uint32_t>(x); }},
      {"connect_timeout_ms", 100, 600000,
       [&](uint64_t x) { s.connect_timeout_ms = static_cast<uint32_t>(x); }},
      {"zero_copy", 0, 1, [&](uint64_t x) { s.zero_copy = x != 0; }},
  };
  for (const Field& f : fields) {
    if (const char* t = get(f.name)) {
      if (absl::Status st = ReadUint(f.name, t, f.lo, f.hi, v); !st.ok()) return st;
      f.set(v);
    }
  }
  if (s.inject_size > s.eager_size) {
    return absl::InvalidArgumentError(absl::StrCat("FI_METAROCE_INJECT_SIZE=", s.inject_size,
                                                   " is above FI_METAROCE_EAGER_SIZE=",
                                                   s.eager_size));
  }
  return s;
}

std::vector<std::string> InterfacesFromDaemonConfig(const std::string& conf_path) {
  std::ifstream in(conf_path);
  std::string line;
  std::string section;
  while (std::getline(in, line)) {
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (l.empty() || l[0] == '#' || l[0] == ';') continue;
    if (l[0] == '[') {
      section = std::string(absl::StripSuffix(absl::StripPrefix(l, "["), "]"));
      continue;
    }
    if (section != "daemon") continue;
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(l, absl::MaxSplits('=', 1));
    if (absl::StripAsciiWhitespace(kv.first) == "interfaces") return SplitList(kv.second);
  }
  return {};
}

absl::Status Offerable(const Settings& s, const std::string& socket_path, bool daemon_socket,
                       const std::vector<std::string>& config_interfaces) {
  if (s.mode == Mode::kAttached) {
    if (daemon_socket) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "FI_METAROCE_MODE=attached, and no metaroced socket at ", socket_path,
        ": start metaroced, or set FI_METAROCE_SOCKET to its socket"));
  }
  if (s.mode == Mode::kAuto && daemon_socket) return absl::OkStatus();
  if (!s.interfaces.empty() || !config_interfaces.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      s.mode == Mode::kAuto ? absl::StrCat("no metaroced socket at ", socket_path, ", and ")
                            : std::string("FI_METAROCE_MODE=embedded, and "),
      "no interfaces to run an embedded engine on: start metaroced, or set "
      "FI_METAROCE_INTERFACES (e.g. FI_METAROCE_INTERFACES=eth0), or `interfaces` in "
      "/etc/metaroce/metaroced.conf"));
}

}  // namespace metaroce::ofi
