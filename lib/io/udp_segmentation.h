// UDP generic segmentation (UDP_SEGMENT, Linux 4.18+): which queued datagrams may leave as one
// message, and the control message that says so. The kernel walks its UDP, IP and routing code
// once for such a message and cuts it back into the same datagrams after them (in the device when
// it offers UDP segmentation, in software otherwise). Used by UdpPort (lib/io/udp_port.h) and by
// mrperf's kernel-UDP baseline, so that both send alike.
//
// Pure functions; safe from any thread.
#pragma once

#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

namespace metaroce::io {

// Limits of one message: segments (the kernel's UDP_MAX_SEGMENTS: 64, raised to 128 by later
// kernels) and bytes (an IP datagram's 16-bit length, less IPv6 and UDP headers).
inline constexpr size_t kMaxSegments = 64;
inline constexpr size_t kMaxSegmentedBytes = 65535 - 40 - 8;

// Space for the UDP_SEGMENT control message.
inline constexpr size_t kSegmentControlSpace = CMSG_SPACE(sizeof(uint16_t));

// How many of the `count` queued datagrams from index `first` on form one message: every one but
// the last has the first one's size (the last may be shorter), `joins(i)` holds for each after
// the first (same peer, same ECN codepoint), within kMaxSegments and kMaxSegmentedBytes.
// `size(i)` is datagram i's length. At least 1.
template <typename SizeOf, typename Joins>
size_t SegmentRunLength(size_t first, size_t count, SizeOf size, Joins joins) {
  const size_t head = size(first);
  size_t run = 1;
  size_t bytes = head;
  while (first + run < count && run < kMaxSegments) {
    const size_t next = size(first + run);
    if (size(first + run - 1) != head || next > head || bytes + next > kMaxSegmentedBytes ||
        !joins(first + run)) {
      break;
    }
    bytes += next;
    ++run;
  }
  return run;
}

// Writes the UDP_SEGMENT control message (segments of `segment` bytes) at `c`, which has
// kSegmentControlSpace bytes.
inline void WriteSegmentSize(cmsghdr* c, uint16_t segment) {
  c->cmsg_level = IPPROTO_UDP;
  c->cmsg_type = UDP_SEGMENT;
  c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
  std::memcpy(CMSG_DATA(c), &segment, sizeof segment);
}

}  // namespace metaroce::io
