// Shared by the privileged BPF tests: a main() that skips with 77 when the machine cannot run
// them and otherwise moves the process into a private network namespace (removed with the
// process, so every exit path cleans up), frame builders for packet fixtures, and a minimal raw
// AF_XDP socket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace metaroce::bpf_test {

using Bytes = std::vector<uint8_t>;

// Runs a shell command (in the test's private namespace); returns its exit status.
int Shell(const std::string& command);

// Path given to the test binary as --bpf-dir=DIR (build/bpf), for objects loaded by tc.
const std::string& BpfBuildDir();

inline constexpr uint16_t kPort = 4792;
inline constexpr uint16_t kEthP8021Q = 0x8100;
inline constexpr uint16_t kEthP8021AD = 0x88a8;

// An Ethernet frame carrying IPv4 or IPv6 and an L4 header, described field by field.
struct FrameSpec {
  uint16_t vlan_tpid = 0;        // 0: untagged; else one tag with this TPID
  bool ipv6 = false;
  uint8_t l4_proto = 17;         // IPPROTO_UDP
  uint16_t sport = 50000;
  uint16_t dport = kPort;
  uint8_t ihl = 5;               // IPv4 header length in words (options are NOPs)
  uint16_t frag_off = 0;         // IPv4 flags+fragment offset field, host order
  uint8_t tos = 0;               // IPv4 TOS or IPv6 traffic class (ECN in the low 2 bits)
  bool ipv6_fragment_header = false;  // insert an IPv6 Fragment header before the L4 header
  int udp_len_override = -1;     // >= 0: write this into the UDP length field
  Bytes payload;                 // L4 payload (after the UDP/TCP/ICMP header)
};
Bytes BuildFrame(const FrameSpec& spec);

// A MetaRoCE base header (24 bytes) with this version byte, followed by extra zero bytes.
Bytes MetaRoceBase(uint8_t version = 1, size_t extra = 0);
// An Ethernet ARP request.
Bytes ArpFrame();
// The first n bytes of a frame.
Bytes Truncated(Bytes frame, size_t n);

// One's-complement sum over an IPv4 header is 0xffff when its checksum is right.
bool Ipv4ChecksumOk(const uint8_t* header, size_t len);

// An AF_XDP socket in copy mode, bound to (ifindex, queue), with UMEM and rings mapped.
class RawXsk {
 public:
  RawXsk() = default;
  ~RawXsk();
  RawXsk(const RawXsk&) = delete;
  RawXsk& operator=(const RawXsk&) = delete;
  // Returns an empty string on success, else what failed.
  std::string Open(int ifindex, uint32_t queue);
  int fd() const { return fd_; }
  // Puts every UMEM frame on the fill ring.
  void FillAll();
  // Waits up to timeout_ms for one received frame and copies it out; false on timeout.
  bool Receive(Bytes* frame, int timeout_ms);

 private:
  static constexpr uint32_t kFrames = 64;
  static constexpr uint32_t kFrameSize = 4096;
  int fd_ = -1;
  void* umem_ = nullptr;
  void* fill_map_ = nullptr;
  size_t fill_map_len_ = 0;
  void* rx_map_ = nullptr;
  size_t rx_map_len_ = 0;
  uint32_t* fill_producer_ = nullptr;
  uint64_t* fill_descs_ = nullptr;
  uint32_t* rx_producer_ = nullptr;
  uint32_t* rx_consumer_ = nullptr;
  void* rx_descs_ = nullptr;
};

// Sends one raw frame out of ifindex (AF_PACKET). Returns 0 or an errno.
int SendRawFrame(int ifindex, const Bytes& frame);

}  // namespace metaroce::bpf_test
