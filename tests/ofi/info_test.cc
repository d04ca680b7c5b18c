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
#include <span>
#include <string>
#include <vector>

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
  // FI_TAGGED without a direction implies both (fi_getinfo(3)).
  EXPECT_EQ(info->caps, uint64_t{FI_TAGGED | FI_SEND | FI_RECV | FI_SOURCE | FI_LOCAL_COMM |
                                 FI_REMOTE_COMM});
}

TEST(FitToHints, RmaWithoutADirectionComesBackAsTheWritesItHas) {
  // fi_mr_test's hints: FI_MSG | FI_RMA. Returned bare, FI_RMA implies remote read, which
  // fabtests then registered memory for and fi_mr_reg refused.
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  hints->caps = FI_MSG | FI_RMA;
  ASSERT_EQ(FitOf(hints.get(), info.get()).result, 0);
  EXPECT_EQ(info->caps & (FI_WRITE | FI_REMOTE_WRITE), uint64_t{FI_WRITE | FI_REMOTE_WRITE});
  EXPECT_EQ(info->caps & (FI_READ | FI_REMOTE_READ | FI_TAGGED), 0u);
  EXPECT_EQ(info->tx_attr->caps & FI_TAGGED, 0u) << "FI_TAGGED in tx caps, not asked for";
  EXPECT_EQ(info->rx_attr->caps & FI_TAGGED, 0u) << "FI_TAGGED in rx caps, not asked for";
  EXPECT_NE(info->tx_attr->caps & FI_WRITE, 0u);
  EXPECT_NE(info->rx_attr->caps & FI_REMOTE_WRITE, 0u);
  EXPECT_EQ(info->tx_attr->caps & ~info->caps, 0u);
  EXPECT_EQ(info->rx_attr->caps & ~info->caps, 0u);
}

TEST(FitToHints, TxAndRxCapsHoldOnlyTheirOwnKinds) {
  // fi_getinfo_test caps1: tx caps may hold only transmit caps (no FI_SOURCE, a receive cap,
  // nor FI_LOCAL_COMM/FI_REMOTE_COMM, the domain's); rx caps only receive caps.
  constexpr uint64_t kTxKinds = FI_MSG | FI_RMA | FI_TAGGED | FI_SEND | FI_READ | FI_WRITE;
  constexpr uint64_t kRxKinds = FI_MSG | FI_RMA | FI_TAGGED | FI_DIRECTED_RECV | FI_RECV |
                                FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SOURCE;
  for (uint64_t caps : {uint64_t{0}, uint64_t{FI_MSG}, uint64_t{FI_TAGGED | FI_DIRECTED_RECV},
                        uint64_t{FI_MSG | FI_RMA | FI_TAGGED}}) {
    InfoPtr info = Ours();
    InfoPtr hints = Hints();
    hints->caps = caps;
    ASSERT_EQ(FitOf(hints.get(), info.get()).result, 0);
    EXPECT_EQ(info->tx_attr->caps & ~kTxKinds, 0u) << "hints 0x" << std::hex << caps;
    EXPECT_EQ(info->rx_attr->caps & ~kRxKinds, 0u) << "hints 0x" << std::hex << caps;
    EXPECT_EQ(info->rx_attr->caps & ~info->caps, 0u);
  }
}

TEST(FitToHints, RmaWithADirectionKeepsIt) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  hints->caps = FI_RMA | FI_WRITE;
  ASSERT_EQ(FitOf(hints.get(), info.get()).result, 0);
  EXPECT_EQ(info->caps & (FI_WRITE | FI_REMOTE_WRITE), uint64_t{FI_WRITE});
}

TEST(FitToHints, TxAndRxCapsNarrowToTheirHints) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  hints->caps = FI_MSG | FI_TAGGED;
  hints->tx_attr->caps = FI_TAGGED;
  ASSERT_EQ(FitOf(hints.get(), info.get()).result, 0);
  EXPECT_EQ(info->tx_attr->caps & (FI_MSG | FI_TAGGED), uint64_t{FI_TAGGED});
  EXPECT_EQ(info->rx_attr->caps & (FI_MSG | FI_TAGGED), uint64_t{FI_MSG | FI_TAGGED});
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

// Either AV type works and neither is preferred: unasked, the info says FI_AV_UNSPEC (an
// FI_AV_TABLE reported unasked led fabtests' fi_rdm_multi_client server to address every new
// client as fi_addr 0, the first, gone); asked, it says what was asked.
TEST(FitToHints, LeavesTheAvTypeOpenUnlessAsked) {
  for (const fi_av_type asked : {FI_AV_UNSPEC, FI_AV_TABLE, FI_AV_MAP}) {
    InfoPtr info = Ours();
    InfoPtr hints = Hints();
    hints->domain_attr->av_type = asked;
    ASSERT_EQ(FitOf(hints.get(), info.get()).result, 0);
    EXPECT_EQ(info->domain_attr->av_type, asked);
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

TEST(FitToHints, MrBasicComesBackAsAsked) {
  // fi_mr(3): "if FI_MR_BASIC is set on input to fi_getinfo(), it will not be cleared".
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  hints->domain_attr->mr_mode = FI_MR_BASIC;
  ASSERT_EQ(FitOf(hints.get(), info.get()).result, 0);
  EXPECT_EQ(info->domain_attr->mr_mode, FI_MR_BASIC);
}

TEST(FitToHints, MrScalableComesBackAsAsked) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  hints->domain_attr->mr_mode = FI_MR_SCALABLE;
  ASSERT_EQ(FitOf(hints.get(), info.get()).result, 0);
  EXPECT_EQ(info->domain_attr->mr_mode, FI_MR_SCALABLE);
}

TEST(EffectiveMrMode, BasicActsAsProvKeyVirtAddrAllocated) {
  for (uint32_t v : {uint32_t{FI_VERSION(1, 4)}, kVersion}) {
    EXPECT_EQ(EffectiveMrMode(v, FI_MR_BASIC),
              uint64_t{FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED});
    EXPECT_EQ(EffectiveMrMode(v, FI_MR_SCALABLE), 0u);
  }
  EXPECT_EQ(EffectiveMrMode(kVersion, FI_MR_LOCAL | FI_MR_PROV_KEY),
            uint64_t{FI_MR_LOCAL | FI_MR_PROV_KEY});
  EXPECT_EQ(EffectiveMrMode(kVersion, 0), 0u);
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

// ---- fi_getinfo's node, service and FI_SOURCE (FitToNodeService) ----

io::IpAddress Local() { return *io::IpAddress::Parse("198.18.0.2"); }

EndpointAddress AddressAt(const void* bytes, size_t len, bool source) {
  std::span<const uint8_t> b(static_cast<const uint8_t*>(bytes), len);
  absl::StatusOr<EndpointAddress> a =
      source ? EndpointAddress::DecodeSource(b) : EndpointAddress::Decode(b);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? *a : EndpointAddress{};
}

TEST(FitToNodeService, NothingGivenStillSetsTheSource) {
  // fi_getinfo_test no_hints 1 and src 1: "source addrlen not set".
  InfoPtr info = Ours();
  std::string why;
  ASSERT_EQ(FitToNodeService(nullptr, nullptr, 0, Local(), info.get(), why), 0) << why;
  ASSERT_EQ(info->src_addrlen, kAddressBytes);
  const EndpointAddress src = AddressAt(info->src_addr, info->src_addrlen, true);
  EXPECT_EQ(src.planes, std::vector<io::IpAddress>{Local()});
  EXPECT_EQ(src.tcp_port, 0);
  EXPECT_EQ(info->dest_addr, nullptr);
}

TEST(FitToNodeService, SourceServiceIsTheListenersPort) {
  InfoPtr info = Ours();
  std::string why;
  ASSERT_EQ(FitToNodeService(nullptr, "9228", FI_SOURCE, Local(), info.get(), why), 0) << why;
  const EndpointAddress src = AddressAt(info->src_addr, info->src_addrlen, true);
  EXPECT_EQ(src.planes, std::vector<io::IpAddress>{Local()});
  EXPECT_EQ(src.tcp_port, 9228);
  EXPECT_EQ(src.nonce, 0u);
  EXPECT_EQ(info->dest_addr, nullptr);
}

TEST(FitToNodeService, SourceNodeIsTheSourceAddress) {
  InfoPtr info = Ours();
  std::string why;
  ASSERT_EQ(FitToNodeService("198.18.1.2", nullptr, FI_SOURCE, Local(), info.get(), why), 0);
  const EndpointAddress src = AddressAt(info->src_addr, info->src_addrlen, true);
  EXPECT_EQ(src.planes[0], *io::IpAddress::Parse("198.18.1.2"));
}

TEST(FitToNodeService, NodeAndServiceAreTheDestination) {
  InfoPtr info = Ours();
  std::string why;
  ASSERT_EQ(FitToNodeService("198.18.0.6", "9228", 0, Local(), info.get(), why), 0) << why;
  ASSERT_EQ(info->dest_addrlen, kAddressBytes);
  const EndpointAddress dest = AddressAt(info->dest_addr, info->dest_addrlen, false);
  EXPECT_EQ(dest.planes, std::vector<io::IpAddress>{*io::IpAddress::Parse("198.18.0.6")});
  EXPECT_EQ(dest.tcp_port, 9228);
  EXPECT_EQ(dest.nonce, 0u) << "nonce 0: whichever endpoint listens there";
  const EndpointAddress src = AddressAt(info->src_addr, info->src_addrlen, true);
  EXPECT_EQ(src.planes[0], Local());
}

TEST(FitToNodeService, Ipv6NodeIsAnIpv6Destination) {
  InfoPtr info = Ours();
  std::string why;
  ASSERT_EQ(FitToNodeService("fd00:6d72:0:1::2", "9228", FI_NUMERICHOST, Local(), info.get(),
                             why), 0) << why;
  const EndpointAddress dest = AddressAt(info->dest_addr, info->dest_addrlen, false);
  EXPECT_TRUE(dest.planes[0].v6);
}

TEST(FitToNodeService, NodeThatDoesNotResolveFindsNothing) {
  InfoPtr info = Ours();
  std::string why;
  EXPECT_EQ(FitToNodeService("g00n13s", "9228", FI_NUMERICHOST, Local(), info.get(), why),
            -FI_ENODATA);
  EXPECT_THAT(why, HasSubstr("g00n13s"));
}

TEST(FitToNodeService, ServiceThatIsNotAPortFindsNothing) {
  InfoPtr info = Ours();
  std::string why;
  EXPECT_EQ(FitToNodeService("198.18.0.6", "http-ish", 0, Local(), info.get(), why),
            -FI_ENODATA);
  EXPECT_THAT(why, HasSubstr("port number"));
}

TEST(FitToNodeService, NodeWithoutServiceCannotBeReached) {
  InfoPtr info = Ours();
  std::string why;
  EXPECT_EQ(FitToNodeService("198.18.0.6", nullptr, 0, Local(), info.get(), why), -FI_ENODATA);
  EXPECT_THAT(why, HasSubstr("port"));
}

TEST(FitToHints, KeepsTheSourceAddressOfTheHints) {
  InfoPtr info = Ours();
  InfoPtr hints = Hints();
  EndpointAddress src;
  src.planes = {Local()};
  src.tcp_port = 0;  // a source may leave the port to the kernel
  const EndpointAddress::Bytes b = src.Encode();
  hints->src_addr = malloc(b.size());
  std::memcpy(hints->src_addr, b.data(), b.size());
  hints->src_addrlen = b.size();
  ASSERT_EQ(FitOf(hints.get(), info.get()).result, 0);
  ASSERT_EQ(info->src_addrlen, kAddressBytes);
  EXPECT_EQ(std::memcmp(info->src_addr, b.data(), b.size()), 0);
}

}  // namespace
}  // namespace metaroce::ofi
