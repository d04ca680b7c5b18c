#include "tests/support/host_pair.h"

#include <cstdlib>

namespace metaroce::testing {

HostPair::HostPair(core::ConnectionConfig config, const core::ReceiveBudgetConfig& budget) {
  a_ = std::make_unique<core::Endpoint>(sink_a_, budget);
  b_ = std::make_unique<core::Endpoint>(sink_b_, budget);
  config.local_conn_id = 1;
  config.remote_conn_id = 1;
  core::ConnectionConfig ca = config, cb = config;
  ca.tx_token = cb.rx_token = 0x1111222233334444ull;
  ca.rx_token = cb.tx_token = 0x5555666677778888ull;
  cb.seed = config.seed + 1;
  auto ra = a_->CreateConnection(ca);
  auto rb = b_->CreateConnection(cb);
  if (!ra.ok() || !rb.ok()) std::abort();
  ca_ = *ra;
  cb_ = *rb;
  fate = [](const RecordedPacket&, bool, core::Instant) { return Fate{}; };
}

void HostPair::Collect() {
  for (int side = 0; side < 2; ++side) {
    RecordingSink& sink = side == 0 ? sink_a_ : sink_b_;
    for (RecordedPacket& p : sink.packets()) {
      const bool to_b = side == 0;
      if (on_send) on_send(p, to_b);
      const Fate f = fate(p, to_b, now_);
      if (f.drop) {
        ++dropped_;
        continue;
      }
      for (int c = 0; c < f.copies; ++c) {
        InFlight in;
        in.to_b = to_b;
        in.bytes = p.bytes;
        in.meta.src_port = p.meta.src_port;
        in.meta.dst_port = p.meta.dst_port;
        in.meta.plane = p.meta.plane;
        in.meta.ce = f.ce;
        wire_.emplace(std::make_pair((now_ + f.delay).ns + c, seq_++), std::move(in));
      }
    }
    sink.Clear();
  }
}

void HostPair::Poll() {
  core::Completion buf[64];
  size_t n;
  while ((n = ca_->PollCompletions(buf)) > 0) {
    comps_a_.insert(comps_a_.end(), buf, buf + n);
    for (size_t i = 0; on_completion_a && i < n; ++i) on_completion_a(buf[i]);
  }
  while ((n = cb_->PollCompletions(buf)) > 0) {
    comps_b_.insert(comps_b_.end(), buf, buf + n);
    for (size_t i = 0; on_completion_b && i < n; ++i) on_completion_b(buf[i]);
  }
}

std::vector<core::PathEvent> HostPair::TakeEventsA() {
  std::vector<core::PathEvent> out;
  core::PathEvent buf[64];
  size_t n;
  while ((n = ca_->PollEvents(buf)) > 0) out.insert(out.end(), buf, buf + n);
  return out;
}

uint64_t HostPair::RunUntil(core::Instant until, uint64_t max_events) {
  uint64_t events = 0;
  Collect();
  Poll();
  while (events < max_events) {
    const core::Instant timer = std::min(a_->NextDeadline(), b_->NextDeadline());
    const core::Instant packet =
        wire_.empty() ? core::kNever : core::Instant{wire_.begin()->first.first};
    const core::Instant next = std::min(timer, packet);
    if (next == core::kNever || next > until) break;
    now_ = std::max(now_, next);
    if (packet <= timer) {
      InFlight in = std::move(wire_.begin()->second);
      wire_.erase(wire_.begin());
      ++delivered_;
      (in.to_b ? b_ : a_)->OnDatagram(now_, in.bytes, in.meta);
    } else {
      a_->OnTimer(now_);
      b_->OnTimer(now_);
    }
    ++events;
    Collect();
    Poll();
  }
  if (until != core::kNever && now_ < until && events < max_events) now_ = until;
  return events;
}

}  // namespace metaroce::testing
