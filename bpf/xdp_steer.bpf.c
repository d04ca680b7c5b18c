// SPDX-License-Identifier: Apache-2.0
/*
 * MetaRoCE steering: UDP datagrams to our port go to the AF_XDP socket of the receive queue,
 * everything else goes to the kernel. ABI (maps, rodata, counters): include/metaroce_xdp_abi.h.
 *
 * Parsing: Ethernet, at most one 802.1Q / 802.1ad tag, IPv4 (IHL options skipped; fragments to
 * the kernel) or IPv6 (next header must be UDP directly; a Fragment header goes to the kernel,
 * any other extension header counts as "not UDP"), UDP. Only a datagram whose UDP header is
 * complete and whose destination port is ours is judged: it must carry at least the 24-byte
 * MetaRoCE base header (by the UDP length and by the bytes present) with version byte 1, else it
 * is dropped and counted. Anything we cannot identify as ours is passed: the kernel owns it, and
 * its own checks and counters handle malformed frames.
 *
 * Two programs from one source: mr_xdp_steer (SEC "xdp", linear frames) and mr_xdp_steer_fr
 * (SEC "xdp.frags", multi-buffer frames for MTUs above what native XDP takes without frags).
 * Both expect the Ethernet/IP/UDP headers in the first buffer (every driver puts them there);
 * the frags program reads the MetaRoCE base header with bpf_xdp_load_bytes when it is not.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "metaroce_xdp_abi.h"

/* UDP destination port steered to AF_XDP, network byte order. Set before load; objects loaded
 * without a skeleton (ip link set ... xdp obj) steer the default port 4792. */
const volatile __u16 metaroce_port = bpf_htons(MR_XDP_DEFAULT_UDP_PORT);
/* enum mr_xdp_no_socket_verdict. Set before load. */
const volatile __u32 no_socket_verdict = MR_XDP_NO_SOCKET_PASS;

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, MR_XDP_DEFAULT_MAX_QUEUES);
  __type(key, __u32);
  __type(value, __u32);
} xsks_map SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct mr_xdp_counters);
} mr_xdp_counters SEC(".maps");

struct vlan_hdr_ {
  __be16 tci;
  __be16 encapsulated_proto;
};

#define IP_MF_ 0x2000
#define IP_OFFSET_ 0x1fff
#define IPPROTO_FRAGMENT_ 44

static __always_inline int count(enum mr_xdp_counter which, int verdict) {
  __u32 zero = 0;
  __u64 *c = bpf_map_lookup_elem(&mr_xdp_counters, &zero);
  if (c && which < MR_XDP_COUNTER_COUNT) c[which] += 1; /* per-CPU slot: no atomics needed */
  return verdict;
}

static __always_inline int steer(struct xdp_md *ctx, int frags) {
  void *data = (void *)(long)ctx->data;
  void *data_end = (void *)(long)ctx->data_end;

  struct ethhdr *eth = data;
  if ((void *)(eth + 1) > data_end) return count(MR_XDP_PASS_MALFORMED, XDP_PASS);
  __be16 proto = eth->h_proto;
  void *l3 = eth + 1;
  if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
    struct vlan_hdr_ *vlan = l3;
    if ((void *)(vlan + 1) > data_end) return count(MR_XDP_PASS_MALFORMED, XDP_PASS);
    proto = vlan->encapsulated_proto;
    l3 = vlan + 1;
  }

  struct udphdr *udp;
  if (proto == bpf_htons(ETH_P_IP)) {
    struct iphdr *ip = l3;
    if ((void *)(ip + 1) > data_end) return count(MR_XDP_PASS_MALFORMED, XDP_PASS);
    if (ip->version != 4 || ip->ihl < 5) return count(MR_XDP_PASS_MALFORMED, XDP_PASS);
    if (ip->frag_off & bpf_htons(IP_MF_ | IP_OFFSET_))
      return count(MR_XDP_PASS_FRAGMENT, XDP_PASS);
    if (ip->protocol != IPPROTO_UDP) return count(MR_XDP_PASS_NOT_UDP, XDP_PASS);
    udp = (void *)ip + ip->ihl * 4;
  } else if (proto == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr *ip6 = l3;
    if ((void *)(ip6 + 1) > data_end) return count(MR_XDP_PASS_MALFORMED, XDP_PASS);
    if (ip6->version != 6) return count(MR_XDP_PASS_MALFORMED, XDP_PASS);
    if (ip6->nexthdr == IPPROTO_FRAGMENT_) return count(MR_XDP_PASS_FRAGMENT, XDP_PASS);
    if (ip6->nexthdr != IPPROTO_UDP) return count(MR_XDP_PASS_NOT_UDP, XDP_PASS);
    udp = (void *)(ip6 + 1);
  } else {
    return count(MR_XDP_PASS_NOT_IP, XDP_PASS);
  }

  if ((void *)(udp + 1) > data_end) return count(MR_XDP_PASS_MALFORMED, XDP_PASS);
  if (udp->dest != metaroce_port) return count(MR_XDP_PASS_OTHER_PORT, XDP_PASS);

  /* Ours from here on: judge it. The UDP length must claim the base header... */
  if (bpf_ntohs(udp->len) < sizeof(struct udphdr) + MR_XDP_BASE_HEADER_LEN)
    return count(MR_XDP_DROP_TRUNCATED, XDP_DROP);
  /* ...and the bytes must be there. */
  __u8 version;
  __u8 *base = (void *)(udp + 1);
  if ((void *)(base + MR_XDP_BASE_HEADER_LEN) <= data_end) {
    version = base[0];
  } else if (frags) {
    /* Base header (partly) in a later buffer: bpf_xdp_load_bytes copies across buffers and
     * fails if the frame ends first. */
    __u8 hdr[MR_XDP_BASE_HEADER_LEN];
    __u32 off = (__u32)((void *)base - data);
    if (bpf_xdp_load_bytes(ctx, off, hdr, sizeof(hdr)) != 0)
      return count(MR_XDP_DROP_TRUNCATED, XDP_DROP);
    version = hdr[0];
  } else {
    return count(MR_XDP_DROP_TRUNCATED, XDP_DROP);
  }
  if (version != MR_XDP_WIRE_VERSION) return count(MR_XDP_DROP_BAD_VERSION, XDP_DROP);

  /* The low bits of the flags are the verdict when xsks_map has no socket at this queue. */
  __u64 fallback = no_socket_verdict == MR_XDP_NO_SOCKET_DROP ? XDP_DROP : XDP_PASS;
  long verdict = bpf_redirect_map(&xsks_map, ctx->rx_queue_index, fallback);
  if (verdict == XDP_REDIRECT) return count(MR_XDP_REDIRECTED, XDP_REDIRECT);
  if (verdict == XDP_DROP) return count(MR_XDP_DROP_NO_SOCKET, XDP_DROP);
  return count(MR_XDP_PASS_NO_SOCKET, XDP_PASS);
}

SEC("xdp")
int mr_xdp_steer(struct xdp_md *ctx) { return steer(ctx, 0); }

SEC("xdp.frags")
int mr_xdp_steer_fr(struct xdp_md *ctx) { return steer(ctx, 1); }

char LICENSE[] SEC("license") = "Dual BSD/GPL";
