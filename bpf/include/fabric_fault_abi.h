/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ABI of bpf/fabric_fault.bpf.c, the test fabric's fault injector: a tc (cls_bpf, direct-action)
 * program for router links, shared by the BPF program and user space (C++ static_asserts it).
 *
 * Scope: IPv4 and IPv6 packets (after at most one 802.1Q/802.1ad tag) of every protocol, because
 * a router link loses TCP, ICMP and UDP alike. Non-IP frames (ARP, LLDP) always pass, so IPv4
 * neighbour resolution keeps working and a blackhole looks like a link that forwards nothing yet
 * still answers ARP (a gray failure: the case MetaRoCE must detect). IPv6 neighbour discovery is
 * ICMPv6, hence IP, and is subject to the faults. Set udp_dport to limit the faults to UDP
 * datagrams to one destination port (e.g. MetaRoCE's 4792), leaving ND, ARP and the test
 * harness' own traffic alone. Attach on ingress or egress: both see the frame from its Ethernet
 * header.
 *
 * Order per matched packet: blackhole -> random drop -> random CE mark -> pass.
 *
 * Maps (one set per loaded instance, i.e. per link; find ids with `bpftool map show name ...`):
 *   mr_fault_config  BPF_MAP_TYPE_ARRAY, one entry (key 0, __u32), value struct mr_fault_config.
 *                    Read on every packet: changes apply at once. Zero (the initial value) means
 *                    no faults.
 *   mr_fault_counts  BPF_MAP_TYPE_PERCPU_ARRAY, one entry (key 0), value struct
 *                    mr_fault_counters per CPU; user space sums the CPUs.
 *   mr_fault_first_drop
 *                    BPF_MAP_TYPE_ARRAY, one entry (key 0), value __u64: bpf_ktime_get_ns()
 *                    (CLOCK_MONOTONIC) of the first packet dropped (blackhole or random drop)
 *                    since user space last wrote 0 there: the instant a fault took effect, in
 *                    the clock the transport's own events use.
 *
 * Example, 1% loss on the link whose program holds map id 42 (values little-endian on x86):
 *   bpftool map update id 42 key 0 0 0 0 value hex 10 27 00 00  00 00 00 00  00 00 00 00  00 00 00 00
 */
#ifndef METAROCE_BPF_INCLUDE_FABRIC_FAULT_ABI_H_
#define METAROCE_BPF_INCLUDE_FABRIC_FAULT_ABI_H_

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

#define MR_FAULT_PROG_NAME "mr_fabric_fault"
#define MR_FAULT_CONFIG_MAP_NAME "mr_fault_config"
#define MR_FAULT_COUNTERS_MAP_NAME "mr_fault_counts"
#define MR_FAULT_FIRST_DROP_MAP_NAME "mr_fault_first_drop"
#define MR_FAULT_PPM 1000000u /* probabilities are in parts per million */

/* Bits of mr_fault_config.flags. */
#define MR_FAULT_BLACKHOLE 0x1u /* drop every matched packet */

struct mr_fault_config {
  MR_ABI_U32 drop_ppm;    /* 0: probability (per million) that a matched packet is dropped;
                             host byte order; >= 1000000 drops all */
  MR_ABI_U32 ce_ppm;      /* 4: probability (per million) that a matched ECT(0)/ECT(1) packet is
                             marked CE; host byte order; non-ECT packets are never marked */
  MR_ABI_U32 flags;       /* 8: MR_FAULT_* bits, host byte order */
  MR_ABI_U16 udp_dport;   /* 12: NETWORK byte order; 0: faults apply to every IP packet;
                             otherwise only to UDP datagrams to this destination port */
  MR_ABI_U16 reserved;    /* 14: zero */
};

/* Index of each counter: counter i is the i-th __u64 of struct mr_fault_counters. Each packet
 * the program sees increments exactly one counter. Packet counts, host byte order. */
enum mr_fault_counter {
  MR_FAULT_UNMATCHED = 0,     /* not IP, truncated, or not the configured UDP port: passed */
  MR_FAULT_PASSED = 1,        /* matched and passed unchanged */
  MR_FAULT_CE_MARKED = 2,     /* matched, ECT, marked CE (or already CE), passed */
  MR_FAULT_CE_NOT_ECT = 3,    /* matched, CE roll hit, but not ECT: passed unchanged */
  MR_FAULT_DROP_RANDOM = 4,   /* dropped by drop_ppm */
  MR_FAULT_DROP_BLACKHOLE = 5,/* dropped by MR_FAULT_BLACKHOLE */
  MR_FAULT_COUNTER_COUNT = 6,
};

struct mr_fault_counters {
  MR_ABI_U64 unmatched;       /* 0  MR_FAULT_UNMATCHED */
  MR_ABI_U64 passed;          /* 8  MR_FAULT_PASSED */
  MR_ABI_U64 ce_marked;       /* 16 MR_FAULT_CE_MARKED */
  MR_ABI_U64 ce_not_ect;      /* 24 MR_FAULT_CE_NOT_ECT */
  MR_ABI_U64 drop_random;     /* 32 MR_FAULT_DROP_RANDOM */
  MR_ABI_U64 drop_blackhole;  /* 40 MR_FAULT_DROP_BLACKHOLE */
};

#ifdef __cplusplus
static_assert(sizeof(mr_fault_config) == 16);
static_assert(sizeof(mr_fault_counters) == MR_FAULT_COUNTER_COUNT * 8);
#else
_Static_assert(sizeof(struct mr_fault_config) == 16, "fixed layout");
_Static_assert(sizeof(struct mr_fault_counters) == MR_FAULT_COUNTER_COUNT * 8,
               "one __u64 per enum mr_fault_counter");
#endif

#undef MR_ABI_U16
#undef MR_ABI_U32
#undef MR_ABI_U64

#endif /* METAROCE_BPF_INCLUDE_FABRIC_FAULT_ABI_H_ */
