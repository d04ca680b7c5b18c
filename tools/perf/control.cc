#include "tools/perf/control.h"

#include <poll.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tools/perf/common.h"

namespace metaroce::perf {

ControlMessage& ControlMessage::Set(std::string_view key, std::string_view value) {
  std::string v(value);
  for (char& c : v) {
    if (c == '\n') c = ' ';
  }
  fields[std::string(key)] = std::move(v);
  return *this;
}

ControlMessage& ControlMessage::Set(std::string_view key, uint64_t value) {
  return Set(key, std::to_string(value));
}

ControlMessage& ControlMessage::SetDouble(std::string_view key, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  return Set(key, buf);
}

absl::StatusOr<std::string> ControlMessage::Get(std::string_view key) const {
  auto it = fields.find(key);
  if (it == fields.end()) {
    return absl::NotFoundError(absl::StrCat("control message '", kind, "' lacks '", std::string(key),
                                            "' (mrperf versions differ?)"));
  }
  return it->second;
}

absl::StatusOr<uint64_t> ControlMessage::GetU64(std::string_view key) const {
  absl::StatusOr<std::string> s = Get(key);
  if (!s.ok()) return s.status();
  uint64_t v = 0;
  if (!absl::SimpleAtoi(*s, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("control field ", std::string(key), "=", *s,
                                                   " is not an unsigned integer"));
  }
  return v;
}

absl::StatusOr<double> ControlMessage::GetDouble(std::string_view key) const {
  absl::StatusOr<std::string> s = Get(key);
  if (!s.ok()) return s.status();
  double v = 0;
  if (!absl::SimpleAtod(*s, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("control field ", std::string(key), "=", *s,
                                                   " is not a number"));
  }
  return v;
}

uint64_t ControlMessage::U64Or(std::string_view key, uint64_t fallback) const {
  absl::StatusOr<uint64_t> v = GetU64(key);
  return v.ok() ? *v : fallback;
}

absl::StatusOr<ControlChannel> ControlChannel::Connect(std::string_view host, uint16_t port,
                                                       absl::Duration timeout) {
  // The server may still be loading its datapath: retry refused connections until the timeout.
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last;
  while (absl::Now() < deadline) {
    absl::StatusOr<api::ExchangeSocket> s = api::ExchangeSocket::Connect(host, port, deadline);
    if (s.ok()) return ControlChannel(*std::move(s));
    last = s.status();
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::UnavailableError(absl::StrCat(
      "no mrperf server at ",
      host.find(':') == std::string_view::npos ? std::string(host)
                                               : absl::StrCat("[", std::string(host), "]"),
      ":", port, " (", last.message(),
      "): start `mrperf TEST` without an address there first, with the same -p"));
}

absl::StatusOr<ControlChannel> ControlChannel::Accept(api::ExchangeSocket& listener,
                                                      absl::Time deadline) {
  absl::StatusOr<api::ExchangeSocket> s = listener.Accept(deadline);
  if (!s.ok()) return s.status();
  return ControlChannel(*std::move(s));
}

absl::Status ControlChannel::Send(const ControlMessage& m, absl::Duration timeout) {
  std::string text = m.kind + "\n";
  for (const auto& [k, v] : m.fields) absl::StrAppend(&text, k, "=", v, "\n");
  std::vector<std::byte> body(text.size());
  std::memcpy(body.data(), text.data(), text.size());
  return socket_.SendMessage(body, absl::Now() + timeout);
}

absl::StatusOr<ControlMessage> ControlChannel::Receive(std::string_view expected,
                                                       absl::Time deadline) {
  absl::StatusOr<std::vector<std::byte>> body = socket_.ReceiveMessage(deadline);
  if (!body.ok()) {
    return absl::Status(body.status().code(),
                        absl::StrCat("waiting for '", std::string(expected), "' from the peer (",
                                     socket_.peer_name(), "): ", body.status().message()));
  }
  std::string text(reinterpret_cast<const char*>(body->data()), body->size());
  ControlMessage m;
  bool first = true;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (first) {
      m.kind = std::string(line);
      first = false;
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    m.fields[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  if (m.kind == "error") {
    return absl::FailedPreconditionError(
        absl::StrCat("the peer (", socket_.peer_name(), ") says: ", m.fields["why"]));
  }
  if (!expected.empty() && m.kind != expected) {
    return absl::InvalidArgumentError(absl::StrCat("expected '", std::string(expected), "' from the peer, got '",
                                                   m.kind, "' (mrperf versions or tests differ?)"));
  }
  return m;
}

void ControlChannel::SendError(std::string_view why) {
  ControlMessage m;
  m.kind = "error";
  m.Set("why", why);
  Send(m, absl::Seconds(1)).IgnoreError();
}

bool ControlChannel::Readable() const {
  pollfd p{socket_.fd(), POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

void PutLatency(ControlMessage& m, const LatResult& r) {
  m.Set("size", r.size).Set("iterations", r.iterations);
  m.SetDouble("t_min", r.t_min).SetDouble("t_max", r.t_max).SetDouble("t_typical", r.t_typical);
  m.SetDouble("t_avg", r.t_avg).SetDouble("t_stdev", r.t_stdev).SetDouble("p99", r.p99);
  m.SetDouble("p999", r.p999);
  m.Set("failed_ops", r.failed_ops).Set("data_errors", r.data_errors).Set("verified", r.verified);
}

LatResult LatencyFrom(const ControlMessage& m, uint64_t size) {
  LatResult r;
  r.size = size;
  r.iterations = m.U64Or("iterations", 0);
  r.t_min = m.GetDouble("t_min").value_or(0);
  r.t_max = m.GetDouble("t_max").value_or(0);
  r.t_typical = m.GetDouble("t_typical").value_or(0);
  r.t_avg = m.GetDouble("t_avg").value_or(0);
  r.t_stdev = m.GetDouble("t_stdev").value_or(0);
  r.p99 = m.GetDouble("p99").value_or(0);
  r.p999 = m.GetDouble("p999").value_or(0);
  r.failed_ops = m.U64Or("failed_ops", 0);
  r.data_errors = m.U64Or("data_errors", 0);
  r.verified = m.U64Or("verified", 0);
  return r;
}

absl::StatusOr<ClientGreeting> AwaitClient(const PerfOptions& options,
                                           const std::function<void()>& ready) {
  const std::string bind = options.port_kind == PortKindFlag::kMemory ? "127.0.0.1" : "";
  absl::StatusOr<api::ExchangeSocket> listen = api::ExchangeSocket::Listen(bind, options.port);
  if (!listen.ok()) {
    return absl::Status(listen.status().code(),
                        absl::StrCat("control port ", options.port, ": ",
                                     listen.status().message(), " (another mrperf? use -p)"));
  }
  if (ready) ready();
  std::fprintf(stderr, "mrperf: %s server waiting on port %u\n",
               std::string(TestName(options.test)).c_str(), options.port);
  std::optional<ControlChannel> ctl;
  while (!ctl) {
    if (StopRequested()) return absl::CancelledError("interrupted");
    absl::StatusOr<ControlChannel> c =
        ControlChannel::Accept(*listen, absl::Now() + absl::Seconds(1));
    if (c.ok()) {
      ctl.emplace(*std::move(c));
    } else if (!absl::IsDeadlineExceeded(c.status())) {
      return c.status();
    }
  }
  absl::StatusOr<ControlMessage> hello =
      ctl->Receive("hello", absl::Now() + absl::Seconds(options.timeout_s));
  if (!hello.ok()) return hello.status();
  return ClientGreeting{*std::move(ctl), *std::move(hello)};
}

}  // namespace metaroce::perf
