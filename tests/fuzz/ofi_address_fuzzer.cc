// Fuzz target for the libfabric provider's endpoint address (lib/ofi/address.h): the bytes an
// application hands fi_av_insert, fi_av_straddr or fi_getinfo's hints (src_addr, dest_addr),
// which may be short, malformed or another provider's.
//
// What must hold for every input (the whole input is the address; its length is the span's):
//   - no crash, no read outside the input (AddressSanitizer), whatever its length;
//   - a refusal is InvalidArgument with a message;
//   - an accepted address has 1 to 4 planes (IPv4) or 1 to 3 (IPv6), all of one family, and a
//     non-zero TCP port; it re-encodes to the input's first 12 + planes * width bytes (the layout
//     address.h states; what follows is not read) and decodes again to itself;
//   - DecodeSource accepts whatever Decode accepts, as the same address, and refuses an input
//     Decode accepts only for nothing: it differs from Decode only in allowing TCP port 0;
//   - ToString names every plane and the port.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/ofi/address.h"
#include "tests/fuzz/fuzz_check.h"

namespace metaroce::ofi {
namespace {

void Check(std::span<const uint8_t> in) {
  absl::StatusOr<EndpointAddress> a = EndpointAddress::Decode(in);
  absl::StatusOr<EndpointAddress> s = EndpointAddress::DecodeSource(in);
  if (!a.ok()) {
    FUZZ_CHECK(a.status().code() == absl::StatusCode::kInvalidArgument);
    FUZZ_CHECK(!a.status().message().empty());
    if (s.ok()) FUZZ_CHECK(s->tcp_port == 0);  // the one difference
    if (!s.ok()) FUZZ_CHECK(s.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  FUZZ_CHECK(s.ok() && *s == *a);
  FUZZ_CHECK(in.size() >= kAddressBytes);
  FUZZ_CHECK(!a->planes.empty());
  const bool v6 = a->planes[0].v6;
  FUZZ_CHECK(a->planes.size() <= (v6 ? kMaxAddressPlanesV6 : kMaxAddressPlanes));
  for (const io::IpAddress& ip : a->planes) FUZZ_CHECK(ip.v6 == v6);
  FUZZ_CHECK(a->tcp_port != 0);
  const EndpointAddress::Bytes b = a->Encode();
  const size_t used = 12 + a->planes.size() * (v6 ? 16 : 4);
  FUZZ_CHECK(std::equal(b.begin(), b.begin() + used, in.begin()));
  FUZZ_CHECK(std::all_of(b.begin() + used, b.end(), [](uint8_t x) { return x == 0; }));
  absl::StatusOr<EndpointAddress> again = EndpointAddress::Decode(b);
  FUZZ_CHECK(again.ok() && *again == *a);
  const std::string text = a->ToString();
  FUZZ_CHECK(text.rfind("metaroce://", 0) == 0);
  FUZZ_CHECK(text.find(absl::StrCat(":", a->tcp_port, "/")) != std::string::npos);
  for (const io::IpAddress& ip : a->planes) FUZZ_CHECK(text.find(ip.ToString()) != std::string::npos);
}

}  // namespace
}  // namespace metaroce::ofi

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  metaroce::ofi::Check(std::span<const uint8_t>(data, size));
  return 0;
}
