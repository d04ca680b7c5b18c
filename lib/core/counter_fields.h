// The fields of ConnectionCounters as a table, with what each one counts, so that summing,
// reporting and exporting them (JSON, mrsim, Prometheus help) cannot forget one or describe it
// in two places. Keep in the struct's order when the core adds a counter.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "lib/core/connection.h"

namespace metaroce::core {

struct ConnectionCounterField {
  std::string_view name;  // Soft-RoCE's name where it means the same
  uint64_t ConnectionCounters::*member;
  std::string_view meaning;  // one sentence, as exported (Prometheus HELP)
};

inline constexpr std::array<ConnectionCounterField, 28> kConnectionCounterFields = {{
    {"sent_pkts", &ConnectionCounters::sent_pkts, "Data packets sent, retransmissions included."},
    {"rcvd_pkts", &ConnectionCounters::rcvd_pkts, "Data packets accepted."},
    {"retransmits", &ConnectionCounters::retransmits,
     "Data packets sent again (gap, timeout, go-back-N, reroute, hedge)."},
    {"gap_retransmits", &ConnectionCounters::gap_retransmits,
     "Retransmissions triggered by a SACK gap."},
    {"timeout_retransmits", &ConnectionCounters::timeout_retransmits,
     "Retransmissions triggered by a probe timeout (tail loss)."},
    {"tail_probes", &ConnectionCounters::tail_probes,
     "Retransmissions of a path's newest packet two RTTs into the connection's tail."},
    {"rerouted_packets", &ConnectionCounters::rerouted_packets,
     "Retransmissions moved off a failed path."},
    {"hedged_packets", &ConnectionCounters::hedged_packets,
     "Retransmissions copied off an overtaken path to a live one."},
    {"congestion_loss_cuts", &ConnectionCounters::congestion_loss_cuts,
     "Losses seen with a queue around them (CE marks or delay): windows halved."},
    {"duplicate_request", &ConnectionCounters::duplicate_request,
     "Received data packets that had been received already."},
    {"out_of_window", &ConnectionCounters::out_of_window,
     "Received packets beyond the SACK window (dropped)."},
    {"bad_token", &ConnectionCounters::bad_token,
     "Packets dropped for a wrong connection token."},
    {"bad_path", &ConnectionCounters::bad_path, "Packets dropped for a path id out of range."},
    {"reorder_drops", &ConnectionCounters::reorder_drops,
     "Reorder-buffer baseline: packets dropped for lack of room."},
    {"seq_err_naks_sent", &ConnectionCounters::seq_err_naks_sent,
     "Go-back-N: out-of-order packets refused with a NAK."},
    {"rcvd_rnr_err", &ConnectionCounters::rcvd_rnr_err, "RNR NAKs received."},
    {"rnr_naks_sent", &ConnectionCounters::rnr_naks_sent, "RNR NAKs sent (no receive posted)."},
    {"access_naks_sent", &ConnectionCounters::access_naks_sent, "Remote access error NAKs sent."},
    {"acks_sent", &ConnectionCounters::acks_sent, "ACKs sent."},
    {"acks_rcvd", &ConnectionCounters::acks_rcvd, "ACKs received."},
    {"pulls_sent", &ConnectionCounters::pulls_sent,
     "Responder: pulls granted to requesters paced below one packet per path."},
    {"pulls_rcvd", &ConnectionCounters::pulls_rcvd, "Requester: pulls received."},
    {"pulled_pkts", &ConnectionCounters::pulled_pkts,
     "Requester: new data packets sent on a pull."},
    {"probes_sent", &ConnectionCounters::probes_sent, "PROBE packets sent."},
    {"loss_queries", &ConnectionCounters::loss_queries,
     "PROBEs a clocked connection sent to ask whether its overdue packets arrived."},
    {"retry_exceeded_err", &ConnectionCounters::retry_exceeded_err,
     "Work requests failed with RETRY_EXC_ERR."},
    {"messages_completed", &ConnectionCounters::messages_completed,
     "Requester: send work requests completed successfully."},
    {"messages_received", &ConnectionCounters::messages_received,
     "Responder: messages fully placed."},
}};
// Every field listed: ConnectionCounters holds only uint64_t counters.
static_assert(sizeof(ConnectionCounters) == kConnectionCounterFields.size() * sizeof(uint64_t),
              "a ConnectionCounters field is missing from kConnectionCounterFields");

inline void AccumulateCounters(ConnectionCounters& sum, const ConnectionCounters& c) {
  for (const ConnectionCounterField& f : kConnectionCounterFields) sum.*f.member += c.*f.member;
}

}  // namespace metaroce::core
