#include "lib/api/connection.h"

#include "absl/strings/str_cat.h"
#include "lib/engine/engine.h"

namespace metaroce::api {

Connection::~Connection() { engine_.DestroyConnection(local_.conn_id).IgnoreError(); }

absl::Status Connection::PostSend(const SendWorkRequest& wr) {
  if (!channel_->sends.TryPush(wr)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "send queue full (", channel_->sends.capacity(),
        " requests waiting for the engine): poll completions, then post again"));
  }
  engine_.Wake(channel_->owner());
  return absl::OkStatus();
}

absl::Status Connection::PostRecv(const RecvWorkRequest& wr) {
  if (!channel_->recvs.TryPush(wr)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "receive queue full (", channel_->recvs.capacity(),
        " receives waiting for the engine): poll completions, then post again"));
  }
  engine_.Wake(channel_->owner());
  return absl::OkStatus();
}

size_t Connection::PostSends(std::span<const SendWorkRequest> wrs) {
  size_t n = 0;
  while (n < wrs.size() && channel_->sends.TryPush(wrs[n])) ++n;
  if (n > 0) engine_.Wake(channel_->owner());
  return n;
}

size_t Connection::PostRecvs(std::span<const RecvWorkRequest> wrs) {
  size_t n = 0;
  while (n < wrs.size() && channel_->recvs.TryPush(wrs[n])) ++n;
  if (n > 0) engine_.Wake(channel_->owner());
  return n;
}

size_t Connection::PollEvents(std::span<PathEvent> out) {
  size_t n = 0;
  while (n < out.size() && channel_->events.TryPop(out[n])) ++n;
  return n;
}

absl::StatusOr<ConnectionStats> Connection::Stats() const {
  return engine_.Snapshot(local_.conn_id);
}

absl::Status Connection::Abort() { return engine_.AbortConnection(local_.conn_id); }

absl::Status Connection::RequestRotation(uint16_t path_id) {
  return engine_.RequestRotation(local_.conn_id, path_id);
}

}  // namespace metaroce::api
