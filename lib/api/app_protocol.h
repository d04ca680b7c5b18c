// What both ends of an attached application's session compute alike: the control methods'
// names and the shapes of the shared blocks (docs/control-protocol.md, "Applications"). The
// daemon's side is daemon/app_session.h, the application's lib/api/attached_backend.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lib/engine/doorbell.h"

namespace metaroce::api::app_protocol {

inline constexpr std::string_view kAttach = "app.attach";
inline constexpr std::string_view kMemAlloc = "mem.alloc";
inline constexpr std::string_view kMemFree = "mem.free";
inline constexpr std::string_view kMrReg = "mr.reg";
inline constexpr std::string_view kMrDereg = "mr.dereg";
inline constexpr std::string_view kCqCreate = "cq.create";
inline constexpr std::string_view kCqDestroy = "cq.destroy";
inline constexpr std::string_view kQpPrepare = "qp.prepare";
inline constexpr std::string_view kQpCreate = "qp.create";
inline constexpr std::string_view kQpDestroy = "qp.destroy";
inline constexpr std::string_view kQpStats = "qp.stats";
inline constexpr std::string_view kQpRotate = "qp.rotate";
inline constexpr std::string_view kQpAbort = "qp.abort";

// The doorbell block: worker w's engine::Doorbell at w * kDoorbellStride.
inline constexpr size_t kDoorbellStride = sizeof(engine::Doorbell);
inline constexpr size_t DoorbellOffset(int worker) {
  return static_cast<size_t>(worker) * kDoorbellStride;
}

// A connection's path event ring when qp.create does not say.
inline constexpr uint32_t kDefaultEventDepth = 256;
inline constexpr uint32_t kMaxEventDepth = 4096;
// Completion queue depth per worker.
inline constexpr uint64_t kMaxCompletionQueueDepth = uint64_t{1} << 24;

}  // namespace metaroce::api::app_protocol
