#include "daemon/listing.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/params.h"

namespace metaroce::daemon {

using control::Json;

absl::StatusOr<PageParams> ReadPageParams(const Json& params) {
  PageParams p;
  if (const Json* v = params.Find("after"); v != nullptr && !v->is_null()) {
    p.after = v->AsUint();
    if (!p.after) {
      return absl::InvalidArgumentError(absl::StrCat(
          "after: expected the `next` of the previous page (an unsigned integer), not ",
          v->Dump()));
    }
  }
  if (const Json* v = params.Find("limit"); v != nullptr && !v->is_null()) {
    const std::optional<uint64_t> limit = v->AsUint();
    if (!limit || *limit < 1 || *limit > kMaxPageLimit) {
      return absl::InvalidArgumentError(absl::StrCat("limit ", v->Dump(), " is not in 1..",
                                                     kMaxPageLimit,
                                                     " (items per page; follow next for more)"));
    }
    p.limit = *limit;
  }
  return p;
}

PageBuilder::PageBuilder(const PageParams& params, size_t max_bytes)
    : params_(params), max_bytes_(max_bytes) {}

uint64_t PageBuilder::first_key() const {
  if (!params_.after) return 0;
  return *params_.after == UINT64_MAX ? UINT64_MAX : *params_.after + 1;
}

bool PageBuilder::Offer(uint64_t key, const std::function<std::optional<Json>()>& make) {
  if (more_) return false;
  if (items_.size() >= params_.limit) {
    more_ = true;
    return false;
  }
  std::optional<Json> item = make();
  if (!item) return true;  // gone meanwhile
  // What the item adds to the reply's line: its text and the comma before it.
  const size_t bytes = item->Dump().size() + (items_.empty() ? 0 : 1);
  if (!items_.empty() && bytes_ + bytes > max_bytes_) {
    more_ = true;
    return false;
  }
  bytes_ += bytes;
  last_key_ = key;
  items_.push_back(*std::move(item));
  return true;
}

void PageBuilder::Finish(Json& result, std::string_view array_key) {
  Json& list = result[array_key] = Json::MakeArray();
  for (Json& item : items_) list.Push(std::move(item));
  items_.clear();
  if (more_) result["next"] = last_key_;
}

absl::StatusOr<Json> ShowConnectionPage(
    const Json& params, const std::function<std::vector<uint32_t>(std::string_view peer)>& ids,
    const std::function<std::optional<Json>(uint32_t id)>& describe) {
  if (absl::Status s = OnlyKeys(params, {"id", "peer", "after", "limit"}); !s.ok()) return s;
  std::optional<uint64_t> id;
  if (const Json* v = params.Find("id"); v != nullptr && !v->is_null()) {
    id = v->AsUint();
    if (!id) return absl::InvalidArgumentError("id: expected a connection id (integer)");
  }
  absl::StatusOr<std::string> peer = params.GetStringOr("peer", "");
  if (!peer.ok()) return peer.status();
  absl::StatusOr<PageParams> page_params = ReadPageParams(params);
  if (!page_params.ok()) return page_params.status();

  std::vector<uint32_t> listed = ids(*peer);
  if (id) {
    const auto is_id = [&](uint32_t c) { return c == *id; };
    const bool exists = std::any_of(listed.begin(), listed.end(), is_id) ||
                        (!peer->empty() && *id <= UINT32_MAX &&
                         std::ranges::binary_search(ids(""), static_cast<uint32_t>(*id)));
    if (!exists) return absl::NotFoundError(absl::StrCat("no connection ", *id));
    std::erase_if(listed, [&](uint32_t c) { return !is_id(c); });
  }
  PageBuilder page(*page_params);
  for (auto it = std::lower_bound(listed.begin(), listed.end(), page.first_key());
       it != listed.end(); ++it) {
    const uint32_t c = *it;
    if (!page.Offer(c, [&] { return describe(c); })) break;
  }
  Json out = Json::MakeObject();
  page.Finish(out, "connections");
  return out;
}

}  // namespace metaroce::daemon
