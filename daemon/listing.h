// Listings that grow with what the daemon holds (conn.show: every connection on the host;
// path.events: every connection's record) come in pages, so that no reply outgrows the control
// protocol's line limit (control::kMaxMessageBytes): 4,000 connections take about 2.5 MB to
// describe. docs/control-protocol.md, "Listings", is the contract:
//
//   request  params `after` (optional: the key of the last item already seen; the page starts
//            after it) and `limit` (optional, 1..kMaxPageLimit: at most this many items)
//   result   the items in increasing key order, and `next` (the key to pass as `after`) only
//            when more remain
//
// A page is also cut before its items would outgrow kPageBytes, whatever the limit. A request
// without `after` and `limit` (what every client sent before listings were paged) therefore gets
// the whole listing whenever it fits in one reply, as before, and its first page with `next`
// when it does not (where it used to get an error).
//
// Keys are what the listing is ordered by and never reused: connection ids, event sequence
// numbers. So a walk from no `after` to no `next` returns every item that existed for the whole
// walk exactly once; items made meanwhile appear when their key is past the cursor, items gone
// meanwhile do not.
//
// Threading: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/control/json.h"
#include "lib/control/protocol.h"

namespace metaroce::daemon {

// Bytes of items (serialized, with the commas between them) one page holds at most: the line
// limit less room for the envelope, `{"version":1,"id":N,"result":{"connections":[` ...
// `],"next":N}}` and the newline (under 200 bytes with 20-digit numbers).
inline constexpr size_t kPageBytes = control::kMaxMessageBytes - 4096;
// `limit`'s largest value, and its default: a page is cut earlier by kPageBytes (a connection's
// description takes 600 bytes or more, an event about 250).
inline constexpr uint64_t kMaxPageLimit = 10000;

struct PageParams {
  std::optional<uint64_t> after;  // items whose key is greater; none: from the first
  uint64_t limit = kMaxPageLimit;
};

// `after` and `limit` of a request. InvalidArgument naming the parameter, the value and what is
// expected (`limit 0 is not in 1..10000`).
absl::StatusOr<PageParams> ReadPageParams(const control::Json& params);

// One page, offered its items in increasing key order.
class PageBuilder {
 public:
  explicit PageBuilder(const PageParams& params, size_t max_bytes = kPageBytes);

  // Where the page's items start: the first key greater than `after`.
  uint64_t first_key() const;

  // Offers the item of `key`, made by `make` only when the page has room for one more by count
  // (`make` returns nullopt for an item gone meanwhile: skipped). True: taken or skipped, offer
  // the next. False: the page is full (by count, or the item would outgrow max_bytes): more
  // remain from this key on, and the caller stops. The first item is always taken, so that a
  // walk always moves.
  bool Offer(uint64_t key, const std::function<std::optional<control::Json>()>& make);

  // Moves the items into result[array_key] (an array, possibly empty) and, when more remain,
  // sets result["next"].
  void Finish(control::Json& result, std::string_view array_key);

  size_t size() const { return items_.size(); }
  size_t bytes() const { return bytes_; }

 private:
  PageParams params_;
  size_t max_bytes_;
  std::vector<control::Json> items_;
  size_t bytes_ = 0;
  uint64_t last_key_ = 0;
  bool more_ = false;
};

// conn.show over connections described elsewhere (the daemon's own, the applications'):
// params `id`, `peer` (filters), `after`, `limit`. `ids(peer)` lists the connections' ids in
// increasing order, those of `peer` only when it is not empty; `describe(id)` is a connection's
// CONN object, or nullopt when it is gone. Unknown parameters and bad values are InvalidArgument,
// an `id` no connection has NotFound ("no connection 7").
absl::StatusOr<control::Json> ShowConnectionPage(
    const control::Json& params,
    const std::function<std::vector<uint32_t>(std::string_view peer)>& ids,
    const std::function<std::optional<control::Json>(uint32_t id)>& describe);

}  // namespace metaroce::daemon
