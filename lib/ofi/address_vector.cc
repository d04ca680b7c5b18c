// Address vectors: libfabric's entry points. An fi_addr is the index of the address in the
// vector, for FI_AV_TABLE and FI_AV_MAP alike. A malformed address is not inserted: its fi_addr
// is FI_ADDR_NOTAVAIL (and, with FI_SYNC_ERR, its error in the context's int array). No address
// at all (a null buffer, as an fi_info without a destination carries) is -FI_EINVAL, as is a
// null buffer to fi_av_straddr or fi_av_lookup: every address an application hands the provider
// is checked (EndpointAddress::Decode) before it is read as one.
#include <cstring>

#include "lib/ofi/entry_points.h"
#include "lib/ofi/objects.h"

namespace metaroce::ofi {

fi_addr_t Av::Lookup(const EndpointAddress::Bytes& address) const {
  auto it = by_address.find(
      absl::string_view(reinterpret_cast<const char*>(address.data()), address.size()));
  return it == by_address.end() ? FI_ADDR_NOTAVAIL : it->second;
}

namespace {

int Insert(fid_av* f, const void* addr, size_t count, fi_addr_t* fi_addr, uint64_t flags,
           void* context) {
  auto* av = FromFid<Av>(f);
  if ((flags & ~uint64_t{FI_SYNC_ERR | FI_MORE}) != 0) return -FI_EBADFLAGS;
  if (count == 0) return 0;
  if (addr == nullptr) return -FI_EINVAL;
  std::lock_guard<std::mutex> lock(av->domain->mu);
  int inserted = 0;
  const auto* bytes = static_cast<const uint8_t*>(addr);
  for (size_t i = 0; i < count; ++i) {
    std::span<const uint8_t> one(bytes + i * kAddressBytes, kAddressBytes);
    absl::StatusOr<EndpointAddress> a = EndpointAddress::Decode(one);
    if (!a.ok()) {
      if (fi_addr != nullptr) fi_addr[i] = FI_ADDR_NOTAVAIL;
      if ((flags & FI_SYNC_ERR) && context != nullptr) static_cast<int*>(context)[i] = FI_EINVAL;
      continue;
    }
    EndpointAddress::Bytes b;
    std::memcpy(b.data(), one.data(), kAddressBytes);
    const fi_addr_t index = av->entries.size();
    av->entries.push_back(b);
    av->valid.push_back(true);
    av->by_address.try_emplace(std::string(reinterpret_cast<const char*>(b.data()), b.size()),
                               index);
    if (fi_addr != nullptr) fi_addr[i] = index;
    if ((flags & FI_SYNC_ERR) && context != nullptr) static_cast<int*>(context)[i] = 0;
    ++inserted;
  }
  ++av->generation;
  return inserted;
}

int Remove(fid_av* f, fi_addr_t* fi_addr, size_t count, uint64_t) {
  auto* av = FromFid<Av>(f);
  if (count > 0 && fi_addr == nullptr) return -FI_EINVAL;
  std::lock_guard<std::mutex> lock(av->domain->mu);
  for (size_t i = 0; i < count; ++i) {
    const fi_addr_t a = fi_addr[i];
    if (a >= av->entries.size() || !av->valid[a]) return -FI_EINVAL;
    av->valid[a] = false;
    const EndpointAddress::Bytes& b = av->entries[a];
    auto it = av->by_address.find(
        absl::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
    if (it != av->by_address.end() && it->second == a) av->by_address.erase(it);
  }
  ++av->generation;
  return 0;
}

int Lookup(fid_av* f, fi_addr_t fi_addr, void* addr, size_t* addrlen) {
  auto* av = FromFid<Av>(f);
  if (addrlen == nullptr || (addr == nullptr && *addrlen > 0)) return -FI_EINVAL;
  std::lock_guard<std::mutex> lock(av->domain->mu);
  if (fi_addr >= av->entries.size() || !av->valid[fi_addr]) return -FI_ENOENT;
  const size_t room = *addrlen;
  *addrlen = kAddressBytes;
  std::memcpy(addr, av->entries[fi_addr].data(), std::min(room, kAddressBytes));
  return 0;
}

const char* StrAddr(fid_av*, const void* addr, char* buf, size_t* len) {
  if (len == nullptr) return nullptr;
  absl::StatusOr<EndpointAddress> a =
      addr == nullptr
          ? absl::StatusOr<EndpointAddress>(absl::InvalidArgumentError("no address"))
          : EndpointAddress::Decode({static_cast<const uint8_t*>(addr), kAddressBytes});
  const std::string s = a.ok() ? a->ToString() : "metaroce://(invalid)";
  if (buf != nullptr && *len > 0) {
    const size_t n = std::min(*len - 1, s.size());
    std::memcpy(buf, s.data(), n);
    buf[n] = '\0';
  }
  *len = s.size() + 1;
  return buf;
}

int AvClose(fid* f) {
  auto* av = FromFid<Av>(f);
  if (av->refs.load() > 0) return -FI_EBUSY;
  --av->domain->refs;
  delete av;
  return 0;
}

fi_ops kAvFidOps = {sizeof(fi_ops), AvClose, METAROCE_ENOSYS(fi_ops, bind),
                    METAROCE_ENOSYS(fi_ops, control), METAROCE_ENOSYS(fi_ops, ops_open), nullptr,
                    nullptr};
fi_ops_av kAvOps = {sizeof(fi_ops_av),
                    Insert,
                    METAROCE_ENOSYS(fi_ops_av, insertsvc),
                    METAROCE_ENOSYS(fi_ops_av, insertsym),
                    Remove,
                    Lookup,
                    StrAddr,
                    METAROCE_ENOSYS(fi_ops_av, av_set)};

}  // namespace

int OpenAv(fid_domain* dom, fi_av_attr* attr, fid_av** out, void* context) {
  auto* d = FromFid<Domain>(dom);
  if (attr != nullptr && (attr->flags & FI_EVENT)) return -FI_ENOSYS;  // no EQ reporting
  if (attr != nullptr && attr->name != nullptr) return -FI_ENOSYS;      // no shared AVs
  auto* av = new Av;
  std::memset(&av->fid, 0, sizeof(av->fid));
  av->fid.fid.fclass = FI_CLASS_AV;
  av->fid.fid.context = context;
  av->fid.fid.ops = &kAvFidOps;
  av->fid.ops = &kAvOps;
  av->domain = d;
  av->type = attr != nullptr && attr->type == FI_AV_MAP ? FI_AV_MAP : FI_AV_TABLE;
  ++d->refs;
  *out = &av->fid;
  return 0;
}

}  // namespace metaroce::ofi
