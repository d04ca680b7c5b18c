/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ABI of bpf/xdp_steer.bpf.c, shared by the BPF program (C, clang -target bpf) and user space
 * (C++: lib/io/xdp_steering.cc static_asserts every size and offset below).
 *
 * Contract, in one place:
 *   - Program names: MR_XDP_PROG_NAME ("xdp" section, linear frames only, veth MTU <= 3506) and
 *     MR_XDP_FRAGS_PROG_NAME ("xdp.frags", multi-buffer frames, needs XDP_USE_SG sockets for
 *     frames above one page). Both are in one object and share the maps below.
 *   - Read-only configuration, set in the skeleton's rodata before load:
 *       metaroce_port      __u16, NETWORK byte order: the UDP destination port steered to AF_XDP
 *                          (default htons(MR_XDP_DEFAULT_UDP_PORT)).
 *       no_socket_verdict  __u32, MR_XDP_NO_SOCKET_PASS (default) or MR_XDP_NO_SOCKET_DROP:
 *                          what happens to our packets when no AF_XDP socket is registered for
 *                          the receive queue they arrived on.
 *   - Maps:
 *       xsks_map         BPF_MAP_TYPE_XSKMAP, key __u32 = receive queue id (host order), value
 *                        __u32 = AF_XDP socket fd (on update). An AF_XDP socket must be registered
 *                        under the queue id it is bound to: the kernel refuses a redirect to a
 *                        socket bound to another queue (the frame is dropped, xdp:xdp_redirect_err).
 *       mr_xdp_counters  BPF_MAP_TYPE_PERCPU_ARRAY, one entry (key 0), value struct
 *                        mr_xdp_counters per CPU. User space sums the CPUs.
 *
 * Every counter is a packet count, host byte order, per CPU, monotonically increasing from load.
 * Each packet the program sees increments exactly one counter.
 */
#ifndef METAROCE_BPF_INCLUDE_METAROCE_XDP_ABI_H_
#define METAROCE_BPF_INCLUDE_METAROCE_XDP_ABI_H_

#ifdef __cplusplus
#include <cstdint>
#define MR_ABI_U16 std::uint16_t
#define MR_ABI_U32 std::uint32_t
#define MR_ABI_U64 std::uint64_t
#else
#include <linux/types.h>
#define MR_ABI_U16 __u16
#define MR_ABI_U32 __u32
#define MR_ABI_U64 __u64
#endif

#define MR_XDP_PROG_NAME "mr_xdp_steer"
#define MR_XDP_FRAGS_PROG_NAME "mr_xdp_steer_fr"  /* BPF object names are at most 15 chars */
#define MR_XDP_COUNTERS_MAP_NAME "mr_xdp_counters"
#define MR_XDP_XSKS_MAP_NAME "xsks_map"

/* Default size of xsks_map: receive queues 0..MR_XDP_DEFAULT_MAX_QUEUES-1 can be steered. User
 * space may change it before load (bpf_map__set_max_entries). */
#define MR_XDP_DEFAULT_MAX_QUEUES 256

/* Default UDP port of MetaRoCE (host order; lib/wire/packet.h kDefaultUdpPort). */
#define MR_XDP_DEFAULT_UDP_PORT 4792

/* MetaRoCE base header: 24 bytes, version byte at offset 0 (lib/wire/packet.h BaseHeader). */
#define MR_XDP_BASE_HEADER_LEN 24
#define MR_XDP_WIRE_VERSION 1

/* Values of the rodata variable no_socket_verdict. */
enum mr_xdp_no_socket_verdict {
  MR_XDP_NO_SOCKET_PASS = 0, /* to the kernel stack (a kernel UDP socket may take it) */
  MR_XDP_NO_SOCKET_DROP = 1,
};

/* Index of each counter: counter i is the i-th __u64 of struct mr_xdp_counters. */
enum mr_xdp_counter {
  /* Ours, and handed to the AF_XDP socket of the receive queue. (The kernel can still drop it
   * after the program returns, e.g. fill ring empty / rx ring full: that shows in the socket's
   * XDP_STATISTICS, not here.) */
  MR_XDP_REDIRECTED = 0,
  /* Ours, but no socket registered for the queue: passed to the kernel (verdict PASS). */
  MR_XDP_PASS_NO_SOCKET = 1,
  /* Ours, but no socket registered for the queue: dropped (verdict DROP). */
  MR_XDP_DROP_NO_SOCKET = 2,
  /* Ours (UDP to our port) but the UDP length or the frame is shorter than the 24-byte base
   * header: dropped. */
  MR_XDP_DROP_TRUNCATED = 3,
  /* Ours but the version byte is not MR_XDP_WIRE_VERSION: dropped. */
  MR_XDP_DROP_BAD_VERSION = 4,
  /* Not IPv4/IPv6 (ARP, LLDP, a second VLAN tag, ...): passed. */
  MR_XDP_PASS_NOT_IP = 5,
  /* IP but not UDP (TCP, ICMP, IPv6 extension headers other than Fragment): passed. */
  MR_XDP_PASS_NOT_UDP = 6,
  /* UDP to another port: passed. */
  MR_XDP_PASS_OTHER_PORT = 7,
  /* IPv4 fragment (MF set or offset != 0) or IPv6 Fragment header: passed, the kernel
   * reassembles (MetaRoCE senders never fragment; such datagrams reach a kernel socket only). */
  MR_XDP_PASS_FRAGMENT = 8,
  /* Too short to tell whether it is ours (truncated Ethernet, VLAN, IP or UDP header, IPv4 IHL
   * < 5, wrong IP version nibble): passed, the kernel drops and counts it in its own stats. */
  MR_XDP_PASS_MALFORMED = 9,
  MR_XDP_COUNTER_COUNT = 10,
};

/* Value of mr_xdp_counters (per CPU). Field order == enum mr_xdp_counter. Each field is a
 * packet count, host byte order. Named fields so that `bpftool map dump name mr_xdp_counters`
 * prints names. */
struct mr_xdp_counters {
  MR_ABI_U64 redirected;      /* 0  MR_XDP_REDIRECTED */
  MR_ABI_U64 pass_no_socket;  /* 8  MR_XDP_PASS_NO_SOCKET */
  MR_ABI_U64 drop_no_socket;  /* 16 MR_XDP_DROP_NO_SOCKET */
  MR_ABI_U64 drop_truncated;  /* 24 MR_XDP_DROP_TRUNCATED */
  MR_ABI_U64 drop_bad_version; /* 32 MR_XDP_DROP_BAD_VERSION */
  MR_ABI_U64 pass_not_ip;     /* 40 MR_XDP_PASS_NOT_IP */
  MR_ABI_U64 pass_not_udp;    /* 48 MR_XDP_PASS_NOT_UDP */
  MR_ABI_U64 pass_other_port; /* 56 MR_XDP_PASS_OTHER_PORT */
  MR_ABI_U64 pass_fragment;   /* 64 MR_XDP_PASS_FRAGMENT */
  MR_ABI_U64 pass_malformed;  /* 72 MR_XDP_PASS_MALFORMED */
};

#ifdef __cplusplus
static_assert(sizeof(mr_xdp_counters) == MR_XDP_COUNTER_COUNT * 8);
#else
_Static_assert(sizeof(struct mr_xdp_counters) == MR_XDP_COUNTER_COUNT * 8,
               "one __u64 per enum mr_xdp_counter");
#endif

#undef MR_ABI_U16
#undef MR_ABI_U32
#undef MR_ABI_U64

#endif /* METAROCE_BPF_INCLUDE_METAROCE_XDP_ABI_H_ */
