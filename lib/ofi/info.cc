#include "lib/ofi/info.h"

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>
#include <span>
#include <string_view>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/ofi/address.h"

namespace metaroce::ofi {
namespace {

constexpr uint64_t kTxCaps = FI_MSG | FI_TAGGED | FI_RMA | FI_WRITE | FI_SEND;
constexpr uint64_t kRxCaps =
    FI_MSG | FI_TAGGED | FI_RMA | FI_RECV | FI_REMOTE_WRITE | FI_DIRECTED_RECV | FI_SOURCE;
constexpr uint64_t kDomainCaps = FI_LOCAL_COMM | FI_REMOTE_COMM;
constexpr uint64_t kCaps = kTxCaps | kRxCaps | kDomainCaps;
// Secondary capabilities the provider keeps whether asked or not (fi_getinfo(3)).
constexpr uint64_t kSecondaryCaps = FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM;
constexpr uint64_t kMrModes = FI_MR_LOCAL | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED;

std::string CapsText(uint64_t caps) {
  const char* s = fi_tostr(&caps, FI_TYPE_CAPS);
  return s != nullptr ? std::string(s) : absl::StrCat("0x", absl::Hex(caps));
}

}  // namespace

fi_info* ProviderInfo(uint32_t version, const Settings& s, const std::string& domain_name) {
  fi_info* info = fi_allocinfo();
  if (info == nullptr) return nullptr;
  info->caps = kCaps;
  info->mode = 0;
  info->addr_format = FI_FORMAT_UNSPEC;

  info->tx_attr->caps = kTxCaps;
  info->tx_attr->msg_order = FI_ORDER_SAS;
  info->tx_attr->comp_order = FI_ORDER_NONE;
  info->tx_attr->inject_size = s.inject_size;
  info->tx_attr->size = kQueueSize;
  info->tx_attr->iov_limit = kIovLimit;
  info->tx_attr->rma_iov_limit = 1;

  info->rx_attr->caps = kRxCaps;
  info->rx_attr->msg_order = FI_ORDER_SAS;
  info->rx_attr->comp_order = FI_ORDER_NONE;
  info->rx_attr->size = kQueueSize;
  info->rx_attr->iov_limit = kIovLimit;

  info->ep_attr->type = FI_EP_RDM;
  info->ep_attr->protocol = FI_PROTO_UNSPEC;
  info->ep_attr->protocol_version = 1;
  info->ep_attr->max_msg_size = kMaxMessageSize;
  // 64 tag bits the application may use as it likes: libfabric's FI_TAG_GENERIC pattern (ofi.h).
  info->ep_attr->mem_tag_format = 0xAAAAAAAAAAAAAAAAull;
  info->ep_attr->tx_ctx_cnt = 1;
  info->ep_attr->rx_ctx_cnt = 1;

  fi_domain_attr* d = info->domain_attr;
  d->name = strdup(domain_name.c_str());
  d->threading = FI_THREAD_SAFE;
  d->control_progress = FI_PROGRESS_MANUAL;
  d->data_progress = FI_PROGRESS_MANUAL;
  d->resource_mgmt = FI_RM_ENABLED;
  // Either type is usable (fi_addr is the insertion index in both, address_vector.cc) and none
  // is preferred: FI_AV_UNSPEC, as libfabric's tcp provider says, unless the hints ask for one.
  // (Reporting FI_AV_TABLE unasked made fabtests' server, which then assumes every new peer is
  // fi_addr 0, address a gone client in fi_rdm_multi_client.)
  d->av_type = FI_AV_UNSPEC;
  d->mr_mode = 0;
  d->mr_key_size = sizeof(uint64_t);
  d->cq_data_size = sizeof(uint64_t);
  d->cq_cnt = 256;
  d->ep_cnt = 256;
  d->tx_ctx_cnt = 256;
  d->rx_ctx_cnt = 256;
  d->max_ep_tx_ctx = 1;
  d->max_ep_rx_ctx = 1;
  d->mr_iov_limit = 1;
  d->mr_cnt = 1u << 16;
  d->caps = kDomainCaps;

  info->fabric_attr->name = strdup(kFabricName);
  info->fabric_attr->prov_version = kProviderVersion;
  info->fabric_attr->api_version = version;
  return info;
}

int FitToHints(uint32_t version, const fi_info* hints, fi_info* info, std::string& why) {
  if (hints == nullptr) return 0;
  auto refuse = [&](std::string reason) {
    why = std::move(reason);
    return -FI_ENODATA;
  };
  if (const uint64_t missing = hints->caps & ~kCaps; missing != 0) {
    return refuse(absl::StrCat("capabilities the provider lacks: ", CapsText(missing)));
  }
  if ((hints->caps & (FI_READ | FI_REMOTE_READ | FI_ATOMIC)) != 0) {
    return refuse("FI_READ, FI_REMOTE_READ and FI_ATOMIC: MetaRoCE has Write, not Read");
  }
  if (hints->caps != 0) {
    // fi_getinfo(3): the primary caps asked for, narrowed to what they mean here, and the
    // secondary caps the provider keeps. FI_RMA without a direction implies all four
    // (fi_getinfo(3)); the provider has the write ones only, and says so, so that an
    // application registers for FI_REMOTE_WRITE, not remote read (fi_mr_test registered for
    // both from a bare FI_RMA, and fi_mr_reg refused the read). FI_MSG and FI_TAGGED without
    // a direction imply both.
    uint64_t caps = hints->caps;
    if ((caps & FI_RMA) && !(caps & (FI_WRITE | FI_REMOTE_WRITE))) {
      caps |= FI_WRITE | FI_REMOTE_WRITE;
    }
    if ((caps & (FI_MSG | FI_TAGGED)) && !(caps & (FI_SEND | FI_RECV))) caps |= FI_SEND | FI_RECV;
    info->caps = caps | (info->caps & kSecondaryCaps);
  }
  // The transmit and receive caps: what the endpoint's caps hold of each (no FI_TAGGED unless
  // the application asked for it; FI_SOURCE is a receive cap, the COMM ones the domain's).
  info->tx_attr->caps = info->caps & kTxCaps;
  info->rx_attr->caps = info->caps & kRxCaps;
  if (hints->addr_format != FI_FORMAT_UNSPEC) {
    return refuse("address formats other than FI_FORMAT_UNSPEC (metaroce's own 60 bytes)");
  }
  for (const auto& [addr, len, what] :
       {std::tuple{hints->src_addr, hints->src_addrlen, "src_addr"},
        std::tuple{hints->dest_addr, hints->dest_addrlen, "dest_addr"}}) {
    if (addr == nullptr) continue;
    std::span<const uint8_t> bytes(static_cast<const uint8_t*>(addr), len);
    absl::StatusOr<EndpointAddress> a = std::string_view(what) == "src_addr"
                                            ? EndpointAddress::DecodeSource(bytes)
                                            : EndpointAddress::Decode(bytes);
    if (!a.ok()) return refuse(absl::StrCat(what, ": ", a.status().message()));
  }
  for (const auto& [from, from_len, to, to_len] :
       {std::tuple{hints->src_addr, hints->src_addrlen, &info->src_addr, &info->src_addrlen},
        std::tuple{hints->dest_addr, hints->dest_addrlen, &info->dest_addr,
                   &info->dest_addrlen}}) {
    if (from == nullptr) continue;
    free(*to);
    *to = malloc(from_len);
    if (*to == nullptr) return -FI_ENOMEM;
    std::memcpy(*to, from, from_len);
    *to_len = from_len;
  }
  if (const fi_ep_attr* e = hints->ep_attr) {
    if (e->type != FI_EP_UNSPEC && e->type != FI_EP_RDM) {
      return refuse("endpoint types other than FI_EP_RDM");
    }
    if (e->protocol != FI_PROTO_UNSPEC) return refuse("a named protocol");
    if (e->max_msg_size > kMaxMessageSize) return refuse("max_msg_size above 4 GiB");
    if (e->tx_ctx_cnt > 1 || e->rx_ctx_cnt > 1) return refuse("scalable endpoints");
  }
  if (const fi_tx_attr* t = hints->tx_attr) {
    if (t->caps & ~kTxCaps & ~kSecondaryCaps) return refuse("transmit capabilities it lacks");
    if (t->msg_order & ~uint64_t{FI_ORDER_SAS}) {
      return refuse("message orders beyond FI_ORDER_SAS");
    }
    if (t->comp_order & ~uint64_t{FI_ORDER_NONE}) return refuse("completion ordering");
    if (t->inject_size > info->tx_attr->inject_size) {
      return refuse(absl::StrCat("inject_size above ", info->tx_attr->inject_size,
                                 " (FI_METAROCE_INJECT_SIZE)"));
    }
    if (t->iov_limit > kIovLimit) return refuse("iov_limit above 8");
    if (t->rma_iov_limit > 1) return refuse("rma_iov_limit above 1");
    if (t->caps != 0) info->tx_attr->caps &= t->caps;
    info->tx_attr->op_flags = t->op_flags;
    if (t->size > 0 && t->size < info->tx_attr->size) info->tx_attr->size = t->size;
  }
  if (const fi_rx_attr* r = hints->rx_attr) {
    if (r->caps & ~kRxCaps & ~kSecondaryCaps) return refuse("receive capabilities it lacks");
    if (r->msg_order & ~uint64_t{FI_ORDER_SAS}) {
      return refuse("message orders beyond FI_ORDER_SAS");
    }
    if (r->comp_order & ~uint64_t{FI_ORDER_NONE}) return refuse("completion ordering");
    if (r->iov_limit > kIovLimit) return refuse("iov_limit above 8");
    if (r->total_buffered_recv > 0) return refuse("total_buffered_recv");
    if (r->caps != 0) info->rx_attr->caps &= r->caps | FI_SOURCE;
    info->rx_attr->op_flags = r->op_flags;
    if (r->size > 0 && r->size < info->rx_attr->size) info->rx_attr->size = r->size;
  }
  if (const fi_domain_attr* d = hints->domain_attr) {
    fi_domain_attr* o = info->domain_attr;
    if (d->name != nullptr && std::strcmp(d->name, o->name) != 0) {
      return refuse(absl::StrCat("domain ", d->name, " (this host's is ", o->name, ")"));
    }
    if (d->threading != FI_THREAD_UNSPEC) o->threading = d->threading;
    // FI_PROGRESS_AUTO: a progress thread of the domain's does what the application's calls
    // would (Domain::Open); one mode for both, the stronger one asked for.
    if (d->control_progress == FI_PROGRESS_AUTO || d->data_progress == FI_PROGRESS_AUTO) {
      o->control_progress = FI_PROGRESS_AUTO;
      o->data_progress = FI_PROGRESS_AUTO;
    }
    if (d->av_type != FI_AV_UNSPEC) o->av_type = d->av_type;
    if (FI_VERSION_GE(version, FI_VERSION(1, 5))) {
      // fi_mr(3): the legacy modes come back as asked (FI_MR_BASIC "will not be cleared by the
      // provider"); the domain then acts as FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED
      // (BASIC) or with no mode bit (SCALABLE): EffectiveMrMode.
      if (d->mr_mode == FI_MR_BASIC || d->mr_mode == FI_MR_SCALABLE) {
        o->mr_mode = d->mr_mode;
      } else {
        o->mr_mode = d->mr_mode & kMrModes;
      }
    } else {
      o->mr_mode = d->mr_mode == FI_MR_BASIC ? FI_MR_BASIC : FI_MR_SCALABLE;
    }
    if (d->cq_data_size > o->cq_data_size) return refuse("cq_data_size above 8");
    if (d->mr_key_size > o->mr_key_size) return refuse("mr_key_size above 8");
    if (d->caps & ~kDomainCaps) return refuse("domain capabilities it lacks");
  } else if (!FI_VERSION_GE(version, FI_VERSION(1, 5))) {
    info->domain_attr->mr_mode = FI_MR_SCALABLE;
  }
  if (const fi_fabric_attr* f = hints->fabric_attr) {
    if (f->name != nullptr && std::strcmp(f->name, kFabricName) != 0) {
      return refuse(absl::StrCat("fabric ", f->name));
    }
    if (f->prov_name != nullptr && strcasecmp(f->prov_name, kProviderName) != 0) {
      return refuse(absl::StrCat("provider ", f->prov_name));
    }
  }
  return 0;
}

uint64_t EffectiveMrMode(uint32_t version, int mr_mode) {
  if (!FI_VERSION_GE(version, FI_VERSION(1, 5)) || mr_mode == FI_MR_BASIC ||
      mr_mode == FI_MR_SCALABLE) {
    if (mr_mode == FI_MR_BASIC) return FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED;
    return 0;
  }
  return static_cast<uint64_t>(mr_mode);
}

namespace {

// The address of `node` (null: the loopback address), as getaddrinfo gives it first.
absl::StatusOr<io::IpAddress> Resolve(const char* node, bool numeric) {
  if (node == nullptr) return io::IpAddress::Parse("127.0.0.1");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = numeric ? AI_NUMERICHOST : 0;
  addrinfo* res = nullptr;
  if (const int rc = getaddrinfo(node, nullptr, &hints, &res); rc != 0) {
    return absl::NotFoundError(absl::StrCat("node ", node, ": ", gai_strerror(rc)));
  }
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = res->ai_family == AF_INET6
                        ? static_cast<const void*>(
                              &reinterpret_cast<const sockaddr_in6*>(res->ai_addr)->sin6_addr)
                        : static_cast<const void*>(
                              &reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr);
  inet_ntop(res->ai_family, raw, text, sizeof(text));
  freeaddrinfo(res);
  return io::IpAddress::Parse(text);
}

absl::StatusOr<uint16_t> Port(const char* service) {
  if (service == nullptr) return uint16_t{0};
  uint32_t port = 0;
  if (!absl::SimpleAtoi(service, &port) || port > 0xffff) {
    return absl::InvalidArgumentError(
        absl::StrCat("service ", service, ": a TCP port number is expected"));
  }
  return static_cast<uint16_t>(port);
}

// Replaces `*to` (malloc'd, fi_freeinfo frees it) with `a` encoded.
int SetAddress(const EndpointAddress& a, void** to, size_t* to_len) {
  void* bytes = malloc(kAddressBytes);
  if (bytes == nullptr) return -FI_ENOMEM;
  const EndpointAddress::Bytes b = a.Encode();
  std::memcpy(bytes, b.data(), kAddressBytes);
  free(*to);
  *to = bytes;
  *to_len = kAddressBytes;
  return 0;
}

}  // namespace

int FitToNodeService(const char* node, const char* service, uint64_t flags,
                     const io::IpAddress& local, fi_info* info, std::string& why) {
  auto refuse = [&](const absl::Status& reason) {
    why = std::string(reason.message());
    return -FI_ENODATA;
  };
  absl::StatusOr<uint16_t> port = Port(service);
  if (!port.ok()) return refuse(port.status());
  const bool numeric = (flags & FI_NUMERICHOST) != 0;
  if (flags & FI_SOURCE) {
    EndpointAddress src;
    if (node != nullptr) {
      absl::StatusOr<io::IpAddress> ip = Resolve(node, numeric);
      if (!ip.ok()) return refuse(ip.status());
      src.planes = {*ip};
    } else {
      src.planes = {local};
    }
    src.tcp_port = *port;
    return SetAddress(src, &info->src_addr, &info->src_addrlen);
  }
  if (node != nullptr || service != nullptr) {
    absl::StatusOr<io::IpAddress> ip = Resolve(node, numeric);
    if (!ip.ok()) return refuse(ip.status());
    if (*port == 0) {
      return refuse(absl::InvalidArgumentError(absl::StrCat(
          "node ", node, " without a service: the peer's port is needed to reach it")));
    }
    EndpointAddress dest;
    dest.planes = {*ip};
    dest.tcp_port = *port;
    if (const int r = SetAddress(dest, &info->dest_addr, &info->dest_addrlen); r != 0) return r;
  }
  if (info->src_addr == nullptr) {
    EndpointAddress src;
    src.planes = {local};
    return SetAddress(src, &info->src_addr, &info->src_addrlen);
  }
  return 0;
}

}  // namespace metaroce::ofi
