// Matching of arriving messages with posted receives, libfabric's rules (fi_tagged(3), fi_msg(3)):
//   - a message matches a posted receive when ((tag ^ receive.tag) & ~receive.ignore) == 0 and the
//     receive names its source or any source (FI_ADDR_UNSPEC: kAnySource here);
//   - an arriving message takes the first matching receive in posting order; a receive posted
//     takes the first matching message in arrival order (unexpected messages), so that messages
//     from one source with one tag are received in the order they were sent (FI_ORDER_SAS).
// Untagged messages use the same queue with tag 0 and an ignore mask of all ones.
//
// Entries carry an opaque `handle` (the provider's object for the receive or the message). Pure:
// no I/O, no allocation beyond the queues; not thread-safe (the provider's domain lock guards it).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>

namespace metaroce::ofi {

inline constexpr uint64_t kAnySource = ~uint64_t{0};

struct PostedReceive {
  uint64_t tag = 0;
  uint64_t ignore = 0;
  uint64_t source = kAnySource;  // a peer's identity, or kAnySource
  void* handle = nullptr;
};

struct ArrivedMessage {
  uint64_t tag = 0;
  uint64_t source = 0;  // kAnySource: not known (yet); only receives from any source take it
  void* handle = nullptr;
};

class MatchQueue {
 public:
  static bool Matches(const PostedReceive& r, uint64_t tag, uint64_t source) {
    return ((tag ^ r.tag) & ~r.ignore) == 0 && (r.source == kAnySource || r.source == source);
  }

  // A message arrived: the first posted receive it matches, taken off the queue; nullopt when it
  // matches none (then the caller keeps it: AddUnexpected).
  std::optional<PostedReceive> TakeReceiveFor(uint64_t tag, uint64_t source) {
    for (auto it = posted_.begin(); it != posted_.end(); ++it) {
      if (Matches(*it, tag, source)) {
        PostedReceive r = *it;
        posted_.erase(it);
        return r;
      }
    }
    return std::nullopt;
  }
  void AddUnexpected(const ArrivedMessage& m) { unexpected_.push_back(m); }

  // A receive is posted: the first unexpected message it matches (taken off the queue unless
  // `peek`); nullopt when there is none (then the caller posts it: AddPosted).
  std::optional<ArrivedMessage> FindMessageFor(const PostedReceive& r, bool peek) {
    for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
      if (Matches(r, it->tag, it->source)) {
        ArrivedMessage m = *it;
        if (!peek) unexpected_.erase(it);
        return m;
      }
    }
    return std::nullopt;
  }
  void AddPosted(const PostedReceive& r) { posted_.push_back(r); }

  // Removes the posted receive whose handle is `handle` (fi_cancel); false when none is posted.
  bool CancelPosted(const void* handle) {
    for (auto it = posted_.begin(); it != posted_.end(); ++it) {
      if (it->handle == handle) {
        posted_.erase(it);
        return true;
      }
    }
    return false;
  }
  // Removes the unexpected message `handle` (claimed by FI_CLAIM); false when it is not queued.
  bool RemoveUnexpected(const void* handle) {
    for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
      if (it->handle == handle) {
        unexpected_.erase(it);
        return true;
      }
    }
    return false;
  }

  // Messages whose source was unknown when they arrived (kAnySource: the sender was not yet in
  // the address vector) get `resolve(handle)` as their source now, so that a directed receive
  // posted since then finds them in arrival order (an MPI library inserts a peer's address on
  // first use, which can be after that peer's first message arrived).
  template <typename Resolve>
  void ResolveUnknownSources(Resolve resolve) {
    for (ArrivedMessage& m : unexpected_) {
      if (m.source == kAnySource) m.source = resolve(m.handle);
    }
  }

  const std::deque<PostedReceive>& posted() const { return posted_; }
  const std::deque<ArrivedMessage>& unexpected() const { return unexpected_; }

 private:
  std::deque<PostedReceive> posted_;
  std::deque<ArrivedMessage> unexpected_;
};

}  // namespace metaroce::ofi
