// The provider's libfabric entry points that open objects (each defined beside its object), the
// provider's log line, and -FI_ENOSYS for operations it does not offer.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <string_view>

namespace metaroce::ofi {

class Domain;

int OpenDomain(fid_fabric* fabric, fi_info* info, fid_domain** domain, void* context);
int OpenEndpoint(Domain* domain, fi_info* info, fid_ep** ep, void* context);
int OpenAv(fid_domain* domain, fi_av_attr* attr, fid_av** av, void* context);
int OpenCq(fid_domain* domain, fi_cq_attr* attr, fid_cq** cq, void* context);
int OpenCntr(fid_domain* domain, fi_cntr_attr* attr, fid_cntr** cntr, void* context);
int OpenEq(fid_fabric* fabric, fi_eq_attr* attr, fid_eq** eq, void* context);

// A warning through libfabric's log (FI_LOG_LEVEL=warn shows it).
void Warn(std::string_view message);

// Unsupported<decltype(&ops::member)>::Call: the operation returns -FI_ENOSYS.
template <typename F>
struct Unsupported;
template <typename R, typename... A>
struct Unsupported<R (*)(A...)> {
  static R Call(A...) { return static_cast<R>(-FI_ENOSYS); }
};
#define METAROCE_ENOSYS(ops, member) \
  ::metaroce::ofi::Unsupported<decltype(ops::member)>::Call

}  // namespace metaroce::ofi
