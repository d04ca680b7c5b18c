// Next-hop resolution for ports that build Ethernet frames themselves: destination IP -> route
// (RTM_GETROUTE) -> next-hop IP and interface -> neighbour entry (RTM_GETNEIGH) -> MAC.
//
// Talks rtnetlink directly (no `ip` parsing), one short-lived NETLINK_ROUTE socket per lookup,
// so the kernel answered is the one of the network namespace the calling thread is in.
//
// Threading: the free functions are thread-safe; a NeighborTable (a cache) is used by one thread.
// Costs: a lookup that misses the cache is two netlink round trips (tens of microseconds); the
// cache makes the steady state free. Entries expire after `ttl` so that a changed route or MAC is
// picked up; a failed lookup is retried no more often than `negative_ttl`.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lib/io/frame.h"
#include "lib/io/ip_address.h"

namespace metaroce::io {

struct NextHop {
  IpAddress gateway;     // the IP whose MAC is used: the destination itself when on-link
  bool on_link = true;   // no gateway on the route
  uint32_t ifindex = 0;  // outgoing interface
  IpAddress preferred_source;  // RTA_PREFSRC when the route has one, else all zero
};

// One route lookup (RTM_GETROUTE for `destination`). Errors: NotFound (no route: add one or fix
// the address), errno-mapped netlink failures.
absl::StatusOr<NextHop> LookUpRoute(const IpAddress& destination);

// One neighbour table lookup for `address` on `ifindex`. Errors: Unavailable when the entry is
// missing or not resolved yet, with the fix in the message (traffic through the kernel resolves
// it: `ping -c1 ADDRESS` in this namespace); errno-mapped netlink failures.
absl::StatusOr<MacAddress> LookUpNeighbor(const IpAddress& address, uint32_t ifindex);

class NeighborTable {
 public:
  struct Options {
    // Interface the port sends on. Routes through another interface are refused
    // (FailedPrecondition): the frame would leave on the wrong plane. 0: accept any.
    uint32_t ifindex = 0;
    std::chrono::steady_clock::duration ttl = std::chrono::seconds(10);
    std::chrono::steady_clock::duration negative_ttl = std::chrono::milliseconds(100);
  };

  NeighborTable() : NeighborTable(Options{}) {}
  explicit NeighborTable(Options options) : options_(options) {}

  // The MAC to put in frames for `destination`: cached, else route + neighbour lookups. A cached
  // failure is returned as is until negative_ttl passes.
  absl::StatusOr<MacAddress> Resolve(const IpAddress& destination);
  // Forgets every entry (e.g. after a route change).
  void Clear() { cache_.clear(); }

 private:
  struct Entry {
    absl::StatusOr<MacAddress> mac;
    std::chrono::steady_clock::time_point expires;
  };
  struct IpHash {
    size_t operator()(const IpAddress& a) const;
  };

  Options options_;
  absl::flat_hash_map<IpAddress, Entry, IpHash> cache_;
};

}  // namespace metaroce::io
