// Registered memory: the only memory the core reads from or writes to.
//
// A region is a byte range of the caller's address space with an lkey, an rkey and ibverbs access
// flags. Addresses are plain virtual addresses (as with ibv_reg_mr): a Write packet names the
// address of its first byte and the rkey of the region that must contain it. Every access the core
// makes goes through Resolve*(), which checks key, bounds and access for the exact byte range and
// refuses anything else (docs/spec/messages-and-memory.md).
//
// A region may also belong to another process (an application attached to a daemon): its
// addresses are that process's, the ones its work requests and its peers name, while the bytes
// are mapped here elsewhere (shared memory). RegisterMapped records where; Resolve*() then
// returns the local address of the same byte.
//
// Protection domains (as ibv_pd; docs/spec/messages-and-memory.md [M7]): every region belongs to
// one (MemoryRegion::pd; kDefaultProtectionDomain is the domain of applications that never ask
// for another), and every Resolve*() names the domain of the connection asking. A region of
// another domain is not found: the answer is kUnknownKey, exactly as for a key that was never
// registered, so that probing keys cannot tell the two apart. Keys stay unique across domains
// (one hash lookup per resolution, then one compare of the entry's domain).
//
// Cost: an incoming Write packet is resolved by its rkey, and consecutive packets almost always
// name the same region (a message is many packets). The table remembers the last region an rkey
// resolved to, so such a packet costs one compare and the checks, not two hash lookups
// (docs/performance.md). Deregister forgets it; keys are never reused, so nothing else can make
// it stale.
//
// Thread-safety: none; owned by one endpoint and used from its thread only (the remembered
// region is written by the const ResolveRemoteWrite).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace metaroce::core {

// The domain of every region and connection that does not name another.
inline constexpr uint32_t kDefaultProtectionDomain = 0;

struct MemoryRegion {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint32_t access = 0;  // access::*
  uint32_t pd = kDefaultProtectionDomain;  // only connections of this domain can use the region
};

// Why an access was refused. Maps to completion statuses: local checks give LOC_PROT_ERR /
// LOC_LEN_ERR, remote ones a REMOTE_ACCESS NAK (REM_ACCESS_ERR at the requester).
enum class AccessError : uint8_t { kNone, kUnknownKey, kOutOfBounds, kNotPermitted };

class MemoryTable {
 public:
  // Registers [base, base+length) with the given access in domain `pd`; keys are assigned by the
  // table and are never reused while the table lives. Fails on a null or empty range or unknown
  // access bits.
  absl::StatusOr<MemoryRegion> Register(void* base, uint64_t length, uint32_t access,
                                        uint32_t pd = kDefaultProtectionDomain);
  // Registers a region under keys (and in the domain) chosen by the caller: an engine with
  // several shards gives the same region the same keys in every shard's table. Refuses keys
  // already in use in any domain, and keys the table itself could still assign (below
  // kFirstCallerKey).
  absl::Status RegisterWithKeys(const MemoryRegion& region);
  // Keys at or above this are never assigned by Register().
  static constexpr uint32_t kFirstCallerKey = 0x80000000u;
  // As RegisterWithKeys, for a region whose addresses are another process's: `region.addr` is
  // its first byte there, `local_base` the same byte mapped in this process.
  absl::Status RegisterMapped(const MemoryRegion& region, void* local_base);
  // The caller must not deregister a region while a posted request or receive still uses it
  // (as with ibv_dereg_mr): the core keeps resolved pointers for outstanding work.
  absl::Status Deregister(uint32_t lkey);

  // For a local gather/scatter list element of a connection of domain `pd`. `need_write`: the
  // core will write (receive buffers).
  AccessError ResolveLocal(uint32_t pd, uint32_t lkey, uint64_t addr, uint64_t length,
                           bool need_write, std::byte** out) const;
  // For an incoming Write on a connection of domain `pd`: needs access::kRemoteWrite and the
  // whole range inside the region.
  AccessError ResolveRemoteWrite(uint32_t pd, uint32_t rkey, uint64_t addr, uint64_t length,
                                 std::byte** out) const;

  size_t size() const { return by_lkey_.size(); }

 private:
  struct Entry {
    MemoryRegion region;
    std::byte* local_base = nullptr;  // region.addr's byte in this process
  };
  absl::Status Insert(const MemoryRegion& region, std::byte* local_base);

  absl::flat_hash_map<uint32_t, Entry> by_lkey_;
  absl::flat_hash_map<uint32_t, uint32_t> lkey_by_rkey_;
  // The region the latest ResolveRemoteWrite found by its key (a copy: valid until Deregister).
  mutable bool last_remote_valid_ = false;
  mutable uint32_t last_rkey_ = 0;
  mutable Entry last_remote_;
  uint32_t next_key_ = 0x100;
};

}  // namespace metaroce::core
