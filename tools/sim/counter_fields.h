// The fields of core::ConnectionCounters as a table, so that summing and reporting them cannot
// forget one. Keep in the struct's order when the core adds a counter.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>

#include "lib/core/connection.h"

namespace metaroce::sim {

using ConnectionCounterField = std::pair<std::string_view, uint64_t core::ConnectionCounters::*>;

inline constexpr std::array<ConnectionCounterField, 21> kConnectionCounterFields = {{
    {"sent_pkts", &core::ConnectionCounters::sent_pkts},
    {"rcvd_pkts", &core::ConnectionCounters::rcvd_pkts},
    {"retransmits", &core::ConnectionCounters::retransmits},
    {"gap_retransmits", &core::ConnectionCounters::gap_retransmits},
    {"timeout_retransmits", &core::ConnectionCounters::timeout_retransmits},
    {"rerouted_packets", &core::ConnectionCounters::rerouted_packets},
    {"duplicate_request", &core::ConnectionCounters::duplicate_request},
    {"out_of_window", &core::ConnectionCounters::out_of_window},
    {"bad_token", &core::ConnectionCounters::bad_token},
    {"bad_path", &core::ConnectionCounters::bad_path},
    {"reorder_drops", &core::ConnectionCounters::reorder_drops},
    {"seq_err_naks_sent", &core::ConnectionCounters::seq_err_naks_sent},
    {"rcvd_rnr_err", &core::ConnectionCounters::rcvd_rnr_err},
    {"rnr_naks_sent", &core::ConnectionCounters::rnr_naks_sent},
    {"access_naks_sent", &core::ConnectionCounters::access_naks_sent},
    {"acks_sent", &core::ConnectionCounters::acks_sent},
    {"acks_rcvd", &core::ConnectionCounters::acks_rcvd},
    {"probes_sent", &core::ConnectionCounters::probes_sent},
    {"retry_exceeded_err", &core::ConnectionCounters::retry_exceeded_err},
    {"messages_completed", &core::ConnectionCounters::messages_completed},
    {"messages_received", &core::ConnectionCounters::messages_received},
}};
// Every field listed: ConnectionCounters holds only uint64_t counters.
static_assert(sizeof(core::ConnectionCounters) == kConnectionCounterFields.size() * sizeof(uint64_t),
              "a ConnectionCounters field is missing from kConnectionCounterFields");

inline void AccumulateCounters(core::ConnectionCounters& sum, const core::ConnectionCounters& c) {
  for (const auto& [name, field] : kConnectionCounterFields) sum.*field += c.*field;
}

}  // namespace metaroce::sim
