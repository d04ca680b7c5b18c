// PathEventRecord (daemon/path_event_record.h): the path manager's record of path events,
// compact and bounded per connection and in bytes.
#include "daemon/path_event_record.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace metaroce::daemon {
namespace {

using ::testing::ElementsAre;

core::PathEvent Rotation(uint32_t conn, uint16_t path, int64_t at_ns) {
  core::PathEvent e;
  e.at = core::Instant{at_ns};
  e.conn_id = conn;
  e.path_id = path;
  e.kind = core::PathEvent::Kind::kPortRotated;
  e.old_port = 49152;
  e.new_port = 49153;
  e.reason = core::PathEventReason::kFailed;
  return e;
}

std::vector<uint64_t> Seqs(const PathEventRecord& r, std::optional<uint32_t> conn = {},
                           uint64_t from = 0) {
  std::vector<uint64_t> out;
  r.Visit(conn, from, [&](const PathEventRecord::Entry& e) {
    out.push_back(e.seq);
    return true;
  });
  return out;
}

TEST(PathEventRecord_Entry, IsFortyBytes) { EXPECT_EQ(PathEventRecord::kEventBytes, 40u); }

TEST(PathEventRecord_Visit, MergesConnectionsInSequenceOrder) {
  PathEventRecord r;
  r.Record(Rotation(7, 0, 100), 1);
  r.Record(Rotation(3, 1, 200), 2);
  r.Record(Rotation(7, 2, 300), 3);
  EXPECT_THAT(Seqs(r), ElementsAre(1, 2, 3));
  EXPECT_THAT(Seqs(r, 7), ElementsAre(1, 3));
  EXPECT_THAT(Seqs(r, {}, 2), ElementsAre(2, 3));
  EXPECT_THAT(r.Connections(), ElementsAre(3, 7));
}

TEST(PathEventRecord_Limits, KeepsTheLastPerConnection) {
  PathEventRecord r({.per_connection = 2, .max_bytes = 1 << 20});
  for (int i = 0; i < 5; ++i) r.Record(Rotation(1, 0, i), i);
  r.Record(Rotation(2, 0, 9), 9);
  EXPECT_THAT(Seqs(r, 1), ElementsAre(4, 5));
  EXPECT_THAT(Seqs(r, 2), ElementsAre(6));
  EXPECT_EQ(r.events(), 3u);
  EXPECT_EQ(r.dropped_for_bytes(), 0u);
}

TEST(PathEventRecord_Limits, BoundedInBytesDroppingTheOldestOfAll) {
  // Room for 4 events in all: a flapping connection (1) pushes out the oldest events first,
  // whoever's, and the record never holds more than its bytes.
  PathEventRecord r({.per_connection = 1024, .max_bytes = 4 * PathEventRecord::kEventBytes});
  r.Record(Rotation(2, 0, 1), 1);  // seq 1
  r.Record(Rotation(3, 0, 2), 2);  // seq 2
  for (int i = 0; i < 10; ++i) {
    r.Record(Rotation(1, 0, 10 + i), 10 + i);  // seqs 3..12
    EXPECT_LE(r.bytes(), 4 * PathEventRecord::kEventBytes);
  }
  EXPECT_THAT(Seqs(r), ElementsAre(9, 10, 11, 12));
  EXPECT_THAT(r.Connections(), ElementsAre(1));  // 2's and 3's records went, and their blocks
  EXPECT_EQ(r.dropped_for_bytes(), 8u);
}

TEST(PathEventRecord_Limits, ManyConnectionsStayWithinTheBytes) {
  // 4,000 connections of 8 flapping paths, 20 events each: 640,000 events, 25.6 MB as entries
  // (and far more as JSON objects) against a bound of 1 MiB.
  const size_t bound = size_t{1} << 20;
  PathEventRecord r({.per_connection = 1024, .max_bytes = bound});
  for (int round = 0; round < 20; ++round) {
    for (uint32_t c = 0; c < 4000; ++c) {
      for (uint16_t p = 0; p < 8; ++p) r.Record(Rotation(c, p, round), round);
    }
  }
  EXPECT_LE(r.bytes(), bound);
  EXPECT_EQ(r.events(), bound / PathEventRecord::kEventBytes);
  // What is left is the newest.
  const std::vector<uint64_t> seqs = Seqs(r);
  ASSERT_FALSE(seqs.empty());
  EXPECT_EQ(seqs.back(), 20u * 4000 * 8);
  EXPECT_EQ(seqs.front(), 20u * 4000 * 8 - seqs.size() + 1);
}

TEST(PathEventRecord_Limits, LoweredLimitsTrimAtOnce) {
  PathEventRecord r;
  for (int i = 0; i < 6; ++i) r.Record(Rotation(i % 2, 0, i), i);
  r.SetLimits({.per_connection = 2, .max_bytes = 3 * PathEventRecord::kEventBytes});
  EXPECT_THAT(Seqs(r), ElementsAre(4, 5, 6));
}

TEST(PathEventRecord_Erase, ForgetsAConnection) {
  PathEventRecord r({.per_connection = 1024, .max_bytes = 3 * PathEventRecord::kEventBytes});
  r.Record(Rotation(1, 0, 1), 1);
  r.Record(Rotation(2, 0, 2), 2);
  r.Erase(1);
  EXPECT_EQ(r.events(), 1u);
  // The byte bound still drops the oldest that remains, not the erased one's.
  r.Record(Rotation(3, 0, 3), 3);
  r.Record(Rotation(3, 0, 4), 4);
  r.Record(Rotation(3, 0, 5), 5);
  EXPECT_THAT(Seqs(r), ElementsAre(3, 4, 5));
}

TEST(PathEventRecord_Json, TheProtocolsEventObject) {
  PathEventRecord r;
  r.Record(Rotation(4, 3, 123456789), 2500000000);
  core::PathEvent s;
  s.at = core::Instant{5};
  s.conn_id = 4;
  s.path_id = 1;
  s.from = core::PathState::kActive;
  s.to = core::PathState::kSuspect;
  s.reason = core::PathEventReason::kTimeout;
  r.Record(s, 0);
  std::vector<std::string> out;
  r.Visit({}, 0, [&](const PathEventRecord::Entry& e) {
    out.push_back(PathEventRecord::ToJson(e).Dump());
    return true;
  });
  EXPECT_THAT(out, ElementsAre(
      R"({"time_s":2.5,"monotonic_ns":123456789,"conn":4,"path_id":3,"kind":"rotation",)"
      R"("old_port":49152,"new_port":49153,"reason":"failed","seq":1})",
      R"({"time_s":0,"monotonic_ns":5,"conn":4,"path_id":1,"kind":"state","from":"active",)"
      R"("to":"suspect","reason":"timeout","seq":2})"));
}

}  // namespace
}  // namespace metaroce::daemon
