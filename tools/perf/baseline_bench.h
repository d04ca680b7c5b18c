// The two baselines measured on the same hosts, interfaces and addresses as the stack tests:
//
//   raw_bw / raw_lat  the frames the stack sends (MetaRoCE headers, each message of -s bytes
//                     cut at the MTU as the stack cuts it: full payloads and a last one with what
//                     is left; version byte 1 so the steering program takes them) through the
//                     same ports (AfXdpPort on the same queues, under the same XDP program), with
//                     no protocol: no ACKs, no retransmission, no completions. The ceiling.
//   udp_bw / udp_lat  the same datagrams through plain kernel UDP sockets (sendmmsg/recvmmsg,
//                     unconnected, one socket per path so ECMP spreads them): the commodity
//                     baseline.
// Bandwidth is what the receiver counted (the sender may outrun it: the difference is loss).
// Latency is half the round trip of an echo. -n counts messages of -s bytes (ceil(size/mtu)
// datagrams each, -s bytes in all); -D runs for that many seconds.
#pragma once

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "tools/perf/json.h"
#include "tools/perf/options.h"
#include "lib/api/port_factory.h"

namespace metaroce::perf {

absl::StatusOr<JsonValue> RunBaselineServer(const PerfOptions& options,
                                            std::shared_ptr<api::MemoryPairBroker> broker,
                                            std::function<void()> ready);
absl::StatusOr<JsonValue> RunBaselineClient(const PerfOptions& options,
                                            std::shared_ptr<api::MemoryPairBroker> broker);

}  // namespace metaroce::perf
