// Tests of lib/core/memory_table.h: registration, key assignment, and the key, bounds and access
// checks that guard every byte the core reads or writes (docs/spec/memory.md).
#include "lib/core/memory_table.h"

#include <cstdint>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "lib/core/types.h"

namespace metaroce::core {
namespace {

// The domain every test uses unless it is about domains.
constexpr uint32_t kPd = kDefaultProtectionDomain;
constexpr uint32_t kReadOnly = 0;
constexpr uint32_t kLocalRw = access::kLocalWrite;
constexpr uint32_t kRemoteRw = access::kLocalWrite | access::kRemoteWrite;

uint64_t AddrOf(const void* p) { return reinterpret_cast<uint64_t>(p); }

TEST(MemoryTable_Register, ReportsRangeAndAccess) {
  std::vector<std::byte> buf(4096);
  MemoryTable table;
  auto mr = table.Register(buf.data(), buf.size(), kRemoteRw);
  ASSERT_TRUE(mr.ok()) << mr.status();
  EXPECT_EQ(mr->addr, AddrOf(buf.data()));
  EXPECT_EQ(mr->length, buf.size());
  EXPECT_EQ(mr->access, kRemoteRw);
  EXPECT_EQ(table.size(), 1u);
}

TEST(MemoryTable_Register, RefusesNullAndEmpty) {
  std::vector<std::byte> buf(16);
  MemoryTable table;
  EXPECT_EQ(table.Register(nullptr, 16, kLocalRw).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.Register(buf.data(), 0, kLocalRw).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.size(), 0u);
}

TEST(MemoryTable_Register, RefusesUnknownAccessBits) {
  std::vector<std::byte> buf(16);
  MemoryTable table;
  EXPECT_EQ(table.Register(buf.data(), buf.size(), 1u << 7).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.size(), 0u);
}

TEST(MemoryTable_Register, RemoteWriteRequiresLocalWrite) {
  std::vector<std::byte> buf(16);
  MemoryTable table;
  EXPECT_EQ(table.Register(buf.data(), buf.size(), access::kRemoteWrite).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(table.Register(buf.data(), buf.size(), kRemoteRw).ok());
}

TEST(MemoryTable_Register, AcceptsEveryValidAccessCombination) {
  std::vector<std::byte> buf(16);
  MemoryTable table;
  for (uint32_t a : {kReadOnly, kLocalRw, kRemoteRw, access::kRemoteRead,
                     kRemoteRw | access::kRemoteRead}) {
    EXPECT_TRUE(table.Register(buf.data(), buf.size(), a).ok()) << a;
  }
}

TEST(MemoryTable_Keys, DistinctAndNeverReused) {
  std::vector<std::byte> buf(64);
  MemoryTable table;
  std::set<uint32_t> lkeys, rkeys;
  for (int round = 0; round < 50; ++round) {
    auto mr = table.Register(buf.data(), buf.size(), kRemoteRw);
    ASSERT_TRUE(mr.ok());
    EXPECT_TRUE(lkeys.insert(mr->lkey).second) << "lkey reused: " << mr->lkey;
    EXPECT_TRUE(rkeys.insert(mr->rkey).second) << "rkey reused: " << mr->rkey;
    if (round % 2 == 0) {
      ASSERT_TRUE(table.Deregister(mr->lkey).ok());
    }
  }
  // No rkey is also an lkey: a peer that sends an lkey as an rkey gets nothing.
  for (uint32_t r : rkeys) EXPECT_EQ(lkeys.count(r), 0u) << r;
}

TEST(MemoryTable_Deregister, UnknownKeyIsNotFound) {
  MemoryTable table;
  EXPECT_EQ(table.Deregister(12345).code(), absl::StatusCode::kNotFound);
}

TEST(MemoryTable_Deregister, RevokesBothKeys) {
  std::vector<std::byte> buf(64);
  MemoryTable table;
  auto mr = table.Register(buf.data(), buf.size(), kRemoteRw);
  ASSERT_TRUE(mr.ok());
  ASSERT_TRUE(table.Deregister(mr->lkey).ok());
  EXPECT_EQ(table.size(), 0u);
  std::byte* out = nullptr;
  EXPECT_EQ(table.ResolveLocal(kPd, mr->lkey, mr->addr, 1, false, &out), AccessError::kUnknownKey);
  EXPECT_EQ(table.ResolveRemoteWrite(kPd, mr->rkey, mr->addr, 1, &out), AccessError::kUnknownKey);
  EXPECT_EQ(table.Deregister(mr->lkey).code(), absl::StatusCode::kNotFound);
}

// The region remembered from the previous Write is forgotten with its registration.
TEST(MemoryTable_Deregister, RevokesTheRegionTheLastWriteResolved) {
  std::vector<std::byte> a(64), b(64);
  MemoryTable table;
  auto ma = table.Register(a.data(), a.size(), kRemoteRw);
  auto mb = table.Register(b.data(), b.size(), kRemoteRw);
  ASSERT_TRUE(ma.ok() && mb.ok());
  std::byte* out = nullptr;
  ASSERT_EQ(table.ResolveRemoteWrite(kPd, ma->rkey, ma->addr + 8, 8, &out), AccessError::kNone);
  EXPECT_EQ(out, a.data() + 8);
  ASSERT_TRUE(table.Deregister(ma->lkey).ok());
  EXPECT_EQ(table.ResolveRemoteWrite(kPd, ma->rkey, ma->addr + 8, 8, &out),
            AccessError::kUnknownKey);
  // Writes alternating between regions each get their own.
  auto mc = table.Register(a.data(), a.size(), kRemoteRw);
  ASSERT_TRUE(mc.ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(table.ResolveRemoteWrite(kPd, mb->rkey, mb->addr + 1, 1, &out), AccessError::kNone);
    EXPECT_EQ(out, b.data() + 1);
    ASSERT_EQ(table.ResolveRemoteWrite(kPd, mc->rkey, mc->addr + 2, 1, &out), AccessError::kNone);
    EXPECT_EQ(out, a.data() + 2);
  }
}

TEST(MemoryTable_Deregister, LeavesOtherRegionsAlone) {
  std::vector<std::byte> a(64), b(64);
  MemoryTable table;
  auto ma = table.Register(a.data(), a.size(), kRemoteRw);
  auto mb = table.Register(b.data(), b.size(), kRemoteRw);
  ASSERT_TRUE(ma.ok() && mb.ok());
  ASSERT_TRUE(table.Deregister(ma->lkey).ok());
  std::byte* out = nullptr;
  EXPECT_EQ(table.ResolveRemoteWrite(kPd, mb->rkey, mb->addr, 64, &out), AccessError::kNone);
  EXPECT_EQ(out, b.data());
}

TEST(MemoryTable_ResolveLocal, InsideRegionGivesItsAddress) {
  std::vector<std::byte> buf(4096);
  MemoryTable table;
  auto mr = table.Register(buf.data(), buf.size(), kLocalRw);
  ASSERT_TRUE(mr.ok());
  std::byte* out = nullptr;
  EXPECT_EQ(table.ResolveLocal(kPd, mr->lkey, mr->addr, 4096, true, &out), AccessError::kNone);
  EXPECT_EQ(out, buf.data());
  EXPECT_EQ(table.ResolveLocal(kPd, mr->lkey, mr->addr + 100, 3996, false, &out),
            AccessError::kNone);
  EXPECT_EQ(out, buf.data() + 100);
  EXPECT_EQ(table.ResolveLocal(kPd, mr->lkey, mr->addr + 4095, 1, true, &out), AccessError::kNone);
  EXPECT_EQ(out, buf.data() + 4095);
}

TEST(MemoryTable_ResolveLocal, UnknownKey) {
  std::vector<std::byte> buf(64);
  MemoryTable table;
  auto mr = table.Register(buf.data(), buf.size(), kRemoteRw);
  ASSERT_TRUE(mr.ok());
  std::byte* out = nullptr;
  EXPECT_EQ(table.ResolveLocal(kPd, mr->lkey + 1, mr->addr, 1, false, &out),
            AccessError::kUnknownKey);
  // An rkey is not an lkey.
  EXPECT_EQ(table.ResolveLocal(kPd, mr->rkey, mr->addr, 1, false, &out), AccessError::kUnknownKey);
}

TEST(MemoryTable_ResolveLocal, OutOfBounds) {
  std::vector<std::byte> buf(4096);
  MemoryTable table;
  auto mr = table.Register(buf.data() + 1024, 1024, kLocalRw);
  ASSERT_TRUE(mr.ok());
  std::byte* out = nullptr;
  const uint64_t a = mr->addr;
  EXPECT_EQ(table.ResolveLocal(kPd, mr->lkey, a - 1, 1, false, &out), AccessError::kOutOfBounds);
  EXPECT_EQ(table.ResolveLocal(kPd, mr->lkey, a - 1, 2, false, &out), AccessError::kOutOfBounds);
  EXPECT_EQ(table.ResolveLocal(kPd, mr->lkey, a, 1025, false, &out), AccessError::kOutOfBounds);
  EXPECT_EQ(table.ResolveLocal(kPd, mr->lkey, a + 1023, 2, false, &out), AccessError::kOutOfBounds);
  EXPECT_EQ(table.ResolveLocal(kPd, mr->lkey, a + 1024, 1, false, &out), AccessError::kOutOfBounds);
  EXPECT_EQ(table.ResolveLocal(kPd, mr->lkey, a + 4096, 1, false, &out), AccessError::kOutOfBounds);
}

TEST(MemoryTable_ResolveLocal, ArithmeticDoesNotWrap) {
  std::vector<std::byte> buf(4096);
  MemoryTable table;
  auto mr = table.Register(buf.data(), buf.size(), kLocalRw);
  ASSERT_TRUE(mr.ok());
  std::byte* out = nullptr;
  // addr + length overflows 64 bits back into the region.
  EXPECT_EQ(table.ResolveLocal(kPd, mr->lkey, mr->addr + 1, UINT64_MAX, false, &out),
            AccessError::kOutOfBounds);
  EXPECT_EQ(table.ResolveLocal(kPd, mr->lkey, UINT64_MAX, 2, false, &out),
            AccessError::kOutOfBounds);
  EXPECT_EQ(table.ResolveLocal(kPd, mr->lkey, 0, mr->addr + 1, false, &out),
            AccessError::kOutOfBounds);
}

TEST(MemoryTable_ResolveLocal, WriteNeedsLocalWrite) {
  std::vector<std::byte> buf(64);
  MemoryTable table;
  auto ro = table.Register(buf.data(), buf.size(), kReadOnly);
  ASSERT_TRUE(ro.ok());
  std::byte* out = nullptr;
  EXPECT_EQ(table.ResolveLocal(kPd, ro->lkey, ro->addr, 8, true, &out), AccessError::kNotPermitted);
  EXPECT_EQ(table.ResolveLocal(kPd, ro->lkey, ro->addr, 8, false, &out), AccessError::kNone);
}

TEST(MemoryTable_ResolveRemoteWrite, InsideRegionGivesItsAddress) {
  std::vector<std::byte> buf(8192);
  MemoryTable table;
  auto mr = table.Register(buf.data(), buf.size(), kRemoteRw);
  ASSERT_TRUE(mr.ok());
  std::byte* out = nullptr;
  EXPECT_EQ(table.ResolveRemoteWrite(kPd, mr->rkey, mr->addr + 4096, 4096, &out),
            AccessError::kNone);
  EXPECT_EQ(out, buf.data() + 4096);
}

TEST(MemoryTable_ResolveRemoteWrite, NeedsRemoteWriteAccess) {
  std::vector<std::byte> buf(64);
  MemoryTable table;
  for (uint32_t a : {kReadOnly, kLocalRw, access::kRemoteRead}) {
    auto mr = table.Register(buf.data(), buf.size(), a);
    ASSERT_TRUE(mr.ok());
    std::byte* out = nullptr;
    EXPECT_EQ(table.ResolveRemoteWrite(kPd, mr->rkey, mr->addr, 8, &out),
              AccessError::kNotPermitted)
        << a;
  }
}

TEST(MemoryTable_ResolveRemoteWrite, LkeyIsNotAnRkey) {
  std::vector<std::byte> buf(64);
  MemoryTable table;
  auto mr = table.Register(buf.data(), buf.size(), kRemoteRw);
  ASSERT_TRUE(mr.ok());
  std::byte* out = nullptr;
  EXPECT_EQ(table.ResolveRemoteWrite(kPd, mr->lkey, mr->addr, 8, &out), AccessError::kUnknownKey);
  EXPECT_EQ(table.ResolveRemoteWrite(kPd, 0, mr->addr, 8, &out), AccessError::kUnknownKey);
}

TEST(MemoryTable_ResolveRemoteWrite, OutOfBoundsAndNoWrap) {
  std::vector<std::byte> buf(4096);
  MemoryTable table;
  auto mr = table.Register(buf.data() + 1024, 2048, kRemoteRw);
  ASSERT_TRUE(mr.ok());
  std::byte* out = nullptr;
  const uint64_t a = mr->addr;
  EXPECT_EQ(table.ResolveRemoteWrite(kPd, mr->rkey, a - 1, 1, &out), AccessError::kOutOfBounds);
  EXPECT_EQ(table.ResolveRemoteWrite(kPd, mr->rkey, a + 2047, 2, &out), AccessError::kOutOfBounds);
  EXPECT_EQ(table.ResolveRemoteWrite(kPd, mr->rkey, a + 2048, 1, &out), AccessError::kOutOfBounds);
  EXPECT_EQ(table.ResolveRemoteWrite(kPd, mr->rkey, a + 8, UINT64_MAX - 4, &out),
            AccessError::kOutOfBounds);
  EXPECT_EQ(table.ResolveRemoteWrite(kPd, mr->rkey, UINT64_MAX, 1, &out),
            AccessError::kOutOfBounds);
  EXPECT_EQ(table.ResolveRemoteWrite(kPd, mr->rkey, a + 2047, 1, &out), AccessError::kNone);
}

TEST(MemoryTable_ResolveRemoteWrite, RangeSpanningTwoRegionsIsRefused) {
  std::vector<std::byte> buf(128);
  MemoryTable table;
  auto lo = table.Register(buf.data(), 64, kRemoteRw);
  auto hi = table.Register(buf.data() + 64, 64, kRemoteRw);
  ASSERT_TRUE(lo.ok() && hi.ok());
  std::byte* out = nullptr;
  EXPECT_EQ(table.ResolveRemoteWrite(kPd, lo->rkey, lo->addr + 32, 64, &out),
            AccessError::kOutOfBounds);
  EXPECT_EQ(table.ResolveRemoteWrite(kPd, hi->rkey, lo->addr + 32, 64, &out),
            AccessError::kOutOfBounds);
  // Each key covers exactly its own region, even where the address belongs to the other.
  EXPECT_EQ(table.ResolveRemoteWrite(kPd, lo->rkey, hi->addr, 1, &out), AccessError::kOutOfBounds);
}

}  // namespace
}  // namespace metaroce::core

namespace metaroce::core {
namespace {

TEST(MemoryTable_RegisterWithKeys, SameKeysResolveAndCollisionsAreRefused) {
  std::vector<std::byte> buf(4096);
  MemoryTable t;
  MemoryRegion r{reinterpret_cast<uint64_t>(buf.data()), buf.size(), 0x80000001u, 0x80000002u,
                 access::kLocalWrite | access::kRemoteWrite};
  ASSERT_TRUE(t.RegisterWithKeys(r).ok());
  std::byte* p = nullptr;
  EXPECT_EQ(t.ResolveRemoteWrite(kPd, 0x80000002u, r.addr + 10, 100, &p), AccessError::kNone);
  EXPECT_EQ(p, buf.data() + 10);
  EXPECT_EQ(t.ResolveLocal(kPd, 0x80000001u, r.addr, 4096, true, &p), AccessError::kNone);
  EXPECT_EQ(t.RegisterWithKeys(r).code(), absl::StatusCode::kAlreadyExists);
  MemoryRegion low = r;
  low.lkey = 5;
  low.rkey = 0x80000009u;
  EXPECT_EQ(t.RegisterWithKeys(low).code(), absl::StatusCode::kInvalidArgument);
  MemoryRegion empty = r;
  empty.lkey = 0x80000010u;
  empty.rkey = 0x80000011u;
  empty.length = 0;
  EXPECT_EQ(t.RegisterWithKeys(empty).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace metaroce::core

namespace metaroce::core {
namespace {

// A region of another process: its addresses there, its bytes here at another address.
TEST(MemoryTable_RegisterMapped, ResolvesTheirAddressesToOurMapping) {
  std::vector<std::byte> here(8192);
  MemoryTable table;
  MemoryRegion r;
  r.addr = 0x7f0000100000;  // where the application sees the region
  r.length = here.size();
  r.access = kRemoteRw;
  r.lkey = MemoryTable::kFirstCallerKey + 1;
  r.rkey = MemoryTable::kFirstCallerKey + 2;
  ASSERT_TRUE(table.RegisterMapped(r, here.data()).ok());
  std::byte* out = nullptr;
  ASSERT_EQ(table.ResolveLocal(kPd, r.lkey, r.addr + 100, 50, true, &out), AccessError::kNone);
  EXPECT_EQ(out, here.data() + 100);
  ASSERT_EQ(table.ResolveRemoteWrite(kPd, r.rkey, r.addr + 4096, 4096, &out), AccessError::kNone);
  EXPECT_EQ(out, here.data() + 4096);
  // Bounds are the application's: our own address of the bytes means nothing to the table.
  EXPECT_EQ(table.ResolveLocal(kPd, r.lkey, AddrOf(here.data()), 1, false, &out),
            AccessError::kOutOfBounds);
  EXPECT_EQ(table.ResolveRemoteWrite(kPd, r.rkey, r.addr + 8000, 193, &out),
            AccessError::kOutOfBounds);
}

TEST(MemoryTable_RegisterMapped, RefusesNoMappingAndWrappingRegions) {
  std::vector<std::byte> here(64);
  MemoryTable table;
  MemoryRegion r;
  r.addr = 0x1000;
  r.length = 64;
  r.access = kLocalRw;
  r.lkey = MemoryTable::kFirstCallerKey + 1;
  r.rkey = MemoryTable::kFirstCallerKey + 2;
  EXPECT_EQ(table.RegisterMapped(r, nullptr).code(), absl::StatusCode::kInvalidArgument);
  r.addr = UINT64_MAX - 10;
  EXPECT_EQ(table.RegisterMapped(r, here.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.size(), 0u);
}

}  // namespace
}  // namespace metaroce::core

namespace metaroce::core {
namespace {

// [M7]: a region of another protection domain is exactly as unknown as a key never registered.
TEST(MemoryTable_ProtectionDomain, AnotherDomainsKeysAreUnknownKeys) {
  std::vector<std::byte> buf(4096);
  MemoryTable table;
  constexpr uint32_t kMine = 7, kTheirs = 8;
  auto mr = table.Register(buf.data(), buf.size(), kRemoteRw, kMine);
  ASSERT_TRUE(mr.ok());
  EXPECT_EQ(mr->pd, kMine);
  std::byte* out = nullptr;
  EXPECT_EQ(table.ResolveLocal(kMine, mr->lkey, mr->addr, 64, true, &out), AccessError::kNone);
  EXPECT_EQ(table.ResolveRemoteWrite(kMine, mr->rkey, mr->addr, 64, &out), AccessError::kNone);
  for (uint32_t other : {kTheirs, kDefaultProtectionDomain}) {
    out = nullptr;
    // Even a request that would be out of bounds or not permitted says only "unknown key".
    EXPECT_EQ(table.ResolveLocal(other, mr->lkey, mr->addr, 64, true, &out),
              AccessError::kUnknownKey);
    EXPECT_EQ(table.ResolveLocal(other, mr->lkey, mr->addr - 1, 64, false, &out),
              AccessError::kUnknownKey);
    EXPECT_EQ(table.ResolveRemoteWrite(other, mr->rkey, mr->addr, 64, &out),
              AccessError::kUnknownKey);
    EXPECT_EQ(table.ResolveRemoteWrite(other, mr->rkey, mr->addr + 4096, 1, &out),
              AccessError::kUnknownKey);
    EXPECT_EQ(out, nullptr);
  }
}

TEST(MemoryTable_ProtectionDomain, KeysAreUniqueAcrossDomains) {
  std::vector<std::byte> buf(4096);
  MemoryTable t;
  MemoryRegion r;
  r.addr = AddrOf(buf.data());
  r.length = buf.size();
  r.lkey = MemoryTable::kFirstCallerKey + 1;
  r.rkey = MemoryTable::kFirstCallerKey + 2;
  r.access = kRemoteRw;
  r.pd = 1;
  ASSERT_TRUE(t.RegisterMapped(r, buf.data()).ok());
  r.pd = 2;  // the same keys in another domain would make a key name two regions
  EXPECT_EQ(t.RegisterMapped(r, buf.data()).code(), absl::StatusCode::kAlreadyExists);
  std::byte* out = nullptr;
  EXPECT_EQ(t.ResolveLocal(2, r.lkey, r.addr, 1, false, &out), AccessError::kUnknownKey);
  EXPECT_EQ(t.ResolveLocal(1, r.lkey, r.addr, 1, false, &out), AccessError::kNone);
}

}  // namespace
}  // namespace metaroce::core
