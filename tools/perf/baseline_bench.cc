#include "tools/perf/baseline_bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/api/stats_json.h"
#include "lib/io/packet_port.h"
#include "lib/io/udp_segmentation.h"
#include "lib/wire/packet.h"
#include "tools/perf/common.h"
#include "tools/perf/control.h"
#include "tools/perf/report.h"

namespace metaroce::perf {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint16_t kSourcePortBase = 49152;
constexpr uint8_t kRawOpcode = 0xee;  // not a MetaRoCE opcode: a stack would drop it
constexpr size_t kBatch = 64;

bool IsRaw(TestKind t) { return t == TestKind::kRawBw || t == TestKind::kRawLat; }

using ReceiveFn = std::function<void(std::span<const std::byte> bytes, const io::IpAddress& src,
                                     uint16_t src_port, int plane)>;

// Datagrams in and out, whatever carries them. One owner thread.
class DatagramIo {
 public:
  virtual ~DatagramIo() = default;
  // Queues one datagram; false when full (Flush and retry).
  virtual bool Send(int plane, const io::IpAddress& dst, uint16_t src_port, uint16_t dst_port,
                    std::span<const std::byte> bytes) = 0;
  virtual void Flush() = 0;
  virtual size_t Receive(const ReceiveFn& fn) = 0;
  virtual std::string description() const = 0;
  virtual JsonValue Stats() const { return JsonValue(); }
};

// The stack's own ports (AfXdpPort etc.), without the stack.
class PortIo final : public DatagramIo {
 public:
  explicit PortIo(std::vector<std::unique_ptr<io::PacketPort>> ports)
      : ports_(std::move(ports)), rx_(kBatch) {}
  bool Send(int plane, const io::IpAddress& dst, uint16_t src_port, uint16_t dst_port,
            std::span<const std::byte> bytes) override {
    io::TxPacket p;
    p.dst = dst;
    p.src_port = src_port;
    p.dst_port = dst_port;
    p.headers = bytes.first(std::min<size_t>(bytes.size(), wire::kDataHeadersSize));
    p.payload = bytes.subspan(p.headers.size());
    return ports_[plane]->Send(p);
  }
  void Flush() override {
    for (auto& p : ports_) p->Flush();
  }
  size_t Receive(const ReceiveFn& fn) override {
    size_t total = 0;
    for (size_t plane = 0; plane < ports_.size(); ++plane) {
      const size_t n = ports_[plane]->Receive(rx_);
      for (size_t i = 0; i < n; ++i) fn(rx_[i].payload, rx_[i].src, rx_[i].src_port, int(plane));
      if (n > 0) ports_[plane]->Release(std::span<const io::RxPacket>(rx_.data(), n));
      total += n;
    }
    return total;
  }
  std::string description() const override { return ports_[0]->description(); }
  JsonValue Stats() const override {
    JsonValue out = JsonValue::MakeArray();
    for (const auto& p : ports_) out.Push(api::PortStatsJson(p->stats(), p->description()));
    return out;
  }

 private:
  std::vector<std::unique_ptr<io::PacketPort>> ports_;
  std::vector<io::RxPacket> rx_;
};

// Plain kernel UDP sockets, unconnected (5-tuple ECMP), batched with sendmmsg/recvmmsg; runs of
// same-sized datagrams to one peer leave as single UDP_SEGMENT messages, as the stack's UDP port
// sends them (lib/io/udp_port.h), until the kernel refuses that.
class KernelUdpIo final : public DatagramIo {
 public:
  // One socket per (plane address, port) in `binds`.
  static absl::StatusOr<std::unique_ptr<KernelUdpIo>> Open(
      const std::vector<std::pair<io::IpAddress, uint16_t>>& binds,
      const std::vector<int>& planes) {
    std::unique_ptr<KernelUdpIo> k(new KernelUdpIo);
    for (size_t i = 0; i < binds.size(); ++i) {
      const auto& [ip, port] = binds[i];
      const int fd = socket(ip.v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) return absl::ErrnoToStatus(errno, "socket(AF_INET, SOCK_DGRAM)");
      const int buf = 8 << 20;
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
      sockaddr_storage ss;
      const socklen_t len = ToSockaddr(ip, port, &ss);
      if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
        const int e = errno;
        close(fd);
        return absl::ErrnoToStatus(e, absl::StrCat("bind UDP ", ip.ToString(), ":", port,
                                                   " (another program on the port?)"));
      }
      k->socks_.push_back({fd, port, planes[i]});
    }
    return k;
  }
  ~KernelUdpIo() override {
    for (const Sock& s : socks_) close(s.fd);
  }

  bool Send(int plane, const io::IpAddress& dst, uint16_t src_port, uint16_t dst_port,
            std::span<const std::byte> bytes) override {
    Sock* s = nullptr;
    for (Sock& c : socks_) {
      if (c.port == src_port && c.plane == plane) s = &c;
    }
    if (s == nullptr) return true;  // no such socket: nothing can leave (counted as sent)
    if (s->pending.size() >= kBatch) {
      FlushSocket(*s);
      if (s->pending.size() >= kBatch) return false;
    }
    Pending& p = s->pending.emplace_back();
    p.bytes.assign(bytes.begin(), bytes.end());
    p.len = ToSockaddr(dst, dst_port, &p.addr);
    return true;
  }
  void Flush() override {
    for (Sock& s : socks_) FlushSocket(s);
  }
  size_t Receive(const ReceiveFn& fn) override {
    size_t total = 0;
    for (Sock& s : socks_) {
      mmsghdr msgs[kBatch];
      iovec iov[kBatch];
      sockaddr_storage from[kBatch];
      if (rx_buffers_.size() < kBatch) rx_buffers_.resize(kBatch, std::vector<std::byte>(65536));
      for (size_t i = 0; i < kBatch; ++i) {
        iov[i] = {rx_buffers_[i].data(), rx_buffers_[i].size()};
        msgs[i] = {};
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        msgs[i].msg_hdr.msg_name = &from[i];
        msgs[i].msg_hdr.msg_namelen = sizeof from[i];
      }
      const int n = recvmmsg(s.fd, msgs, kBatch, MSG_DONTWAIT, nullptr);
      for (int i = 0; i < n; ++i) {
        io::IpAddress src;
        uint16_t port = 0;
        FromSockaddr(from[i], &src, &port);
        fn(std::span<const std::byte>(rx_buffers_[i].data(), msgs[i].msg_len), src, port, s.plane);
      }
      if (n > 0) total += static_cast<size_t>(n);
    }
    return total;
  }
  std::string description() const override {
    return segmentation_ ? "kernel udp sendmmsg+gso/recvmmsg"
                         : "kernel udp sendmmsg/recvmmsg (UDP_SEGMENT refused)";
  }

 private:
  struct Pending {
    std::vector<std::byte> bytes;
    sockaddr_storage addr;
    socklen_t len = 0;
  };
  struct Sock {
    int fd;
    uint16_t port;
    int plane;
    std::vector<Pending> pending;
  };
  static socklen_t ToSockaddr(const io::IpAddress& ip, uint16_t port, sockaddr_storage* ss) {
    std::memset(ss, 0, sizeof *ss);
    if (ip.v6) {
      auto* s6 = reinterpret_cast<sockaddr_in6*>(ss);
      s6->sin6_family = AF_INET6;
      s6->sin6_port = htons(port);
      std::memcpy(&s6->sin6_addr, ip.bytes.data(), 16);
      return sizeof *s6;
    }
    auto* s4 = reinterpret_cast<sockaddr_in*>(ss);
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
    s4->sin_addr.s_addr = htonl(ip.v4_host());
    return sizeof *s4;
  }
  static void FromSockaddr(const sockaddr_storage& ss, io::IpAddress* ip, uint16_t* port) {
    if (ss.ss_family == AF_INET6) {
      const auto* s6 = reinterpret_cast<const sockaddr_in6*>(&ss);
      ip->v6 = true;
      std::memcpy(ip->bytes.data(), &s6->sin6_addr, 16);
      *port = ntohs(s6->sin6_port);
    } else {
      const auto* s4 = reinterpret_cast<const sockaddr_in*>(&ss);
      *ip = io::IpAddress::V4(ntohl(s4->sin_addr.s_addr));
      *port = ntohs(s4->sin_port);
    }
  }
  void FlushSocket(Sock& s) {
    if (s.pending.empty()) return;
    struct Control {
      alignas(cmsghdr) unsigned char bytes[io::kSegmentControlSpace];
    };
    mmsghdr msgs[kBatch];
    iovec iov[kBatch];
    Control control[kBatch];
    size_t covers[kBatch];
    const size_t n = s.pending.size();
    size_t m = 0;
    for (size_t i = 0; i < n; ++m) {
      const Pending& head = s.pending[i];
      const size_t run =
          !segmentation_ ? 1
                         : io::SegmentRunLength(
                               i, n, [&](size_t j) { return s.pending[j].bytes.size(); },
                               [&](size_t j) {
                                 return s.pending[j].len == head.len &&
                                        std::memcmp(&s.pending[j].addr, &head.addr, head.len) == 0;
                               });
      for (size_t k = 0; k < run; ++k) {
        iov[i + k] = {s.pending[i + k].bytes.data(), s.pending[i + k].bytes.size()};
      }
      msgs[m] = {};
      msgs[m].msg_hdr.msg_iov = &iov[i];
      msgs[m].msg_hdr.msg_iovlen = run;
      msgs[m].msg_hdr.msg_name = &s.pending[i].addr;
      msgs[m].msg_hdr.msg_namelen = s.pending[i].len;
      if (run > 1) {
        msgs[m].msg_hdr.msg_control = control[m].bytes;
        msgs[m].msg_hdr.msg_controllen = sizeof control[m].bytes;
        io::WriteSegmentSize(CMSG_FIRSTHDR(&msgs[m].msg_hdr),
                             static_cast<uint16_t>(head.bytes.size()));
      }
      covers[m] = run;
      i += run;
    }
    const int sent = sendmmsg(s.fd, msgs, static_cast<unsigned>(m), MSG_DONTWAIT);
    if (sent <= 0) {
      if (sent < 0 && covers[0] > 1 && (errno == EIO || errno == EINVAL)) {
        segmentation_ = false;  // the kernel refuses UDP_SEGMENT here: send them one by one
        return;
      }
      // EAGAIN: the socket buffer is full, keep them; anything else: a loss, as on a wire.
      if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) s.pending.clear();
      return;
    }
    size_t done = 0;
    for (int k = 0; k < sent; ++k) done += covers[k];
    s.pending.erase(s.pending.begin(), s.pending.begin() + static_cast<std::ptrdiff_t>(done));
  }
  std::vector<Sock> socks_;
  std::vector<std::vector<std::byte>> rx_buffers_;
  bool segmentation_ = true;
};

struct Setup {
  PerfOptions o;
  uint32_t mtu = 0;
  std::unique_ptr<api::Datapath> dp;
  std::vector<std::unique_ptr<DatagramIo>> ios;  // per worker thread
  std::vector<io::IpAddress> peer_ips;           // per plane
  PortModes port_modes;                          // of the raw tests' ports
};

absl::Status OpenIo(Setup& s, std::shared_ptr<api::MemoryPairBroker> broker, int side,
                    bool server) {
  PerfOptions dpo = s.o;
  if (!IsRaw(s.o.test)) dpo.port_kind = PortKindFlag::kUdp;  // kernel sockets: no XDP program
  absl::StatusOr<std::unique_ptr<api::Datapath>> dp =
      api::Datapath::Create(DatapathOptionsFor(dpo, std::move(broker), side));
  if (!dp.ok()) return dp.status();
  s.dp = *std::move(dp);
  s.mtu = s.o.mtu != 0 ? s.o.mtu : s.dp->DefaultMtu();
  const int planes = static_cast<int>(s.dp->planes().size());
  if (IsRaw(s.o.test)) {
    for (int w = 0; w < s.o.workers; ++w) {
      std::vector<std::unique_ptr<io::PacketPort>> ports;
      for (int p = 0; p < planes; ++p) {
        api::PortSpec spec;
        spec.worker = w;
        spec.plane = p;
        spec.queue = static_cast<uint32_t>(w);
        spec.ifname = s.dp->planes()[p].ifname;
        spec.local_ip = s.dp->planes()[p].local_ip;
        spec.kind = s.dp->kind();
        spec.udp_port = s.o.udp_port;
        spec.mtu = s.mtu;
        absl::StatusOr<std::unique_ptr<io::PacketPort>> port = s.dp->Open(spec);
        if (!port.ok()) return port.status();
        s.port_modes.Record(**port);
        ports.push_back(*std::move(port));
      }
      s.ios.push_back(std::make_unique<PortIo>(std::move(ports)));
    }
    return absl::OkStatus();
  }
  std::vector<std::pair<io::IpAddress, uint16_t>> binds;
  std::vector<int> plane_of;
  if (server) {
    for (int p = 0; p < planes; ++p) {
      binds.emplace_back(s.dp->planes()[p].local_ip, s.o.udp_port);
      plane_of.push_back(p);
    }
  } else {
    for (int i = 0; i < s.o.paths; ++i) {
      binds.emplace_back(s.dp->planes()[i % planes].local_ip, kSourcePortBase + i);
      plane_of.push_back(i % planes);
    }
  }
  absl::StatusOr<std::unique_ptr<KernelUdpIo>> k = KernelUdpIo::Open(binds, plane_of);
  if (!k.ok()) return k.status();
  s.ios.push_back(*std::move(k));
  return absl::OkStatus();
}

std::string JoinIps(const api::Datapath& dp) {
  std::vector<std::string> v;
  for (const api::PlaneInfo& p : dp.planes()) v.push_back(p.local_ip.ToString());
  return absl::StrJoin(v, ",");
}

absl::Status ParseIps(const ControlMessage& m, Setup& s) {
  absl::StatusOr<std::string> ips = m.Get("ips");
  if (!ips.ok()) return ips.status();
  s.peer_ips.clear();
  for (absl::string_view v : absl::StrSplit(*ips, ',', absl::SkipEmpty())) {
    absl::StatusOr<io::IpAddress> a = io::IpAddress::Parse(std::string_view(v.data(), v.size()));
    if (!a.ok()) return a.status();
    s.peer_ips.push_back(*a);
  }
  if (s.peer_ips.size() != s.dp->planes().size()) {
    return absl::FailedPreconditionError(absl::StrCat("the peer has ", s.peer_ips.size(),
                                                      " planes, this side ",
                                                      s.dp->planes().size()));
  }
  return absl::OkStatus();
}

// The datagram of a message's frame: MetaRoCE-sized headers (version byte 1, an opcode no
// stack uses, the sequence number where the PSN goes) and `payload` bytes.
std::vector<std::byte> MakeDatagram(uint32_t payload) {
  std::vector<std::byte> d(wire::kDataHeadersSize + payload, std::byte{0x61});
  std::memset(d.data(), 0, wire::kDataHeadersSize);
  d[0] = std::byte{wire::kVersion};
  d[1] = std::byte{kRawOpcode};
  return d;
}
inline void SetSeq(std::vector<std::byte>& d, uint32_t seq) { std::memcpy(d.data() + 12, &seq, 4); }

// The datagrams of one message of `size` bytes, cut at `mtu` as the stack cuts a message into
// packets: full ones, and a last one with what is left (64 KiB at a payload of 8,916 bytes:
// seven of 8,916 and one of 3,124). A ceiling that sent full datagrams only would carry 9 % more
// bytes per datagram than the stack at that MTU, and measure the message size, not the protocol.
struct MessageFrames {
  std::vector<std::byte> full, last;  // full: empty when the message is one datagram
  uint64_t count = 1;
  std::vector<std::byte>& at(uint64_t k) { return k % count + 1 == count ? last : full; }
};
MessageFrames MakeMessageFrames(uint64_t size, uint32_t mtu) {
  MessageFrames f;
  f.count = std::max<uint64_t>(1, (size + mtu - 1) / mtu);
  const uint64_t full = std::min<uint64_t>(size, mtu);
  if (f.count > 1) f.full = MakeDatagram(static_cast<uint32_t>(full));  // at() takes it
  f.last = MakeDatagram(static_cast<uint32_t>(size - (f.count - 1) * full));
  return f;
}
inline uint32_t GetSeq(std::span<const std::byte> d) {
  uint32_t v = 0;
  if (d.size() >= 16) std::memcpy(&v, d.data() + 12, 4);
  return v;
}

struct RxCount {
  uint64_t packets = 0, bytes = 0;
  Clock::time_point first{}, last{};
  std::vector<uint64_t> windows;
};

JsonValue DocumentHead(const Setup& s, std::string_view role) {
  JsonValue doc;
  doc["version"] = kJsonVersion;
  doc["tool"] = "mrperf";
  doc["test"] = TestName(s.o.test);
  doc["role"] = role;
  JsonValue config = ConfigJson(s.o, s.dp.get(), s.mtu);
  config["datagram_bytes"] = wire::kDataHeadersSize + std::min<uint64_t>(s.o.size, s.mtu);
  JsonValue& d = config["port_descriptions"] = JsonValue::MakeArray();
  for (const auto& io : s.ios) d.Push(io->description());
  config["zero_copy"] = s.port_modes.zero_copy();
  if (!IsRaw(s.o.test)) config["port_kind"] = "kernel_udp";
  doc["config"] = std::move(config);
  return doc;
}

void PrintTitle(const Setup& s) {
  if (TablesQuiet()) return;
  std::printf("%s  %zu plane(s), %d worker(s), %lu-byte datagrams, %s\n",
              std::string(TestName(s.o.test)).c_str(), s.dp->planes().size(),
              static_cast<int>(s.ios.size()),
              static_cast<unsigned long>(wire::kDataHeadersSize + std::min<uint64_t>(s.o.size, s.mtu)),
              s.ios[0]->description().c_str());
  if (IsLatency(s.o.test)) PrintLatHeader(); else PrintBwHeader(s.o.report_gbits);
}

}  // namespace

absl::StatusOr<JsonValue> RunBaselineServer(const PerfOptions& options,
                                            std::shared_ptr<api::MemoryPairBroker> broker,
                                            std::function<void()> ready) {
  Setup s;
  s.o = options;
  if (IsLatency(s.o.test)) s.o.workers = 1;
  if (absl::Status st = OpenIo(s, broker, 0, true); !st.ok()) return st;
  absl::StatusOr<ClientGreeting> greeting = AwaitClient(options, ready);
  if (!greeting.ok()) return greeting.status();
  ControlChannel* ctl = &greeting->channel;
  const ControlMessage* hello = &greeting->hello;
  const absl::Duration timeout = absl::Seconds(options.timeout_s);
  if (hello->Get("test").value_or("") != TestName(s.o.test)) {
    const std::string why = absl::StrCat("the client runs ", hello->Get("test").value_or("?"),
                                         ", this server ", std::string(TestName(s.o.test)),
                                         ": run the same test on both sides");
    ctl->SendError(why);
    return absl::FailedPreconditionError(why);
  }
  s.o.size = hello->U64Or("size", s.o.size);
  s.o.iterations = hello->U64Or("iterations", s.o.iterations);
  s.o.duration_s = hello->GetDouble("duration_s").value_or(0);
  if (absl::Status st = ParseIps(*hello, s); !st.ok()) {
    ctl->SendError(std::string(st.message()));
    return st;
  }
  ControlMessage rdy;
  rdy.kind = "ready";
  rdy.Set("ips", JoinIps(*s.dp));
  if (absl::Status st = ctl->Send(rdy); !st.ok()) return st;
  absl::StatusOr<ControlMessage> round = ctl->Receive("round", absl::Now() + timeout);
  if (!round.ok()) return round.status();

  std::atomic<bool> stop{false};
  const Clock::time_point t0 = Clock::now();
  const auto window = std::chrono::milliseconds(s.o.duration_s >= 2 ? 1000 : 100);
  std::vector<RxCount> counts(s.ios.size());
  std::vector<std::thread> threads;
  for (size_t w = 0; w < s.ios.size(); ++w) {
    threads.emplace_back([&, w] {
      DatagramIo& io = *s.ios[w];
      RxCount& c = counts[w];
      const bool echo = IsLatency(s.o.test);
      const uint16_t udp_port = s.o.udp_port;
      const bool raw = IsRaw(s.o.test);
      uint32_t idle = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const Clock::time_point now = Clock::now();
        const size_t n = io.Receive([&](std::span<const std::byte> b, const io::IpAddress& src,
                                        uint16_t src_port, int plane) {
          if (b.size() < wire::kDataHeadersSize) return;
          if (c.packets == 0) c.first = now;
          c.last = now;
          ++c.packets;
          c.bytes += b.size() - wire::kDataHeadersSize;
          const size_t i = static_cast<size_t>((now - t0) / window);
          if (i >= c.windows.size()) c.windows.resize(i + 1, 0);
          c.windows[i] += b.size() - wire::kDataHeadersSize;
          if (echo) {
            // Raw: back to the client's steered port; kernel: back to its socket.
            const uint16_t sp = raw ? src_port : udp_port;
            const uint16_t dp = raw ? udp_port : src_port;
            while (!io.Send(plane, src, sp, dp, b)) io.Flush();
          }
        });
        if (n > 0) {
          if (echo) io.Flush();
          idle = 0;
        } else if (!echo) {
          // Busy-poll, as the stack's server does (inline engine): on veth the sender's CPU
          // delivers into this socket, and a receiver that naps when idle pulls the rings'
          // cache lines less often, which makes that sender ~6 % faster (measured). The ceiling
          // and the stack must differ only by the protocol, not by the polling policy.
          IdleWait(idle, /*latency=*/false, /*inline_engine=*/true);
        }
      }
    });
  }
  if (ready) {}  // (memory runs: the client thread runs concurrently)
  ControlMessage go;
  go.kind = "go";
  absl::Status st = ctl->Send(go);
  absl::StatusOr<ControlMessage> done =
      st.ok() ? ctl->Receive("round_done", absl::InfiniteFuture()) : absl::StatusOr<ControlMessage>(st);
  if (!IsLatency(s.o.test)) absl::SleepFor(absl::Milliseconds(50));  // stragglers in flight
  stop = true;
  for (auto& t : threads) t.join();
  if (!done.ok()) return done.status();

  RxCount total;
  for (const RxCount& c : counts) {
    if (c.packets == 0) continue;
    if (total.packets == 0 || c.first < total.first) total.first = c.first;
    if (c.last > total.last) total.last = c.last;
    total.packets += c.packets;
    total.bytes += c.bytes;
    if (total.windows.size() < c.windows.size()) total.windows.resize(c.windows.size(), 0);
    for (size_t i = 0; i < c.windows.size(); ++i) total.windows[i] += c.windows[i];
  }
  BwResult r;
  r.size = s.o.size;
  r.bytes = total.bytes;
  r.sent = done->U64Or("sent", 0);
  r.seconds = std::chrono::duration<double>(total.last - total.first).count();
  const uint64_t frames_per_msg = (s.o.size + s.mtu - 1) / s.mtu;
  r.iterations = total.packets / std::max<uint64_t>(frames_per_msg, 1);
  if (r.seconds > 0) {
    r.avg_bytes_per_s = static_cast<double>(r.bytes) / r.seconds;
    r.msg_rate_per_s = static_cast<double>(r.iterations) / r.seconds;
  }
  // Peak over complete windows between the first and the last packet.
  double peak = 0;
  for (size_t i = 0; i < total.windows.size(); ++i) {
    const Clock::time_point ws = t0 + window * i, we = t0 + window * (i + 1);
    if (ws >= total.first && we <= total.last) {
      peak = std::max(peak, static_cast<double>(total.windows[i]) /
                                std::chrono::duration<double>(window).count());
    }
  }
  r.peak_bytes_per_s = std::max(peak, r.avg_bytes_per_s);
  ControlMessage res;
  res.kind = "round_result";
  res.Set("packets", total.packets).Set("bytes", r.bytes).Set("iterations", r.iterations);
  res.SetDouble("seconds", r.seconds).SetDouble("peak", r.peak_bytes_per_s);
  res.SetDouble("avg", r.avg_bytes_per_s).SetDouble("rate", r.msg_rate_per_s);
  if (absl::Status e = ctl->Send(res); !e.ok()) return e;

  JsonValue doc = DocumentHead(s, "server");
  PrintTitle(s);
  JsonValue& results = doc["results"] = JsonValue::MakeArray();
  if (IsLatency(s.o.test)) {
    LatResult l = LatencyFrom(*done, s.o.size);
    PrintLatRow(l);
    results.Push(ToJson(l));
  } else {
    PrintBwRow(r, s.o.report_gbits);
    results.Push(ToJson(r));
  }
  PrintDashes();
  JsonValue& ports = doc["ports"] = JsonValue::MakeArray();
  for (const auto& io : s.ios) ports.Push(io->Stats());
  absl::StatusOr<ControlMessage> bye = ctl->Receive("bye", absl::Now() + timeout);
  (void)bye;
  return doc;
}

absl::StatusOr<JsonValue> RunBaselineClient(const PerfOptions& options,
                                            std::shared_ptr<api::MemoryPairBroker> broker) {
  Setup s;
  s.o = options;
  if (IsLatency(s.o.test)) s.o.workers = 1;
  if (absl::Status st = OpenIo(s, broker, 1, false); !st.ok()) return st;
  const std::string host = options.server.value_or("127.0.0.1");
  const absl::Duration timeout = absl::Seconds(options.timeout_s);
  absl::StatusOr<ControlChannel> ctl = ControlChannel::Connect(host, options.port, timeout);
  if (!ctl.ok()) return ctl.status();
  ControlMessage hello;
  hello.kind = "hello";
  hello.Set("test", TestName(s.o.test)).Set("size", s.o.size).Set("iterations", s.o.iterations);
  hello.SetDouble("duration_s", s.o.duration_s).Set("ips", JoinIps(*s.dp));
  if (absl::Status st = ctl->Send(hello); !st.ok()) return st;
  absl::StatusOr<ControlMessage> rdy = ctl->Receive("ready", absl::Now() + timeout);
  if (!rdy.ok()) return rdy.status();
  if (absl::Status st = ParseIps(*rdy, s); !st.ok()) return st;
  ControlMessage round;
  round.kind = "round";
  round.Set("size", s.o.size);
  if (absl::Status st = ctl->Send(round); !st.ok()) return st;
  absl::StatusOr<ControlMessage> go = ctl->Receive("go", absl::Now() + timeout);
  if (!go.ok()) return go.status();

  MessageFrames message = MakeMessageFrames(s.o.size, s.mtu);
  const uint64_t frames_per_msg = message.count;
  const int planes = static_cast<int>(s.peer_ips.size());
  const bool raw = IsRaw(s.o.test);
  const bool by_time = s.o.duration_s > 0;
  const auto duration = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s.o.duration_s));
  // Kernel UDP: the path picks the socket (its source port); raw: the source port itself.
  auto source_port = [&](uint64_t path) { return static_cast<uint16_t>(kSourcePortBase + path % s.o.paths); };
  auto plane_of = [&](uint64_t path) { return static_cast<int>((path % s.o.paths) % planes); };
  ControlMessage done;
  done.kind = "round_done";
  JsonValue doc = DocumentHead(s, "client");
  JsonValue& results = doc["results"] = JsonValue::MakeArray();
  if (IsLatency(s.o.test)) {
    DatagramIo& io = *s.ios[0];
    const uint64_t warmup = by_time ? 100 : std::min<uint64_t>(s.o.iterations / 10, 100);
    std::vector<int64_t> samples;
    uint64_t failed = 0;
    const Clock::time_point start = Clock::now();
    for (uint64_t i = 0;; ++i) {
      if (StopRequested()) break;
      if (by_time ? (i >= warmup && Clock::now() - start >= duration) : i >= warmup + s.o.iterations) break;
      const uint32_t seq = static_cast<uint32_t>(i + 1);
      const Clock::time_point t0 = Clock::now();
      for (uint64_t f = 0; f < frames_per_msg; ++f) {
        std::vector<std::byte>& d = message.at(f);
        SetSeq(d, seq);
        while (!io.Send(plane_of(i), s.peer_ips[plane_of(i)], source_port(i), s.o.udp_port, d)) io.Flush();
      }
      io.Flush();
      uint64_t back = 0;
      uint32_t spins = 0;
      bool lost = false;
      while (back < frames_per_msg) {
        io.Receive([&](std::span<const std::byte> b, const io::IpAddress&, uint16_t, int) {
          if (GetSeq(b) == seq) ++back;
        });
        if ((++spins & 4095) == 0 && (Clock::now() - t0 > std::chrono::milliseconds(200) || StopRequested())) {
          lost = true;  // a baseline without a protocol: a lost frame is a lost sample
          break;
        }
      }
      const Clock::time_point t1 = Clock::now();
      if (lost) {
        ++failed;
        continue;
      }
      if (i >= warmup) samples.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count() / 2);
    }
    LatResult l = ComputeLatency(s.o.size, samples);
    l.failed_ops = failed;
    PutLatency(done, l);
    if (absl::Status st = ctl->Send(done); !st.ok()) return st;
    absl::StatusOr<ControlMessage> res = ctl->Receive("round_result", absl::Now() + timeout);
    if (!res.ok()) return res.status();
    PrintTitle(s);
    PrintLatRow(l);
    results.Push(ToJson(l));
  } else {
    std::vector<uint64_t> sent(s.ios.size(), 0);
    std::vector<std::thread> threads;
    const Clock::time_point start = Clock::now();
    const uint64_t frames_total = s.o.iterations * frames_per_msg;
    for (size_t w = 0; w < s.ios.size(); ++w) {
      threads.emplace_back([&, w] {
        DatagramIo& io = *s.ios[w];
        MessageFrames frames = message;  // this thread's copies (their sequence numbers change)
        uint64_t n = 0;
        const uint64_t mine = frames_total / s.ios.size();
        while (!StopRequested()) {
          if (by_time ? Clock::now() - start >= duration : n >= mine) break;
          for (size_t k = 0; k < kBatch && (by_time || n < mine); ++k) {  // -n: this share
            const uint64_t path = n + w;  // spread over paths and planes, as the stack does
            std::vector<std::byte>& d = frames.at(n);
            SetSeq(d, static_cast<uint32_t>(n));
            if (!io.Send(plane_of(path), s.peer_ips[plane_of(path)], source_port(path),
                         s.o.udp_port, d)) {
              break;
            }
            ++n;
          }
          io.Flush();
          // Raw: take whatever comes back so that the receive ring never fills (nothing should).
          if (raw) io.Receive([](std::span<const std::byte>, const io::IpAddress&, uint16_t, int) {});
        }
        io.Flush();
        sent[w] = n;
      });
    }
    for (auto& t : threads) t.join();
    uint64_t total_sent = 0;
    for (uint64_t v : sent) total_sent += v;
    done.Set("sent", total_sent);
    if (absl::Status st = ctl->Send(done); !st.ok()) return st;
    absl::StatusOr<ControlMessage> res = ctl->Receive("round_result", absl::Now() + timeout);
    if (!res.ok()) return res.status();
    BwResult r;
    r.size = s.o.size;
    r.sent = total_sent;
    r.bytes = res->U64Or("bytes", 0);
    r.iterations = res->U64Or("iterations", 0);
    r.seconds = res->GetDouble("seconds").value_or(0);
    r.peak_bytes_per_s = res->GetDouble("peak").value_or(0);
    r.avg_bytes_per_s = res->GetDouble("avg").value_or(0);
    r.msg_rate_per_s = res->GetDouble("rate").value_or(0);
    PrintTitle(s);
    PrintBwRow(r, s.o.report_gbits);
    JsonValue j = ToJson(r);
    j["received_packets"] = res->U64Or("packets", 0);
    j["sent_packets"] = total_sent;
    results.Push(std::move(j));
  }
  PrintDashes();
  JsonValue& ports = doc["ports"] = JsonValue::MakeArray();
  for (const auto& io : s.ios) ports.Push(io->Stats());
  ControlMessage bye;
  bye.kind = "bye";
  ctl->Send(bye).IgnoreError();
  return doc;
}

}  // namespace metaroce::perf
