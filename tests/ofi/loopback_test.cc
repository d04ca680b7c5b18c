// The metaroce provider end to end through libfabric's public API, without privileges: the
// provider is loaded from this build (FI_PROVIDER_PATH, set by meson) and runs an embedded engine
// over kernel UDP on lo, progressed by the test's fi_cq_read calls (FI_METAROCE_ENGINE_THREADS=0).
// Each test opens one domain and two endpoints on it, A and B, each with its own CQs, counters
// and an AV holding both addresses (fi_addr 0: A, 1: B); their connections loop over 127.0.0.1.
//
// Covered: untagged and tagged messages (tag + ignore, FI_DIRECTED_RECV), rendezvous sizes,
// FI_REMOTE_CQ_DATA, send-after-send order, truncation, FI_PEEK / FI_CLAIM, fi_cancel, RMA writes
// (eager and rendezvous, with remote CQ data, refused keys and ranges), rendezvous with and
// without zero copy (FI_METAROCE_ZERO_COPY), FI_MR_LOCAL's check of local buffers, malformed
// and unreachable addresses, counters, fi_inject, and sends to self.
// Every wait has a deadline: a lost completion fails the test instead of hanging it.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr size_t kAddressBytes = 60;  // lib/ofi/address.h
constexpr size_t kEagerSize = 8192;   // FI_METAROCE_EAGER_SIZE below
constexpr size_t kInjectSize = 4096;
constexpr auto kDeadline = 5s;
constexpr int kRemAccessErr = 10;  // IBV_WC_REM_ACCESS_ERR

// The provider's settings for every test, before libfabric reads them (its first fi_getinfo).
void SetEnvironment() {
  setenv("FI_METAROCE_MODE", "embedded", 1);
  setenv("FI_METAROCE_INTERFACES", "lo", 1);
  setenv("FI_METAROCE_PORT_KIND", "udp", 1);
  setenv("FI_METAROCE_ENGINE_THREADS", "0", 1);
  setenv("FI_METAROCE_EAGER_SIZE", std::to_string(kEagerSize).c_str(), 1);
  setenv("FI_METAROCE_INJECT_SIZE", std::to_string(kInjectSize).c_str(), 1);
  setenv("FI_METAROCE_CONNECT_TIMEOUT_MS", "2000", 1);
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 31 + (i >> 8));
  return v;
}

// One completion: a success (err 0) or an error entry, with the source fi_cq_readfrom gave.
struct Completion {
  fi_cq_err_entry e{};
  fi_addr_t source = FI_ADDR_NOTAVAIL;
};

std::string Describe(const Completion& c) {
  return "{context " + std::to_string(reinterpret_cast<uintptr_t>(c.e.op_context)) + ", flags 0x" +
         [&] {
           char b[32];
           snprintf(b, sizeof(b), "%llx", static_cast<unsigned long long>(c.e.flags));
           return std::string(b);
         }() +
         ", len " + std::to_string(c.e.len) + ", err " + std::to_string(c.e.err) + "}";
}

// Reads one entry (or error entry) from `cq` if there is one.
bool ReadOne(fid_cq* cq, Completion& out) {
  fi_cq_tagged_entry t{};
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  const ssize_t n = fi_cq_readfrom(cq, &t, 1, &src);
  if (n == 1) {
    out = Completion{};
    out.e.op_context = t.op_context;
    out.e.flags = t.flags;
    out.e.len = t.len;
    out.e.buf = t.buf;
    out.e.data = t.data;
    out.e.tag = t.tag;
    out.source = src;
    return true;
  }
  if (n == -FI_EAVAIL) {
    out = Completion{};
    if (fi_cq_readerr(cq, &out.e, 0) == 1) return true;
    ADD_FAILURE() << "fi_cq_read said FI_EAVAIL but fi_cq_readerr gave nothing";
    return false;
  }
  if (n != -FI_EAGAIN) ADD_FAILURE() << "fi_cq_readfrom: " << fi_strerror(static_cast<int>(-n));
  return false;
}

// Waits for `count` entries of `cq`, progressing the domain by reading it; fails the test (and
// returns what came) when they do not come within `deadline`.
std::vector<Completion> Wait(fid_cq* cq, size_t count, std::chrono::milliseconds deadline =
                                                           std::chrono::milliseconds(kDeadline)) {
  std::vector<Completion> got;
  const Clock::time_point end = Clock::now() + deadline;
  while (got.size() < count) {
    Completion c;
    if (ReadOne(cq, c)) {
      got.push_back(c);
      continue;
    }
    if (Clock::now() > end) {
      ADD_FAILURE() << "timed out waiting for " << count << " completions: " << got.size()
                    << " came";
      break;
    }
  }
  return got;
}

Completion WaitOne(fid_cq* cq) {
  std::vector<Completion> c = Wait(cq, 1);
  return c.empty() ? Completion{} : c[0];
}

// Reads `cq` for `how_long` and expects nothing.
void ExpectNothing(fid_cq* cq, std::chrono::milliseconds how_long = 100ms) {
  const Clock::time_point end = Clock::now() + how_long;
  while (Clock::now() < end) {
    Completion c;
    if (ReadOne(cq, c)) ADD_FAILURE() << "unexpected completion " << Describe(c);
  }
}

// One endpoint with what it is bound to.
struct Side {
  fid_ep* ep = nullptr;
  fid_cq* tx = nullptr;
  fid_cq* rx = nullptr;
  fid_av* av = nullptr;
  fid_cntr* send_cntr = nullptr;
  fid_cntr* recv_cntr = nullptr;
  std::array<uint8_t, kAddressBytes> name{};
  fi_addr_t self = FI_ADDR_NOTAVAIL;
  fi_addr_t peer = FI_ADDR_NOTAVAIL;
};

void Close(fid* f) {
  if (f != nullptr) {
    EXPECT_EQ(fi_close(f), 0) << "fi_close of fclass " << f->fclass;
  }
}

class Loopback : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { SetEnvironment(); }

  // The domain's mr_mode hint; FI_MR_PROV_KEY | FI_MR_VIRT_ADDR: what RMA tests name memory by.
  virtual int MrMode() const { return FI_MR_PROV_KEY | FI_MR_VIRT_ADDR; }

  // FI_METAROCE_ZERO_COPY: rendezvous straight from and into the application's buffers (1), or
  // through the provider's chunk buffers (0).
  virtual const char* ZeroCopy() const { return "1"; }

  // The progress model asked for (FI_PROGRESS_AUTO: the domain's own thread progresses).
  virtual fi_progress Progress() const { return FI_PROGRESS_MANUAL; }

  // FI_METAROCE_ENGINE_THREADS: "0", the engine in the progress calls (and, while the test
  // makes none, in the domain's watchdog thread), or "1", a thread of its own.
  virtual const char* EngineThreads() const { return "0"; }

  void SetUp() override {
    setenv("FI_METAROCE_ZERO_COPY", ZeroCopy(), 1);  // read by fi_fabric
    setenv("FI_METAROCE_ENGINE_THREADS", EngineThreads(), 1);
    ASSERT_NE(getenv("FI_PROVIDER_PATH"), nullptr)
        << "FI_PROVIDER_PATH must name the directory of libmetaroce-fi.so (meson sets it)";
    fi_info* hints = fi_allocinfo();
    ASSERT_NE(hints, nullptr);
    hints->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_DIRECTED_RECV;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = MrMode();
    hints->domain_attr->data_progress = Progress();
    hints->domain_attr->control_progress = Progress();
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    hints->fabric_attr->prov_name = strdup("metaroce");
    const int r = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    ASSERT_EQ(r, 0) << "fi_getinfo: " << fi_strerror(-r)
                    << " (is libmetaroce-fi.so in FI_PROVIDER_PATH=" << getenv("FI_PROVIDER_PATH")
                    << "?)";
    ASSERT_STREQ(info_->fabric_attr->prov_name, "metaroce");
    ASSERT_EQ(fi_fabric(info_->fabric_attr, &fabric_, nullptr), 0);
    const int d = fi_domain(fabric_, info_, &domain_, nullptr);
    ASSERT_EQ(d, 0) << "fi_domain (the embedded engine over UDP on lo): " << fi_strerror(-d)
                    << " (FI_LOG_LEVEL=warn shows the provider's reason)";
    ASSERT_NO_FATAL_FAILURE(Open(a_));
    ASSERT_NO_FATAL_FAILURE(Open(b_));
    // Both AVs: fi_addr 0 is A, 1 is B.
    for (Side* s : {&a_, &b_}) {
      fi_addr_t addrs[2] = {FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL};
      std::array<uint8_t, 2 * kAddressBytes> both;
      std::memcpy(both.data(), a_.name.data(), kAddressBytes);
      std::memcpy(both.data() + kAddressBytes, b_.name.data(), kAddressBytes);
      ASSERT_EQ(fi_av_insert(s->av, both.data(), 2, addrs, 0, nullptr), 2);
      ASSERT_EQ(addrs[0], 0u);
      ASSERT_EQ(addrs[1], 1u);
    }
    a_.self = b_.peer = 0;
    b_.self = a_.peer = 1;
  }

  // Opens `s` on the domain from `info` (default: the test's).
  void Open(Side& s, fi_info* info = nullptr, fid_domain* domain = nullptr) {
    if (domain == nullptr) domain = domain_;
    ASSERT_EQ(fi_endpoint(domain, info != nullptr ? info : info_, &s.ep, nullptr), 0);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.wait_obj = FI_WAIT_NONE;
    ASSERT_EQ(fi_cq_open(domain, &cq_attr, &s.tx, nullptr), 0);
    ASSERT_EQ(fi_cq_open(domain, &cq_attr, &s.rx, nullptr), 0);
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    ASSERT_EQ(fi_av_open(domain, &av_attr, &s.av, nullptr), 0);
    fi_cntr_attr cntr_attr{};
    cntr_attr.events = FI_CNTR_EVENTS_COMP;
    cntr_attr.wait_obj = FI_WAIT_NONE;
    ASSERT_EQ(fi_cntr_open(domain, &cntr_attr, &s.send_cntr, nullptr), 0);
    ASSERT_EQ(fi_cntr_open(domain, &cntr_attr, &s.recv_cntr, nullptr), 0);
    ASSERT_EQ(fi_ep_bind(s.ep, &s.av->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(s.ep, &s.tx->fid, FI_TRANSMIT), 0);
    ASSERT_EQ(fi_ep_bind(s.ep, &s.rx->fid, FI_RECV), 0);
    ASSERT_EQ(fi_ep_bind(s.ep, &s.send_cntr->fid, FI_SEND), 0);
    ASSERT_EQ(fi_ep_bind(s.ep, &s.recv_cntr->fid, FI_RECV), 0);
    ASSERT_EQ(fi_enable(s.ep), 0);
    size_t len = s.name.size();
    ASSERT_EQ(fi_getname(&s.ep->fid, s.name.data(), &len), 0);
    ASSERT_EQ(len, kAddressBytes);
  }

  void TearDown() override {
    for (fid_mr* mr : mrs_) Close(&mr->fid);
    for (Side* s : {&a_, &b_, &c_}) {
      if (s->ep != nullptr) Close(&s->ep->fid);
      for (fid* f : {s->tx ? &s->tx->fid : nullptr, s->rx ? &s->rx->fid : nullptr,
                     s->av ? &s->av->fid : nullptr, s->send_cntr ? &s->send_cntr->fid : nullptr,
                     s->recv_cntr ? &s->recv_cntr->fid : nullptr}) {
        Close(f);
      }
    }
    if (domain2_ != nullptr) Close(&domain2_->fid);
    if (domain_ != nullptr) Close(&domain_->fid);
    if (fabric_ != nullptr) Close(&fabric_->fid);
    if (info_ != nullptr) fi_freeinfo(info_);
  }

  // A registration of `buf` on the domain, closed with the test.
  fid_mr* Register(void* buf, size_t len, uint64_t access) {
    fid_mr* mr = nullptr;
    const int r = fi_mr_reg(domain_, buf, len, access, 0, 0, 0, &mr, nullptr);
    EXPECT_EQ(r, 0) << "fi_mr_reg: " << fi_strerror(-r);
    if (mr != nullptr) mrs_.push_back(mr);
    return mr;
  }

  // A tagged receive with fi_trecvmsg's flags (FI_PEEK, FI_CLAIM, ...).
  ssize_t TRecvMsg(Side& s, void* buf, size_t len, fi_addr_t src, uint64_t tag, uint64_t ignore,
                   void* context, uint64_t flags) {
    iovec iov{buf, len};
    void* desc = nullptr;
    fi_msg_tagged m{};
    m.msg_iov = &iov;
    m.desc = &desc;
    m.iov_count = buf != nullptr ? 1 : 0;
    m.addr = src;
    m.tag = tag;
    m.ignore = ignore;
    m.context = context;
    return fi_trecvmsg(s.ep, &m, flags);
  }

  // Peeks (fi_trecvmsg with `flags`, FI_PEEK among them) for `tag` at `s` until a message is
  // found (each miss is an FI_ENOMSG entry); the entry that found it.
  Completion PeekUntilFound(Side& s, uint64_t tag, fi_context* ctx, uint64_t flags) {
    const Clock::time_point end = Clock::now() + kDeadline;
    while (Clock::now() < end) {
      EXPECT_EQ(TRecvMsg(s, nullptr, 0, FI_ADDR_UNSPEC, tag, 0, ctx, flags), 0);
      const Completion c = WaitOne(s.rx);
      if (c.e.err != FI_ENOMSG) return c;
    }
    ADD_FAILURE() << "FI_PEEK never found the message";
    return Completion{};
  }

  // Sends `data` from `from` to `to` (tagged) and waits for the send's completion.
  void SendAndComplete(Side& from, fi_addr_t to, const std::vector<uint8_t>& data, uint64_t tag) {
    fi_context ctx{};
    ASSERT_EQ(fi_tsend(from.ep, data.data(), data.size(), nullptr, to, tag, &ctx), 0);
    const Completion c = WaitOne(from.tx);
    EXPECT_EQ(c.e.err, 0);
    EXPECT_EQ(c.e.op_context, &ctx);
  }

  // Waits for a message of `size` bytes from A to B to complete at both ends, without error.
  void ExpectBothEndsComplete(size_t size) {
    const Completion r = WaitOne(b_.rx);
    EXPECT_EQ(r.e.err, 0);
    EXPECT_EQ(r.e.len, size);
    EXPECT_EQ(WaitOne(a_.tx).e.err, 0);
  }

  // A message of `size` bytes from A to B, into a receive posted first; checks the data.
  void ExpectMessageArrivesWhole(size_t size) {
    const std::vector<uint8_t> sent = Pattern(size, 3);
    std::vector<uint8_t> got(size, 0);
    fi_context rctx{}, sctx{};
    ASSERT_EQ(fi_trecv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, 77, 0, &rctx), 0);
    ASSERT_EQ(fi_tsend(a_.ep, sent.data(), sent.size(), nullptr, a_.peer, 77, &sctx), 0);
    const Completion r = WaitOne(b_.rx);
    EXPECT_EQ(r.e.err, 0);
    EXPECT_EQ(r.e.op_context, &rctx);
    EXPECT_EQ(r.e.len, size);
    EXPECT_EQ(r.e.tag, 77u);
    const Completion s = WaitOne(a_.tx);
    EXPECT_EQ(s.e.err, 0);
    EXPECT_EQ(s.e.op_context, &sctx);
    EXPECT_TRUE(got == sent) << "the " << size << " bytes received differ from those sent";
  }

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_domain* domain2_ = nullptr;  // a second domain, for the tests that open one
  Side a_, b_;
  Side c_;  // a third endpoint, for the tests that open one
  std::vector<fid_mr*> mrs_;
};

// ---- Messages -----------------------------------------------------------------------------------

TEST_F(Loopback, UntaggedSendReachesAPostedReceive) {
  const std::vector<uint8_t> sent = Pattern(64, 1);
  std::vector<uint8_t> got(128, 0);
  fi_context rctx{}, sctx{};
  ASSERT_EQ(fi_recv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  ASSERT_EQ(fi_send(a_.ep, sent.data(), sent.size(), nullptr, a_.peer, &sctx), 0);
  const Completion r = WaitOne(b_.rx);
  EXPECT_EQ(r.e.err, 0);
  EXPECT_EQ(r.e.op_context, &rctx);
  EXPECT_EQ(r.e.flags & (FI_RECV | FI_MSG), uint64_t{FI_RECV | FI_MSG});
  EXPECT_EQ(r.e.len, 64u);
  EXPECT_EQ(r.source, b_.peer);
  EXPECT_TRUE(std::equal(sent.begin(), sent.end(), got.begin()));
  const Completion s = WaitOne(a_.tx);
  EXPECT_EQ(s.e.err, 0);
  EXPECT_EQ(s.e.op_context, &sctx);
  EXPECT_EQ(s.e.flags & (FI_SEND | FI_MSG), uint64_t{FI_SEND | FI_MSG});
}

TEST_F(Loopback, UntaggedSendArrivingFirstWaitsForItsReceive) {
  const std::vector<uint8_t> sent = Pattern(100, 2);
  fi_context sctx{};
  ASSERT_EQ(fi_send(a_.ep, sent.data(), sent.size(), nullptr, a_.peer, &sctx), 0);
  EXPECT_EQ(WaitOne(a_.tx).e.err, 0);
  std::vector<uint8_t> got(100, 0);
  fi_context rctx{};
  ASSERT_EQ(fi_recv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  const Completion r = WaitOne(b_.rx);
  EXPECT_EQ(r.e.err, 0);
  EXPECT_EQ(r.e.op_context, &rctx);
  EXPECT_TRUE(got == sent);
}

TEST_F(Loopback, TaggedReceiveMatchesTagUnderIgnoreBits) {
  const std::vector<uint8_t> other = Pattern(32, 5), wanted = Pattern(48, 6);
  std::vector<uint8_t> got(64, 0);
  fi_context rctx{};
  ASSERT_EQ(fi_trecv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, 0x1200, 0xff, &rctx),
            0);
  SendAndComplete(a_, a_.peer, other, 0x1300);   // not matched: 0x13.. differs outside ignore
  SendAndComplete(a_, a_.peer, wanted, 0x12ab);  // matched
  const Completion r = WaitOne(b_.rx);
  EXPECT_EQ(r.e.err, 0);
  EXPECT_EQ(r.e.op_context, &rctx);
  EXPECT_EQ(r.e.tag, 0x12abu);
  EXPECT_EQ(r.e.len, wanted.size());
  EXPECT_TRUE(std::equal(wanted.begin(), wanted.end(), got.begin()));
  // The other one waits for its own receive.
  std::vector<uint8_t> got2(64, 0);
  fi_context rctx2{};
  ASSERT_EQ(fi_trecv(b_.ep, got2.data(), got2.size(), nullptr, FI_ADDR_UNSPEC, 0x1300, 0,
                     &rctx2),
            0);
  const Completion r2 = WaitOne(b_.rx);
  EXPECT_EQ(r2.e.op_context, &rctx2);
  EXPECT_EQ(r2.e.tag, 0x1300u);
  EXPECT_TRUE(std::equal(other.begin(), other.end(), got2.begin()));
}

TEST_F(Loopback, DirectedReceiveTakesOnlyItsSource) {
  const std::vector<uint8_t> from_a = Pattern(40, 10), from_b = Pattern(40, 20);
  std::vector<uint8_t> got_b(40, 0), got_a(40, 0);
  fi_context want_b{}, want_a{};
  // B waits for a message from itself; A's message with the same tag must not take it.
  ASSERT_EQ(fi_trecv(b_.ep, got_b.data(), got_b.size(), nullptr, b_.self, 5, 0, &want_b), 0);
  SendAndComplete(a_, a_.peer, from_a, 5);
  ExpectNothing(b_.rx);
  SendAndComplete(b_, b_.self, from_b, 5);
  Completion r = WaitOne(b_.rx);
  EXPECT_EQ(r.e.op_context, &want_b);
  EXPECT_EQ(r.source, b_.self);
  EXPECT_TRUE(got_b == from_b) << "the receive from B got another source's message";
  // A's message waited for a receive naming A.
  ASSERT_EQ(fi_trecv(b_.ep, got_a.data(), got_a.size(), nullptr, b_.peer, 5, 0, &want_a), 0);
  r = WaitOne(b_.rx);
  EXPECT_EQ(r.e.op_context, &want_a);
  EXPECT_EQ(r.source, b_.peer);
  EXPECT_TRUE(got_a == from_a);
}

TEST_F(Loopback, MessageOfEagerSizeArrivesWhole) { ExpectMessageArrivesWhole(kEagerSize); }

TEST_F(Loopback, RendezvousMessageOfOneMebibyteArrivesWhole) {
  ExpectMessageArrivesWhole(1 << 20);
}

TEST_F(Loopback, RendezvousMessageOfOddSizeArrivesWhole) { ExpectMessageArrivesWhole(300001); }

// A rendezvous message from two buffers (not registered whole: the sender copies what each
// kCts asks for, chunk_size at most) into one buffer the receiver registers: the receiver must
// not ask for the message at once, as it does of a registered source.
TEST_F(Loopback, RendezvousMessageFromTwoBuffersIntoOneArrivesWhole) {
  const size_t size = 700001, split = 250000;
  const std::vector<uint8_t> sent = Pattern(size, 6);
  std::vector<uint8_t> first(sent.begin(), sent.begin() + split);
  std::vector<uint8_t> second(sent.begin() + split, sent.end());
  iovec iov[2] = {{first.data(), first.size()}, {second.data(), second.size()}};
  std::vector<uint8_t> got(size, 0);
  fi_context rctx{}, sctx{};
  ASSERT_EQ(fi_trecv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, 9, 0, &rctx), 0);
  ASSERT_EQ(fi_tsendv(a_.ep, iov, nullptr, 2, a_.peer, 9, &sctx), 0);
  ExpectBothEndsComplete(size);
  EXPECT_TRUE(got == sent);
}

// The other way round: one registered buffer into a receive of two buffers, which the receiver
// cannot register as one sink (its chunks land in its own buffers, then copied).
TEST_F(Loopback, RendezvousMessageFromOneBufferIntoTwoArrivesWhole) {
  const size_t size = 700001, split = 300000;
  const std::vector<uint8_t> sent = Pattern(size, 7);
  std::vector<uint8_t> first(split, 0), second(size - split, 0);
  iovec iov[2] = {{first.data(), first.size()}, {second.data(), second.size()}};
  fi_context rctx{}, sctx{};
  ASSERT_EQ(fi_trecvv(b_.ep, iov, nullptr, 2, FI_ADDR_UNSPEC, 10, 0, &rctx), 0);
  ASSERT_EQ(fi_tsend(a_.ep, sent.data(), sent.size(), nullptr, a_.peer, 10, &sctx), 0);
  ExpectBothEndsComplete(size);
  std::vector<uint8_t> got(first);
  got.insert(got.end(), second.begin(), second.end());
  EXPECT_TRUE(got == sent);
}

TEST_F(Loopback, RendezvousMessageArrivingBeforeItsReceiveArrivesWhole) {
  const size_t size = 200003;
  const std::vector<uint8_t> sent = Pattern(size, 4);
  fi_context sctx{}, rctx{};
  ASSERT_EQ(fi_tsend(a_.ep, sent.data(), sent.size(), nullptr, a_.peer, 8, &sctx), 0);
  ExpectNothing(a_.tx, 50ms);  // the announcement reaches B, and waits
  std::vector<uint8_t> got(size, 0);
  ASSERT_EQ(fi_trecv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, 8, 0, &rctx), 0);
  ExpectBothEndsComplete(size);
  EXPECT_TRUE(got == sent);
}

TEST_F(Loopback, SendDataArrivesAsRemoteCqData) {
  const std::vector<uint8_t> sent = Pattern(24, 7);
  std::vector<uint8_t> got(24, 0);
  fi_context rctx{}, sctx{};
  ASSERT_EQ(fi_trecv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, 3, 0, &rctx), 0);
  ASSERT_EQ(fi_tsenddata(a_.ep, sent.data(), sent.size(), nullptr, 0x0123456789abcdef, a_.peer,
                         3, &sctx),
            0);
  const Completion r = WaitOne(b_.rx);
  EXPECT_EQ(r.e.err, 0);
  EXPECT_NE(r.e.flags & FI_REMOTE_CQ_DATA, 0u);
  EXPECT_EQ(r.e.data, 0x0123456789abcdefu);
  EXPECT_EQ(r.e.tag, 3u);
  EXPECT_EQ(WaitOne(a_.tx).e.err, 0);
  EXPECT_TRUE(got == sent);
}

TEST_F(Loopback, SendDataOfARendezvousMessageArrivesAsRemoteCqData) {
  const std::vector<uint8_t> sent = Pattern(100000, 8);
  std::vector<uint8_t> got(sent.size(), 0);
  fi_context rctx{}, sctx{};
  ASSERT_EQ(fi_trecv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, 3, 0, &rctx), 0);
  ASSERT_EQ(fi_tsenddata(a_.ep, sent.data(), sent.size(), nullptr, 42, a_.peer, 3, &sctx), 0);
  const Completion r = WaitOne(b_.rx);
  EXPECT_EQ(r.e.err, 0);
  EXPECT_NE(r.e.flags & FI_REMOTE_CQ_DATA, 0u);
  EXPECT_EQ(r.e.data, 42u);
  EXPECT_EQ(WaitOne(a_.tx).e.err, 0);
  EXPECT_TRUE(got == sent);
}

// FI_ORDER_SAS: messages of one tag from one sender match receives in the order sent, whether
// the receives were posted before (the first half) or after (the second half) they arrived. A
// few are large enough for rendezvous.
TEST_F(Loopback, ManyMessagesWithOneTagMatchInOrderSent) {
  constexpr size_t kCount = 200;
  constexpr size_t kMax = 3 * kEagerSize;
  auto size_of = [](size_t i) { return i % 50 == 7 ? kMax : 8 + i % 100; };
  std::vector<std::vector<uint8_t>> got(kCount, std::vector<uint8_t>(kMax, 0));
  std::vector<fi_context> rctx(kCount);
  for (size_t i = 0; i < kCount / 2; ++i) {
    ASSERT_EQ(fi_trecv(b_.ep, got[i].data(), kMax, nullptr, FI_ADDR_UNSPEC, 9, 0, &rctx[i]), 0);
  }
  std::vector<std::vector<uint8_t>> sent(kCount);
  std::vector<fi_context> sctx(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    sent[i] = Pattern(size_of(i), static_cast<uint8_t>(i));
    std::memcpy(sent[i].data(), &i, sizeof(i));  // its index first
    ssize_t r;
    const Clock::time_point end = Clock::now() + kDeadline;
    while ((r = fi_tsend(a_.ep, sent[i].data(), sent[i].size(), nullptr, a_.peer, 9,
                         &sctx[i])) == -FI_EAGAIN &&
           Clock::now() < end) {
      Completion c;
      ReadOne(a_.tx, c);
    }
    ASSERT_EQ(r, 0) << "message " << i;
  }
  std::vector<Completion> first = Wait(b_.rx, kCount / 2);
  for (size_t i = kCount / 2; i < kCount; ++i) {
    ASSERT_EQ(fi_trecv(b_.ep, got[i].data(), kMax, nullptr, FI_ADDR_UNSPEC, 9, 0, &rctx[i]), 0);
  }
  std::vector<Completion> second = Wait(b_.rx, kCount / 2, 10s);
  for (const std::vector<Completion>* v : {&first, &second}) {
    for (const Completion& c : *v) EXPECT_EQ(c.e.err, 0) << Describe(c);
  }
  for (size_t i = 0; i < kCount; ++i) {
    EXPECT_TRUE(std::equal(sent[i].begin(), sent[i].end(), got[i].begin()))
        << "receive " << i << " holds message " << *reinterpret_cast<size_t*>(got[i].data());
  }
}

TEST_F(Loopback, EagerMessageLargerThanItsReceiveIsTruncated) {
  const std::vector<uint8_t> sent = Pattern(300, 9);
  std::vector<uint8_t> got(100, 0);
  fi_context rctx{}, sctx{};
  ASSERT_EQ(fi_trecv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, 4, 0, &rctx), 0);
  ASSERT_EQ(fi_tsend(a_.ep, sent.data(), sent.size(), nullptr, a_.peer, 4, &sctx), 0);
  const Completion r = WaitOne(b_.rx);
  EXPECT_EQ(r.e.err, FI_ETRUNC);
  EXPECT_EQ(r.e.op_context, &rctx);
  EXPECT_EQ(r.e.len, 100u);
  EXPECT_EQ(r.e.olen, 200u);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), sent.begin()));
  EXPECT_EQ(WaitOne(a_.tx).e.err, 0);
}

TEST_F(Loopback, RendezvousMessageLargerThanItsReceiveIsTruncated) {
  const std::vector<uint8_t> sent = Pattern(50000, 10);
  std::vector<uint8_t> got(20000, 0);
  fi_context rctx{}, sctx{};
  ASSERT_EQ(fi_trecv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, 4, 0, &rctx), 0);
  ASSERT_EQ(fi_tsend(a_.ep, sent.data(), sent.size(), nullptr, a_.peer, 4, &sctx), 0);
  const Completion r = WaitOne(b_.rx);
  EXPECT_EQ(r.e.err, FI_ETRUNC);
  EXPECT_EQ(r.e.len, 20000u);
  EXPECT_EQ(r.e.olen, 30000u);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), sent.begin()));
  EXPECT_EQ(WaitOne(a_.tx).e.err, 0);
}

// ---- FI_PEEK, FI_CLAIM, fi_cancel -----------------------------------------------------------------

TEST_F(Loopback, PeekWithNothingThereGivesNoMessage) {
  fi_context pctx{};
  ASSERT_EQ(TRecvMsg(b_, nullptr, 0, FI_ADDR_UNSPEC, 11, 0, &pctx, FI_PEEK), 0);
  const Completion c = WaitOne(b_.rx);
  EXPECT_EQ(c.e.err, FI_ENOMSG);
  EXPECT_EQ(c.e.op_context, &pctx);
}

TEST_F(Loopback, PeekFindsAMessageWithoutReceivingIt) {
  const std::vector<uint8_t> sent = Pattern(50, 11);
  SendAndComplete(a_, a_.peer, sent, 12);
  fi_context pctx{};
  const Completion p = PeekUntilFound(b_, 12, &pctx, FI_PEEK);
  EXPECT_EQ(p.e.err, 0);
  EXPECT_EQ(p.e.op_context, &pctx);
  EXPECT_EQ(p.e.len, 50u);
  EXPECT_EQ(p.e.tag, 12u);
  // Still there for a receive.
  std::vector<uint8_t> got(50, 0);
  fi_context rctx{};
  ASSERT_EQ(fi_trecv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, 12, 0, &rctx), 0);
  const Completion r = WaitOne(b_.rx);
  EXPECT_EQ(r.e.err, 0);
  EXPECT_EQ(r.e.op_context, &rctx);
  EXPECT_TRUE(got == sent);
}

TEST_F(Loopback, PeekClaimKeepsTheMessageForTheClaimReceive) {
  const std::vector<uint8_t> sent = Pattern(60, 12);
  SendAndComplete(a_, a_.peer, sent, 13);
  fi_context cctx{};
  const Completion p = PeekUntilFound(b_, 13, &cctx, FI_PEEK | FI_CLAIM);
  EXPECT_EQ(p.e.err, 0);
  EXPECT_EQ(p.e.len, 60u);
  EXPECT_EQ(p.e.tag, 13u);
  // Claimed: another peek no longer sees it.
  fi_context pctx{};
  ASSERT_EQ(TRecvMsg(b_, nullptr, 0, FI_ADDR_UNSPEC, 13, 0, &pctx, FI_PEEK), 0);
  EXPECT_EQ(WaitOne(b_.rx).e.err, FI_ENOMSG);
  std::vector<uint8_t> got(60, 0);
  ASSERT_EQ(TRecvMsg(b_, got.data(), got.size(), FI_ADDR_UNSPEC, 13, 0, &cctx, FI_CLAIM), 0);
  const Completion r = WaitOne(b_.rx);
  EXPECT_EQ(r.e.err, 0);
  EXPECT_EQ(r.e.op_context, &cctx);
  EXPECT_EQ(r.e.len, 60u);
  EXPECT_TRUE(got == sent);
}

TEST_F(Loopback, PeekDiscardDiscardsTheMessageItFinds) {
  SendAndComplete(a_, a_.peer, Pattern(30, 18), 22);
  fi_context pctx{};
  const Completion p = PeekUntilFound(b_, 22, &pctx, FI_PEEK | FI_DISCARD);
  EXPECT_EQ(p.e.err, 0);
  EXPECT_EQ(p.e.len, 30u);
  // Gone: another peek finds nothing, and a receive takes the next message.
  fi_context again{};
  ASSERT_EQ(TRecvMsg(b_, nullptr, 0, FI_ADDR_UNSPEC, 22, 0, &again, FI_PEEK), 0);
  EXPECT_EQ(WaitOne(b_.rx).e.err, FI_ENOMSG);
  const std::vector<uint8_t> second = Pattern(31, 19);
  std::vector<uint8_t> got(64, 0);
  fi_context rctx{};
  ASSERT_EQ(fi_trecv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, 22, 0, &rctx), 0);
  SendAndComplete(a_, a_.peer, second, 22);
  const Completion r = WaitOne(b_.rx);
  EXPECT_EQ(r.e.op_context, &rctx);
  EXPECT_EQ(r.e.len, 31u);
  EXPECT_TRUE(std::equal(second.begin(), second.end(), got.begin()));
}

TEST_F(Loopback, PeekDiscardOfARendezvousMessageCompletesItsSend) {
  const std::vector<uint8_t> sent = Pattern(100000, 20);
  fi_context sctx{}, pctx{};
  ASSERT_EQ(fi_tsend(a_.ep, sent.data(), sent.size(), nullptr, a_.peer, 23, &sctx), 0);
  const Completion p = PeekUntilFound(b_, 23, &pctx, FI_PEEK | FI_DISCARD);
  EXPECT_EQ(p.e.err, 0);
  EXPECT_EQ(p.e.len, sent.size());
  const Completion s = WaitOne(a_.tx);
  EXPECT_EQ(s.e.err, 0);
  EXPECT_EQ(s.e.op_context, &sctx);
  ExpectNothing(b_.rx);  // the discard itself reports nothing
}

TEST_F(Loopback, ClaimDiscardOfARendezvousMessageCompletesItsSend) {
  const std::vector<uint8_t> sent = Pattern(100000, 21);
  fi_context sctx{}, cctx{};
  ASSERT_EQ(fi_tsend(a_.ep, sent.data(), sent.size(), nullptr, a_.peer, 24, &sctx), 0);
  const Completion p = PeekUntilFound(b_, 24, &cctx, FI_PEEK | FI_CLAIM);
  EXPECT_EQ(p.e.err, 0);
  ASSERT_EQ(TRecvMsg(b_, nullptr, 0, FI_ADDR_UNSPEC, 24, 0, &cctx, FI_CLAIM | FI_DISCARD), 0);
  EXPECT_EQ(WaitOne(b_.rx).e.op_context, &cctx);
  const Completion s = WaitOne(a_.tx);
  EXPECT_EQ(s.e.err, 0);
  EXPECT_EQ(s.e.op_context, &sctx);
}

TEST_F(Loopback, CancelOfAPostedReceiveGivesCanceled) {
  std::vector<uint8_t> got(10, 0);
  fi_context rctx{};
  ASSERT_EQ(fi_trecv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, 14, 0, &rctx), 0);
  EXPECT_EQ(fi_cancel(&b_.ep->fid, &rctx), 0);
  const Completion c = WaitOne(b_.rx);
  EXPECT_EQ(c.e.err, FI_ECANCELED);
  EXPECT_EQ(c.e.op_context, &rctx);
  // Gone: a message of its tag is not received by it.
  SendAndComplete(a_, a_.peer, Pattern(10, 1), 14);
  ExpectNothing(b_.rx);
}

// ---- RMA writes ---------------------------------------------------------------------------------

class LoopbackRma : public Loopback {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(Loopback::SetUp());
    target_.assign(kTarget, 0xee);
    mr_ = Register(target_.data(), target_.size(), FI_REMOTE_WRITE);
    ASSERT_NE(mr_, nullptr);
    key_ = fi_mr_key(mr_);
    base_ = reinterpret_cast<uint64_t>(target_.data());  // FI_MR_VIRT_ADDR
  }

  // Writes `data` from A to B's region at `offset` (with remote CQ data when `with_data`); A's
  // completion.
  Completion WriteToB(const std::vector<uint8_t>& data, uint64_t offset, bool with_data,
                      uint64_t key) {
    fi_context wctx{};
    const ssize_t r =
        with_data ? fi_writedata(a_.ep, data.data(), data.size(), nullptr, 0x5555, a_.peer,
                                 base_ + offset, key, &wctx)
                  : fi_write(a_.ep, data.data(), data.size(), nullptr, a_.peer, base_ + offset,
                             key, &wctx);
    EXPECT_EQ(r, 0) << "fi_write: " << fi_strerror(static_cast<int>(-r));
    const Completion c = WaitOne(a_.tx);
    EXPECT_EQ(c.e.op_context, &wctx);
    EXPECT_NE(c.e.flags & FI_WRITE, 0u) << Describe(c);
    return c;
  }

  void ExpectWritten(const std::vector<uint8_t>& data, uint64_t offset) {
    EXPECT_TRUE(std::equal(data.begin(), data.end(), target_.begin() + offset))
        << "the region does not hold the bytes written";
    EXPECT_EQ(target_[offset - 1], 0xee) << "a byte before the write changed";
    EXPECT_EQ(target_[offset + data.size()], 0xee) << "a byte after the write changed";
  }

  // Writes 1 MiB from A into B's region by rendezvous (its request, the target's requests for
  // chunks, the chunks) and watches memory without calling into libfabric: only a thread of the
  // domain's can move it. Then A's completion.
  void ExpectWriteLandsWithoutProgressCalls() {
    const std::vector<uint8_t> data = Pattern(1 << 20, 31);
    fi_context wctx{};
    ASSERT_EQ(fi_write(a_.ep, data.data(), data.size(), nullptr, a_.peer, base_ + 64, key_,
                       &wctx),
              0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!std::equal(data.begin(), data.end(), target_.begin() + 64) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ExpectWritten(data, 64);
    EXPECT_EQ(WaitOne(a_.tx).e.err, 0);
  }

  static constexpr size_t kTarget = (1 << 20) + 4096;
  std::vector<uint8_t> target_;
  fid_mr* mr_ = nullptr;
  uint64_t key_ = 0;
  uint64_t base_ = 0;
};

TEST_F(LoopbackRma, SmallWriteLandsInTheRegion) {
  const std::vector<uint8_t> data = Pattern(1000, 13);
  EXPECT_EQ(WriteToB(data, 100, false, key_).e.err, 0);
  ExpectWritten(data, 100);
  ExpectNothing(b_.rx);  // no remote CQ data: no entry at the target
}

TEST_F(LoopbackRma, SmallWriteDataGivesTheTargetAnEntry) {
  const std::vector<uint8_t> data = Pattern(512, 14);
  EXPECT_EQ(WriteToB(data, 8, true, key_).e.err, 0);
  const Completion t = WaitOne(b_.rx);
  EXPECT_EQ(t.e.err, 0);
  EXPECT_EQ(t.e.flags & (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA),
            uint64_t{FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA});
  EXPECT_EQ(t.e.data, 0x5555u);
  ExpectWritten(data, 8);
}

TEST_F(LoopbackRma, WriteMsgWithTheInjectFlagStillCompletes) {
  std::vector<uint8_t> data = Pattern(100, 31);
  const std::vector<uint8_t> sent = data;
  iovec iov{data.data(), data.size()};
  void* desc = nullptr;
  fi_rma_iov rma{base_ + 8, sent.size(), key_};
  fi_msg_rma m{};
  m.msg_iov = &iov;
  m.desc = &desc;
  m.iov_count = 1;
  m.addr = a_.peer;
  m.rma_iov = &rma;
  m.rma_iov_count = 1;
  fi_context wctx{};
  m.context = &wctx;
  ASSERT_EQ(fi_writemsg(a_.ep, &m, FI_INJECT), 0);
  std::fill(data.begin(), data.end(), 0);
  const Completion c = WaitOne(a_.tx);
  EXPECT_EQ(c.e.err, 0);
  EXPECT_EQ(c.e.op_context, &wctx);
  ExpectWritten(sent, 8);
}

TEST_F(LoopbackRma, RendezvousWriteOfOneMebibyteLandsInTheRegion) {
  const std::vector<uint8_t> data = Pattern(1 << 20, 15);
  EXPECT_EQ(WriteToB(data, 64, false, key_).e.err, 0);
  ExpectWritten(data, 64);
}

TEST_F(LoopbackRma, RendezvousWriteDataGivesTheTargetAnEntry) {
  const std::vector<uint8_t> data = Pattern(300001, 16);
  EXPECT_EQ(WriteToB(data, 3, true, key_).e.err, 0);
  const Completion t = WaitOne(b_.rx);
  EXPECT_EQ(t.e.err, 0);
  EXPECT_NE(t.e.flags & FI_REMOTE_CQ_DATA, 0u);
  EXPECT_EQ(t.e.data, 0x5555u);
  ExpectWritten(data, 3);
}

TEST_F(LoopbackRma, WriteWithAWrongKeyIsRefusedWithRemoteAccessError) {
  const Completion c = WriteToB(Pattern(100, 17), 0, false, key_ + 1000);
  EXPECT_EQ(c.e.err, FI_EACCES);
  EXPECT_EQ(c.e.prov_errno, kRemAccessErr);
  EXPECT_EQ(target_[0], 0xee);
}

TEST_F(LoopbackRma, WriteBeyondTheRegionIsRefusedWithRemoteAccessError) {
  const Completion c = WriteToB(Pattern(100, 18), kTarget - 50, false, key_);
  EXPECT_EQ(c.e.err, FI_EACCES);
  EXPECT_EQ(c.e.prov_errno, kRemAccessErr);
  EXPECT_EQ(target_[kTarget - 50], 0xee);
}

TEST_F(LoopbackRma, RendezvousWriteBeyondTheRegionIsRefusedWithRemoteAccessError) {
  const Completion c = WriteToB(Pattern(100000, 19), kTarget - 50000, false, key_);
  EXPECT_EQ(c.e.err, FI_EACCES);
  EXPECT_EQ(c.e.prov_errno, kRemAccessErr);
}

TEST_F(LoopbackRma, WriteIntoARegionWithoutRemoteWriteAccessIsRefused) {
  std::vector<uint8_t> other(4096, 0xee);
  fid_mr* mr = Register(other.data(), other.size(), FI_SEND | FI_RECV);
  ASSERT_NE(mr, nullptr);
  const std::vector<uint8_t> data = Pattern(10, 20);
  fi_context wctx{};
  ASSERT_EQ(fi_write(a_.ep, data.data(), data.size(), nullptr, a_.peer,
                     reinterpret_cast<uint64_t>(other.data()), fi_mr_key(mr), &wctx),
            0);
  const Completion c = WaitOne(a_.tx);
  EXPECT_EQ(c.e.err, FI_EACCES);
  EXPECT_EQ(c.e.prov_errno, kRemAccessErr);
  EXPECT_EQ(other[0], 0xee);
}

// ---- Rendezvous through the provider's chunk buffers (FI_METAROCE_ZERO_COPY=0) ---------------

class LoopbackCopied : public LoopbackRma {
 protected:
  const char* ZeroCopy() const override { return "0"; }
};

TEST_F(LoopbackCopied, RendezvousMessageOfOneMebibyteArrivesWhole) {
  ExpectMessageArrivesWhole(1 << 20);
}

TEST_F(LoopbackCopied, RendezvousMessageOfOddSizeArrivesWhole) {
  ExpectMessageArrivesWhole(300001);
}

TEST_F(LoopbackCopied, RendezvousWriteDataLandsInTheRegion) {
  const std::vector<uint8_t> data = Pattern(300001, 29);
  EXPECT_EQ(WriteToB(data, 5, true, key_).e.err, 0);
  const Completion t = WaitOne(b_.rx);
  EXPECT_EQ(t.e.err, 0);
  EXPECT_EQ(t.e.data, 0x5555u);
  ExpectWritten(data, 5);
}

// ---- FI_PROGRESS_AUTO ---------------------------------------------------------------------------

TEST_F(LoopbackRma, InlineEngineMovesAWriteWhileTheApplicationIsAway) {
  // Manual progress, the engine inline: the watchdog progresses the domain after 500 us without
  // a call (an application blocked on a socket still answers its peers).
  ExpectWriteLandsWithoutProgressCalls();
}

class LoopbackAuto : public LoopbackRma {
 protected:
  fi_progress Progress() const override { return FI_PROGRESS_AUTO; }
  // An engine thread of its own: the watchdog (inline engines only) is then not there, and only
  // FI_PROGRESS_AUTO's thread runs the provider's protocol.
  const char* EngineThreads() const override { return "1"; }
};

// An engine thread of its own under manual progress: nothing but the test's calls progresses
// the provider (no watchdog: that is the inline engine's).
class LoopbackEngineThread : public Loopback {
 protected:
  const char* EngineThreads() const override { return "1"; }
};

TEST_F(LoopbackEngineThread, PeeksAloneDriveProgress) {
  // fabtests' fi_rdm_tagged_peek: the receiver peeks until the message is there, reading each
  // miss's FI_ENOMSG entry, and makes no other call. A peek that did not progress never found
  // it (and the sender met RNR NAKs until RETRY_EXC_ERR).
  const std::vector<uint8_t> sent = Pattern(40, 17);
  fi_context sctx{}, pctx{};
  ASSERT_EQ(fi_tsend(a_.ep, sent.data(), sent.size(), nullptr, a_.peer, 21, &sctx), 0);
  const Completion p = PeekUntilFound(b_, 21, &pctx, FI_PEEK);
  EXPECT_EQ(p.e.err, 0);
  EXPECT_EQ(p.e.len, 40u);
  std::vector<uint8_t> got(40, 0);
  fi_context rctx{};
  ASSERT_EQ(fi_trecv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, 21, 0, &rctx), 0);
  EXPECT_EQ(WaitOne(b_.rx).e.op_context, &rctx);
  EXPECT_EQ(WaitOne(a_.tx).e.op_context, &sctx);
  EXPECT_TRUE(got == sent);
}

TEST_F(LoopbackEngineThread, SreadReturnsAMessageAsItArrives) {
  const std::vector<uint8_t> sent = Pattern(48, 32);
  std::vector<uint8_t> got(48, 0);
  fi_context rctx{}, sctx{};
  ASSERT_EQ(fi_recv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  ASSERT_EQ(fi_send(a_.ep, sent.data(), sent.size(), nullptr, a_.peer, &sctx), 0);
  fi_cq_tagged_entry e{};
  // fi_cq_sread progresses (manual progress) between its sleeps.
  ASSERT_EQ(fi_cq_sread(b_.rx, &e, 1, nullptr, 5000), 1);
  EXPECT_EQ(e.op_context, &rctx);
  ASSERT_EQ(fi_cq_sread(a_.tx, &e, 1, nullptr, 5000), 1);
  EXPECT_EQ(e.op_context, &sctx);
  EXPECT_TRUE(got == sent);
}

TEST_F(LoopbackEngineThread, SignalWakesABlockedSread) {
  // fabtests' fi_cq_test cq_signal; fi_cq_signal was a no-op, and the read slept out its
  // timeout. The read's timeout (20 s) is far beyond the test's deadline for it to return.
  std::promise<ssize_t> done;
  std::future<ssize_t> result = done.get_future();
  std::thread reader([&] {
    fi_cq_tagged_entry e{};
    done.set_value(fi_cq_sread(b_.rx, &e, 1, nullptr, 20000));
  });
  // A signal before the reader blocks is kept for it, one after wakes it: either way it returns.
  ASSERT_EQ(fi_cq_signal(b_.rx), 0);
  const bool returned = result.wait_for(kDeadline) == std::future_status::ready;
  reader.join();
  EXPECT_TRUE(returned) << "fi_cq_sread was not woken by fi_cq_signal";
  EXPECT_EQ(result.get(), -FI_EAGAIN);
}

TEST_F(LoopbackEngineThread, SignalBeforeSreadMakesItReturnAtOnce) {
  ASSERT_EQ(fi_cq_signal(b_.rx), 0);
  std::promise<ssize_t> done;
  std::future<ssize_t> result = done.get_future();
  std::thread reader([&] {
    fi_cq_tagged_entry e{};
    done.set_value(fi_cq_sread(b_.rx, &e, 1, nullptr, 20000));
  });
  const bool returned = result.wait_for(kDeadline) == std::future_status::ready;
  reader.join();
  EXPECT_TRUE(returned) << "a signal before fi_cq_sread was lost";
  EXPECT_EQ(result.get(), -FI_EAGAIN);
  // Taken: the next read waits for its timeout again (a short one here).
  fi_cq_tagged_entry e{};
  EXPECT_EQ(fi_cq_sread(b_.rx, &e, 1, nullptr, 10), -FI_EAGAIN);
}

TEST_F(LoopbackAuto, DomainTakesAutoProgress) {
  EXPECT_EQ(info_->domain_attr->data_progress, FI_PROGRESS_AUTO);
}

TEST_F(LoopbackAuto, RendezvousWriteLandsWithoutAnyProgressCall) {
  ExpectWriteLandsWithoutProgressCalls();
}

// ---- FI_MR_LOCAL --------------------------------------------------------------------------------

class LoopbackMrLocal : public Loopback {
 protected:
  int MrMode() const override { return FI_MR_LOCAL | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR; }
};

TEST_F(LoopbackMrLocal, DomainTakesFiMrLocal) {
  EXPECT_NE(info_->domain_attr->mr_mode & FI_MR_LOCAL, 0);
}

TEST_F(LoopbackMrLocal, SendFromAnUnregisteredBufferIsRefused) {
  const std::vector<uint8_t> data = Pattern(64, 21);
  fi_context sctx{};
  EXPECT_EQ(fi_send(a_.ep, data.data(), data.size(), nullptr, a_.peer, &sctx), -FI_EACCES);
}

TEST_F(LoopbackMrLocal, SendFromARegisteredBufferWithItsDescriptorGoes) {
  std::vector<uint8_t> data = Pattern(64, 22), got(64, 0);
  fid_mr* smr = Register(data.data(), data.size(), FI_SEND);
  fid_mr* rmr = Register(got.data(), got.size(), FI_RECV);
  ASSERT_NE(smr, nullptr);
  ASSERT_NE(rmr, nullptr);
  fi_context sctx{}, rctx{};
  ASSERT_EQ(fi_recv(b_.ep, got.data(), got.size(), fi_mr_desc(rmr), FI_ADDR_UNSPEC, &rctx), 0);
  ASSERT_EQ(fi_send(a_.ep, data.data(), data.size(), fi_mr_desc(smr), a_.peer, &sctx), 0);
  EXPECT_EQ(WaitOne(b_.rx).e.err, 0);
  EXPECT_EQ(WaitOne(a_.tx).e.err, 0);
  EXPECT_TRUE(got == data);
}

// ---- Addresses ----------------------------------------------------------------------------------

TEST_F(Loopback, MalformedAddressIsNotInserted) {
  std::array<uint8_t, kAddressBytes> bad = a_.name;
  bad[0] = 'X';  // magic
  fi_addr_t addr = 0;
  EXPECT_EQ(fi_av_insert(a_.av, bad.data(), 1, &addr, 0, nullptr), 0);
  EXPECT_EQ(addr, FI_ADDR_NOTAVAIL);
}

TEST_F(Loopback, NoAddressAtAllIsRefusedNotRead) {
  // What fabtests' negative test (fi_rdm g00n13s) does: fi_av_insert of the dest_addr of an
  // fi_info that has none. It crashed in EndpointAddress::Decode.
  fi_addr_t addr = 0;
  EXPECT_EQ(fi_av_insert(a_.av, nullptr, 1, &addr, 0, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_av_insert(a_.av, nullptr, 0, &addr, 0, nullptr), 0);
  char text[64];
  size_t len = sizeof(text);
  EXPECT_STREQ(fi_av_straddr(a_.av, nullptr, text, &len), "metaroce://(invalid)");
  EXPECT_EQ(fi_av_remove(a_.av, nullptr, 1, 0), -FI_EINVAL);
  // The AV still works.
  fi_addr_t again = FI_ADDR_NOTAVAIL;
  EXPECT_EQ(fi_av_insert(a_.av, b_.name.data(), 1, &again, 0, nullptr), 1);
  EXPECT_NE(again, FI_ADDR_NOTAVAIL);
}

// A TCP port nobody listens on (bound, then closed).
uint16_t UnusedTcpPort();

// fi_getinfo's hints as the fixture asks them.
fi_info* ProviderHints() {
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_MSG | FI_TAGGED;
  hints->ep_attr->type = FI_EP_RDM;
  hints->fabric_attr->prov_name = strdup("metaroce");
  return hints;
}

TEST_F(Loopback, PeerNamedByNodeAndServiceIsReached) {
  // fabtests' in-band addressing (fi_rdm, fi_rdm_pingpong without -E): the server opens its
  // endpoint from fi_getinfo(NULL, service, FI_SOURCE); the client from fi_getinfo(node,
  // service, 0), inserts the info's dest_addr and sends; the server learns the client's
  // address from the message. fi_getinfo ignored node and service, so the client had no
  // dest_addr (fi_av_insert of nothing: the crash) and the server listened on a random port.
  const std::string service = std::to_string(UnusedTcpPort());
  fi_info* hints = ProviderHints();
  fi_info* server_info = nullptr;
  fi_info* client_info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, service.c_str(), FI_SOURCE, hints,
                       &server_info), 0);
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", service.c_str(), 0, hints, &client_info),
            0);
  fi_freeinfo(hints);
  ASSERT_NE(server_info->src_addr, nullptr) << "FI_SOURCE with a service gave no src_addr";
  EXPECT_EQ(server_info->src_addrlen, kAddressBytes);
  ASSERT_NE(client_info->dest_addr, nullptr) << "a node and service gave no dest_addr";
  ASSERT_EQ(client_info->dest_addrlen, kAddressBytes);
  EXPECT_NE(client_info->src_addr, nullptr);
  ASSERT_NO_FATAL_FAILURE(Open(c_, server_info));

  // A (the client) names C (the server) by the dest_addr alone.
  fi_addr_t server = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(a_.av, client_info->dest_addr, 1, &server, 0, nullptr), 1);
  const std::vector<uint8_t> hello(a_.name.begin(), a_.name.end());  // A's name, in band
  std::vector<uint8_t> got(kAddressBytes, 0);
  fi_context rctx{}, sctx{};
  ASSERT_EQ(fi_recv(c_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  ASSERT_EQ(fi_send(a_.ep, hello.data(), hello.size(), nullptr, server, &sctx), 0);
  const Completion s = WaitOne(a_.tx);
  EXPECT_EQ(s.e.err, 0) << "the send to the server named by node and service failed";
  const Completion r = WaitOne(c_.rx);
  EXPECT_EQ(r.e.op_context, &rctx);
  ASSERT_TRUE(got == hello);
  // The server answers at the address it was told.
  fi_addr_t client = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(c_.av, got.data(), 1, &client, 0, nullptr), 1);
  const std::vector<uint8_t> answer = Pattern(20, 33);
  std::vector<uint8_t> back(20, 0);
  fi_context r2{}, s2{};
  ASSERT_EQ(fi_recv(a_.ep, back.data(), back.size(), nullptr, FI_ADDR_UNSPEC, &r2), 0);
  ASSERT_EQ(fi_send(c_.ep, answer.data(), answer.size(), nullptr, client, &s2), 0);
  EXPECT_EQ(WaitOne(c_.tx).e.err, 0);
  const Completion a = WaitOne(a_.rx);
  EXPECT_EQ(a.e.op_context, &r2);
  EXPECT_EQ(a.source, server) << "the answer's source is the server's AV entry";
  EXPECT_TRUE(back == answer);
  fi_freeinfo(server_info);
  fi_freeinfo(client_info);
}

TEST_F(Loopback, SecondDomainOfTheProcessSharesTheEngine) {
  // fabtests' fi_dom_test -n 2: the second fi_domain got -FI_ENODEV (the first owned the port:
  // "bind UDP ... port 4792: Address already in use"). Both run on the process's one engine.
  const int r = fi_domain(fabric_, info_, &domain2_, nullptr);
  ASSERT_EQ(r, 0) << "second fi_domain: " << fi_strerror(-r);
  ASSERT_NO_FATAL_FAILURE(Open(c_, nullptr, domain2_));
  // A (domain 1) and C (domain 2) talk both ways.
  fi_addr_t to_c = FI_ADDR_NOTAVAIL, to_a = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(a_.av, c_.name.data(), 1, &to_c, 0, nullptr), 1);
  ASSERT_EQ(fi_av_insert(c_.av, a_.name.data(), 1, &to_a, 0, nullptr), 1);
  for (auto [from, to, dest] : {std::tuple{&a_, &c_, to_c}, std::tuple{&c_, &a_, to_a}}) {
    const std::vector<uint8_t> sent = Pattern(100000, 34);  // rendezvous: both directions' Writes
    std::vector<uint8_t> got(sent.size(), 0);
    fi_context rctx{}, sctx{};
    ASSERT_EQ(fi_recv(to->ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    ASSERT_EQ(fi_send(from->ep, sent.data(), sent.size(), nullptr, dest, &sctx), 0);
    // Each domain's CQs progress their own domain only: read both until both complete.
    Completion r, s;
    bool have_r = false, have_s = false;
    const Clock::time_point end = Clock::now() + kDeadline;
    while (!(have_r && have_s) && Clock::now() < end) {
      if (!have_r) have_r = ReadOne(to->rx, r);
      if (!have_s) have_s = ReadOne(from->tx, s);
    }
    ASSERT_TRUE(have_r && have_s) << "the message between the domains did not complete";
    EXPECT_EQ(r.e.err, 0);
    EXPECT_EQ(s.e.err, 0);
    EXPECT_TRUE(got == sent);
  }
  // Closing the second domain leaves the first one's engine running.
  Close(&c_.ep->fid);
  for (fid* f : {&c_.tx->fid, &c_.rx->fid, &c_.av->fid, &c_.send_cntr->fid, &c_.recv_cntr->fid}) {
    Close(f);
  }
  c_ = Side{};
  Close(&domain2_->fid);
  domain2_ = nullptr;
  SendAndComplete(a_, a_.peer, Pattern(16, 35), 2);
}

TEST_F(Loopback, PeerThatStartsListeningAfterTheSendIsReached) {
  // fabtests starts its client a second after its server; a server whose engine took longer to
  // open refused the client's set-up, and the send failed at once with FI_EHOSTUNREACH
  // (fi_bw -U, fi_msg_inject -N in the fabtests run). A refused set-up is tried again until the
  // set-up timeout.
  const std::string service = std::to_string(UnusedTcpPort());
  fi_info* hints = ProviderHints();
  fi_info* server_info = nullptr;
  fi_info* client_info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, service.c_str(), FI_SOURCE, hints,
                       &server_info), 0);
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", service.c_str(), 0, hints, &client_info),
            0);
  fi_freeinfo(hints);
  fi_addr_t server = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(a_.av, client_info->dest_addr, 1, &server, 0, nullptr), 1);
  const std::vector<uint8_t> sent = Pattern(24, 36);
  fi_context sctx{};
  ASSERT_EQ(fi_send(a_.ep, sent.data(), sent.size(), nullptr, server, &sctx), 0);
  ExpectNothing(a_.tx);  // refused, and not given up
  ASSERT_NO_FATAL_FAILURE(Open(c_, server_info));
  std::vector<uint8_t> got(24, 0);
  fi_context rctx{};
  ASSERT_EQ(fi_recv(c_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  const Completion s = WaitOne(a_.tx);
  EXPECT_EQ(s.e.err, 0);
  EXPECT_EQ(s.e.op_context, &sctx);
  EXPECT_EQ(WaitOne(c_.rx).e.op_context, &rctx);
  EXPECT_TRUE(got == sent);
  fi_freeinfo(server_info);
  fi_freeinfo(client_info);
}

TEST_F(Loopback, NodeThatDoesNotResolveFindsNothing) {
  // fabtests' negative test, fi_rdm g00n13s.
  fi_info* hints = ProviderHints();
  fi_info* info = nullptr;
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), "g00n13s", "9228", FI_NUMERICHOST, hints, &info),
            -FI_ENODATA);
  fi_freeinfo(hints);
}

uint16_t UnusedTcpPort() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sin);
  if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&sin), &len) != 0) {
    ADD_FAILURE() << "cannot find an unused TCP port";
  }
  close(s);
  return ntohs(sin.sin_port);
}

TEST_F(Loopback, SendToAnEndpointThatDoesNotExistCompletesInError) {
  std::array<uint8_t, kAddressBytes> nobody = b_.name;
  const uint16_t port = UnusedTcpPort();
  nobody[6] = static_cast<uint8_t>(port >> 8);  // the set-up listener's port, big-endian
  nobody[7] = static_cast<uint8_t>(port);
  fi_addr_t addr = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(a_.av, nobody.data(), 1, &addr, 0, nullptr), 1);
  ASSERT_NE(addr, FI_ADDR_NOTAVAIL);
  const std::vector<uint8_t> data = Pattern(16, 23);
  fi_context sctx{};
  ASSERT_EQ(fi_send(a_.ep, data.data(), data.size(), nullptr, addr, &sctx), 0);
  const std::vector<Completion> c = Wait(a_.tx, 1, 10s);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NE(c[0].e.err, 0) << "a send to nobody succeeded";
  EXPECT_EQ(c[0].e.op_context, &sctx);
  // The endpoint still works with its real peer.
  SendAndComplete(a_, a_.peer, data, 1);
}

// ---- Counters, inject, self ---------------------------------------------------------------------

// Reads `cntr` (which progresses the domain) until it reaches `value` or the deadline passes.
uint64_t WaitCounter(fid_cntr* cntr, uint64_t value) {
  const Clock::time_point end = Clock::now() + kDeadline;
  uint64_t v = fi_cntr_read(cntr);
  while (v < value && Clock::now() < end) v = fi_cntr_read(cntr);
  return v;
}

TEST_F(Loopback, CountersCountSendsAndReceives) {
  std::vector<uint8_t> got(3 * 32, 0);
  std::vector<fi_context> rctx(3), sctx(3);
  const std::vector<uint8_t> data = Pattern(32, 24);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(fi_recv(b_.ep, got.data() + 32 * i, 32, nullptr, FI_ADDR_UNSPEC, &rctx[i]), 0);
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(fi_send(a_.ep, data.data(), data.size(), nullptr, a_.peer, &sctx[i]), 0);
  }
  EXPECT_EQ(WaitCounter(b_.recv_cntr, 3), 3u);
  EXPECT_EQ(WaitCounter(a_.send_cntr, 3), 3u);
  EXPECT_EQ(fi_cntr_readerr(a_.send_cntr), 0u);
  EXPECT_EQ(fi_cntr_readerr(b_.recv_cntr), 0u);
  EXPECT_EQ(fi_cntr_read(a_.recv_cntr), 0u);
  EXPECT_EQ(fi_cntr_read(b_.send_cntr), 0u);
  Wait(b_.rx, 3);
  Wait(a_.tx, 3);
}

TEST_F(Loopback, InjectDeliversWithoutASendCompletion) {
  std::vector<uint8_t> data = Pattern(kInjectSize, 25);
  const std::vector<uint8_t> sent = data;
  std::vector<uint8_t> got(kInjectSize, 0);
  fi_context rctx{};
  ASSERT_EQ(fi_trecv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, 15, 0, &rctx), 0);
  ASSERT_EQ(fi_tinject(a_.ep, data.data(), data.size(), a_.peer, 15), 0);
  std::fill(data.begin(), data.end(), 0);  // the buffer is the application's again at once
  const Completion r = WaitOne(b_.rx);
  EXPECT_EQ(r.e.err, 0);
  EXPECT_EQ(r.e.op_context, &rctx);
  EXPECT_TRUE(got == sent);
  EXPECT_EQ(WaitCounter(a_.send_cntr, 1), 1u);
  ExpectNothing(a_.tx);
}

TEST_F(Loopback, SendMsgWithTheInjectFlagStillCompletes) {
  // fi_msg(3): FI_INJECT as an operation flag frees the buffer on return; the completion is
  // still generated (fabtests' fi_msg_inject -A inject hung for it).
  std::vector<uint8_t> data = Pattern(64, 29);
  const std::vector<uint8_t> sent = data;
  std::vector<uint8_t> got(64, 0);
  fi_context rctx{}, sctx{};
  ASSERT_EQ(fi_recv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  iovec iov{data.data(), data.size()};
  void* desc = nullptr;
  fi_msg m{};
  m.msg_iov = &iov;
  m.desc = &desc;
  m.iov_count = 1;
  m.addr = a_.peer;
  m.context = &sctx;
  ASSERT_EQ(fi_sendmsg(a_.ep, &m, FI_INJECT), 0);
  std::fill(data.begin(), data.end(), 0);  // the buffer is the application's again at once
  const Completion s = WaitOne(a_.tx);
  EXPECT_EQ(s.e.err, 0);
  EXPECT_EQ(s.e.op_context, &sctx);
  EXPECT_EQ(WaitOne(b_.rx).e.op_context, &rctx);
  EXPECT_TRUE(got == sent);
}

TEST_F(Loopback, TaggedSendMsgWithTheInjectFlagStillCompletes) {
  std::vector<uint8_t> data = Pattern(kInjectSize, 30);
  std::vector<uint8_t> got(kInjectSize, 0);
  fi_context rctx{}, sctx{};
  ASSERT_EQ(fi_trecv(b_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, 16, 0, &rctx), 0);
  iovec iov{data.data(), data.size()};
  void* desc = nullptr;
  fi_msg_tagged m{};
  m.msg_iov = &iov;
  m.desc = &desc;
  m.iov_count = 1;
  m.addr = a_.peer;
  m.tag = 16;
  m.context = &sctx;
  ASSERT_EQ(fi_tsendmsg(a_.ep, &m, FI_INJECT | FI_COMPLETION), 0);
  EXPECT_EQ(WaitOne(a_.tx).e.op_context, &sctx);
  EXPECT_EQ(WaitOne(b_.rx).e.op_context, &rctx);
}

TEST_F(Loopback, InjectAboveInjectSizeIsRefused) {
  const std::vector<uint8_t> data = Pattern(kInjectSize + 1, 26);
  EXPECT_EQ(fi_inject(a_.ep, data.data(), data.size(), a_.peer), -FI_EMSGSIZE);
}

TEST_F(Loopback, MessageToItselfIsReceived) {
  const std::vector<uint8_t> sent = Pattern(200, 27);
  std::vector<uint8_t> got(200, 0);
  fi_context rctx{}, sctx{};
  ASSERT_EQ(fi_recv(a_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  ASSERT_EQ(fi_send(a_.ep, sent.data(), sent.size(), nullptr, a_.self, &sctx), 0);
  const Completion r = WaitOne(a_.rx);
  EXPECT_EQ(r.e.err, 0);
  EXPECT_EQ(r.e.op_context, &rctx);
  EXPECT_EQ(r.source, a_.self);
  EXPECT_EQ(WaitOne(a_.tx).e.op_context, &sctx);
  EXPECT_TRUE(got == sent);
}

TEST_F(Loopback, RendezvousSizedMessageToItselfIsReceived) {
  const std::vector<uint8_t> sent = Pattern(100000, 28);
  std::vector<uint8_t> got(sent.size(), 0);
  fi_context rctx{}, sctx{};
  ASSERT_EQ(fi_trecv(a_.ep, got.data(), got.size(), nullptr, FI_ADDR_UNSPEC, 1, 0, &rctx), 0);
  ASSERT_EQ(fi_tsend(a_.ep, sent.data(), sent.size(), nullptr, a_.self, 1, &sctx), 0);
  EXPECT_EQ(WaitOne(a_.rx).e.err, 0);
  EXPECT_EQ(WaitOne(a_.tx).e.err, 0);
  EXPECT_TRUE(got == sent);
}

}  // namespace
