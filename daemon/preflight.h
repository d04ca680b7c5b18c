// Start-up checks of metaroced, before anything is created: each failure is one line that names
// its fix, so that a refusal at start-up never needs a debugger.
//
//   af_xdp ports: capabilities CAP_NET_ADMIN, CAP_BPF (or CAP_SYS_ADMIN), CAP_NET_RAW; bpffs at
//                 /sys/fs/bpf; RLIMIT_MEMLOCK large enough for the UMEMs (or raisable, or
//                 CAP_IPC_LOCK)
//   every kind:   no daemon answers on the control socket already; the interfaces exist (in
//                 this network namespace)
//
// Another XDP program on an interface is found later, by the Datapath when it attaches ours; its
// message names the program and the command that removes it.
//
// Threading: pure functions, plus GatherPreflightFacts which asks the kernel.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/config.h"

namespace metaroce::daemon {

inline constexpr uint32_t kBpfFsMagic = 0xcafe4a11;  // statfs f_type of bpffs (BPF_FS_MAGIC)
inline constexpr const char* kBpfFsPath = "/sys/fs/bpf";

struct PreflightFacts {
  uid_t euid = 0;
  uint64_t effective_caps = 0;       // bit N: capability N (capget, version 3)
  bool bpffs_mounted = false;        // statfs(/sys/fs/bpf).f_type == kBpfFsMagic
  uint64_t memlock_soft = 0;         // bytes; UINT64_MAX: unlimited
  uint64_t memlock_hard = 0;
  std::vector<std::string> missing_interfaces;
  bool socket_answers = false;       // connect() to config.daemon.socket succeeded
};

PreflightFacts GatherPreflightFacts(const Config& config);

// Bytes of UMEM the AF_XDP sockets pin: one socket per worker and plane.
uint64_t UmemBytesNeeded(const Config& config);

// Every refusal, one line each; empty: go.
std::vector<std::string> PreflightRefusals(const Config& config, const PreflightFacts& facts);

}  // namespace metaroce::daemon
