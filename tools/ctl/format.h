// How mrctl prints the daemon's results (docs/control-protocol.md, "Methods").
//
// FormatJson is the contract for scripts: the result object with "version": 1 inserted as its
// first key (a result's own "version", daemon.show's metaroced version, is renamed
// "metaroced_version"), on one line or indented by 2 with `pretty`. FormatText is for people,
// iproute2-like, and may change between releases:
//
//   conn 3 peer 198.18.0.6 peer_id 5 state ready paths 8 planes 0,1 profile metaroce ...
//   link pl0 tx_packets 10 rx_packets 12 ...                      (stat show)
//   PATH PORT PLANE STATE SRTT_US MIN_RTT_US ECN CWND UTIL RETX ROT  (path show, a table)
//
// Fields a newer daemon adds are printed too (as "key value" after the known ones); a field
// that is missing prints as "-". Pure functions; every output ends with a newline unless empty.
#pragma once

#include <string>
#include <string_view>

#include "lib/control/json.h"

namespace metaroce::ctl {

std::string FormatJson(const control::Json& result, bool pretty);

// `method` is the one that produced `result` ("conn.show"); `details` (-d) adds each
// connection's counters to conn show / conn add.
std::string FormatText(std::string_view method, const control::Json& result, bool details);

}  // namespace metaroce::ctl
