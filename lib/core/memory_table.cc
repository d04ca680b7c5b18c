#include "lib/core/memory_table.h"

#include "lib/core/types.h"

namespace metaroce::core {
namespace {

bool InBounds(const MemoryRegion& r, uint64_t addr, uint64_t length) {
  // Written to avoid overflow: addr >= r.addr and addr - r.addr + length <= r.length.
  return addr >= r.addr && addr - r.addr <= r.length && length <= r.length - (addr - r.addr);
}

}  // namespace

absl::StatusOr<MemoryRegion> MemoryTable::Register(void* base, uint64_t length, uint32_t access,
                                                   uint32_t pd) {
  if (base == nullptr || length == 0) {
    return absl::InvalidArgumentError("memory region must be non-empty and non-null");
  }
  constexpr uint32_t kAll = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead;
  if ((access & ~kAll) != 0) return absl::InvalidArgumentError("unknown access flags");
  if ((access & access::kRemoteWrite) && !(access & access::kLocalWrite)) {
    // Same rule as ibv_reg_mr: remote write requires local write.
    return absl::InvalidArgumentError("REMOTE_WRITE requires LOCAL_WRITE");
  }
  MemoryRegion r;
  r.addr = reinterpret_cast<uint64_t>(base);
  r.length = length;
  r.access = access;
  r.pd = pd;
  r.lkey = next_key_++;
  // rkeys are distinct from lkeys so that a confused peer cannot use an lkey as an rkey.
  r.rkey = r.lkey ^ 0x5a5a0000u;
  by_lkey_[r.lkey] = Entry{r, static_cast<std::byte*>(base)};
  lkey_by_rkey_[r.rkey] = r.lkey;
  return r;
}

absl::Status MemoryTable::RegisterWithKeys(const MemoryRegion& r) {
  return Insert(r, reinterpret_cast<std::byte*>(r.addr));
}

absl::Status MemoryTable::RegisterMapped(const MemoryRegion& r, void* local_base) {
  if (local_base == nullptr) return absl::InvalidArgumentError("no local mapping");
  return Insert(r, static_cast<std::byte*>(local_base));
}

absl::Status MemoryTable::Insert(const MemoryRegion& r, std::byte* local_base) {
  if (r.addr == 0 || r.length == 0) {
    return absl::InvalidArgumentError("memory region must be non-empty and non-null");
  }
  constexpr uint32_t kAll = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead;
  if ((r.access & ~kAll) != 0) return absl::InvalidArgumentError("unknown access flags");
  if (r.lkey < kFirstCallerKey || r.rkey < kFirstCallerKey) {
    return absl::InvalidArgumentError("caller-chosen keys must be >= kFirstCallerKey");
  }
  if (by_lkey_.contains(r.lkey) || lkey_by_rkey_.contains(r.rkey)) {
    return absl::AlreadyExistsError("lkey or rkey already registered");
  }
  if (r.addr + r.length < r.addr) return absl::InvalidArgumentError("region wraps around");
  by_lkey_[r.lkey] = Entry{r, local_base};
  lkey_by_rkey_[r.rkey] = r.lkey;
  return absl::OkStatus();
}

absl::Status MemoryTable::Deregister(uint32_t lkey) {
  auto it = by_lkey_.find(lkey);
  if (it == by_lkey_.end()) return absl::NotFoundError("no memory region with this lkey");
  lkey_by_rkey_.erase(it->second.region.rkey);
  by_lkey_.erase(it);
  last_remote_valid_ = false;
  return absl::OkStatus();
}

AccessError MemoryTable::ResolveLocal(uint32_t pd, uint32_t lkey, uint64_t addr,
                                      uint64_t length, bool need_write, std::byte** out) const {
  auto it = by_lkey_.find(lkey);
  // Another domain's region is as unknown as no region at all ([M7]).
  if (it == by_lkey_.end() || it->second.region.pd != pd) return AccessError::kUnknownKey;
  const MemoryRegion& r = it->second.region;
  if (need_write && !(r.access & access::kLocalWrite)) return AccessError::kNotPermitted;
  if (!InBounds(r, addr, length)) return AccessError::kOutOfBounds;
  *out = it->second.local_base + (addr - r.addr);
  return AccessError::kNone;
}

AccessError MemoryTable::ResolveRemoteWrite(uint32_t pd, uint32_t rkey, uint64_t addr,
                                            uint64_t length, std::byte** out) const {
  if (!last_remote_valid_ || last_rkey_ != rkey) {
    auto k = lkey_by_rkey_.find(rkey);
    if (k == lkey_by_rkey_.end()) return AccessError::kUnknownKey;
    last_remote_ = by_lkey_.at(k->second);
    last_rkey_ = rkey;
    last_remote_valid_ = true;
  }
  const Entry& e = last_remote_;
  const MemoryRegion& r = e.region;
  if (r.pd != pd) return AccessError::kUnknownKey;  // as no region at all ([M7])
  if (!(r.access & access::kRemoteWrite)) return AccessError::kNotPermitted;
  if (!InBounds(r, addr, length)) return AccessError::kOutOfBounds;
  *out = e.local_base + (addr - r.addr);
  return AccessError::kNone;
}

}  // namespace metaroce::core
