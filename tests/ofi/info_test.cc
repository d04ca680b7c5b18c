// lib/ofi/info.h: the provider's fi_info and FitToHints (fi_getinfo's hints): null hints, refusals
// with FI_ENODATA and a reason (capabilities it lacks, FI_READ, FI_EP_MSG,
// inject_size above its own, a malformed dest_addr), narrowing of caps and mr_mode, dest_addr
// copied.
#include "lib/ofi/info.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "lib/ofi/address.h"

namespace metaroce::ofi {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kVersion = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);

struct FreeInfo {
  void operator()(fi_info* i) const { fi_freeinfo(i); }
};
using InfoPtr = std::unique_ptr<fi_info, FreeInfo>;

InfoPtr Ours() { return InfoPtr(ProviderInfo(kVersion, Settings{}, "lo:8paths")); }
InfoPtr Hints() { return InfoPtr(fi_allocinfo()); }

EndpointAddress::Bytes AnAddress() {
  EndpointAddress a;
  a.planes = {*io::IpAddress::Parse("10.0.0.1")};
  a.tcp_port = 5000;
  a.nonce = 42;
  return a.Encode();
}

void SetDestAddr(fi_info* hints, const uint8_t* bytes, size_t len) {
  hints->dest_addr = malloc(len);
  std::memcpy(hints->dest_addr, bytes, len);
  hints->dest_addrlen = len;
}

// FitToHints's result, and `why` when it refused.
struct Fit {
  int result;
  std::string why;
};
Fit FitOf(const fi_info* hints, fi_info* info) {
  Fit f;
  f.result = FitToHints(kVersion, hints, info, f.why);
  return f;
}

TEST(ProviderInfo, DescribesTheProvider) {
  InfoPtr info = Ours();
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->ep_attr->type, FI_EP_RDM);
  EXPECT_EQ(info->caps & (FI_MSG | FI_TAGGED | FI_RMA), uint64_t{FI_MSG | FI_TAGGED | FI_RMA});
  EXPECT_EQ(info->caps & FI_READ, 0u);
  EXPECT_EQ(info->addr_format, uint32_t{FI_FORMAT_UNSPEC});
  EXPECT_EQ(info->tx_attr->inject_size, 4096u);
  EXPECT_EQ(info->tx_attr->msg_order, uint64_t{FI_ORDER_SAS});
  EXPECT_EQ(info->domain_attr->data_progress, FI_PROGRESS_MANUAL);
  EXPECT_EQ(info->domain_attr->cq_data_size, 8u);
  EXPECT_STREQ(info->domain_attr->name, "lo:8paths");
  EXPECT_STREQ(info->fabric_attr->name, "metaroce");
}

TEST(FitToHints, NullHintsAcceptEverything) {
  InfoPtr info = Ours();
  const uint64_t caps = info->caps;
  EXPECT_EQ(FitOf(nullptr, info.get()).result, 0);
  EXPECT_EQ(info->caps, caps);
}

TEST(FitToHints, NarrowsCapsToTheHintsAndSecondaryCaps) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  hints->caps = FI_TAGGED;
  ASSERT_EQ(FitOf(hints.get(), info.get()).result, 0);
  EXPECT_EQ(info->caps, uint64_t{FI_TAGGED | FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM});
}

TEST(FitToHints, RefusesCapabilitiesItLacksNamingThem) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  hints->caps = FI_MSG | FI_MULTICAST;
  const Fit f = FitOf(hints.get(), info.get());
  EXPECT_EQ(f.result, -FI_ENODATA);
  EXPECT_THAT(f.why, HasSubstr("FI_MULTICAST"));
}

TEST(FitToHints, RefusesFiRead) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  hints->caps = FI_RMA | FI_READ;
  const Fit f = FitOf(hints.get(), info.get());
  EXPECT_EQ(f.result, -FI_ENODATA);
  EXPECT_THAT(f.why, HasSubstr("FI_READ"));
}

TEST(FitToHints, RefusesMsgEndpoints) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  hints->ep_attr->type = FI_EP_MSG;
  const Fit f = FitOf(hints.get(), info.get());
  EXPECT_EQ(f.result, -FI_ENODATA);
  EXPECT_THAT(f.why, HasSubstr("FI_EP_RDM"));
}

TEST(FitToHints, TakesAutoProgressForBoth) {
  for (bool data : {true, false}) {
    InfoPtr info = Ours();
    InfoPtr hints = Hints();
    (data ? hints->domain_attr->data_progress : hints->domain_attr->control_progress) =
        FI_PROGRESS_AUTO;
    const Fit f = FitOf(hints.get(), info.get());
    EXPECT_EQ(f.result, 0) << f.why;
    EXPECT_EQ(info->domain_attr->data_progress, FI_PROGRESS_AUTO);
    EXPECT_EQ(info->domain_attr->control_progress, FI_PROGRESS_AUTO);
  }
}

TEST(FitToHints, KeepsTheMrModesItTakes) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  const uint64_t modes = FI_MR_LOCAL | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED;
  hints->domain_attr->mr_mode = static_cast<int>(modes);
  ASSERT_EQ(FitOf(hints.get(), info.get()).result, 0);
  EXPECT_EQ(info->domain_attr->mr_mode, static_cast<int>(modes));
}

TEST(FitToHints, DropsMrModesItDoesNotTake) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  hints->domain_attr->mr_mode = FI_MR_PROV_KEY | FI_MR_ENDPOINT | FI_MR_RAW | FI_MR_RMA_EVENT;
  ASSERT_EQ(FitOf(hints.get(), info.get()).result, 0);
  EXPECT_EQ(info->domain_attr->mr_mode, FI_MR_PROV_KEY);
}

TEST(FitToHints, NoMrModeOfferedGivesNone) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  hints->domain_attr->mr_mode = 0;
  ASSERT_EQ(FitOf(hints.get(), info.get()).result, 0);
  EXPECT_EQ(info->domain_attr->mr_mode, 0);
}

TEST(FitToHints, MrBasicBecomesProvKeyVirtAddrAllocated) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  hints->domain_attr->mr_mode = FI_MR_BASIC;
  ASSERT_EQ(FitOf(hints.get(), info.get()).result, 0);
  EXPECT_EQ(info->domain_attr->mr_mode, FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED);
}

TEST(FitToHints, RefusesInjectSizeAboveOurs) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  hints->tx_attr->inject_size = 4097;
  const Fit f = FitOf(hints.get(), info.get());
  EXPECT_EQ(f.result, -FI_ENODATA);
  EXPECT_THAT(f.why, HasSubstr("inject_size"));
}

TEST(FitToHints, AcceptsInjectSizeUpToOurs) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  hints->tx_attr->inject_size = 4096;
  EXPECT_EQ(FitOf(hints.get(), info.get()).result, 0);
}

TEST(FitToHints, CopiesDestAddr) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  const EndpointAddress::Bytes a = AnAddress();
  SetDestAddr(hints.get(), a.data(), a.size());
  ASSERT_EQ(FitOf(hints.get(), info.get()).result, 0);
  ASSERT_NE(info->dest_addr, nullptr);
  EXPECT_NE(info->dest_addr, hints->dest_addr);
  ASSERT_EQ(info->dest_addrlen, kAddressBytes);
  EXPECT_EQ(std::memcmp(info->dest_addr, a.data(), a.size()), 0);
}

TEST(FitToHints, RefusesAMalformedDestAddr) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  EndpointAddress::Bytes a = AnAddress();
  a[0] = 'X';
  SetDestAddr(hints.get(), a.data(), a.size());
  const Fit f = FitOf(hints.get(), info.get());
  EXPECT_EQ(f.result, -FI_ENODATA);
  EXPECT_THAT(f.why, HasSubstr("dest_addr"));
  EXPECT_THAT(f.why, HasSubstr("magic"));
}

TEST(FitToHints, RefusesAShortDestAddr) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  const EndpointAddress::Bytes a = AnAddress();
  SetDestAddr(hints.get(), a.data(), 16);
  const Fit f = FitOf(hints.get(), info.get());
  EXPECT_EQ(f.result, -FI_ENODATA);
  EXPECT_THAT(f.why, HasSubstr("dest_addr"));
}

TEST(FitToHints, RefusesAnotherProvider) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  hints->fabric_attr->prov_name = strdup("tcp");
  const Fit f = FitOf(hints.get(), info.get());
  EXPECT_EQ(f.result, -FI_ENODATA);
  EXPECT_THAT(f.why, HasSubstr("tcp"));
}

}  // namespace
}  // namespace metaroce::ofi
