// Listings by pages (daemon/listing.h): the cursor and limit parameters, the page's cut, and
// conn.show over 5,000 connections described as the daemon describes them, which in one reply
// outgrew the control protocol's line limit (from about 1,700 connections on).
#include "daemon/listing.h"

#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/connection_manager.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/control/protocol.h"

namespace metaroce::daemon {
namespace {

using control::Json;
using ::testing::HasSubstr;

Json J(std::string_view text) { return *Json::Parse(text); }

// What the daemon writes on the socket for `result`: the reply's whole line (an error instead
// of a result over the line limit: control::SerializeResponse).
std::string ReplyLine(const Json& result) {
  control::Response r;
  r.id = UINT64_MAX;
  r.result = result;
  return control::SerializeResponse(r);
}
size_t ReplyLineBytes(const Json& result) { return ReplyLine(result).size(); }

// conn.show's description of connection `id`, as long as a daemon's can be: an IPv6 peer,
// 256 paths on 8 planes, every counter at its widest, an error reason.
Json WidestConnection(uint32_t id) {
  ManagedConnection mc;
  mc.id = id;
  mc.peer = "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff";
  mc.peer_id = UINT32_MAX;
  mc.paths = 256;
  mc.planes = {0, 1, 2, 3, 4, 5, 6, 7};
  mc.profile = "metaroce";
  mc.created_s = 1234567.123456789;
  mc.gone = "the peer daemon closed the link (connection reset by peer)";
  api::ConnectionStats st;
  st.conn_id = id;
  st.state = core::Connection::State::kError;
  st.error_status = core::WcStatus::kRetryExcErr;
  static_assert(std::is_trivially_copyable_v<core::ConnectionCounters>);
  std::memset(static_cast<void*>(&st.counters), 0xff, sizeof(st.counters));  // all uint64_t
  return ConnectionJson(mc, st);
}

struct Walk {
  std::vector<uint32_t> ids;      // in the order listed
  std::vector<size_t> line_bytes;  // each reply
  std::vector<size_t> page_sizes;
};

// Follows `next` from no cursor until a page has none, as mrctl does.
Walk WalkConnections(const std::map<uint32_t, Json>& conns, Json params = Json::MakeObject()) {
  Walk walk;
  for (int pages = 0; pages < 1000; ++pages) {
    absl::StatusOr<Json> page = ShowConnectionPage(
        params,
        [&](std::string_view) {
          std::vector<uint32_t> ids;
          for (const auto& [id, c] : conns) ids.push_back(id);
          return ids;
        },
        [&](uint32_t id) -> std::optional<Json> {
          auto it = conns.find(id);
          if (it == conns.end()) return std::nullopt;
          return it->second;
        });
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) break;
    walk.line_bytes.push_back(ReplyLineBytes(*page));
    walk.page_sizes.push_back(page->Find("connections")->size());
    for (const Json& c : page->Find("connections")->array()) {
      walk.ids.push_back(static_cast<uint32_t>(*c.Find("id")->AsUint()));
    }
    const Json* next = page->Find("next");
    if (next == nullptr) break;
    params["after"] = *next;
  }
  return walk;
}

TEST(Listing, FiveThousandConnectionsInRepliesUnderTheLineLimitEachListedOnce) {
  std::map<uint32_t, Json> conns;
  for (uint32_t id = 1; id <= 5000; ++id) conns[id * 3] = WidestConnection(id * 3);

  // What conn.show answered before it was paged: everything in one line, over the limit, which
  // the reply's serialization refuses.
  Json whole = Json::MakeObject();
  Json& list = whole["connections"] = Json::MakeArray();
  for (const auto& [id, c] : conns) list.Push(c);
  absl::StatusOr<control::Response> refused = control::ParseResponse(ReplyLine(whole));
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->status.code(), absl::StatusCode::kResourceExhausted);

  const Walk walk = WalkConnections(conns);
  ASSERT_GT(walk.line_bytes.size(), 1u);
  for (size_t bytes : walk.line_bytes) {
    EXPECT_LE(bytes, control::kMaxMessageBytes);
    EXPECT_GT(bytes, 1000u);  // a result, not the refusal
  }
  // Every page but the last is full: its next item would not have fit.
  for (size_t i = 0; i + 1 < walk.line_bytes.size(); ++i) {
    EXPECT_GT(walk.line_bytes[i] + conns.begin()->second.Dump().size(),
              kPageBytes);
  }
  std::vector<uint32_t> expected;
  for (const auto& [id, c] : conns) expected.push_back(id);
  EXPECT_EQ(walk.ids, expected);  // each once, in id order
}

TEST(Listing, LimitCutsPagesAndNextIsAbsentOnTheLast) {
  std::map<uint32_t, Json> conns;
  for (uint32_t id : {2, 5, 7, 11, 13}) conns[id] = J(absl::StrCat(R"({"id":)", id, "}"));
  Json params = Json::MakeObject();
  params["limit"] = 2;
  const Walk walk = WalkConnections(conns, params);
  EXPECT_EQ(walk.page_sizes, (std::vector<size_t>{2, 2, 1}));
  EXPECT_EQ(walk.ids, (std::vector<uint32_t>{2, 5, 7, 11, 13}));

  // A limit that ends exactly at the last connection: no `next`, no empty page after it.
  params["limit"] = 5;
  EXPECT_EQ(WalkConnections(conns, params).page_sizes, (std::vector<size_t>{5}));
  // A request without paging parameters (every client before paging) gets everything that fits.
  EXPECT_EQ(WalkConnections(conns).page_sizes, (std::vector<size_t>{5}));
}

TEST(Listing, CursorSkipsWhatWasSeenAndGoneConnectionsAreLeftOut) {
  std::map<uint32_t, Json> conns;
  for (uint32_t id : {2, 5, 7}) conns[id] = J(absl::StrCat(R"({"id":)", id, "}"));
  Json params = Json::MakeObject();
  params["after"] = 5;
  EXPECT_EQ(WalkConnections(conns, params).ids, (std::vector<uint32_t>{7}));
  params["after"] = 7;
  EXPECT_EQ(WalkConnections(conns, params).ids, (std::vector<uint32_t>{}));
  params["after"] = UINT64_MAX;
  EXPECT_EQ(WalkConnections(conns, params).ids, (std::vector<uint32_t>{}));

  // Listed by id but deleted before its description was taken: skipped, the page goes on.
  absl::StatusOr<Json> page = ShowConnectionPage(
      Json::MakeObject(), [](std::string_view) { return std::vector<uint32_t>{1, 2, 3}; },
      [](uint32_t id) -> std::optional<Json> {
        if (id == 2) return std::nullopt;
        return J(absl::StrCat(R"({"id":)", id, "}"));
      });
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->Dump(), R"({"connections":[{"id":1},{"id":3}]})");
}

TEST(Listing, FiltersStillApply) {
  auto ids = [](std::string_view peer) {
    return peer.empty() ? std::vector<uint32_t>{1, 2, 3} : std::vector<uint32_t>{2};
  };
  auto describe = [](uint32_t id) -> std::optional<Json> {
    return J(absl::StrCat(R"({"id":)", id, "}"));
  };
  EXPECT_EQ(ShowConnectionPage(J(R"({"peer":"198.18.0.2"})"), ids, describe)->Dump(),
            R"({"connections":[{"id":2}]})");
  EXPECT_EQ(ShowConnectionPage(J(R"({"id":3})"), ids, describe)->Dump(),
            R"({"connections":[{"id":3}]})");
  // An id that exists, of another peer: listed by neither filter, not an error.
  EXPECT_EQ(ShowConnectionPage(J(R"({"id":3,"peer":"198.18.0.2"})"), ids, describe)->Dump(),
            R"({"connections":[]})");
  absl::StatusOr<Json> unknown = ShowConnectionPage(J(R"({"id":9})"), ids, describe);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(), "no connection 9");
}

TEST(Listing, BadPagingParametersAreRefusedWithAReason) {
  auto ids = [](std::string_view) { return std::vector<uint32_t>{1}; };
  auto describe = [](uint32_t) -> std::optional<Json> { return Json::MakeObject(); };
  const std::pair<std::string_view, std::string_view> cases[] = {
      {R"({"limit":0})", "limit 0 is not in 1..10000"},
      {R"({"limit":10001})", "limit 10001 is not in 1..10000"},
      {R"({"limit":-1})", "limit -1 is not in 1..10000"},
      {R"({"limit":"all"})", "limit \"all\" is not in 1..10000"},
      {R"({"after":-3})", "after: expected the `next` of the previous page"},
      {R"({"after":1.5})", "after: expected the `next` of the previous page"},
      {R"({"after":"7"})", "after: expected the `next` of the previous page"},
      {R"({"cursor":7})", "unknown parameter cursor; expected id, peer, after, limit"},
  };
  for (const auto& [params, message] : cases) {
    absl::StatusOr<Json> r = ShowConnectionPage(J(params), ids, describe);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << params;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(message)) << params;
  }
  EXPECT_TRUE(ShowConnectionPage(J(R"({"limit":10000,"after":0})"), ids, describe).ok());
  EXPECT_TRUE(ShowConnectionPage(J(R"({"limit":null,"after":null})"), ids, describe).ok());
}

TEST(Listing, PageBuilderCutsByBytesButAlwaysTakesOneItem) {
  PageParams params;
  PageBuilder page(params, /*max_bytes=*/20);
  const Json big = J(R"({"text":"more than twenty bytes of text"})");
  EXPECT_TRUE(page.Offer(1, [&] { return std::optional<Json>(big); }));   // alone: taken
  EXPECT_FALSE(page.Offer(2, [&] { return std::optional<Json>(big); }));  // full
  int made = 0;
  EXPECT_FALSE(page.Offer(3, [&] { ++made; return std::optional<Json>(big); }));
  EXPECT_EQ(made, 0);  // a full page makes nothing more
  Json out = Json::MakeObject();
  page.Finish(out, "items");
  EXPECT_EQ(out.Find("items")->size(), 1u);
  EXPECT_EQ(out.Find("next")->AsUint(), 1u);
}

TEST(Listing, AFullPageByCountDescribesNothingMore) {
  PageParams params;
  params.limit = 1;
  PageBuilder page(params);
  int made = 0;
  auto make = [&] { ++made; return std::optional<Json>(Json::MakeObject()); };
  EXPECT_TRUE(page.Offer(4, make));
  EXPECT_FALSE(page.Offer(5, make));
  EXPECT_EQ(made, 1);  // describing a connection costs a round trip to its worker
  Json out = Json::MakeObject();
  page.Finish(out, "connections");
  EXPECT_EQ(out.Dump(), R"({"connections":[{}],"next":4})");
}

}  // namespace
}  // namespace metaroce::daemon
