// The Prometheus exposition (daemon/prometheus_text.h), the daemon's metric families rendered
// from a made-up snapshot (daemon/metrics.h), and the HTTP server of /metrics
// (daemon/metrics_server.h) over a real loopback socket. With promtool installed, the rendered
// snapshot must pass `promtool check metrics` (parse and lint) without a word.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/metrics.h"
#include "daemon/metrics_server.h"
#include "daemon/prometheus_text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/core/counter_fields.h"
#include "lib/wire/packet.h"

namespace metaroce::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

// ---- the format ----

TEST(PrometheusText, LabelValuesAreEscaped) {
  EXPECT_EQ(EscapeLabelValue(R"(a\b"c)"), R"(a\\b\"c)");
  EXPECT_EQ(EscapeLabelValue("two\nlines"), R"(two\nlines)");
  EXPECT_EQ(EscapeLabelValue("tab\tstays"), "tab\tstays");
  EXPECT_EQ(EscapeLabelValue("caf\xC3\xA9"), "caf\xC3\xA9");  // valid UTF-8 kept
  // Invalid UTF-8: a stray continuation byte, a truncated sequence, an overlong '/', a
  // surrogate: each invalid byte becomes U+FFFD.
  EXPECT_EQ(ValidUtf8("a\x80z"), "a\xEF\xBF\xBDz");
  EXPECT_EQ(ValidUtf8("\xC3"), "\xEF\xBF\xBD");
  EXPECT_EQ(ValidUtf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(ValidUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(ValidUtf8("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");  // 4-byte sequence kept
}

TEST(PrometheusText, HelpIsEscaped) {
  EXPECT_EQ(EscapeHelp("a \\ b\nc \"quoted\""), "a \\\\ b\\nc \"quoted\"");
}

TEST(PrometheusText, Numbers) {
  EXPECT_EQ(FormatSampleValue(uint64_t{0}), "0");
  EXPECT_EQ(FormatSampleValue(std::numeric_limits<uint64_t>::max()), "18446744073709551615");
  EXPECT_EQ(FormatSampleValue(0.25), "0.25");
  EXPECT_EQ(FormatSampleValue(1.0), "1");
  EXPECT_EQ(FormatSampleValue(-2.5), "-2.5");
  EXPECT_EQ(FormatSampleValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatSampleValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatSampleValue(-std::numeric_limits<double>::infinity()), "-Inf");
  // Shortest form that reads back exactly.
  for (double d : {1e-6, 0.1, 12.345e-6, 1.7976931348623157e308, 5e-324}) {
    EXPECT_EQ(std::strtod(FormatSampleValue(d).c_str(), nullptr), d) << d;
  }
  EXPECT_EQ(FormatSampleValue(1e-6), "1e-06");
}

TEST(PrometheusText, Names) {
  EXPECT_TRUE(IsValidMetricName("metaroce_path_srtt_seconds"));
  EXPECT_TRUE(IsValidMetricName("a:b_c9"));
  EXPECT_FALSE(IsValidMetricName("9a"));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_TRUE(IsValidLabelName("conn"));
  EXPECT_FALSE(IsValidLabelName("__name__"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("1a"));
}

TEST(PrometheusText, FamiliesAreGroupedWithHelpAndType) {
  PrometheusText t;
  PrometheusText::Family& a = t.Declare("x_total", MetricType::kCounter, "Xs.\nMore.");
  PrometheusText::Family& b = t.Declare("y", MetricType::kGauge, "Ys.");
  t.Declare("empty", MetricType::kGauge, "No samples.");
  a.Add({{"conn", "1"}}, uint64_t{3});
  b.Add({}, 0.5);
  a.Add({{"conn", "2"}}, uint64_t{4});  // after y's sample: still rendered with x's
  EXPECT_EQ(&t.Declare("x_total", MetricType::kCounter, "Xs.\nMore."), &a);
  EXPECT_THAT(t.problems(), IsEmpty());
  EXPECT_EQ(t.Render(),
            "# HELP x_total Xs.\\nMore.\n"
            "# TYPE x_total counter\n"
            "x_total{conn=\"1\"} 3\n"
            "x_total{conn=\"2\"} 4\n"
            "# HELP y Ys.\n"
            "# TYPE y gauge\n"
            "y 0.5\n"
            "# HELP empty No samples.\n"
            "# TYPE empty gauge\n");
}

TEST(PrometheusText, WhatTheFormatCannotCarryIsAProblemNotOutput) {
  PrometheusText t;
  t.Declare("bad-name", MetricType::kGauge, "h").Add({}, uint64_t{1});
  PrometheusText::Family& f = t.Declare("ok", MetricType::kGauge, "h");
  f.Add({{"le-gal", "1"}}, uint64_t{1});
  f.Add({{"a", "1"}, {"a", "2"}}, uint64_t{1});
  f.Add({{"a", "1"}}, uint64_t{1});
  f.Add({{"a", "1"}}, uint64_t{2});  // the same series again
  t.Declare("ok", MetricType::kCounter, "h").Add({{"a", "3"}}, uint64_t{1});
  EXPECT_EQ(t.problems().size(), 5u) << ::testing::PrintToString(t.problems());
  const std::string out = t.Render();
  EXPECT_THAT(out, Not(HasSubstr("bad-name")));
  EXPECT_THAT(out, Not(HasSubstr("le-gal")));
  EXPECT_THAT(out, HasSubstr("ok{a=\"1\"} 1\n"));
  EXPECT_THAT(out, Not(HasSubstr("ok{a=\"1\"} 2")));
  EXPECT_THAT(out, Not(HasSubstr("a=\"3\"")));
  EXPECT_THAT(out, HasSubstr("# TYPE ok gauge\n"));
}

// ---- the daemon's families ----

MetricsSnapshot MadeUpSnapshot() {
  MetricsSnapshot s;
  s.build = {"0.1.0", "6.1.0-13-amd64", "1.1", "1.3.1", "2.3"};
  s.port_kind = "af_xdp";
  s.first_queue = 0;
  s.start_time_seconds = 1.7e9;
  s.uptime_seconds = 12.5;
  s.heap_in_use_bytes = 1 << 20;
  s.app_sessions = 1;
  s.app_memory_bytes = 4096;
  for (int p = 0; p < 2; ++p) {
    LinkMetrics l;
    l.interface = absl::StrCat("pl", p);
    l.plane = p;
    l.address = absl::StrCat("198.18.", p, ".2");
    l.xdp_prog_id = 40 + p;
    l.xdp_mode = "native";
    l.xdp_packets = {{"redirected", 100}, {"pass_not_udp", 3}, {"drop_truncated", 0}};
    s.links.push_back(l);
  }
  for (int w = 0; w < 2; ++w) {
    engine::WorkerStats ws;
    ws.worker = w;
    ws.loops = 1000;
    ws.connections = 1;
    ws.endpoint.rx_datagrams = 50;
    ws.endpoint.malformed_by_reason[static_cast<size_t>(wire::ParseError::kTruncated)] = 2;
    for (int p = 0; p < 2; ++p) {
      io::PortStats ps;
      ps.tx_packets = 10 + p;
      ps.fill_ring_empty = 7;
      ws.ports.push_back(ps);
      ws.port_descriptions.push_back(
          absl::StrCat("af_xdp pl", p, " queue ", w, " copy-mode need_wakeup frame 2048"));
      ws.port_features.push_back({.af_xdp = true, .need_wakeup = true});
    }
    s.workers.push_back(ws);
  }
  ConnectionMetrics own;
  own.id = 1;
  own.peer = "198.18.0.6";
  own.profile = "metaroce";
  own.stats.conn_id = 1;
  own.stats.counters.sent_pkts = 123;
  own.stats.counters.retransmits = 4;
  for (uint16_t i = 0; i < 4; ++i) {
    core::PathStats p;
    p.path_id = i;
    p.src_port = static_cast<uint16_t>(49152 + i);
    p.plane = static_cast<uint8_t>(i % 2);
    p.state = i == 3 ? core::PathState::kFailed : core::PathState::kActive;
    p.srtt = std::chrono::microseconds(25);
    p.min_rtt = std::chrono::microseconds(20);
    p.cwnd_bytes = 65536;
    p.ecn_fraction = 0.125;
    p.utilization = 0.5;
    p.tx_packets = 100 * i;
    own.stats.paths.push_back(p);
  }
  s.connections.push_back(own);
  ConnectionMetrics app;
  app.id = 2;
  app.application = true;
  app.application_name = "evil\"app\\\nname\xFF";  // quote, backslash, newline, invalid UTF-8
  app.application_pid = 4242;
  app.peer = "198.18.0.6";
  app.profile = "metaroce";
  app.stats.conn_id = 2;
  app.stats.state = core::Connection::State::kError;
  core::PathStats p;
  p.path_id = 0;
  p.srtt = core::Duration(0);
  app.stats.paths.push_back(p);
  s.connections.push_back(app);
  return s;
}

struct Parsed {
  std::map<std::string, std::string> type;  // family -> counter/gauge
  std::set<std::string> help;
  std::vector<std::pair<std::string, std::string>> samples;  // (name, "{labels}")
  std::vector<std::string> errors;
};

// A strict reading of the text: every sample's family was declared (HELP then TYPE) right
// before its group, and no family appears twice.
Parsed ParseExposition(const std::string& text) {
  Parsed out;
  std::string current;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "# HELP ")) {
      std::vector<std::string> parts = absl::StrSplit(line.substr(7), absl::MaxSplits(' ', 1));
      if (!out.help.insert(parts[0]).second) out.errors.push_back("HELP twice: " + parts[0]);
      current = parts[0];
      continue;
    }
    if (absl::StartsWith(line, "# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(line.substr(7), ' ');
      if (parts.size() != 2 || parts[0] != current) {
        out.errors.push_back("TYPE without HELP: " + std::string(line));
      }
      out.type[parts[0]] = parts.size() == 2 ? parts[1] : "";
      continue;
    }
    const size_t end = line.find_first_of("{ ");
    const std::string name(line.substr(0, end));
    if (name != current) out.errors.push_back("sample outside its family: " + std::string(line));
    std::string labels;
    if (line[end] == '{') labels = std::string(line.substr(end, line.rfind('}') - end + 1));
    out.samples.emplace_back(name, labels);
  }
  return out;
}

std::vector<std::string> Samples(const Parsed& p, absl::string_view name) {
  std::vector<std::string> out;
  for (const auto& [n, labels] : p.samples) {
    if (n == name) out.push_back(labels);
  }
  return out;
}

TEST(Metrics, EveryFamilyIsDeclaredAndNamedByTheConventions) {
  std::vector<std::string> problems;
  const std::string text = RenderMetrics(MadeUpSnapshot(), &problems);
  EXPECT_THAT(problems, IsEmpty());
  const Parsed p = ParseExposition(text);
  EXPECT_THAT(p.errors, IsEmpty());
  EXPECT_GE(p.type.size(), 60u);
  for (const auto& [name, type] : p.type) {
    EXPECT_THAT(name, StartsWith("metaroce_"));
    EXPECT_EQ(type == "counter", absl::EndsWith(name, "_total")) << name << " " << type;
    EXPECT_TRUE(type == "counter" || type == "gauge") << name;
  }
  // A source port is a value, never a label.
  for (const auto& [name, labels] : p.samples) {
    EXPECT_THAT(labels, Not(HasSubstr("port=\""))) << name << labels;
  }
}

TEST(Metrics, BuildInfoDaemonAndLinks) {
  const std::string text = RenderMetrics(MadeUpSnapshot());
  EXPECT_THAT(text, HasSubstr("metaroce_build_info{version=\"0.1.0\",kernel=\"6.1.0-13-amd64\","
                              "libbpf=\"1.1\",libxdp=\"1.3.1\",liburing=\"2.3\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_daemon_uptime_seconds 12.5\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_daemon_connections{owner=\"daemon\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_daemon_connections{owner=\"application\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_xdp_packets_total{interface=\"pl1\",outcome=\"redirected\"}"
                              " 100\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_link_xdp_program_id{interface=\"pl0\"} 40\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_af_xdp_fill_ring_empty_total{interface=\"pl1\",queue=\"1\"}"
                              " 7\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_port_tx_packets_total{interface=\"pl1\",queue=\"0\"} 11\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_port_info{interface=\"pl0\",queue=\"1\",worker=\"1\","
                              "description=\"af_xdp pl0 queue 1 copy-mode need_wakeup frame 2048\","
                              "af_xdp=\"true\",zero_copy=\"false\",need_wakeup=\"true\","
                              "busy_poll=\"false\",multi_buffer=\"false\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_worker_loops_total{worker=\"1\"} 1000\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_worker_malformed_datagrams_total{worker=\"0\","
                              "reason=\"truncated\"} 2\n"));
  EXPECT_THAT(text, Not(HasSubstr("reason=\"none\"")));
}

TEST(Metrics, KernelUdpPortsHaveNoRingHealthSeries) {
  MetricsSnapshot s = MadeUpSnapshot();
  s.port_kind = "udp";
  for (engine::WorkerStats& w : s.workers) {
    // Typed by what the ports are, not by the words of their descriptions.
    for (std::string& d : w.port_descriptions) d = "udp io_uring 198.18.0.2:4792";
    for (io::PortFeatures& f : w.port_features) f = io::PortFeatures{};
  }
  const Parsed p = ParseExposition(RenderMetrics(s));
  EXPECT_THAT(Samples(p, "metaroce_af_xdp_fill_ring_empty_total"), IsEmpty());
  EXPECT_EQ(Samples(p, "metaroce_port_tx_packets_total").size(), 4u);
  EXPECT_EQ(p.type.count("metaroce_af_xdp_fill_ring_empty_total"), 1u);  // still declared
}

TEST(Metrics, EveryConnectionCounterWithItsOwnHelp) {
  const std::string text = RenderMetrics(MadeUpSnapshot());
  for (const core::ConnectionCounterField& f : core::kConnectionCounterFields) {
    const std::string family = "metaroce_connection_" + std::string(f.name) + "_total";
    EXPECT_THAT(text, HasSubstr("# TYPE " + family + " counter\n")) << f.name;
    EXPECT_FALSE(f.meaning.empty()) << f.name << ": say what it counts (lib/core/counter_fields.h)";
    EXPECT_THAT(text, HasSubstr("# HELP " + family + " " + std::string(f.meaning) + "\n"))
        << f.name;
  }
  EXPECT_THAT(text, HasSubstr("metaroce_connection_sent_pkts_total{conn=\"1\"} 123\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_connection_retransmits_total{conn=\"1\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_connection_state{conn=\"1\",state=\"ready\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_connection_state{conn=\"2\",state=\"error\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_connection_state{conn=\"2\",state=\"ready\"} 0\n"));
  // The application's name, escaped and made valid UTF-8.
  EXPECT_THAT(text, HasSubstr("application=\"evil\\\"app\\\\\\nname\xEF\xBF\xBD\",pid=\"4242\""));
}

TEST(Metrics, PathsByIdWithStateAndPortAsValues) {
  const Parsed p = ParseExposition(RenderMetrics(MadeUpSnapshot()));
  const std::string text = RenderMetrics(MadeUpSnapshot());
  for (int i = 0; i < 4; ++i) {
    const std::string id = absl::StrCat("conn=\"1\",path=\"", i, "\"");
    EXPECT_THAT(text, HasSubstr(absl::StrCat("metaroce_path_source_port{", id, "} ", 49152 + i,
                                             "\n")));
    EXPECT_THAT(text, HasSubstr(absl::StrCat("metaroce_path_tx_packets_total{", id, "} ", 100 * i,
                                             "\n")));
    for (const char* state : {"active", "suspect", "failed", "probing"}) {
      const bool on = std::string(state) == (i == 3 ? "failed" : "active");
      EXPECT_THAT(text, HasSubstr(absl::StrCat("metaroce_path_state{", id, ",state=\"", state,
                                               "\"} ", on ? 1 : 0, "\n")));
    }
  }
  EXPECT_THAT(text, HasSubstr("metaroce_path_srtt_seconds{conn=\"1\",path=\"0\"} 2.5e-05\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_path_min_rtt_seconds{conn=\"1\",path=\"0\"} 2e-05\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_path_ecn_marked_ratio{conn=\"1\",path=\"0\"} 0.125\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_path_cwnd_bytes{conn=\"1\",path=\"2\"} 65536\n"));
  EXPECT_THAT(text, HasSubstr("metaroce_path_info{conn=\"1\",path=\"1\",plane=\"1\","
                              "interface=\"pl1\"} 1\n"));
  EXPECT_EQ(Samples(p, "metaroce_path_srtt_seconds").size(), 5u);  // 4 + the application's 1
}

TEST(Metrics, NoConnectionsStillDeclaresEveryFamily) {
  MetricsSnapshot s = MadeUpSnapshot();
  const size_t families = ParseExposition(RenderMetrics(s)).type.size();
  s.connections.clear();
  s.workers.clear();
  const Parsed p = ParseExposition(RenderMetrics(s));
  EXPECT_THAT(p.errors, IsEmpty());
  EXPECT_EQ(p.type.size(), families);
  EXPECT_THAT(Samples(p, "metaroce_path_srtt_seconds"), IsEmpty());
}

// promtool's parser and linter (Debian's prometheus package) on the rendered snapshot.
TEST(Metrics, PromtoolFindsNothingToSay) {
  const char* promtool = "/usr/bin/promtool";
  if (access(promtool, X_OK) != 0) GTEST_SKIP() << "no " << promtool;
  char path[] = "/tmp/metaroce_metrics_test.XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = RenderMetrics(MadeUpSnapshot());
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  const std::string cmd = absl::StrCat(promtool, " check metrics < ", path, " 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  unlink(path);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, "");
}

// ---- the HTTP server ----

std::string Render() { return "# HELP m h\n# TYPE m gauge\nm 1\n"; }

TEST(MetricsServerRespond, Answers) {
  auto status_of = [](const std::string& r) { return r.substr(0, r.find("\r\n")); };
  EXPECT_EQ(status_of(MetricsServer::Respond("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", Render)),
            "HTTP/1.1 200 OK");
  const std::string ok = MetricsServer::Respond("GET /metrics?x=1 HTTP/1.0\n\n", Render);
  EXPECT_THAT(ok, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  EXPECT_THAT(ok, HasSubstr(absl::StrCat("Content-Length: ", Render().size(), "\r\n")));
  EXPECT_THAT(ok, HasSubstr("Connection: close\r\n"));
  EXPECT_TRUE(absl::EndsWith(ok, "\r\n\r\n" + Render()));
  const std::string head = MetricsServer::Respond("HEAD /metrics HTTP/1.1\r\n\r\n", Render);
  EXPECT_THAT(head, HasSubstr(absl::StrCat("Content-Length: ", Render().size(), "\r\n")));
  EXPECT_TRUE(absl::EndsWith(head, "\r\n\r\n"));
  EXPECT_EQ(status_of(MetricsServer::Respond("GET / HTTP/1.1\r\n\r\n", Render)),
            "HTTP/1.1 404 Not Found");
  EXPECT_EQ(status_of(MetricsServer::Respond("GET /metricsx HTTP/1.1\r\n\r\n", Render)),
            "HTTP/1.1 404 Not Found");
  const std::string post = MetricsServer::Respond("POST /metrics HTTP/1.1\r\n\r\n", Render);
  EXPECT_EQ(status_of(post), "HTTP/1.1 405 Method Not Allowed");
  EXPECT_THAT(post, HasSubstr("Allow: GET, HEAD\r\n"));
  EXPECT_EQ(status_of(MetricsServer::Respond("GET /metrics HTTP/2.0\r\n\r\n", Render)),
            "HTTP/1.1 505 HTTP Version Not Supported");
  for (const char* bad : {"\r\n\r\n", "GET\r\n\r\n", "GET /metrics\r\n\r\n",
                          "GET  /metrics HTTP/1.1\r\n\r\n", "G(T /metrics HTTP/1.1\r\n\r\n",
                          "GET metrics HTTP/1.1\r\n\r\n", "\x16\x03\x01\x02\x00\n\n"}) {
    EXPECT_EQ(status_of(MetricsServer::Respond(bad, Render)), "HTTP/1.1 400 Bad Request") << bad;
  }
  // render runs only for a 200.
  int renders = 0;
  MetricsServer::Respond("GET /nope HTTP/1.1\r\n\r\n", [&] { ++renders; return std::string(); });
  EXPECT_EQ(renders, 0);
}

TEST(MetricsServerAnswerTo, WaitsForTheWholeHeadWithinTheLimit) {
  auto status_of = [](const std::optional<std::string>& r) {
    return r ? r->substr(0, r->find("\r\n")) : std::string("(waits)");
  };
  EXPECT_EQ(status_of(MetricsServer::AnswerTo("", 64, Render)), "(waits)");
  EXPECT_EQ(status_of(MetricsServer::AnswerTo("GET /metrics HTTP/1.1\r\n", 64, Render)),
            "(waits)");
  EXPECT_EQ(status_of(MetricsServer::AnswerTo("GET /metrics HTTP/1.1\r\n\r\n", 64, Render)),
            "HTTP/1.1 200 OK");
  // Bytes after the head (a body, a pipelined request) are not part of it.
  EXPECT_EQ(MetricsServer::AnswerTo("GET /metrics HTTP/1.1\n\nGET / HTTP/1.1\n\n", 64, Render),
            MetricsServer::Respond("GET /metrics HTTP/1.1\n\n", Render));
  // A head of exactly the limit is answered; one byte more is 431, complete or not.
  const std::string head = "GET /metrics HTTP/1.1\r\nX: " + std::string(30, 'a') + "\r\n\r\n";
  EXPECT_EQ(status_of(MetricsServer::AnswerTo(head, head.size(), Render)), "HTTP/1.1 200 OK");
  EXPECT_EQ(status_of(MetricsServer::AnswerTo(head, head.size() - 1, Render)),
            "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_EQ(status_of(MetricsServer::AnswerTo(std::string(65, 'x'), 64, Render)),
            "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_EQ(status_of(MetricsServer::AnswerTo(std::string(64, 'x'), 64, Render)), "(waits)");
}

// A client of the real server: sends `request` (in pieces if asked), reads to EOF.
std::string Exchange(uint16_t port, const std::string& request, int timeout_ms = 5000) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0) {
    close(fd);
    return "connect failed";
  }
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server answered and closed early (oversize): read its answer
    sent += static_cast<size_t>(n);
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MetricsServerOptions o;
    o.listen = "127.0.0.1:0";
    o.render = [this] {
      ++renders_;
      return Render();
    };
    o.max_request_bytes = 1024;
    o.request_timeout = absl::Milliseconds(300);
    o.max_clients = 4;
    absl::StatusOr<std::unique_ptr<MetricsServer>> s = MetricsServer::Start(std::move(o));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    ASSERT_NE(server_->port(), 0);
  }
  std::atomic<int> renders_{0};
  std::unique_ptr<MetricsServer> server_;
};

TEST_F(MetricsServerTest, ServesMetricsAndRefusesTheRest) {
  EXPECT_EQ(server_->address(), absl::StrCat("127.0.0.1:", server_->port()));
  std::string r = Exchange(server_->port(), "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_TRUE(absl::EndsWith(r, Render()));
  EXPECT_EQ(renders_.load(), 1);
  EXPECT_THAT(Exchange(server_->port(), "GET /other HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 404 "));
  EXPECT_THAT(Exchange(server_->port(), "DELETE /metrics HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 405 "));
  EXPECT_THAT(Exchange(server_->port(), "garbage\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
  EXPECT_EQ(renders_.load(), 1);
}

TEST_F(MetricsServerTest, OversizeSlowAndTooManyClientsAreRefusedAndItStaysUp) {
  // An endless header: 431 once 1 KiB arrived, without waiting for the end.
  EXPECT_THAT(Exchange(server_->port(), "GET /metrics HTTP/1.1\r\nX: " + std::string(64 << 10, 'a')),
              StartsWith("HTTP/1.1 431 "));
  // A request that never completes: 408 after the request timeout.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THAT(Exchange(server_->port(), "GET /metrics HTTP/1.1\r\n"), StartsWith("HTTP/1.1 408 "));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  // Clients that connect and say nothing hold a slot each until their timeout; the one beyond
  // max_clients gets a 503 at once.
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(server_->port());
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)), 0);
    idle.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // accepted
  EXPECT_THAT(Exchange(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 503 "));
  for (int fd : idle) close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Still serving.
  EXPECT_THAT(Exchange(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 200 "));
}

TEST(MetricsServerStart, RefusalsNameTheAddress) {
  MetricsServerOptions o;
  o.listen = "127.0.0.1:0";
  o.render = Render;
  absl::StatusOr<std::unique_ptr<MetricsServer>> first = MetricsServer::Start(o);
  ASSERT_TRUE(first.ok()) << first.status();
  o.listen = (*first)->address();
  absl::StatusOr<std::unique_ptr<MetricsServer>> second = MetricsServer::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("metrics_listen " + o.listen + ": Address already in use"));
  o.listen = "192.0.2.1:9469";  // TEST-NET-1: no interface here has it
  second = MetricsServer::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("no interface has this address"));
  o.listen = "nonsense";
  EXPECT_FALSE(MetricsServer::Start(o).ok());
}

}  // namespace
}  // namespace metaroce::daemon
