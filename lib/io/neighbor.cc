#include "lib/io/neighbor.h"

#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace metaroce::io {
namespace {

// A NETLINK_ROUTE socket for one request/response exchange.
class RouteNetlink {
 public:
  RouteNetlink() : fd_(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE)) {}
  ~RouteNetlink() {
    if (fd_ >= 0) close(fd_);
  }
  RouteNetlink(const RouteNetlink&) = delete;
  RouteNetlink& operator=(const RouteNetlink&) = delete;

  // Sends `request` (its nlmsghdr filled but for seq/pid) and calls `on_message` for every
  // answer until NLMSG_DONE (dumps) or the single answer (plain requests). An NLMSG_ERROR with
  // a nonzero code becomes an errno status.
  template <typename OnMessage>
  absl::Status Exchange(nlmsghdr* request, OnMessage on_message) {
    if (fd_ < 0) return absl::ErrnoToStatus(errno, "socket(AF_NETLINK, NETLINK_ROUTE)");
    request->nlmsg_seq = ++seq_;
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (sendto(fd_, request, request->nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel) < 0) {
      return absl::ErrnoToStatus(errno, "netlink sendto");
    }
    const bool dump = (request->nlmsg_flags & NLM_F_DUMP) == NLM_F_DUMP;
    std::vector<char> buffer(32768);
    for (;;) {
      const ssize_t got = recv(fd_, buffer.data(), buffer.size(), 0);
      if (got < 0) {
        if (errno == EINTR) continue;
        return absl::ErrnoToStatus(errno, "netlink recv");
      }
      size_t left = static_cast<size_t>(got);
      for (auto* h = reinterpret_cast<nlmsghdr*>(buffer.data()); NLMSG_OK(h, left);
           h = NLMSG_NEXT(h, left)) {
        if (h->nlmsg_seq != seq_) continue;
        if (h->nlmsg_type == NLMSG_DONE) return absl::OkStatus();
        if (h->nlmsg_type == NLMSG_ERROR) {
          const auto* err = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
          if (err->error == 0) return absl::OkStatus();  // ACK
          return absl::ErrnoToStatus(-err->error, "netlink request");
        }
        on_message(h);
        if (!dump) return absl::OkStatus();
      }
    }
  }

 private:
  int fd_;
  uint32_t seq_ = 0;
};

void AddAttribute(nlmsghdr* h, uint16_t type, const void* data, size_t length) {
  auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(h) + NLMSG_ALIGN(h->nlmsg_len));
  rta->rta_type = type;
  rta->rta_len = static_cast<uint16_t>(RTA_LENGTH(length));
  std::memcpy(RTA_DATA(rta), data, length);
  h->nlmsg_len = NLMSG_ALIGN(h->nlmsg_len) + RTA_ALIGN(rta->rta_len);
}

size_t AddressBytes(const IpAddress& a) { return a.v6 ? 16 : 4; }

bool ReadAddress(const rtattr* rta, bool v6, IpAddress* out) {
  const size_t n = v6 ? 16 : 4;
  if (RTA_PAYLOAD(rta) != n) return false;
  *out = IpAddress{};
  out->v6 = v6;
  std::memcpy(out->bytes.data(), RTA_DATA(rta), n);
  return true;
}

}  // namespace

absl::StatusOr<NextHop> LookUpRoute(const IpAddress& destination) {
  struct {
    nlmsghdr header;
    rtmsg route;
    char attributes[64];
  } request{};
  request.header.nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  request.header.nlmsg_type = RTM_GETROUTE;
  request.header.nlmsg_flags = NLM_F_REQUEST;
  request.route.rtm_family = destination.v6 ? AF_INET6 : AF_INET;
  request.route.rtm_dst_len = destination.v6 ? 128 : 32;
  AddAttribute(&request.header, RTA_DST, destination.bytes.data(), AddressBytes(destination));

  NextHop hop;
  bool answered = false;
  RouteNetlink netlink;
  absl::Status status = netlink.Exchange(&request.header, [&](nlmsghdr* h) {
    if (h->nlmsg_type != RTM_NEWROUTE) return;
    answered = true;
    auto* rtm = static_cast<rtmsg*>(NLMSG_DATA(h));
    int left = static_cast<int>(RTM_PAYLOAD(h));
    for (auto* rta = RTM_RTA(rtm); RTA_OK(rta, left); rta = RTA_NEXT(rta, left)) {
      switch (rta->rta_type) {
        case RTA_OIF:
          std::memcpy(&hop.ifindex, RTA_DATA(rta), sizeof hop.ifindex);
          break;
        case RTA_GATEWAY:
          if (ReadAddress(rta, destination.v6, &hop.gateway)) hop.on_link = false;
          break;
        case RTA_PREFSRC:
          ReadAddress(rta, destination.v6, &hop.preferred_source);
          break;
        default:
          break;
      }
    }
  });
  if (!status.ok()) {
    if (absl::IsNotFound(status) || status.code() == absl::StatusCode::kUnavailable ||
        status.message().find("unreachable") != std::string::npos) {
      return absl::NotFoundError(absl::StrCat("no route to ", destination.ToString(),
                                              " in this network namespace (", status.message(),
                                              "): add an address or route for it"));
    }
    return status;
  }
  if (!answered || hop.ifindex == 0) {
    return absl::NotFoundError(absl::StrCat("no route to ", destination.ToString(),
                                            ": add an address or route for it"));
  }
  if (hop.on_link) hop.gateway = destination;
  return hop;
}

absl::StatusOr<MacAddress> LookUpNeighbor(const IpAddress& address, uint32_t ifindex) {
  struct {
    nlmsghdr header;
    ndmsg neighbor;
    char attributes[64];
  } request{};
  request.header.nlmsg_len = NLMSG_LENGTH(sizeof(ndmsg));
  request.header.nlmsg_type = RTM_GETNEIGH;
  request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  request.neighbor.ndm_family = address.v6 ? AF_INET6 : AF_INET;
  request.neighbor.ndm_ifindex = static_cast<int>(ifindex);  // dump filter (strict check not needed)

  std::optional<MacAddress> found;
  uint16_t found_state = 0;
  RouteNetlink netlink;
  absl::Status status = netlink.Exchange(&request.header, [&](nlmsghdr* h) {
    if (h->nlmsg_type != RTM_NEWNEIGH || found) return;
    auto* ndm = static_cast<ndmsg*>(NLMSG_DATA(h));
    if (ifindex != 0 && static_cast<uint32_t>(ndm->ndm_ifindex) != ifindex) return;
    int left = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(ndmsg)));
    IpAddress dst;
    bool dst_matches = false;
    std::optional<MacAddress> mac;
    for (auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(ndm) +
                                               NLMSG_ALIGN(sizeof(ndmsg)));
         RTA_OK(rta, left); rta = RTA_NEXT(rta, left)) {
      if (rta->rta_type == NDA_DST) {
        dst_matches = ReadAddress(rta, address.v6, &dst) && dst == address;
      } else if (rta->rta_type == NDA_LLADDR && RTA_PAYLOAD(rta) == 6) {
        MacAddress m;
        std::memcpy(m.bytes.data(), RTA_DATA(rta), 6);
        mac = m;
      }
    }
    if (!dst_matches) return;
    found_state = ndm->ndm_state;
    constexpr uint16_t kUsable =
        NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP;
    if ((ndm->ndm_state & kUsable) != 0 && mac) found = mac;
  });
  if (!status.ok()) return status;
  if (found) return *found;
  return absl::UnavailableError(absl::StrCat(
      "next hop ", address.ToString(), " has no resolved neighbour entry",
      found_state != 0 ? absl::StrCat(" (state 0x", absl::Hex(found_state), ")") : "",
      ": send it traffic through the kernel to resolve it (e.g. `ping -c1 ", address.ToString(),
      "` in this namespace), or add a permanent entry with `ip neigh`"));
}

size_t NeighborTable::IpHash::operator()(const IpAddress& a) const {
  return absl::HashOf(a.v6, std::string_view(reinterpret_cast<const char*>(a.bytes.data()),
                                             a.bytes.size()));
}

absl::StatusOr<MacAddress> NeighborTable::Resolve(const IpAddress& destination) {
  const auto now = std::chrono::steady_clock::now();
  auto it = cache_.find(destination);
  if (it != cache_.end() && now < it->second.expires) return it->second.mac;

  absl::StatusOr<MacAddress> mac = [&]() -> absl::StatusOr<MacAddress> {
    absl::StatusOr<NextHop> hop = LookUpRoute(destination);
    if (!hop.ok()) return hop.status();
    if (options_.ifindex != 0 && hop->ifindex != options_.ifindex) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the route to ", destination.ToString(), " leaves through interface index ",
          hop->ifindex, ", not this port's (", options_.ifindex,
          "): fix the routes so that each plane's peers are reached through its interface"));
    }
    return LookUpNeighbor(hop->gateway, hop->ifindex);
  }();
  if (!mac.ok() && it != cache_.end() && it->second.mac.ok()) {
    // Keep using a MAC that worked while the kernel re-resolves a stale entry.
    it->second.expires = now + options_.negative_ttl;
    return it->second.mac;
  }
  Entry entry{mac, now + (mac.ok() ? options_.ttl : options_.negative_ttl)};
  cache_.insert_or_assign(destination, entry);
  return mac;
}

}  // namespace metaroce::io
