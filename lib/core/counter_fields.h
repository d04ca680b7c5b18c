// The fields of ConnectionCounters as a table, so that summing and reporting them cannot
// forget one. Keep in the struct's order when the core adds a counter.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>

#include "lib/core/connection.h"

namespace metaroce::core {

using ConnectionCounterField = std::pair<std::string_view, uint64_t ConnectionCounters::*>;

inline constexpr std::array<ConnectionCounterField, 22> kConnectionCounterFields = {{
    {"sent_pkts", &ConnectionCounters::sent_pkts},
    {"rcvd_pkts", &ConnectionCounters::rcvd_pkts},
    {"retransmits", &ConnectionCounters::retransmits},
    {"gap_retransmits", &ConnectionCounters::gap_retransmits},
    {"timeout_retransmits", &ConnectionCounters::timeout_retransmits},
    {"rerouted_packets", &ConnectionCounters::rerouted_packets},
    {"hedged_packets", &ConnectionCounters::hedged_packets},
    {"duplicate_request", &ConnectionCounters::duplicate_request},
    {"out_of_window", &ConnectionCounters::out_of_window},
    {"bad_token", &ConnectionCounters::bad_token},
    {"bad_path", &ConnectionCounters::bad_path},
    {"reorder_drops", &ConnectionCounters::reorder_drops},
    {"seq_err_naks_sent", &ConnectionCounters::seq_err_naks_sent},
    {"rcvd_rnr_err", &ConnectionCounters::rcvd_rnr_err},
    {"rnr_naks_sent", &ConnectionCounters::rnr_naks_sent},
    {"access_naks_sent", &ConnectionCounters::access_naks_sent},
    {"acks_sent", &ConnectionCounters::acks_sent},
    {"acks_rcvd", &ConnectionCounters::acks_rcvd},
    {"probes_sent", &ConnectionCounters::probes_sent},
    {"retry_exceeded_err", &ConnectionCounters::retry_exceeded_err},
    {"messages_completed", &ConnectionCounters::messages_completed},
    {"messages_received", &ConnectionCounters::messages_received},
}};
// Every field listed: ConnectionCounters holds only uint64_t counters.
static_assert(sizeof(ConnectionCounters) == kConnectionCounterFields.size() * sizeof(uint64_t),
              "a ConnectionCounters field is missing from kConnectionCounterFields");

inline void AccumulateCounters(ConnectionCounters& sum, const ConnectionCounters& c) {
  for (const auto& [name, field] : kConnectionCounterFields) sum.*field += c.*field;
}

}  // namespace metaroce::core
