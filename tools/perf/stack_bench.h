// write_bw, write_lat, send_bw, send_lat through the MetaRoCE stack (lib/api), perftest's way:
//
//   write_bw  the client keeps every connection's send queue full of Writes into the server's
//             REMOTE_WRITE region (advertised {addr, rkey, length, slots} in private_data);
//             with --verify they are Writes with immediate, and the server checks each slot when
//             the immediate arrives.
//   send_bw   the same with Sends; the server keeps receives posted and checks each message.
//   write_lat ping-pong: the client writes, the server sees the last byte change and writes
//             back (one-packet messages; larger ones and --verify use Write with immediate).
//   send_lat  ping-pong of Sends.
// Latency is half the round trip. Both sides print the table; the client's JSON document
// includes the server's verification results and both sides' connection counters.
#pragma once

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "tools/perf/json.h"
#include "tools/perf/options.h"
#include "lib/api/port_factory.h"

namespace metaroce::perf {

// `broker`: memory ports only (the in-process pair). `ready`: called once the control port
// listens (in-process runs start their client then).
absl::StatusOr<JsonValue> RunStackServer(const PerfOptions& options,
                                         std::shared_ptr<api::MemoryPairBroker> broker,
                                         std::function<void()> ready);
absl::StatusOr<JsonValue> RunStackClient(const PerfOptions& options,
                                         std::shared_ptr<api::MemoryPairBroker> broker);

}  // namespace metaroce::perf
