#include "lib/io/memory_port.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <bit>
#include <cstring>

namespace metaroce::io {

// One direction: a bounded SPSC ring. Slots own their byte vectors; the consumer swaps a slot's
// vector with one of its own, so a received packet is never copied a second time.
struct MemoryPort::Ring {
  struct Slot {
    // Sized to max_packet_bytes once and then kept (buffers are swapped with the receiver's,
    // never shrunk): a resize per packet zeroed what the copy then overwrote.
    std::vector<std::byte> bytes;
    uint32_t length = 0;  // of the datagram in `bytes`
    IpAddress src;
    uint16_t src_port = 0;
    uint16_t dst_port = 0;
    bool ce = false;
  };

  explicit Ring(uint32_t capacity)
      : slots(std::bit_ceil(std::max(capacity, 1u))),
        mask(static_cast<uint32_t>(slots.size()) - 1),
        event_fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Ring() {
    if (event_fd >= 0) close(event_fd);
  }

  std::vector<Slot> slots;
  const uint32_t mask;
  const int event_fd;  // the consumer's wait_fd
  // Producer-owned: next slot to fill (published to the consumer through `tail` on Flush).
  alignas(64) uint32_t producer_next = 0;
  alignas(64) std::atomic<uint32_t> tail{0};  // published by the producer (release)
  alignas(64) std::atomic<uint32_t> head{0};  // advanced by the consumer (release)
};

std::pair<std::unique_ptr<MemoryPort>, std::unique_ptr<MemoryPort>> MemoryPort::CreatePair(
    Options a, Options b) {
  auto a_to_b = std::make_shared<Ring>(a.ring_capacity);
  auto b_to_a = std::make_shared<Ring>(b.ring_capacity);
  std::unique_ptr<MemoryPort> first(new MemoryPort(std::move(a), a_to_b, b_to_a));
  std::unique_ptr<MemoryPort> second(new MemoryPort(std::move(b), b_to_a, a_to_b));
  return {std::move(first), std::move(second)};
}

MemoryPort::MemoryPort(Options options, std::shared_ptr<Ring> outbound,
                       std::shared_ptr<Ring> inbound)
    : options_(std::move(options)),
      outbound_(std::move(outbound)),
      inbound_(std::move(inbound)),
      event_fd_(inbound_->event_fd) {}

MemoryPort::~MemoryPort() = default;

bool MemoryPort::Send(const TxPacket& packet) {
  const size_t size = packet.headers.size() + packet.payload.size();
  if (size > options_.max_packet_bytes) {
    ++stats_.tx_unroutable;
    return true;
  }
  Ring& ring = *outbound_;
  const uint32_t head = ring.head.load(std::memory_order_acquire);
  if (ring.producer_next - head > ring.mask) {
    ++stats_.tx_ring_full;
    return false;
  }
  Ring::Slot& slot = ring.slots[ring.producer_next & ring.mask];
  if (slot.bytes.size() < options_.max_packet_bytes) slot.bytes.resize(options_.max_packet_bytes);
  slot.length = static_cast<uint32_t>(size);
  if (!packet.headers.empty()) {
    std::memcpy(slot.bytes.data(), packet.headers.data(), packet.headers.size());
  }
  if (!packet.payload.empty()) {
    std::memcpy(slot.bytes.data() + packet.headers.size(), packet.payload.data(),
                packet.payload.size());
  }
  slot.src = options_.local_ip;
  slot.src_port = packet.src_port;
  slot.dst_port = packet.dst_port;
  slot.ce = packet.ect && options_.mark_ce && options_.mark_ce(packet);
  ++ring.producer_next;
  ++published_unflushed_;
  ++stats_.tx_packets;
  stats_.tx_bytes += size;
  return true;
}

void MemoryPort::Flush() {
  if (published_unflushed_ == 0) return;
  outbound_->tail.store(outbound_->producer_next, std::memory_order_release);
  published_unflushed_ = 0;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t r = write(outbound_->event_fd, &one, sizeof one);
}

size_t MemoryPort::Receive(std::span<RxPacket> out) {
  Ring& ring = *inbound_;
  uint32_t head = ring.head.load(std::memory_order_relaxed);
  uint32_t tail = ring.tail.load(std::memory_order_acquire);
  if (head == tail) {
    uint64_t counter;
    [[maybe_unused]] ssize_t r = read(event_fd_, &counter, sizeof counter);  // re-arm
    tail = ring.tail.load(std::memory_order_acquire);
  }
  size_t n = 0;
  while (n < out.size() && head != tail) {
    Ring::Slot& slot = ring.slots[head & ring.mask];
    uint64_t cookie;
    if (!free_cookies_.empty()) {
      cookie = free_cookies_.back();
      free_cookies_.pop_back();
    } else {
      cookie = lent_buffers_.size();
      lent_buffers_.emplace_back();
    }
    std::swap(lent_buffers_[cookie], slot.bytes);
    RxPacket& p = out[n++];
    p.payload = std::span<const std::byte>(lent_buffers_[cookie].data(), slot.length);
    p.src = slot.src;
    p.src_port = slot.src_port;
    p.dst_port = slot.dst_port;
    p.ce = slot.ce;
    p.cookie = cookie;
    ++stats_.rx_packets;
    stats_.rx_bytes += p.payload.size();
    ++head;
  }
  ring.head.store(head, std::memory_order_release);
  return n;
}

void MemoryPort::Release(std::span<const RxPacket> packets) {
  // The buffer keeps its capacity for the next swap.
  for (const RxPacket& p : packets) free_cookies_.push_back(p.cookie);
}

}  // namespace metaroce::io
