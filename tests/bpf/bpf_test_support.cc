#include "tests/bpf/bpf_test_support.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/if_xdp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gtest/gtest.h"

#ifndef AF_XDP
#define AF_XDP 44
#endif
#ifndef SOL_XDP
#define SOL_XDP 283
#endif

namespace metaroce::bpf_test {
namespace {

std::string g_bpf_dir;

void Put16(Bytes& b, uint16_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}

uint16_t Checksum(const uint8_t* p, size_t len) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < len; i += 2) sum += (p[i] << 8) | p[i + 1];
  if (len & 1) sum += p[len - 1] << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// Why this machine cannot run the privileged BPF tests, or "" if it can.
std::string CannotRunReason() {
  if (geteuid() != 0) return "not root";
  int fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "mr_probe", 4, 4, 1, nullptr);
  if (fd < 0) return std::string("bpf(BPF_MAP_CREATE) fails: ") + strerror(errno);
  close(fd);
  if (unshare(CLONE_NEWNET) != 0) {
    return std::string("unshare(CLONE_NEWNET) fails: ") + strerror(errno);
  }
  if (Shell("ip link set dev lo up >/dev/null 2>&1") != 0) return "iproute2 `ip` does not work";
  return "";
}

}  // namespace

int Shell(const std::string& command) {
  int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

const std::string& BpfBuildDir() { return g_bpf_dir; }

Bytes BuildFrame(const FrameSpec& s) {
  Bytes l4;
  if (s.l4_proto == 17) {  // UDP
    Put16(l4, s.sport);
    Put16(l4, s.dport);
    Put16(l4, s.udp_len_override >= 0 ? static_cast<uint16_t>(s.udp_len_override)
                                      : static_cast<uint16_t>(8 + s.payload.size()));
    Put16(l4, 0);  // checksum: none (IPv4); the XDP program does not check it
  } else if (s.l4_proto == 6) {  // TCP: ports, seq, ack, offset 5, SYN
    Put16(l4, s.sport);
    Put16(l4, s.dport);
    for (int i = 0; i < 8; ++i) l4.push_back(0);
    l4.push_back(0x50);
    l4.push_back(0x02);
    for (int i = 0; i < 6; ++i) l4.push_back(0);
  } else {  // ICMP echo request / anything else: 8 bytes
    l4 = {8, 0, 0, 0, 0, 1, 0, 1};
  }
  l4.insert(l4.end(), s.payload.begin(), s.payload.end());

  Bytes frame = {0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01};
  if (s.vlan_tpid != 0) {
    Put16(frame, s.vlan_tpid);
    Put16(frame, 42);  // VLAN id 42
  }
  if (!s.ipv6) {
    Put16(frame, ETH_P_IP);
    size_t ip_start = frame.size();
    size_t hlen = s.ihl * 4u;
    frame.push_back(static_cast<uint8_t>(0x40 | (s.ihl & 0xf)));
    frame.push_back(s.tos);
    Put16(frame, static_cast<uint16_t>(hlen + l4.size()));
    Put16(frame, 0x1234);  // id
    Put16(frame, s.frag_off);
    frame.push_back(64);  // ttl
    frame.push_back(s.l4_proto);
    Put16(frame, 0);  // checksum, below
    for (uint8_t a : {198, 18, 0, 1, 198, 18, 0, 2}) frame.push_back(a);
    while (frame.size() < ip_start + hlen) frame.push_back(1);  // NOP options
    uint16_t c = Checksum(&frame[ip_start], hlen);
    frame[ip_start + 10] = static_cast<uint8_t>(c >> 8);
    frame[ip_start + 11] = static_cast<uint8_t>(c);
  } else {
    Put16(frame, ETH_P_IPV6);
    uint32_t word0 = (6u << 28) | (uint32_t{s.tos} << 20) | 0x12345;
    for (int shift = 24; shift >= 0; shift -= 8) frame.push_back(static_cast<uint8_t>(word0 >> shift));
    size_t ext = s.ipv6_fragment_header ? 8 : 0;
    Put16(frame, static_cast<uint16_t>(ext + l4.size()));
    frame.push_back(s.ipv6_fragment_header ? 44 : s.l4_proto);
    frame.push_back(64);  // hop limit
    for (int i = 0; i < 2; ++i) {
      Bytes addr = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)};
      frame.insert(frame.end(), addr.begin(), addr.end());
    }
    if (s.ipv6_fragment_header) {
      Bytes frag = {s.l4_proto, 0, 0, 1, 0, 0, 0, 7};  // offset 0, M=1, id 7
      frame.insert(frame.end(), frag.begin(), frag.end());
    }
  }
  frame.insert(frame.end(), l4.begin(), l4.end());
  return frame;
}

Bytes MetaRoceBase(uint8_t version, size_t extra) {
  Bytes b(24 + extra, 0);
  b[0] = version;
  b[1] = 0x11;  // PROBE
  return b;
}

Bytes ArpFrame() {
  Bytes f = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x06,
             0, 1, 0x08, 0, 6, 4, 0, 1,                      // Ethernet/IPv4 request
             0x02, 0, 0, 0, 0, 0x01, 198, 18, 0, 1,          // sender
             0, 0, 0, 0, 0, 0, 198, 18, 0, 2};               // target
  return f;
}

Bytes Truncated(Bytes frame, size_t n) {
  frame.resize(n);
  return frame;
}

bool Ipv4ChecksumOk(const uint8_t* header, size_t len) { return Checksum(header, len) == 0; }

RawXsk::~RawXsk() {
  if (rx_map_ != nullptr) munmap(rx_map_, rx_map_len_);
  if (fill_map_ != nullptr) munmap(fill_map_, fill_map_len_);
  if (fd_ >= 0) close(fd_);
  if (umem_ != nullptr) munmap(umem_, size_t{kFrames} * kFrameSize);
}

std::string RawXsk::Open(int ifindex, uint32_t queue) {
  auto fail = [](const char* what) { return std::string(what) + ": " + strerror(errno); };
  fd_ = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return fail("socket(AF_XDP)");
  size_t umem_len = size_t{kFrames} * kFrameSize;
  umem_ = mmap(nullptr, umem_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (umem_ == MAP_FAILED) {
    umem_ = nullptr;
    return fail("mmap umem");
  }
  xdp_umem_reg reg = {};
  reg.addr = reinterpret_cast<uintptr_t>(umem_);
  reg.len = umem_len;
  reg.chunk_size = kFrameSize;
  if (setsockopt(fd_, SOL_XDP, XDP_UMEM_REG, &reg, sizeof(reg)) != 0) return fail("XDP_UMEM_REG");
  int n = kFrames;
  if (setsockopt(fd_, SOL_XDP, XDP_UMEM_FILL_RING, &n, sizeof(n)) != 0) return fail("FILL_RING");
  if (setsockopt(fd_, SOL_XDP, XDP_UMEM_COMPLETION_RING, &n, sizeof(n)) != 0) {
    return fail("COMPLETION_RING");
  }
  if (setsockopt(fd_, SOL_XDP, XDP_RX_RING, &n, sizeof(n)) != 0) return fail("XDP_RX_RING");
  xdp_mmap_offsets off = {};
  socklen_t optlen = sizeof(off);
  if (getsockopt(fd_, SOL_XDP, XDP_MMAP_OFFSETS, &off, &optlen) != 0) return fail("MMAP_OFFSETS");
  fill_map_len_ = off.fr.desc + kFrames * sizeof(uint64_t);
  fill_map_ = mmap(nullptr, fill_map_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_,
                   XDP_UMEM_PGOFF_FILL_RING);
  if (fill_map_ == MAP_FAILED) {
    fill_map_ = nullptr;
    return fail("mmap fill ring");
  }
  rx_map_len_ = off.rx.desc + kFrames * sizeof(xdp_desc);
  rx_map_ = mmap(nullptr, rx_map_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_,
                 XDP_PGOFF_RX_RING);
  if (rx_map_ == MAP_FAILED) {
    rx_map_ = nullptr;
    return fail("mmap rx ring");
  }
  auto* fill = static_cast<uint8_t*>(fill_map_);
  auto* rx = static_cast<uint8_t*>(rx_map_);
  fill_producer_ = reinterpret_cast<uint32_t*>(fill + off.fr.producer);
  fill_descs_ = reinterpret_cast<uint64_t*>(fill + off.fr.desc);
  rx_producer_ = reinterpret_cast<uint32_t*>(rx + off.rx.producer);
  rx_consumer_ = reinterpret_cast<uint32_t*>(rx + off.rx.consumer);
  rx_descs_ = rx + off.rx.desc;

  sockaddr_xdp sa = {};
  sa.sxdp_family = AF_XDP;
  sa.sxdp_ifindex = static_cast<uint32_t>(ifindex);
  sa.sxdp_queue_id = queue;
  sa.sxdp_flags = XDP_COPY;
  // A queue closed within ~50 ms can still be busy (ENVIRONMENT.md): retry briefly.
  for (int attempt = 0;; ++attempt) {
    if (bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) break;
    if (errno != EBUSY || attempt == 20) return fail("bind AF_XDP");
    usleep(25000);
  }
  return "";
}

void RawXsk::FillAll() {
  std::atomic_ref<uint32_t> producer(*fill_producer_);
  uint32_t p = producer.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < kFrames; ++i) fill_descs_[(p + i) % kFrames] = uint64_t{i} * kFrameSize;
  producer.store(p + kFrames, std::memory_order_release);
}

bool RawXsk::Receive(Bytes* frame, int timeout_ms) {
  std::atomic_ref<uint32_t> producer(*rx_producer_);
  std::atomic_ref<uint32_t> consumer(*rx_consumer_);
  for (int waited = 0;; waited += 10) {
    uint32_t c = consumer.load(std::memory_order_relaxed);
    if (producer.load(std::memory_order_acquire) != c) {
      const xdp_desc& d = static_cast<const xdp_desc*>(rx_descs_)[c % kFrames];
      const uint8_t* data = static_cast<const uint8_t*>(umem_) + d.addr;
      frame->assign(data, data + d.len);
      consumer.store(c + 1, std::memory_order_release);
      return true;
    }
    if (waited >= timeout_ms) return false;
    pollfd pfd = {fd_, POLLIN, 0};
    poll(&pfd, 1, 10);
  }
}

int SendRawFrame(int ifindex, const Bytes& frame) {
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  sockaddr_ll sa = {};
  sa.sll_family = AF_PACKET;
  sa.sll_ifindex = ifindex;
  sa.sll_halen = ETH_ALEN;
  memcpy(sa.sll_addr, frame.data(), ETH_ALEN);
  ssize_t n = sendto(fd, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&sa),
                     sizeof(sa));
  int err = n == static_cast<ssize_t>(frame.size()) ? 0 : errno;
  close(fd);
  return err;
}

}  // namespace metaroce::bpf_test

// Privileged tests: exit 77 (skip) when the machine cannot run them. GTEST_SKIP would report
// success to meson, not a skip.
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--bpf-dir=", 0) == 0) metaroce::bpf_test::g_bpf_dir = arg.substr(10);
  }
  std::string reason = metaroce::bpf_test::CannotRunReason();
  if (!reason.empty()) {
    std::fprintf(stderr, "SKIP: privileged BPF tests need root and a working bpf(): %s\n",
                 reason.c_str());
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
