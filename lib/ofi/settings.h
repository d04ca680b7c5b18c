// The provider's settings: libfabric parameters (fi_param_define), read from FI_METAROCE_*
// environment variables, listed with their help by `fi_info -e -p metaroce`.
//
//   FI_METAROCE_MODE          auto | attached | embedded (auto: metaroced's socket when a daemon
//                             answers there, else embedded when this process may open AF_XDP
//                             sockets (root or CAP_NET_ADMIN + CAP_BPF + CAP_NET_RAW), else UDP)
//   FI_METAROCE_SOCKET        metaroced's control socket (attached)
//   FI_METAROCE_INTERFACES    embedded: the planes' interfaces, comma-separated (default: the
//                             `interfaces` of /etc/metaroce/metaroced.conf)
//   FI_METAROCE_PORT_KIND     embedded: af_xdp | udp
//   FI_METAROCE_ENGINE_THREADS embedded: engine worker threads; 0 runs the engine inside the
//                             application's progress calls (lowest latency; the application must
//                             then call into libfabric at least every 2 s, or its peers' connections
//                             to it fail)
//   FI_METAROCE_PATHS         paths per connection
//   FI_METAROCE_EAGER_SIZE    messages up to this size go eagerly; larger ones by rendezvous
//   FI_METAROCE_INJECT_SIZE   fi_inject's limit
//   FI_METAROCE_CHUNK_SIZE    bytes per rendezvous Write
//   FI_METAROCE_CHUNKS_IN_FLIGHT rendezvous Writes a receiver asks for at once, per message
//   FI_METAROCE_RECV_SLOTS    receive buffers per connection (the sender's credits)
//   FI_METAROCE_CONNECT_TIMEOUT_MS  a connection set-up's whole exchange
//   FI_METAROCE_ZERO_COPY     embedded: 1 (default) registers the application's buffers with the
//                             engine so that rendezvous writes go from and into them; 0 copies
//                             through the provider's chunk buffers as attached mode must
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace metaroce::ofi {

enum class Mode : uint8_t { kAuto, kAttached, kEmbedded };

struct Settings {
  Mode mode = Mode::kAuto;
  std::string socket_path;            // empty: the library's default
  std::vector<std::string> interfaces;
  bool udp_port_kind = false;         // embedded over kernel UDP instead of AF_XDP
  bool port_kind_set = false;         // FI_METAROCE_PORT_KIND was given
  int engine_threads = 1;
  uint16_t paths = 8;
  uint32_t eager_size = 8192;
  uint32_t inject_size = 4096;
  uint32_t chunk_size = 128 * 1024;
  uint32_t chunks_in_flight = 4;
  uint32_t recv_slots = 32;
  uint32_t connect_timeout_ms = 5000;
  bool zero_copy = true;  // embedded: rendezvous writes from and into the application's buffers

  // One parameter: its name (lowercase, without FI_METAROCE_) and its help (with its default).
  struct Parameter {
    const char* name;
    const char* help;
  };
  static const std::vector<Parameter>& Parameters();
  // Reads every parameter through `get` (name -> its value, or nullptr when unset); refuses a
  // value out of range with InvalidArgument naming the variable and what is allowed.
  static absl::StatusOr<Settings> Read(const std::function<const char*(const char*)>& get);
};

// Where embedded interfaces default from: the `interfaces = a,b` line of [daemon] in `conf_path`.
std::vector<std::string> InterfacesFromDaemonConfig(const std::string& conf_path);

// Whether fi_getinfo offers the provider: only what fi_domain can open (docs/ofi.md, "Where the
// engine runs"). Attached or auto mode with a daemon's socket at `socket_path` (`daemon_socket`:
// it exists): yes. Embedded, or auto with no socket: only with interfaces to run the engine on
// (FI_METAROCE_INTERFACES, else `config_interfaces`, metaroced.conf's). The provider does not
// guess interfaces (libfabric's tcp provider takes every up interface): an embedded engine
// loads an XDP program on each, which on a host's management interface is not a default to
// take unasked. FailedPrecondition names what to set.
absl::Status Offerable(const Settings& s, const std::string& socket_path, bool daemon_socket,
                       const std::vector<std::string>& config_interfaces);

}  // namespace metaroce::ofi
