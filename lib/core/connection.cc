#include "lib/core/connection.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "lib/core/probes.h"
#include "lib/core/receiver.h"
#include "lib/core/sender.h"

namespace metaroce::core {

// Runs AfterEntry(halves) when an entry point returns, whichever way it returns.
class Connection::EntryScope {
 public:
  EntryScope(Connection& c, Halves halves) : c_(c), halves_(halves) {}
  ~EntryScope() { c_.AfterEntry(halves_); }
  EntryScope(const EntryScope&) = delete;
  EntryScope& operator=(const EntryScope&) = delete;

 private:
  Connection& c_;
  Halves halves_;
};

Connection::Connection(const ConnectionConfig& config, MemoryTable& memory, PacketSink& sink,
                       ConnectionObserver* observer, ReceiveBudget* budget)
    : config_(config), memory_(memory), sink_(sink), observer_(observer), budget_(budget) {
  sender_ = std::make_unique<Sender>(*this);
  receiver_ = std::make_unique<Receiver>(*this);
  sender_deadline_ = sender_->NextDeadline();
  receiver_deadline_ = receiver_->NextDeadline();
  if (budget_ != nullptr) budget_->AddConnection(activity_, config_.SprayPaths());
}

Connection::~Connection() {
  if (budget_ != nullptr) budget_->RemoveConnection(activity_);
}

void Connection::AfterEntry(Halves halves) {
  if (halves & kSenderHalf) sender_deadline_ = sender_->NextDeadline();
  if (halves & kReceiverHalf) receiver_deadline_ = receiver_->NextDeadline();
  const Instant deadline =
      state_ == State::kError ? kNever : std::min(sender_deadline_, receiver_deadline_);
  if (deadline != deadline_) {
    deadline_ = deadline;
    if (observer_ != nullptr) observer_->OnDeadlineChanged(*this, deadline);
  }
  AnnounceOutput();
}

void Connection::AnnounceOutput() {
  if (!output_announced_ && has_output()) {
    output_announced_ = true;
    if (observer_ != nullptr) observer_->OnOutputReady(*this);
  }
}

absl::Status Connection::PostSend(Instant now, const SendWorkRequest& wr) {
  EntryScope scope(*this, kSenderHalf);
  if (state_ == State::kError) {
    return absl::FailedPreconditionError(
        absl::StrCat("connection is in error (", std::string(StatusName(error_status_)), ")"));
  }
  // congestion.md §5.2: a connection this host sends on is not one about to send to it.
  if (budget_ != nullptr) budget_->OnLocalPost(activity_);
  return sender_->Post(now, wr);
}

absl::Status Connection::PostRecv(Instant /*now*/, const RecvWorkRequest& wr) {
  EntryScope scope(*this, kReceiverHalf);
  if (state_ == State::kError) {
    return absl::FailedPreconditionError(
        absl::StrCat("connection is in error (", std::string(StatusName(error_status_)), ")"));
  }
  return receiver_->PostRecv(wr);
}

void Connection::OnPacket(Instant now, const wire::Packet& packet, const RxMeta& meta) {
  // An ACK is the sender's, data and PROBEs the receiver's.
  EntryScope scope(*this, packet.opcode == wire::Opcode::kAck ? kSenderHalf : kReceiverHalf);
  if (state_ == State::kError) return;
  // Every packet proves it belongs to this connection before anything in it is used.
  if (packet.token != config_.rx_token) {
    ++counters_.bad_token;
    return;
  }
  if (packet.path_id >= config_.path_count) {
    ++counters_.bad_path;
    return;
  }
  MR_PROBE6(packet_received, config_.local_conn_id, packet.path_id, packet.psn,
            static_cast<uint8_t>(packet.opcode), packet.payload.size(), packet.flags);
  switch (packet.opcode) {
    case wire::Opcode::kAck: sender_->OnAck(now, packet); break;
    case wire::Opcode::kProbe: receiver_->OnProbe(now, packet, meta); break;
    default: receiver_->OnData(now, packet, meta); break;
  }
}

void Connection::OnTimer(Instant now) {
  EntryScope scope(*this, kBothHalves);
  if (state_ == State::kError) return;
  receiver_->OnTimer(now);
  sender_->OnTimer(now);
}

void Connection::SendPull(Instant now, uint64_t turn) {
  EntryScope scope(*this, kReceiverHalf);
  if (state_ == State::kError) return;
  receiver_->SendPull(now, turn);
}

void Connection::Fail(Instant now, WcStatus status, std::optional<uint32_t> culprit) {
  if (state_ == State::kError) return;
  state_ = State::kError;
  error_status_ = status;
  // The culprit gets the real status; if none is named, the oldest request carries it.
  sender_->Flush(now, culprit, status);
  receiver_->Flush();
}

size_t Connection::PollCompletions(std::span<Completion> out) {
  size_t n = 0;
  while (n < out.size() && !completions_.empty()) {
    out[n++] = completions_.front();
    completions_.pop_front();
  }
  AnnounceOutput();  // output left behind is announced again
  return n;
}

size_t Connection::PollEvents(std::span<PathEvent> out) {
  size_t n = 0;
  while (n < out.size() && !events_.empty()) {
    out[n++] = events_.front();
    events_.pop_front();
  }
  AnnounceOutput();
  return n;
}

absl::Status Connection::RequestRotation(Instant now, uint16_t path_id) {
  EntryScope scope(*this, kSenderHalf);
  if (state_ == State::kError) return absl::FailedPreconditionError("connection is in error");
  return sender_->RequestRotation(now, path_id);
}

void Connection::Abort(Instant now) {
  EntryScope scope(*this, kBothHalves);
  Fail(now, WcStatus::kWrFlushErr, std::nullopt);
}

PathStats Connection::path_stats(uint16_t path_id) const {
  PathStats s = sender_->Stats(path_id);
  s.rx_packets = receiver_->rx_packets(path_id);
  return s;
}

size_t Connection::outstanding_sends() const { return sender_->outstanding(); }
size_t Connection::posted_receives() const { return receiver_->posted(); }

}  // namespace metaroce::core
