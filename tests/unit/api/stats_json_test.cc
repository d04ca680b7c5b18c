// lib/api/stats_json: ConnectionStatsFromJson reads back what ConnectionStatsJson writes (an
// attached context's qp.stats), and refuses documents that lack a key.
#include "lib/api/stats_json.h"

#include <chrono>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaroce::api {
namespace {

using ::testing::HasSubstr;

ConnectionStats Sample() {
  ConnectionStats s;
  s.conn_id = 42;
  s.owner = 1;
  s.state = core::Connection::State::kError;
  s.error_status = core::WcStatus::kRetryExcErr;
  s.counters.sent_pkts = 1000;
  s.counters.retransmits = 7;
  s.counters.messages_received = 3;
  s.outstanding_sends = 5;
  s.posted_receives = 6;
  s.events_dropped = 2;
  core::PathStats p;
  p.path_id = 3;
  p.src_port = 50001;
  p.plane = 1;
  p.state = core::PathState::kProbing;
  p.srtt = std::chrono::nanoseconds(12345);
  p.rttvar = std::chrono::microseconds(3);
  p.min_rtt = std::chrono::nanoseconds(9999);
  p.cwnd_bytes = 65536;
  p.inflight_bytes = 4096;
  p.window_hint_bytes = 8192;
  p.ecn_fraction = 0.25;
  p.utilization = 0.5;
  p.tx_packets = 11;
  p.tx_bytes = 22;
  p.acked_packets = 10;
  p.retransmits = 1;
  p.timeouts = 2;
  p.rotations = 3;
  p.ce_marks = 4;
  p.rx_packets = 5;
  s.paths = {p, core::PathStats{}};
  return s;
}

TEST(ConnectionStatsFromJson, ReadsBackWhatConnectionStatsJsonWrites) {
  const ConnectionStats s = Sample();
  // Through text, as over the control socket.
  absl::StatusOr<control::Json> text = control::Json::Parse(ConnectionStatsJson(s).Dump());
  ASSERT_TRUE(text.ok());
  absl::StatusOr<ConnectionStats> back = ConnectionStatsFromJson(*text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->conn_id, 42u);
  EXPECT_EQ(back->owner, 1);
  EXPECT_EQ(back->state, core::Connection::State::kError);
  EXPECT_EQ(back->error_status, core::WcStatus::kRetryExcErr);
  EXPECT_EQ(back->counters.sent_pkts, 1000u);
  EXPECT_EQ(back->counters.retransmits, 7u);
  EXPECT_EQ(back->counters.messages_received, 3u);
  EXPECT_EQ(back->outstanding_sends, 5u);
  EXPECT_EQ(back->posted_receives, 6u);
  EXPECT_EQ(back->events_dropped, 2u);
  ASSERT_EQ(back->paths.size(), 2u);
  const core::PathStats& p = back->paths[0];
  EXPECT_EQ(p.path_id, 3);
  EXPECT_EQ(p.src_port, 50001);
  EXPECT_EQ(p.plane, 1);
  EXPECT_EQ(p.state, core::PathState::kProbing);
  EXPECT_EQ(p.srtt, std::chrono::nanoseconds(12345));
  EXPECT_EQ(p.rttvar, std::chrono::microseconds(3));
  EXPECT_EQ(p.min_rtt, std::chrono::nanoseconds(9999));
  EXPECT_EQ(p.cwnd_bytes, 65536u);
  EXPECT_EQ(p.window_hint_bytes, 8192u);
  EXPECT_DOUBLE_EQ(p.ecn_fraction, 0.25);
  EXPECT_DOUBLE_EQ(p.utilization, 0.5);
  EXPECT_EQ(p.ce_marks, 4u);
  EXPECT_EQ(p.rx_packets, 5u);
  EXPECT_EQ(back->paths[1].state, core::PathState::kActive);
}

TEST(ConnectionStatsFromJson, NamesWhatIsMissingOrWrong) {
  control::Json j = ConnectionStatsJson(Sample());
  control::Json no_counter = j;
  no_counter["counters"] = control::Json::MakeObject();
  EXPECT_THAT(std::string(ConnectionStatsFromJson(no_counter).status().message()),
              HasSubstr("'sent_pkts'"));
  control::Json bad_state = j;
  bad_state["state"] = "sleeping";
  EXPECT_THAT(std::string(ConnectionStatsFromJson(bad_state).status().message()),
              HasSubstr("'state'"));
  control::Json bad_path = j;
  bad_path["paths"] = control::Json::MakeArray();
  control::Json p = control::Json::MakeObject();
  p["path_id"] = 70000;  // not a uint16
  bad_path["paths"].Push(p);
  EXPECT_THAT(std::string(ConnectionStatsFromJson(bad_path).status().message()),
              HasSubstr("'path_id'"));
  EXPECT_FALSE(ConnectionStatsFromJson(control::Json::MakeArray()).ok());
}

}  // namespace
}  // namespace metaroce::api
