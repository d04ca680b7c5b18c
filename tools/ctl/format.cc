#include "tools/ctl/format.h"

#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <vector>

#include "lib/control/protocol.h"

namespace metaroce::ctl {
namespace {

using control::Json;

std::string Text(const Json& v);

// Appends " key value". (Piecewise: GCC 12 warns falsely on `" " + std::string` here.)
void AppendPair(std::string& out, std::string_view key, std::string_view value) {
  out += ' ';
  out.append(key);
  out += ' ';
  out.append(value);
}

// " key value key value" for every member of `object` not in `skip`.
std::string Pairs(const Json& object, std::initializer_list<std::string_view> skip = {}) {
  std::string out;
  for (const auto& [key, value] : object.object()) {
    if (std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
    AppendPair(out, key, Text(value));
  }
  return out;
}

std::string JoinArray(const Json& array) {
  if (array.size() == 0) return "-";
  std::string out;
  for (const Json& element : array.array()) {
    if (!out.empty()) out += ",";
    out += Text(element);
  }
  return out;
}

// One value as a word (or a few): "-" for null or missing, yes/no, arrays joined by commas,
// objects as "key value" pairs.
std::string Text(const Json& v) {
  char buf[32];
  switch (v.type()) {
    case Json::Type::kNull: return "-";
    case Json::Type::kBool: return *v.AsBool() ? "yes" : "no";
    case Json::Type::kInt: return std::to_string(*v.AsInt());
    case Json::Type::kUint: return std::to_string(*v.AsUint());
    case Json::Type::kDouble:
      std::snprintf(buf, sizeof buf, "%g", *v.AsDouble());
      return buf;
    case Json::Type::kString: return v.AsString()->empty() ? "\"\"" : std::string(*v.AsString());
    case Json::Type::kArray: return JoinArray(v);
    case Json::Type::kObject: return v.size() == 0 ? "-" : Pairs(v).substr(1);
    case Json::Type::kRaw: return v.Dump();
  }
  return "-";
}

std::string Field(const Json& object, std::string_view key) {
  const Json* v = object.Find(key);
  return v == nullptr ? "-" : Text(*v);
}

// " key value" for each of `keys`, in that order.
std::string KnownPairs(const Json& object, std::initializer_list<std::string_view> keys) {
  std::string out;
  for (std::string_view key : keys) AppendPair(out, key, Field(object, key));
  return out;
}

// A number with fixed decimals (table cells); other values as Text.
std::string Fixed(const Json& object, std::string_view key, int decimals) {
  const Json* v = object.Find(key);
  if (v == nullptr) return "-";
  if (v->type() != Json::Type::kDouble) return Text(*v);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, *v->AsDouble());
  return buf;
}

// --- conn ------------------------------------------------------------------------------------

bool InError(const Json& conn) {
  const Json* state = conn.Find("state");
  const Json* status = conn.Find("error_status");
  const bool ready = state != nullptr && state->AsString() == std::optional<std::string_view>("ready");
  return !ready || (status != nullptr && status->AsUint().value_or(0) != 0);
}

// conn 3 peer 198.18.0.6 peer_id 5 state error error_status 12 (RETRY_EXC_ERR) paths 8 ...
std::string ConnLines(const Json& conn, bool details) {
  std::string out = "conn " + Field(conn, "id") + KnownPairs(conn, {"peer", "peer_id", "state"});
  if (InError(conn) && conn.Find("error_status") != nullptr) {
    out += " error_status " + Field(conn, "error_status") + " (" +
           Field(conn, "error_status_name") + ")";
  }
  out += KnownPairs(conn, {"paths", "planes", "profile", "owner", "created_s"});
  out += Pairs(conn, {"id", "peer", "peer_id", "state", "error_status", "error_status_name",
                      "paths", "planes", "profile", "owner", "created_s", "counters"});
  out += "\n";
  const Json* counters = conn.Find("counters");
  if (details && counters != nullptr && counters->size() > 0) {
    out += "    " + Pairs(*counters).substr(1) + "\n";
  }
  return out;
}

std::string ConnShow(const Json& result, bool details) {
  std::string out;
  const Json* conns = result.Find("connections");
  if (conns == nullptr) return out;
  for (const Json& conn : conns->array()) out += ConnLines(conn, details);
  return out;
}

std::string ConnAdd(const Json& result, bool details) {
  const Json* conn = result.Find("conn");
  return conn == nullptr ? std::string() : ConnLines(*conn, details);
}

// --- link and stat ---------------------------------------------------------------------------

// xdp native prog_id 42  |  xdp none
std::string XdpWords(const Json& link) {
  const Json* xdp = link.Find("xdp");
  if (xdp == nullptr || !xdp->is_object()) return "xdp " + Field(link, "xdp");
  if (!xdp->Find("attached") || !xdp->Find("attached")->AsBool().value_or(false)) {
    return "xdp none" + Pairs(*xdp, {"attached", "prog_id", "mode"});
  }
  return "xdp " + Field(*xdp, "mode") + " prog_id " + Field(*xdp, "prog_id") +
         Pairs(*xdp, {"attached", "prog_id", "mode"});
}

// The features a link's ports have, as words (iproute2 flags): "need_wakeup multi_buffer", or
// "none".
std::string FeatureWords(const Json& features) {
  std::string out;
  for (const auto& [key, value] : features.object()) {
    if (!value.AsBool().value_or(false)) continue;
    if (!out.empty()) out += ' ';
    out += key;
  }
  return out.empty() ? "none" : out;
}

// link pl0 ifindex 5 plane 0 address 198.18.0.5 mac 02:00:00:00:00:05 mtu 3498
//     port af_xdp pl0 queue 0 copy-mode need_wakeup      (a line per worker's port)
//     features need_wakeup
//     xdp native prog_id 42 queues 0
std::string LinkLines(const Json& link) {
  std::string out = "link " + Field(link, "name") +
                    KnownPairs(link, {"ifindex", "plane", "address", "mac", "mtu"}) +
                    Pairs(link, {"name", "ifindex", "plane", "address", "mac", "mtu", "port",
                                 "ports", "features", "xdp", "queues"}) +
                    "\n";
  // One line per port (one per worker), else the first port.
  const Json* ports = link.Find("ports");
  if (ports != nullptr && ports->is_array() && ports->size() > 0) {
    for (const Json& port : ports->array()) out += "    port " + Text(port) + "\n";
  } else {
    out += "    port " + Field(link, "port") + "\n";
  }
  if (const Json* features = link.Find("features"); features != nullptr && features->is_object()) {
    out += "    features " + FeatureWords(*features) + "\n";
  }
  out += "    " + XdpWords(link) + " queues " + Field(link, "queues") + "\n";
  return out;
}

std::string LinkShow(const Json& result) {
  std::string out;
  if (const Json* links = result.Find("links")) {
    for (const Json& link : links->array()) out += LinkLines(link);
  }
  return out;
}

// `rdma statistic` shape: link pl0 tx_packets 10 rx_packets 12 ...
std::string StatShow(const Json& result) {
  std::string out;
  if (const Json* links = result.Find("links")) {
    for (const Json& link : links->array()) {
      out += "link " + Field(link, "name") + Pairs(link, {"name"}) + "\n";
    }
  }
  return out;
}

// --- path ------------------------------------------------------------------------------------

struct Column {
  std::string_view header;
  std::string_view key;
  int decimals;  // for doubles; -1: as Text
};

constexpr Column kPathColumns[] = {
    {"PATH", "path_id", -1},       {"PORT", "src_port", -1},      {"PLANE", "plane", -1},
    {"STATE", "state", -1},        {"SRTT_US", "srtt_us", 1},     {"MIN_RTT_US", "min_rtt_us", 1},
    {"ECN", "ecn_fraction", 2},    {"CWND", "cwnd_bytes", -1},    {"UTIL", "utilization", 2},
    {"RETX", "retransmits", -1},   {"ROT", "rotations", -1},
};

std::string Cell(const Json& path, const Column& column) {
  return column.decimals < 0 ? Field(path, column.key) : Fixed(path, column.key, column.decimals);
}

// Left-aligned columns, two spaces apart, no trailing blanks.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line.append(width[c] - row[c].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string PathShow(const Json& result) {
  std::vector<std::vector<std::string>> rows(1);
  for (const Column& column : kPathColumns) rows[0].emplace_back(column.header);
  if (const Json* paths = result.Find("paths")) {
    for (const Json& path : paths->array()) {
      std::vector<std::string>& row = rows.emplace_back();
      for (const Column& column : kPathColumns) row.push_back(Cell(path, column));
    }
  }
  return Table(rows);
}

// conn 3 path 2 port 49152 -> 49200
std::string PathRotate(const Json& result) {
  return "conn " + Field(result, "conn") + " path " + Field(result, "path_id") + " port " +
         Field(result, "old_port") + " -> " + Field(result, "new_port") +
         Pairs(result, {"conn", "path_id", "old_port", "new_port"}) + "\n";
}

// time_s 12.3 conn 3 path 2 state active -> suspect reason timeout
// time_s 14.1 conn 3 path 2 rotation 49152 -> 49200 reason manual
std::string EventLine(const Json& event) {
  std::string out = "time_s " + Field(event, "time_s") + " conn " + Field(event, "conn") +
                    " path " + Field(event, "path_id");
  const std::string kind = Field(event, "kind");
  if (kind == "state") {
    out += " state " + Field(event, "from") + " -> " + Field(event, "to");
  } else if (kind == "rotation") {
    out += " rotation " + Field(event, "old_port") + " -> " + Field(event, "new_port");
  } else {  // a kind newer than this mrctl
    return out + " kind " + kind + Pairs(event, {"time_s", "conn", "path_id", "kind", "seq"}) +
           "\n";
  }
  out += " reason " + Field(event, "reason");
  // seq (the daemon's order and paging cursor) is for scripts (-j): lines are in that order.
  out += Pairs(event, {"time_s", "conn", "path_id", "kind", "from", "to", "old_port", "new_port",
                       "reason", "seq"});
  return out + "\n";
}

std::string PathEvents(const Json& result) {
  std::string out;
  if (const Json* events = result.Find("events")) {
    for (const Json& event : events->array()) out += EventLine(event);
  }
  return out;
}

// --- daemon and anything else ----------------------------------------------------------------

// key value, one line per member; nested objects as "key k v k v".
std::string KeyValueLines(const Json& result) {
  std::string out;
  for (const auto& [key, value] : result.object()) out += key + " " + Text(value) + "\n";
  return out;
}

}  // namespace

std::string FormatJson(const Json& result, bool pretty) {
  Json doc = Json::MakeObject();
  doc["version"] = control::kProtocolVersion;
  for (const auto& [key, value] : result.object()) {
    doc[key == "version" ? std::string("metaroced_version") : key] = value;
  }
  return doc.Dump(pretty ? 2 : -1) + "\n";
}

std::string FormatText(std::string_view method, const Json& result, bool details) {
  if (method == "conn.show") return ConnShow(result, details);
  if (method == "conn.add") return ConnAdd(result, details);
  if (method == "conn.del") return "";
  if (method == "link.show") return LinkShow(result);
  if (method == "stat.show") return StatShow(result);
  if (method == "path.show") return PathShow(result);
  if (method == "path.rotate") return PathRotate(result);
  if (method == "path.events") return PathEvents(result);
  return KeyValueLines(result);  // daemon.show, and methods newer than this mrctl
}

}  // namespace metaroce::ctl
