// mrperf's command line: perftest's flags (ib_write_bw and friends) as subcommands, plus the
// MetaRoCE datapath's own (planes, interfaces, transport, port kind, workers).
//
//   mrperf TEST [flags] [SERVER]     TEST: write_bw write_lat send_bw send_lat
//                                          raw_bw raw_lat udp_bw udp_lat
//
// Server: no SERVER argument. Client: SERVER is the server's address for the TCP control
// connection (-p). Pure parsing: no I/O; errors are one line, for the caller to print (exit 2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace metaroce::perf {

enum class TestKind : uint8_t {
  kWriteBw, kWriteLat, kSendBw, kSendLat,
  kRawBw, kRawLat,   // frames of the same size through the same ports, no protocol (ceiling)
  kUdpBw, kUdpLat,   // kernel UDP sockets, sendmmsg/recvmmsg (commodity baseline)
};
std::string_view TestName(TestKind kind);
bool IsLatency(TestKind kind);
bool IsStack(TestKind kind);  // write_* / send_*: through the MetaRoCE stack

enum class PortKindFlag : uint8_t { kXdp, kUdp, kMemory };
std::string_view PortKindName(PortKindFlag kind);

enum class Transport : uint8_t { kMetaRoce, kGoBackN, kReorder };
std::string_view TransportName(Transport t);

// Whose engine the stack tests use: metaroced's (attached, no privileges) or one embedded in
// mrperf (root: XDP and AF_XDP).
enum class EngineMode : uint8_t { kAuto, kEmbedded, kDaemon };

struct PerfOptions {
  TestKind test = TestKind::kWriteBw;
  std::optional<std::string> server;  // set: client
  // perftest flags
  uint64_t size = 0;           // -s; 0 until defaulted (bw 65536, lat 2)
  uint64_t iterations = 0;     // -n; 0 until defaulted (bw 5000, lat 1000)
  bool all_sizes = false;      // -a: 2..2^23
  double duration_s = 0;       // -D; 0: iteration mode
  int qps = 1;                 // -q
  bool report_gbits = false;   // --report_gbits
  std::string out_json;        // --out_json FILE
  bool json_stdout = false;    // --json
  uint16_t port = 18515;       // -p: TCP control port
  uint32_t tx_depth = 128;     // -t: send work requests outstanding per connection
  uint32_t rx_depth = 512;     // -r: receives kept posted per connection (send tests)
  // MetaRoCE datapath
  int paths = 0;               // --paths; 0 until defaulted (8, or 1 for gbn)
  int planes = 0;              // --planes; 0: one per --interface (memory: 1)
  std::vector<std::string> interfaces;  // --interface IF[,IF...]: one per plane
  std::vector<std::string> local_ips;   // --local-ip IP[,IP...]: one per plane (default: the
                                        // interface's first IPv4 address)
  Transport transport = Transport::kMetaRoce;
  PortKindFlag port_kind = PortKindFlag::kXdp;
  // --workers: engine worker threads; 0: inline engine, driven by the app thread (the default of
  // write_lat and send_lat; the others default to 1). Raw and udp tests: sockets/threads, >= 1.
  int workers = 1;
  uint32_t mtu = 0;            // payload bytes per packet; 0: from the interface MTU
  bool verify = false;         // --verify: check every message's data pattern at the receiver
  bool spin = false;           // --spin: engine workers never sleep (IdleStrategy::kSpin)
  std::vector<int> cpus;       // --cpus LIST: pin engine workers
  double timeout_s = 10;       // --timeout: connection set-up and end-of-test exchanges
  uint16_t udp_port = 4792;    // --udp-port: MetaRoCE's UDP port (and raw/udp tests')
  // Stack tests: through metaroced when one answers at daemon_socket (kAuto), or forced.
  EngineMode engine_mode = EngineMode::kAuto;
  std::string daemon_socket;   // --daemon-socket (default: $METAROCE_SOCKET or the default path)

  bool is_client() const { return server.has_value(); }
  std::vector<uint64_t> Sizes() const;  // the sizes to run (-a or -s)
};

// argv[0] is the program, argv[1] the test. InvalidArgument with a one-line reason.
absl::StatusOr<PerfOptions> ParseCommandLine(int argc, char** argv);
std::string Usage();

}  // namespace metaroce::perf
