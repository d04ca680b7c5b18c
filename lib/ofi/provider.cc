// The provider's entry point for libfabric (fi_prov_ini, FI_EXT_INI), fi_getinfo and fi_fabric.
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/control/protocol.h"
#include "lib/io/interface_info.h"
#include "lib/ofi/entry_points.h"
#include "lib/ofi/info.h"
#include "lib/ofi/objects.h"

namespace metaroce::ofi {
namespace {

int GetInfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, fi_info** info);
int FabricOpen(fi_fabric_attr* attr, fid_fabric** fabric, void* context);
void Cleanup() {}

fi_provider kProvider = {
    kProviderVersion, FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), {}, kProviderName,
    GetInfo,          FabricOpen,                                  Cleanup};

absl::StatusOr<Settings> ReadSettings() {
  return Settings::Read([](const char* name) -> const char* {
    char* value = nullptr;
    if (fi_param_get_str(&kProvider, name, &value) != FI_SUCCESS) return nullptr;
    return value;
  });
}

std::string DomainName(const Settings& s) {
  std::vector<std::string> interfaces = s.interfaces;
  if (interfaces.empty()) interfaces = InterfacesFromDaemonConfig("/etc/metaroce/metaroced.conf");
  const std::string planes = interfaces.empty() ? std::string("metaroced")
                                                : absl::StrJoin(interfaces, "+");
  return absl::StrCat(planes, ":", s.paths, "paths");
}

// This host's plane-0 address (the first address of the first interface the engine would run
// on), or the IPv4 wildcard when there is none to tell (attached to a daemon with no
// interfaces named here): the source fi_getinfo reports (FitToNodeService).
io::IpAddress LocalAddress(const Settings& s) {
  std::vector<std::string> interfaces = s.interfaces;
  if (interfaces.empty()) interfaces = InterfacesFromDaemonConfig("/etc/metaroce/metaroced.conf");
  if (!interfaces.empty()) {
    if (absl::StatusOr<io::InterfaceInfo> i = io::ReadInterfaceInfo(interfaces[0]); i.ok()) {
      if (!i->ipv4.empty()) return i->ipv4[0].address;
      for (const io::InterfaceAddress& a : i->ipv6) {
        const bool link_local = a.address.bytes[0] == 0xfe && (a.address.bytes[1] & 0xc0) == 0x80;
        if (!link_local) return a.address;
      }
    }
  }
  return io::IpAddress::V4(0);
}

int GetInfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, fi_info** info) {
  absl::StatusOr<Settings> s = ReadSettings();
  if (!s.ok()) {
    Warn(std::string(s.status().message()));
    return -FI_ENODATA;
  }
  // Offer only what fi_domain can open (settings.h, Offerable).
  const std::string socket =
      s->socket_path.empty() ? std::string(control::kDefaultSocketPath) : s->socket_path;
  if (absl::Status st = Offerable(*s, socket, access(socket.c_str(), F_OK) == 0,
                                  InterfacesFromDaemonConfig("/etc/metaroce/metaroced.conf"));
      !st.ok()) {
    FI_INFO(&kProvider, FI_LOG_CORE, "not offered: %s\n", std::string(st.message()).c_str());
    return -FI_ENODATA;
  }
  fi_info* ours = ProviderInfo(version, *s, DomainName(*s));
  if (ours == nullptr) return -FI_ENOMEM;
  std::string why;
  if (const int r = FitToHints(version, hints, ours, why); r != 0) {
    if (!why.empty()) {
      FI_INFO(&kProvider, FI_LOG_CORE, "hints refused: %s\n", why.c_str());
    }
    fi_freeinfo(ours);
    return r;
  }
  if (const int r = FitToNodeService(node, service, flags, LocalAddress(*s), ours, why); r != 0) {
    FI_INFO(&kProvider, FI_LOG_CORE, "node/service refused: %s\n", why.c_str());
    fi_freeinfo(ours);
    return r;
  }
  *info = ours;
  return 0;
}

int FabricClose(fid* f) {
  delete FromFid<Fabric>(f);
  return 0;
}

int DomainOpen(fid_fabric* fabric, fi_info* info, fid_domain** domain, void* context) {
  return OpenDomain(fabric, info, domain, context);
}

fi_ops kFabricFidOps = {sizeof(fi_ops), FabricClose, METAROCE_ENOSYS(fi_ops, bind),
                        METAROCE_ENOSYS(fi_ops, control), METAROCE_ENOSYS(fi_ops, ops_open),
                        nullptr, nullptr};
fi_ops_fabric kFabricOps = {sizeof(fi_ops_fabric),
                            DomainOpen,
                            METAROCE_ENOSYS(fi_ops_fabric, passive_ep),
                            OpenEq,
                            METAROCE_ENOSYS(fi_ops_fabric, wait_open),
                            METAROCE_ENOSYS(fi_ops_fabric, trywait),
                            METAROCE_ENOSYS(fi_ops_fabric, domain2)};

int FabricOpen(fi_fabric_attr* attr, fid_fabric** out, void* context) {
  if (attr == nullptr || attr->name == nullptr || std::strcmp(attr->name, kFabricName) != 0) {
    return -FI_EINVAL;
  }
  absl::StatusOr<Settings> s = ReadSettings();
  if (!s.ok()) {
    Warn(std::string(s.status().message()));
    return -FI_EINVAL;
  }
  auto* f = new Fabric;
  std::memset(&f->fid, 0, sizeof(f->fid));
  f->fid.fid.fclass = FI_CLASS_FABRIC;
  f->fid.fid.context = context;
  f->fid.fid.ops = &kFabricFidOps;
  f->fid.ops = &kFabricOps;
  f->fid.api_version = attr->api_version;
  f->settings = *s;
  f->api_version = attr->api_version;
  *out = &f->fid;
  return 0;
}

}  // namespace

void Warn(std::string_view message) {
  const std::string m(message);
  FI_WARN(&kProvider, FI_LOG_CORE, "%s\n", m.c_str());
}

fi_provider* Provider() {
  static bool defined = [] {
    for (const Settings::Parameter& p : Settings::Parameters()) {
      fi_param_define(&kProvider, p.name, FI_PARAM_STRING, "%s", p.help);
    }
    return true;
  }();
  (void)defined;
  return &kProvider;
}

}  // namespace metaroce::ofi

extern "C" FI_EXT_INI { return metaroce::ofi::Provider(); }
