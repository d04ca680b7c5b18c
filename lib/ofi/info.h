// What the provider offers (its fi_info) and how it fits an application's hints (fi_getinfo(3)).
//
// One fi_info: FI_EP_RDM, FI_MSG | FI_TAGGED | FI_RMA (write only: the transport has no RDMA
// Read) | FI_DIRECTED_RECV | FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM, 64 tag bits, 8 bytes of
// remote CQ data, send-after-send ordering, FI_PROGRESS_MANUAL (FI_PROGRESS_AUTO when asked: a
// progress thread of the domain's), every threading level (the
// provider locks its domain), FI_AV_TABLE or FI_AV_MAP, FI_RM_ENABLED, and no mode bit the
// application must honour. MR modes: none required; FI_MR_LOCAL, FI_MR_PROV_KEY and
// FI_MR_VIRT_ADDR taken when the application offers them (FI_MR_LOCAL then makes the provider
// check every local descriptor). Limits come from the settings (eager and inject sizes, queue
// depths); paths and planes are told in the domain's name.
//
// GetInfo refuses hints it cannot meet with FI_ENODATA and says why through `why` (the provider
// logs it at FI_LOG_INFO). Not thread-safe beyond what fi_getinfo promises (no shared state).
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <string>

#include "lib/io/ip_address.h"
#include "lib/ofi/settings.h"

namespace metaroce::ofi {

inline constexpr const char* kProviderName = "metaroce";
inline constexpr const char* kFabricName = "metaroce";
inline constexpr uint32_t kProviderVersion = FI_VERSION(1, 0);
inline constexpr uint64_t kMaxMessageSize = uint64_t{1} << 32;
inline constexpr size_t kQueueSize = 1024;   // tx_attr->size, rx_attr->size
inline constexpr size_t kIovLimit = 8;

// A new fi_info (fi_freeinfo frees it) describing the provider with settings `s`; `domain_name`
// names the planes and paths (e.g. "pl0,pl1/8paths").
fi_info* ProviderInfo(uint32_t version, const Settings& s, const std::string& domain_name);

// Narrows `info` to `hints` (caps, mr_mode, threading, progress, av type, op flags) and returns
// 0, or -FI_ENODATA with the reason in `why`. Null hints accept everything.
int FitToHints(uint32_t version, const fi_info* hints, fi_info* info, std::string& why);

// fi_getinfo's node, service and FI_SOURCE (fi_getinfo(3)), as the tcp provider reads them, made
// into the info's addresses (EndpointAddress, one plane, nonce 0: "the endpoint listening
// there", address.h):
//   FI_SOURCE: node (default: `local`) and service (default: any port) are the source, src_addr:
//     an endpoint opened from the info listens on that port;
//   else node and/or service are the destination, dest_addr (node default: the loopback
//     address; service, the peer's port, is needed with a node), and src_addr is `local`.
// src_addr is set whatever is given (a source the hints name is kept). `local`: this host's
// plane-0 address, or the wildcard when the provider cannot tell (attached to a daemon).
// A node that does not resolve (getaddrinfo; FI_NUMERICHOST: numeric only) or a service that is
// not a port number is -FI_ENODATA with the reason in `why`.
int FitToNodeService(const char* node, const char* service, uint64_t flags,
                     const io::IpAddress& local, fi_info* info, std::string& why);

// The mr_mode bits a domain acts by, for the mr_mode its fi_info gave: the legacy FI_MR_BASIC
// (before API 1.5 and after) is FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED, and
// FI_MR_SCALABLE no bit (fi_mr(3)); from 1.5 on, other values are the bits themselves.
uint64_t EffectiveMrMode(uint32_t version, int mr_mode);

}  // namespace metaroce::ofi
