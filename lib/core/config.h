// Configuration of a connection: identity, paths, transport profile, and the tunables of loss
// recovery, congestion control and path health. Defaults are the documented protocol defaults
// (docs/spec/README.md, parameters); Validate() refuses inconsistent settings with a reason.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include <optional>

#include "absl/status/status.h"
#include "lib/core/dcqcn.h"
#include "lib/core/types.h"
#include "lib/wire/packet.h"

namespace metaroce::core {

// How lost packets are recovered.
enum class RecoveryPolicy : uint8_t {
  kSelective,  // a gap in a path's SACK bitmap retransmits exactly the missing PSN (MetaRoCE)
  kGoBackN,    // the receiver takes PSNs in order only; a gap resends everything from it (RoCEv2)
};
// How received data reaches memory.
enum class PlacementPolicy : uint8_t {
  kDirect,         // every packet placed on arrival at its own address (MetaRoCE)
  kInOrderOnly,    // only the next expected PSN is accepted and placed (go-back-N)
  kReorderBuffer,  // out-of-order packets wait in a bounded buffer; placed in message order
};
// How a connection uses its paths.
enum class SprayPolicy : uint8_t {
  kAllPaths,    // spray across every usable path
  kSinglePath,  // one path (its source port pins the flow to one ECMP route)
};

// A transport = a combination of the three policies. The named profiles are the ones compared in
// the evaluation; all run through the same connection code.
struct TransportProfile {
  RecoveryPolicy recovery = RecoveryPolicy::kSelective;
  PlacementPolicy placement = PlacementPolicy::kDirect;
  SprayPolicy spray = SprayPolicy::kAllPaths;
  uint32_t reorder_buffer_bytes = 0;  // kReorderBuffer: capacity

  static TransportProfile MetaRoce() { return {}; }
  static TransportProfile GoBackN() {
    return {RecoveryPolicy::kGoBackN, PlacementPolicy::kInOrderOnly, SprayPolicy::kSinglePath, 0};
  }
  static TransportProfile ReorderBuffer(uint32_t bytes = 1u << 20) {
    return {RecoveryPolicy::kSelective, PlacementPolicy::kReorderBuffer, SprayPolicy::kAllPaths,
            bytes};
  }
  std::string_view Name() const;
};

struct ConnectionConfig {
  // Identity. Packets we send carry dest_conn = remote_conn_id and token = tx_token; packets we
  // accept must carry our local_conn_id and rx_token.
  uint32_t local_conn_id = 1;
  uint32_t remote_conn_id = 1;
  uint64_t tx_token = 0;
  uint64_t rx_token = 0;
  // Protection domain (docs/spec/messages-and-memory.md [M7]): every memory access of the
  // connection (its posted buffers, incoming Writes) resolves only regions registered in this
  // domain. Local: never on the wire, not agreed with the peer.
  uint32_t pd = 0;

  // Paths. Path i starts on source port initial_ports[i] (or port_base + i when empty) and on
  // plane i % plane_count. Rotation draws new ports from [rotate_port_lo, rotate_port_hi].
  uint16_t path_count = 8;
  uint8_t plane_count = 1;
  std::vector<uint16_t> initial_ports;
  uint16_t port_base = 49152;
  uint16_t rotate_port_lo = 49152;
  uint16_t rotate_port_hi = 65535;
  uint16_t udp_port = wire::kDefaultUdpPort;  // destination port of data packets
  uint64_t seed = 1;  // drives port rotation choices, the paced phase and the first path sprayed

  TransportProfile profile;
  uint32_t mtu = 4096;  // payload bytes per data packet
  // Completions in posting order (requester) and receive order (responder). The reorder-buffer
  // profile always completes requests in order (docs/spec/baselines.md [B2]).
  bool ordered_completion = false;
  uint32_t max_send_queue = 1024;  // outstanding send work requests
  // The peer's max_send_queue, from the set-up (docs/spec/setup.md §4): as responder, [M1] accepts
  // a msg_seq only within this distance of the oldest incomplete message. 0: max_send_queue.
  uint32_t peer_max_send_queue = 0;
  uint32_t PeerSendQueue() const {
    return peer_max_send_queue != 0 ? peer_max_send_queue : max_send_queue;
  }
  uint32_t max_recv_queue = 1024;  // posted receives not yet completed
  uint32_t max_message_bytes = 1u << 30;

  // Congestion control (per path, under a connection limit).
  // The connection's initial window, spread evenly over the paths it sprays on: each starts at
  // cwnd = clamp(initial_window_bytes / paths, min_cwnd_bytes, max_cwnd_bytes). It belongs to the
  // connection, not to each path, so that adding paths does not multiply a first burst.
  uint32_t initial_window_bytes = 64 * 1024;
  // The responder's share offered at set-up for the whole connection (ReceiveBudget::
  // InitialOffer, carried by the set-up exchange): each path starts with window_hint =
  // max(1, initial_window_hint_bytes / paths) until the first ACK says better. 0: no hint yet.
  uint64_t initial_window_hint_bytes = 0;
  uint32_t min_cwnd_bytes = 4096;
  uint32_t max_cwnd_bytes = 4u << 20;
  uint64_t connection_max_inflight_bytes = 64u << 20;
  double ecn_gain = 1.0 / 16;       // DCTCP g: weight of a new ECN fraction sample
  Duration target_queue_delay = std::chrono::microseconds(20);  // delay above min RTT tolerated
  // RoCE as deployed (docs/spec/baselines.md [B3]), go-back-N profile only, the same on both ends:
  // the responder sends CNPs, the requester paces its packets at DCQCN's rate (dcqcn.h). The
  // window above still applies; a RoCE NIC has none, so pin it (min_cwnd = max_cwnd).
  std::optional<DcqcnParams> dcqcn;

  // ACKs.
  uint32_t ack_every = 2;  // in-order packets per ACK on a path (gaps and ACK_REQ ACK at once)
  Duration delayed_ack = std::chrono::microseconds(4);

  // Loss detection and path health.
  Duration min_probe_timeout = std::chrono::microseconds(50);
  // [R5d] once nothing more waits to be sent, each path probes its tail when its newest packet
  // is overdue, below the floor above (no evidence against the path; up to three per progress).
  bool tail_probes = true;
  Duration initial_rtt = std::chrono::microseconds(20);
  // Consecutive probe timeouts without progress: failed. Four, not three: at 1 % random loss
  // each way a round trip fails 2 % of the time, and three failed in a row after a loss (one
  // loss in 2,500) failed a healthy path in two runs of three of 1,000 connections.
  uint32_t fail_after_timeouts = 4;
  // ... when the path was overtaken by its siblings ([R5a]; at most fail_after_timeouts). Their
  // delivery of later packets is evidence a blind timeout lacks, but a burst queued on one path
  // (data rerouted off a failed one) also overtakes it for a while: 2 rotated such healthy paths
  // on the test fabric, so the default does not lower the count.
  uint32_t fail_after_overtaken = 4;
  uint32_t max_transmissions = 64;      // per packet; beyond: RETRY_EXC_ERR
  // No acknowledgement on any path for this long while work is outstanding: RETRY_EXC_ERR.
  Duration no_progress_timeout = std::chrono::milliseconds(100);
  Duration rotation_holddown = std::chrono::microseconds(200);  // per path, between rotations
  // Connection-wide rate limit on rotations (token bucket, [R7]): at most rotation_burst at
  // once, refilled at rotation_rate per second; a flapping fabric cannot cause a storm.
  uint32_t rotation_burst = 16;
  double rotation_rate = 2000;
  uint32_t probes_to_activate = 1;      // probe replies needed to carry data again
  Duration degraded_hold = std::chrono::milliseconds(5);  // persistent congestion before rotating
  double degraded_ecn_fraction = 0.9;

  // Receiver-not-ready.
  Duration rnr_delay = std::chrono::microseconds(20);
  uint32_t rnr_retry = 7;  // 7 means retry forever, as in ibverbs

  absl::Status Validate() const;
  // Paths new data is sprayed on: all of them, or one for the single-path profiles.
  uint16_t SprayPaths() const {
    return profile.spray == SprayPolicy::kSinglePath ? uint16_t{1} : path_count;
  }
  // no_progress_timeout / (2 * fail_after_timeouts), >= 1 ns (Validate): the longest PTO, probe
  // interval while work waits, paced interval, and connection-wide silence before a path fails
  // for it ([R5], [R5c], [R7], congestion.md §1).
  Duration RecoveryCap() const { return no_progress_timeout / (2 * fail_after_timeouts); }
  uint16_t InitialPort(uint16_t path) const {
    return initial_ports.empty() ? static_cast<uint16_t>(port_base + path) : initial_ports[path];
  }
};

}  // namespace metaroce::core
