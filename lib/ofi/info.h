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

}  // namespace metaroce::ofi
