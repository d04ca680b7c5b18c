// Protocol timers and windows for a software stack on a general-purpose host.
//
// The core's defaults (lib/core/config.h) describe a NIC-speed transport: microsecond timers,
// which is what the simulator models. A software stack on a shared host sees scheduling delays
// of tens of microseconds to milliseconds (a worker preempted, a vCPU woken from halt), so with
// those defaults it declares packets lost that are merely late, and paths failed that are only
// descheduled. These values keep the same algorithms with timers and ACK batching suited to
// that host; ConnectOptions::tuning starts from them.
#pragma once

#include <chrono>

#include "lib/core/config.h"

namespace metaroce::api {

inline core::ConnectionConfig HostTuning() {
  using std::chrono::microseconds;
  using std::chrono::milliseconds;
  core::ConnectionConfig c;
  c.initial_rtt = microseconds(200);
  c.min_probe_timeout = microseconds(1000);
  c.target_queue_delay = microseconds(200);
  c.ack_every = 16;  // each ACK costs the peer a packet's worth of CPU on a software path
  c.delayed_ack = microseconds(50);
  c.rotation_holddown = milliseconds(5);
  c.rnr_delay = microseconds(200);
  c.no_progress_timeout = milliseconds(2000);
  c.degraded_hold = milliseconds(50);
  return c;
}

}  // namespace metaroce::api
