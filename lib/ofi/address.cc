#include "lib/ofi/address.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace metaroce::ofi {
namespace {

constexpr uint8_t kMagic[3] = {'M', 'R', 'A'};
constexpr uint8_t kVersion = 1;

}  // namespace

EndpointAddress::Bytes EndpointAddress::Encode() const {
  Bytes b{};
  std::memcpy(b.data(), kMagic, 3);
  b[3] = kVersion;
  b[4] = static_cast<uint8_t>(planes.size());
  const bool v6 = !planes.empty() && planes[0].v6;
  b[5] = v6 ? 6 : 4;
  b[6] = static_cast<uint8_t>(tcp_port >> 8);
  b[7] = static_cast<uint8_t>(tcp_port);
  for (int i = 0; i < 4; ++i) b[8 + i] = static_cast<uint8_t>(nonce >> (24 - 8 * i));
  const size_t width = v6 ? 16 : 4;
  for (size_t i = 0; i < planes.size() && 12 + (i + 1) * width <= kAddressBytes; ++i) {
    std::memcpy(b.data() + 12 + i * width, planes[i].bytes.data(), width);
  }
  return b;
}

namespace {

absl::StatusOr<EndpointAddress> DecodeAny(std::span<const uint8_t> b, bool source) {
  if (b.data() == nullptr || b.size() < kAddressBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metaroce address of ", b.size(), " bytes: an address is ", kAddressBytes));
  }
  if (std::memcmp(b.data(), kMagic, 3) != 0) {
    return absl::InvalidArgumentError("not a metaroce address (magic is not \"MRA\")");
  }
  if (b[3] != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("metaroce address version ", b[3], ": this provider reads version 1"));
  }
  if (b[5] != 4 && b[5] != 6) {
    return absl::InvalidArgumentError(
        absl::StrCat("metaroce address of address family ", b[5], " (4 or 6 expected)"));
  }
  const bool v6 = b[5] == 6;
  EndpointAddress a;
  const size_t count = b[4];
  const size_t max = v6 ? kMaxAddressPlanesV6 : kMaxAddressPlanes;
  if (count < 1 || count > max) {
    return absl::InvalidArgumentError(absl::StrCat("metaroce address with ", count,
                                                   " planes: 1 to ", max, " are allowed"));
  }
  a.tcp_port = static_cast<uint16_t>(b[6] << 8 | b[7]);
  if (a.tcp_port == 0 && !source) {
    return absl::InvalidArgumentError("metaroce address with TCP port 0");
  }
  for (int i = 0; i < 4; ++i) a.nonce = a.nonce << 8 | b[8 + i];
  const size_t width = v6 ? 16 : 4;
  for (size_t i = 0; i < count; ++i) {
    io::IpAddress ip;
    ip.v6 = v6;
    std::memcpy(ip.bytes.data(), b.data() + 12 + i * width, width);
    a.planes.push_back(ip);
  }
  return a;
}

}  // namespace

absl::StatusOr<EndpointAddress> EndpointAddress::Decode(std::span<const uint8_t> b) {
  return DecodeAny(b, /*source=*/false);
}

absl::StatusOr<EndpointAddress> EndpointAddress::DecodeSource(std::span<const uint8_t> b) {
  return DecodeAny(b, /*source=*/true);
}

std::string EndpointAddress::ToString() const {
  std::string s = "metaroce://";
  for (size_t i = 0; i < planes.size(); ++i) {
    if (i > 0) s += ",";
    s += planes[i].v6 ? absl::StrCat("[", planes[i].ToString(), "]") : planes[i].ToString();
  }
  absl::StrAppend(&s, ":", tcp_port, "/", absl::StrFormat("%08x", nonce));
  return s;
}

}  // namespace metaroce::ofi
