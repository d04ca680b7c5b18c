// mrctl's output: the JSON document's schema and the text for people (tools/ctl/format.h).
#include "tools/ctl/format.h"

#include <string>

#include "gtest/gtest.h"

namespace metaroce::ctl {
namespace {

using control::Json;

Json J(std::string_view text) {
  absl::StatusOr<Json> j = Json::Parse(text);
  EXPECT_TRUE(j.ok()) << j.status();
  return j.ok() ? *j : Json();
}

constexpr std::string_view kReadyConn = R"({"id":3,"peer":"198.18.0.6","peer_id":5,
    "state":"ready","error_status":0,"error_status_name":"SUCCESS","paths":8,"planes":[0,1],
    "profile":"metaroce","owner":"daemon","created_s":12.5,
    "counters":{"sent_pkts":1200,"rcvd_pkts":0,"retransmits":3}})";

constexpr std::string_view kFailedConn = R"({"id":4,"peer":"198.18.0.7","peer_id":9,
    "state":"error","error_status":12,"error_status_name":"RETRY_EXC_ERR","paths":2,
    "planes":[0],"profile":"gbn","owner":{"pid":4242,"comm":"app"},"created_s":1,
    "counters":{},"new_field":"x"})";

TEST(MrctlFormat, JsonPutsVersionFirst) {
  const Json result = J(R"({"connections":[{"id":3}]})");
  EXPECT_EQ(FormatJson(result, false), "{\"version\":1,\"connections\":[{\"id\":3}]}\n");
  EXPECT_EQ(FormatJson(J(R"({"connections":[]})"), true),
            "{\n"
            "  \"version\": 1,\n"
            "  \"connections\": []\n"
            "}\n");
  EXPECT_EQ(FormatJson(Json::MakeObject(), false), "{\"version\":1}\n");
}

// daemon.show's own "version" is metaroced's; the document's "version" is the schema's.
TEST(MrctlFormat, JsonRenamesTheDaemonsVersion) {
  EXPECT_EQ(FormatJson(J(R"({"version":"0.1.0","protocol":1})"), false),
            "{\"version\":1,\"metaroced_version\":\"0.1.0\",\"protocol\":1}\n");
}

TEST(MrctlFormat, ConnShowOneLinePerConnection) {
  Json result;
  result["connections"].Push(J(kReadyConn));
  result["connections"].Push(J(kFailedConn));
  EXPECT_EQ(FormatText("conn.show", result, false),
            "conn 3 peer 198.18.0.6 peer_id 5 state ready paths 8 planes 0,1 profile metaroce "
            "owner daemon created_s 12.5\n"
            "conn 4 peer 198.18.0.7 peer_id 9 state error error_status 12 (RETRY_EXC_ERR) "
            "paths 2 planes 0 profile gbn owner pid 4242 comm app created_s 1 new_field x\n");
  EXPECT_EQ(FormatText("conn.show", J(R"({"connections":[]})"), false), "");
}

TEST(MrctlFormat, ConnShowDetailsAddTheCounters) {
  Json result;
  result["connections"].Push(J(kReadyConn));
  result["connections"].Push(J(kFailedConn));
  EXPECT_EQ(FormatText("conn.show", result, true),
            "conn 3 peer 198.18.0.6 peer_id 5 state ready paths 8 planes 0,1 profile metaroce "
            "owner daemon created_s 12.5\n"
            "    sent_pkts 1200 rcvd_pkts 0 retransmits 3\n"
            "conn 4 peer 198.18.0.7 peer_id 9 state error error_status 12 (RETRY_EXC_ERR) "
            "paths 2 planes 0 profile gbn owner pid 4242 comm app created_s 1 new_field x\n");
}

TEST(MrctlFormat, MissingFieldsPrintAsDash) {
  EXPECT_EQ(FormatText("conn.show", J(R"({"connections":[{"id":5,"planes":[]}]})"), false),
            "conn 5 peer - peer_id - state - paths - planes - profile - owner - created_s -\n");
  EXPECT_EQ(FormatText("conn.show", J("{}"), false), "");
}

TEST(MrctlFormat, ConnAddPrintsTheNewConnectionAndDelNothing) {
  Json result;
  result["conn"] = J(kReadyConn);
  EXPECT_EQ(FormatText("conn.add", result, false),
            "conn 3 peer 198.18.0.6 peer_id 5 state ready paths 8 planes 0,1 profile metaroce "
            "owner daemon created_s 12.5\n");
  EXPECT_EQ(FormatText("conn.del", Json::MakeObject(), false), "");
}

TEST(MrctlFormat, PathShowIsATable) {
  const Json result = J(R"({"conn":3,"paths":[
      {"path_id":0,"src_port":49152,"plane":0,"state":"active","srtt_us":12.34,"rttvar_us":1.0,
       "min_rtt_us":10.0,"ecn_fraction":0.0,"utilization":0.5,"cwnd_bytes":65536,
       "inflight_bytes":0,"retransmits":3,"timeouts":0,"rotations":1},
      {"path_id":1,"src_port":49153,"plane":1,"state":"suspect","srtt_us":1500,
       "min_rtt_us":9.5,"ecn_fraction":0.25,"utilization":1.0,"cwnd_bytes":4096,
       "retransmits":12,"rotations":0}]})");
  EXPECT_EQ(FormatText("path.show", result, false),
            "PATH  PORT   PLANE  STATE    SRTT_US  MIN_RTT_US  ECN   CWND   UTIL  RETX  ROT\n"
            "0     49152  0      active   12.3     10.0        0.00  65536  0.50  3     1\n"
            "1     49153  1      suspect  1500     9.5         0.25  4096   1.00  12    0\n");
  EXPECT_EQ(FormatText("path.show", J(R"({"conn":3,"paths":[]})"), false),
            "PATH  PORT  PLANE  STATE  SRTT_US  MIN_RTT_US  ECN  CWND  UTIL  RETX  ROT\n");
}

TEST(MrctlFormat, PathRotateAndEvents) {
  EXPECT_EQ(FormatText("path.rotate",
                       J(R"({"conn":3,"path_id":2,"old_port":49152,"new_port":49200})"), false),
            "conn 3 path 2 port 49152 -> 49200\n");
  const Json events = J(R"({"events":[
      {"time_s":12.5,"conn":3,"path_id":2,"kind":"state","from":"active","to":"suspect",
       "reason":"timeout","seq":7},
      {"time_s":14,"conn":3,"path_id":2,"kind":"rotation","old_port":49152,"new_port":49200,
       "reason":"manual","seq":8},
      {"time_s":15,"conn":3,"path_id":1,"kind":"quench","level":2,"seq":9}]})");
  EXPECT_EQ(FormatText("path.events", events, false),
            "time_s 12.5 conn 3 path 2 state active -> suspect reason timeout\n"
            "time_s 14 conn 3 path 2 rotation 49152 -> 49200 reason manual\n"
            "time_s 15 conn 3 path 1 kind quench level 2\n");
}

TEST(MrctlFormat, LinkShowALinePerPortAndTheirFeatures) {
  const Json result = J(R"({"links":[
      {"name":"pl0","ifindex":5,"plane":0,"address":"198.18.0.5","mac":"02:00:00:00:00:05",
       "mtu":3498,"port":"af_xdp pl0 queue 0 copy-mode need_wakeup",
       "ports":["af_xdp pl0 queue 0 copy-mode need_wakeup","af_xdp pl0 queue 1 copy-mode need_wakeup"],
       "features":{"zero_copy":false,"need_wakeup":true,"busy_poll":false,"multi_buffer":true},
       "xdp":{"attached":true,"prog_id":42,"mode":"native"},"queues":[0,1]},
      {"name":"pl1","ifindex":6,"plane":1,"address":"198.19.0.5","mac":"02:00:00:00:01:05",
       "mtu":1500,"port":"udp pl1","xdp":{"attached":false,"prog_id":0,"mode":"none"},
       "queues":[]}]})");
  EXPECT_EQ(FormatText("link.show", result, false),
            "link pl0 ifindex 5 plane 0 address 198.18.0.5 mac 02:00:00:00:00:05 mtu 3498\n"
            "    port af_xdp pl0 queue 0 copy-mode need_wakeup\n"
            "    port af_xdp pl0 queue 1 copy-mode need_wakeup\n"
            "    features need_wakeup multi_buffer\n"
            "    xdp native prog_id 42 queues 0,1\n"
            "link pl1 ifindex 6 plane 1 address 198.19.0.5 mac 02:00:00:00:01:05 mtu 1500\n"
            "    port udp pl1\n"
            "    xdp none queues -\n");
}

TEST(MrctlFormat, StatShowInRdmaStatisticShape) {
  const Json result = J(R"({"links":[
      {"name":"pl0","tx_packets":10,"rx_packets":12,"rx_ring_full":0,"xdp_redirected":12,
       "sent_pkts":10,"retry_exceeded_err":0},
      {"name":"pl1","tx_packets":0}]})");
  EXPECT_EQ(FormatText("stat.show", result, false),
            "link pl0 tx_packets 10 rx_packets 12 rx_ring_full 0 xdp_redirected 12 sent_pkts 10 "
            "retry_exceeded_err 0\n"
            "link pl1 tx_packets 0\n");
}

TEST(MrctlFormat, DaemonShowKeyValueLines) {
  const Json result = J(R"({"version":"0.1.0","protocol":1,"pid":77,"uptime_s":3.5,
      "config_path":"","port_kind":"af_xdp","udp_port":4791,"control_port":4792,"workers":2,
      "versions":{"kernel":"6.1.0","libbpf":"1.1.2","libxdp":"1.3.1","liburing":"2.3"},
      "features":{"zero_copy":false,"need_wakeup":true,"busy_poll":false,"multi_buffer":true},
      "limits":{"max_connections":1024,"max_paths":64,"max_memory_bytes":1073741824},
      "connections":0})");
  EXPECT_EQ(FormatText("daemon.show", result, false),
            "version 0.1.0\n"
            "protocol 1\n"
            "pid 77\n"
            "uptime_s 3.5\n"
            "config_path \"\"\n"
            "port_kind af_xdp\n"
            "udp_port 4791\n"
            "control_port 4792\n"
            "workers 2\n"
            "versions kernel 6.1.0 libbpf 1.1.2 libxdp 1.3.1 liburing 2.3\n"
            "features zero_copy no need_wakeup yes busy_poll no multi_buffer yes\n"
            "limits max_connections 1024 max_paths 64 max_memory_bytes 1073741824\n"
            "connections 0\n");
}

TEST(MrctlFormat, UnknownMethodsPrintKeyValueLines) {
  EXPECT_EQ(FormatText("trace.show", J(R"({"enabled":true,"probes":["a","b"],"none":null})"),
                       false),
            "enabled yes\nprobes a,b\nnone -\n");
}

}  // namespace
}  // namespace metaroce::ctl
