// lib/ofi/matching.h: matching arriving messages with posted receives (libfabric's rules): tag
// and ignore bits, source matching with kAnySource, the first posted receive and the first
// unexpected message winning, peeking without removing, CancelPosted and RemoveUnexpected.
#include "lib/ofi/matching.h"

#include <gtest/gtest.h>

namespace metaroce::ofi {
namespace {

int h1, h2, h3;  // handles: their addresses

TEST(MatchQueue, MatchesEqualTags) {
  EXPECT_TRUE(MatchQueue::Matches({0x1234, 0, kAnySource, nullptr}, 0x1234, 9));
  EXPECT_FALSE(MatchQueue::Matches({0x1234, 0, kAnySource, nullptr}, 0x1235, 9));
}

TEST(MatchQueue, IgnoreBitsMatchAnything) {
  const PostedReceive r{0x1200, 0x00ff, kAnySource, nullptr};
  EXPECT_TRUE(MatchQueue::Matches(r, 0x1200, 1));
  EXPECT_TRUE(MatchQueue::Matches(r, 0x12ab, 1));
  EXPECT_FALSE(MatchQueue::Matches(r, 0x13ab, 1));
  EXPECT_TRUE(MatchQueue::Matches({0, ~uint64_t{0}, kAnySource, nullptr}, 0xffffffffffffffff, 1));
}

TEST(MatchQueue, SourceMustMatchUnlessAnySource) {
  EXPECT_TRUE(MatchQueue::Matches({5, 0, 3, nullptr}, 5, 3));
  EXPECT_FALSE(MatchQueue::Matches({5, 0, 3, nullptr}, 5, 4));
  EXPECT_TRUE(MatchQueue::Matches({5, 0, kAnySource, nullptr}, 5, 4));
}

TEST(MatchQueue, ArrivingMessageTakesTheFirstPostedReceiveItMatches) {
  MatchQueue q;
  q.AddPosted({7, 0, 2, &h1});           // another source
  q.AddPosted({7, 0, kAnySource, &h2});  // first match
  q.AddPosted({7, 0, 1, &h3});           // matches too, posted later
  std::optional<PostedReceive> r = q.TakeReceiveFor(7, 1);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->handle, &h2);
  EXPECT_EQ(q.posted().size(), 2u);
  r = q.TakeReceiveFor(7, 1);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->handle, &h3);
}

TEST(MatchQueue, ArrivingMessageMatchingNothingIsLeft) {
  MatchQueue q;
  q.AddPosted({7, 0, kAnySource, &h1});
  EXPECT_FALSE(q.TakeReceiveFor(8, 1).has_value());
  EXPECT_EQ(q.posted().size(), 1u);
}

TEST(MatchQueue, PostedReceiveTakesTheFirstUnexpectedMessageItMatches) {
  MatchQueue q;
  q.AddUnexpected({9, 1, &h1});  // other tag
  q.AddUnexpected({7, 1, &h2});  // first match
  q.AddUnexpected({7, 1, &h3});
  std::optional<ArrivedMessage> m = q.FindMessageFor({7, 0, kAnySource, nullptr}, false);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->handle, &h2);
  m = q.FindMessageFor({7, 0, kAnySource, nullptr}, false);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->handle, &h3);
  EXPECT_FALSE(q.FindMessageFor({7, 0, kAnySource, nullptr}, false).has_value());
  EXPECT_EQ(q.unexpected().size(), 1u);
}

TEST(MatchQueue, PostedReceiveWithASourceSkipsOtherSources) {
  MatchQueue q;
  q.AddUnexpected({7, 1, &h1});
  q.AddUnexpected({7, 2, &h2});
  std::optional<ArrivedMessage> m = q.FindMessageFor({7, 0, 2, nullptr}, false);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->handle, &h2);
  EXPECT_EQ(m->source, 2u);
}

TEST(MatchQueue, PeekDoesNotRemove) {
  MatchQueue q;
  q.AddUnexpected({7, 1, &h1});
  for (int i = 0; i < 2; ++i) {
    std::optional<ArrivedMessage> m = q.FindMessageFor({7, 0, kAnySource, nullptr}, true);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->handle, &h1);
  }
  EXPECT_EQ(q.unexpected().size(), 1u);
}

TEST(MatchQueue, CancelPostedRemovesThatReceiveOnly) {
  MatchQueue q;
  q.AddPosted({7, 0, kAnySource, &h1});
  q.AddPosted({7, 0, kAnySource, &h2});
  EXPECT_TRUE(q.CancelPosted(&h1));
  EXPECT_FALSE(q.CancelPosted(&h1));
  EXPECT_FALSE(q.CancelPosted(&h3));
  ASSERT_EQ(q.posted().size(), 1u);
  EXPECT_EQ(q.posted().front().handle, &h2);
}

TEST(MatchQueue, RemoveUnexpectedRemovesThatMessageOnly) {
  MatchQueue q;
  q.AddUnexpected({7, 1, &h1});
  q.AddUnexpected({7, 1, &h2});
  EXPECT_TRUE(q.RemoveUnexpected(&h2));
  EXPECT_FALSE(q.RemoveUnexpected(&h2));
  ASSERT_EQ(q.unexpected().size(), 1u);
  EXPECT_EQ(q.unexpected().front().handle, &h1);
}

TEST(MatchQueue, MessageOfAnUnknownSourceKeepsItsPlaceOnceResolved) {
  // Two messages from source 4, the first before 4 was known (an MPI library inserts a peer's
  // address on first use): a directed receive must get the first, not overtake it.
  MatchQueue q;
  q.AddUnexpected({7, kAnySource, &h1});
  q.AddUnexpected({7, 4, &h2});
  const PostedReceive directed{7, 0, 4, nullptr};
  q.ResolveUnknownSources([](void* handle) -> uint64_t { return handle == &h1 ? 4 : 99; });
  std::optional<ArrivedMessage> m = q.FindMessageFor(directed, false);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->handle, &h1);
  EXPECT_EQ(q.unexpected().front().handle, &h2);
  EXPECT_EQ(q.unexpected().front().source, 4u);  // a known source is left alone
}

TEST(MatchQueue, MessageOfAnUnknownSourceGoesOnlyToAReceiveFromAnySource) {
  MatchQueue q;
  q.AddUnexpected({7, kAnySource, &h1});
  EXPECT_FALSE(q.FindMessageFor({7, 0, 4, nullptr}, true).has_value());
  EXPECT_TRUE(q.FindMessageFor({7, 0, kAnySource, nullptr}, true).has_value());
}

}  // namespace
}  // namespace metaroce::ofi
