#include "lib/engine/doorbell.h"

#include <new>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace metaroce::engine {
namespace {

absl::Status CheckDoorbellMemory(const void* memory, size_t bytes) {
  if (memory == nullptr || !IsCacheLineAligned(memory)) {
    return absl::InvalidArgumentError(
        absl::StrCat("doorbell at ", absl::Hex(reinterpret_cast<uintptr_t>(memory)),
                     " is not aligned to ", kCacheLineBytes, " bytes"));
  }
  if (bytes < sizeof(Doorbell)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a doorbell needs ", sizeof(Doorbell), " bytes; ", bytes, " given"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Doorbell*> Doorbell::PlaceAt(void* memory, size_t bytes) {
  if (absl::Status s = CheckDoorbellMemory(memory, bytes); !s.ok()) return s;
  return new (memory) Doorbell;
}

absl::StatusOr<Doorbell*> Doorbell::AttachAt(void* memory, size_t bytes) {
  if (absl::Status s = CheckDoorbellMemory(memory, bytes); !s.ok()) return s;
  auto* doorbell = static_cast<Doorbell*>(memory);
  if (const uint64_t magic = ReadOnce(doorbell->magic); magic != kMagic) {
    return absl::InvalidArgumentError(absl::StrCat("no doorbell here: magic ", absl::Hex(magic),
                                                   ", expected ", absl::Hex(kMagic),
                                                   " (wrong offset?)"));
  }
  return doorbell;
}

}  // namespace metaroce::engine
