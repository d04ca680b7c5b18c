// SPDX-License-Identifier: Apache-2.0
/*
 * Fault injection for the test fabric's router links (no netem on the test machines): random
 * drop, random ECN CE marking of ECT packets, and blackhole, configured per loaded instance
 * through a map at run time. Scope, order and maps: include/fabric_fault_abi.h.
 *
 * Load with tc (cls_bpf, direct action):
 *   tc qdisc add dev DEV clsact
 *   tc filter add dev DEV egress bpf da obj build/bpf/fabric_fault.bpf.o sec tc
 * or from C++ through build/bpf/fabric_fault.skel.h and bpf_tc_attach().
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "fabric_fault_abi.h"

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct mr_fault_config);
} mr_fault_config SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct mr_fault_counters);
} mr_fault_counts SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} mr_fault_first_drop SEC(".maps");

struct vlan_hdr_ {
  __be16 tci;
  __be16 encapsulated_proto;
};

#define IP_MF_ 0x2000
#define IP_OFFSET_ 0x1fff
#define ECN_MASK 0x3
#define ECN_NOT_ECT 0x0
#define ECN_CE 0x3

static __always_inline int count(enum mr_fault_counter which, int verdict) {
  __u32 zero = 0;
  __u64 *c = bpf_map_lookup_elem(&mr_fault_counts, &zero);
  if (c && which < MR_FAULT_COUNTER_COUNT) c[which] += 1;
  return verdict;
}

/* Counts a drop and, if it is the first since user space zeroed mr_fault_first_drop, records
 * its instant there. */
static __always_inline int drop(enum mr_fault_counter which) {
  __u32 zero = 0;
  __u64 *first = bpf_map_lookup_elem(&mr_fault_first_drop, &zero);
  if (first && *first == 0) __sync_val_compare_and_swap(first, 0, bpf_ktime_get_ns());
  return count(which, TC_ACT_SHOT);
}

/* True with probability ppm / 1e6. Scaling (not modulo) keeps the draw unbiased. */
static __always_inline int roll(__u32 ppm) {
  if (ppm == 0) return 0;
  if (ppm >= MR_FAULT_PPM) return 1;
  return (((__u64)bpf_get_prandom_u32() * MR_FAULT_PPM) >> 32) < ppm;
}

/* One's-complement incremental update of a checksum when a 16-bit word changes from old_w to
 * new_w (RFC 1624, eqn. 3). All three in the same (network) byte order. */
static __always_inline __u16 csum_replace2(__u16 check, __u16 old_w, __u16 new_w) {
  __u32 sum = (__u16)~check + (__u16)~old_w + (__u32)new_w;
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  return (__u16)~sum;
}

SEC("tc")
int mr_fabric_fault(struct __sk_buff *skb) {
  __u32 zero = 0;
  struct mr_fault_config *cfg = bpf_map_lookup_elem(&mr_fault_config, &zero);
  if (!cfg) return count(MR_FAULT_UNMATCHED, TC_ACT_OK);

  /* Headers we may write must be in the linear part; pulling is a no-op when they are. */
  __u32 want = sizeof(struct ethhdr) + 4 + sizeof(struct ipv6hdr) + sizeof(struct udphdr);
  if (want > skb->len) want = skb->len;
  bpf_skb_pull_data(skb, want);

  void *data = (void *)(long)skb->data;
  void *data_end = (void *)(long)skb->data_end;
  struct ethhdr *eth = data;
  if ((void *)(eth + 1) > data_end) return count(MR_FAULT_UNMATCHED, TC_ACT_OK);
  __be16 proto = eth->h_proto;
  void *l3 = eth + 1;
  if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
    struct vlan_hdr_ *vlan = l3;
    if ((void *)(vlan + 1) > data_end) return count(MR_FAULT_UNMATCHED, TC_ACT_OK);
    proto = vlan->encapsulated_proto;
    l3 = vlan + 1;
  }

  int is_ipv6 = 0;
  __u8 l4proto;
  void *l4;
  int first_fragment = 1;
  if (proto == bpf_htons(ETH_P_IP)) {
    struct iphdr *ip4 = l3;
    if ((void *)(ip4 + 1) > data_end || ip4->ihl < 5) return count(MR_FAULT_UNMATCHED, TC_ACT_OK);
    l4proto = ip4->protocol;
    l4 = (void *)ip4 + ip4->ihl * 4;
    first_fragment = (ip4->frag_off & bpf_htons(IP_OFFSET_)) == 0;
  } else if (proto == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr *ip6 = l3;
    is_ipv6 = 1;
    if ((void *)(ip6 + 1) > data_end) return count(MR_FAULT_UNMATCHED, TC_ACT_OK);
    l4proto = ip6->nexthdr;
    l4 = ip6 + 1;
  } else {
    return count(MR_FAULT_UNMATCHED, TC_ACT_OK);
  }

  if (cfg->udp_dport != 0) {
    struct udphdr *udp = l4;
    if (l4proto != IPPROTO_UDP || !first_fragment || (void *)(udp + 1) > data_end ||
        udp->dest != cfg->udp_dport)
      return count(MR_FAULT_UNMATCHED, TC_ACT_OK);
  }

  if (cfg->flags & MR_FAULT_BLACKHOLE) return drop(MR_FAULT_DROP_BLACKHOLE);
  if (roll(cfg->drop_ppm)) return drop(MR_FAULT_DROP_RANDOM);
  if (!roll(cfg->ce_ppm)) return count(MR_FAULT_PASSED, TC_ACT_OK);

  /* l3 is a packet pointer on both paths; each branch re-proves its bounds for the verifier. */
  if (!is_ipv6) {
    struct iphdr *ip4 = l3;
    if ((void *)(ip4 + 1) > data_end) return count(MR_FAULT_UNMATCHED, TC_ACT_OK);
    if ((ip4->tos & ECN_MASK) == ECN_NOT_ECT) return count(MR_FAULT_CE_NOT_ECT, TC_ACT_OK);
    /* TOS shares a 16-bit checksum word with version/IHL (the first word of the header). */
    __u16 *word0 = (__u16 *)ip4;
    __u16 old_w = *word0;
    ip4->tos |= ECN_CE;
    ip4->check = csum_replace2(ip4->check, old_w, *word0);
  } else {
    /* Traffic class straddles bytes 0 and 1; its ECN bits are bits 5:4 of byte 1. No IPv6
     * header checksum, and the UDP pseudo-header does not include the traffic class. */
    __u8 *b = l3;
    if ((void *)(b + sizeof(struct ipv6hdr)) > data_end)
      return count(MR_FAULT_UNMATCHED, TC_ACT_OK);
    if (((b[1] >> 4) & ECN_MASK) == ECN_NOT_ECT) return count(MR_FAULT_CE_NOT_ECT, TC_ACT_OK);
    b[1] |= ECN_CE << 4;
  }
  return count(MR_FAULT_CE_MARKED, TC_ACT_OK);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
