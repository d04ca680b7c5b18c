// Human-readable names of the core's enums, in one place.
#include "lib/core/config.h"
#include "lib/core/path_state.h"
#include "lib/core/types.h"

namespace metaroce::core {

std::string_view StatusStr(WcStatus s) {
  // Same texts as ibv_wc_status_str().
  switch (s) {
    case WcStatus::kSuccess: return "success";
    case WcStatus::kLocLenErr: return "local length error";
    case WcStatus::kLocQpOpErr: return "local QP operation error";
    case WcStatus::kLocProtErr: return "local protection error";
    case WcStatus::kWrFlushErr: return "Work Request Flushed Error";
    case WcStatus::kRemInvReqErr: return "remote invalid request error";
    case WcStatus::kRemAccessErr: return "remote access error";
    case WcStatus::kRemOpErr: return "remote operation error";
    case WcStatus::kRetryExcErr: return "transport retry counter exceeded";
    case WcStatus::kRnrRetryExcErr: return "RNR retry counter exceeded";
    case WcStatus::kGeneralErr: return "general error";
  }
  return "unknown";
}

std::string_view StatusName(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess: return "SUCCESS";
    case WcStatus::kLocLenErr: return "LOC_LEN_ERR";
    case WcStatus::kLocQpOpErr: return "LOC_QP_OP_ERR";
    case WcStatus::kLocProtErr: return "LOC_PROT_ERR";
    case WcStatus::kWrFlushErr: return "WR_FLUSH_ERR";
    case WcStatus::kRemInvReqErr: return "REM_INV_REQ_ERR";
    case WcStatus::kRemAccessErr: return "REM_ACCESS_ERR";
    case WcStatus::kRemOpErr: return "REM_OP_ERR";
    case WcStatus::kRetryExcErr: return "RETRY_EXC_ERR";
    case WcStatus::kRnrRetryExcErr: return "RNR_RETRY_EXC_ERR";
    case WcStatus::kGeneralErr: return "GENERAL_ERR";
  }
  return "UNKNOWN";
}

std::string_view WrOpcodeName(WrOpcode op) {
  switch (op) {
    case WrOpcode::kWrite: return "RDMA_WRITE";
    case WrOpcode::kWriteWithImm: return "RDMA_WRITE_WITH_IMM";
    case WrOpcode::kSend: return "SEND";
    case WrOpcode::kSendWithImm: return "SEND_WITH_IMM";
  }
  return "UNKNOWN";
}

std::string_view PathStateName(PathState s) {
  switch (s) {
    case PathState::kActive: return "active";
    case PathState::kSuspect: return "suspect";
    case PathState::kFailed: return "failed";
    case PathState::kProbing: return "probing";
  }
  return "unknown";
}

std::string_view PathEventReasonName(PathEventReason r) {
  switch (r) {
    case PathEventReason::kTimeout: return "timeout";
    case PathEventReason::kProgress: return "progress";
    case PathEventReason::kFailed: return "failed";
    case PathEventReason::kPersistentCongestion: return "persistent_congestion";
    case PathEventReason::kProbeReply: return "probe_reply";
    case PathEventReason::kProbeTimeout: return "probe_timeout";
    case PathEventReason::kManual: return "manual";
    case PathEventReason::kSilence: return "silence";
  }
  return "unknown";
}

std::string_view TransportProfile::Name() const {
  if (recovery == RecoveryPolicy::kGoBackN) return "gbn";
  if (placement == PlacementPolicy::kReorderBuffer) return "reorder";
  if (placement == PlacementPolicy::kDirect && spray == SprayPolicy::kAllPaths) return "metaroce";
  return "custom";
}

}  // namespace metaroce::core
