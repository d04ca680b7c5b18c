#include "lib/api/connection.h"

#include "absl/strings/str_cat.h"
#include "lib/api/backend.h"
#include "lib/engine/doorbell.h"
#include "lib/engine/engine.h"

namespace metaroce::api {

Connection::Connection(std::shared_ptr<engine::ConnectionChannel> channel, WakeTarget wake,
                       std::unique_ptr<ConnectionControl> control, ConnectionParameters local,
                       ConnectionParameters peer)
    : channel_(std::move(channel)),
      wake_(wake),
      control_(std::move(control)),
      local_(std::move(local)),
      peer_(std::move(peer)) {}

// The connection leaves the engine before its rings may go.
Connection::~Connection() { control_.reset(); }

void Connection::Wake() const {
  if (wake_.doorbell != nullptr) {
    engine::RingDoorbell(*wake_.doorbell, wake_.doorbell_fd);
  } else {
    wake_.engine->Wake(wake_.worker);
  }
}

absl::Status Connection::PostSend(const SendWorkRequest& wr) {
  if (!channel_->sends.TryPush(wr)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "send queue full (", channel_->sends.capacity(),
        " requests waiting for the engine): poll completions, then post again"));
  }
  Wake();
  return absl::OkStatus();
}

absl::Status Connection::PostRecv(const RecvWorkRequest& wr) {
  if (!channel_->recvs.TryPush(wr)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "receive queue full (", channel_->recvs.capacity(),
        " receives waiting for the engine): poll completions, then post again"));
  }
  Wake();
  return absl::OkStatus();
}

size_t Connection::PostSends(std::span<const SendWorkRequest> wrs) {
  size_t n = 0;
  while (n < wrs.size() && channel_->sends.TryPush(wrs[n])) ++n;
  if (n > 0) Wake();
  return n;
}

size_t Connection::PostRecvs(std::span<const RecvWorkRequest> wrs) {
  size_t n = 0;
  while (n < wrs.size() && channel_->recvs.TryPush(wrs[n])) ++n;
  if (n > 0) Wake();
  return n;
}

size_t Connection::PollEvents(std::span<PathEvent> out) {
  size_t n = 0;
  while (n < out.size() && channel_->events.TryPop(out[n])) ++n;
  return n;
}

absl::StatusOr<ConnectionStats> Connection::Stats() const { return control_->Stats(); }

absl::Status Connection::Abort() { return control_->Abort(); }

absl::Status Connection::RequestRotation(uint16_t path_id) {
  return control_->RequestRotation(path_id);
}

}  // namespace metaroce::api
