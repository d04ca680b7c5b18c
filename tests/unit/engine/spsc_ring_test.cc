#include "lib/engine/spsc_ring.h"

#include <array>
#include <atomic>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/shared_memory.h"

namespace metaroce::engine {
namespace {

using ::testing::HasSubstr;
using testing::GuardedMapping;
using testing::SealedMemfd;

// The same tests run on a heap ring and on a ring placed in caller memory.
enum class Form { kHeap, kPlaced };

template <typename T>
class RingUnderTest {
 public:
  RingUnderTest(Form form, size_t min_capacity) {
    if (form == Form::kHeap) {
      ring_.emplace(min_capacity);
      return;
    }
    const size_t bytes = SpscRing<T>::BytesFor(min_capacity);
    memory_ = AllocateCacheAligned(bytes);
    ring_.emplace(*SpscRing<T>::PlaceAt(memory_.get(), bytes, min_capacity));
  }
  SpscRing<T>& operator*() { return *ring_; }
  SpscRing<T>* operator->() { return &*ring_; }

 private:
  CacheAlignedBytes memory_;  // placed form only; outlives the view
  std::optional<SpscRing<T>> ring_;
};

class SpscRingForms : public ::testing::TestWithParam<Form> {};

TEST_P(SpscRingForms, CapacityRoundsUpToPowerOfTwo) {
  EXPECT_EQ(RingUnderTest<int>(GetParam(), 0)->capacity(), 2u);
  EXPECT_EQ(RingUnderTest<int>(GetParam(), 5)->capacity(), 8u);
  EXPECT_EQ(RingUnderTest<int>(GetParam(), 1024)->capacity(), 1024u);
}

TEST_P(SpscRingForms, FifoUntilFullThenRefuses) {
  RingUnderTest<int> ring(GetParam(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(ring->TryPush(i));
  EXPECT_FALSE(ring->TryPush(99));
  EXPECT_EQ(ring->SizeApprox(), 4u);
  EXPECT_EQ(ring->FreeApprox(), 0u);
  int v = -1;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(ring->TryPop(v));
    EXPECT_EQ(v, i);
  }
  EXPECT_FALSE(ring->TryPop(v));
  EXPECT_TRUE(ring->EmptyApprox());
  EXPECT_EQ(ring->FreeApprox(), 4u);
}

TEST_P(SpscRingForms, WrapsAroundManyTimes) {
  RingUnderTest<uint64_t> ring(GetParam(), 8);
  uint64_t next_in = 0, next_out = 0;
  for (int round = 0; round < 1000; ++round) {
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(ring->TryPush(next_in++));
    uint64_t v;
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(ring->TryPop(v));
      ASSERT_EQ(v, next_out++);
    }
  }
}

TEST_P(SpscRingForms, BatchPopsAtMostWhatIsThere) {
  RingUnderTest<int> ring(GetParam(), 16);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(ring->TryPush(i));
  std::array<int, 4> out{};
  EXPECT_EQ(ring->PopBatch(out), 4u);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[3], 3);
  std::array<int, 16> rest{};
  EXPECT_EQ(ring->PopBatch(rest), 6u);
  EXPECT_EQ(rest[5], 9);
  EXPECT_EQ(ring->PopBatch(rest), 0u);
}

TEST_P(SpscRingForms, FrontLeavesElementUntilPopFront) {
  RingUnderTest<int> ring(GetParam(), 4);
  EXPECT_EQ(ring->Front(), nullptr);
  ring->TryPush(7);
  ring->TryPush(8);
  ASSERT_NE(ring->Front(), nullptr);
  EXPECT_EQ(*ring->Front(), 7);
  EXPECT_EQ(*ring->Front(), 7);  // still there: the consumer may retry later
  ring->PopFront();
  EXPECT_EQ(*ring->Front(), 8);
}

// Two threads, a small ring (so that both full and empty are hit constantly), every value
// checked in order on the consumer side, mixing single and batch pops.
void StressTwoThreads(SpscRing<uint64_t>& producer_view, SpscRing<uint64_t>& consumer_view,
                      uint64_t count) {
  std::thread producer([&] {
    for (uint64_t i = 0; i < count;) {
      if (producer_view.TryPush(i)) {
        ++i;
      } else {
        std::this_thread::yield();
      }
    }
  });
  uint64_t expected = 0;
  uint64_t sum = 0;
  std::array<uint64_t, 7> batch{};
  while (expected < count) {
    size_t n;
    if (expected % 3 == 0) {
      n = consumer_view.PopBatch(batch);
    } else {
      n = consumer_view.TryPop(batch[0]) ? 1 : 0;
    }
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(batch[i], expected);
      sum += batch[i];
      ++expected;
    }
    if (n == 0) std::this_thread::yield();
  }
  producer.join();
  EXPECT_EQ(sum, count * (count - 1) / 2);
  EXPECT_TRUE(consumer_view.EmptyApprox());
}

TEST_P(SpscRingForms, TwoThreadsKeepOrderAndLoseNothing) {
  RingUnderTest<uint64_t> ring(GetParam(), 64);
  StressTwoThreads(*ring, *ring, 2'000'000);
}

INSTANTIATE_TEST_SUITE_P(SpscRing, SpscRingForms, ::testing::Values(Form::kHeap, Form::kPlaced),
                         [](const ::testing::TestParamInfo<Form>& info) {
                           return std::string(info.param == Form::kHeap ? "Heap" : "Placed");
                         });

TEST(SpscRing_Heap, HoldsMovableElements) {
  SpscRing<std::unique_ptr<int>> ring(2);
  EXPECT_TRUE(ring.TryPush(std::make_unique<int>(3)));
  EXPECT_TRUE(ring.TryPush(std::make_unique<int>(4)));  // destroyed with the ring
  std::unique_ptr<int> out;
  ASSERT_TRUE(ring.TryPop(out));
  EXPECT_EQ(*out, 3);
}

TEST(SpscRing_Heap, MovedViewKeepsTheRing) {
  SpscRing<int> a(4);
  ASSERT_TRUE(a.TryPush(1));
  SpscRing<int> b(std::move(a));
  int v = 0;
  ASSERT_TRUE(b.TryPop(v));
  EXPECT_EQ(v, 1);
  SpscRing<int> c(8);
  c = std::move(b);
  EXPECT_EQ(c.capacity(), 4u);
  EXPECT_TRUE(c.TryPush(2));
}

TEST(SpscRing_Layout, BlocksStayCacheLineAligned) {
  EXPECT_EQ(SpscRing<uint64_t>::kSlotsOffset, 3 * kCacheLineBytes);
  EXPECT_EQ(SpscRing<uint64_t>::BytesFor(8), 192u + 64u);
  EXPECT_EQ(SpscRing<uint8_t>::BytesFor(2), 192u + 64u);  // 2 bytes of slots, padded
  EXPECT_EQ(SpscRing<uint64_t>::BytesFor(5), SpscRing<uint64_t>::BytesFor(8));
  for (size_t n : {1, 3, 100, 1000}) {
    using Bytes24 = std::array<uint8_t, 24>;
    EXPECT_EQ(SpscRing<Bytes24>::BytesFor(n) % kCacheLineBytes, 0u) << n;
  }
  EXPECT_EQ(SpscRing<int>::CapacityFor(size_t{1} << 40), SpscRing<int>::kMaxCapacity);
}

TEST(SpscRing_PlaceAt, RefusesMisalignedOrTooSmallMemory) {
  CacheAlignedBytes memory = AllocateCacheAligned(4096);
  auto misaligned = SpscRing<uint64_t>::PlaceAt(memory.get() + 8, 4000, 16);
  EXPECT_EQ(misaligned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(misaligned.status().message()), HasSubstr("aligned"));
  auto small = SpscRing<uint64_t>::PlaceAt(memory.get(), SpscRing<uint64_t>::BytesFor(16) - 1, 16);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(small.status().message()), HasSubstr("needs"));
  EXPECT_TRUE(SpscRing<uint64_t>::PlaceAt(memory.get(), SpscRing<uint64_t>::BytesFor(16), 16).ok());
}

// ---- one memfd mapped twice: the two views are one ring ----

class SpscRingShared : public ::testing::Test {
 protected:
  static constexpr size_t kBytes = 8192;  // two pages
  static constexpr size_t kCapacity = 256;
  static constexpr size_t kRingBytes = SpscRing<uint64_t>::BytesFor(kCapacity);

  void SetUp() override {
    ASSERT_GE(memfd_.fd(), 0);
    ASSERT_NE(a_.data(), nullptr);
    ASSERT_NE(b_.data(), nullptr);
    ASSERT_NE(a_.data(), b_.data());
  }
  // The ring ends at the guard page of both mappings.
  std::byte* InA() const { return a_.Tail(kRingBytes); }
  std::byte* InB() const { return b_.Tail(kRingBytes); }
  SpscRingHeader& HeaderInA() const { return *reinterpret_cast<SpscRingHeader*>(InA()); }

  SealedMemfd memfd_{kBytes};
  GuardedMapping a_{memfd_.fd(), kBytes};
  GuardedMapping b_{memfd_.fd(), kBytes};
};

TEST_F(SpscRingShared, PushThroughOneMappingPopThroughTheOther) {
  auto placed = SpscRing<uint64_t>::PlaceAt(InA(), kRingBytes, kCapacity);
  ASSERT_TRUE(placed.ok()) << placed.status();
  auto attached = SpscRing<uint64_t>::AttachAt(InB(), kRingBytes);
  ASSERT_TRUE(attached.ok()) << attached.status();
  EXPECT_EQ(attached->capacity(), kCapacity);
  uint64_t next_in = 0, next_out = 0;
  std::array<uint64_t, 100> out{};
  for (int round = 0; round < 100; ++round) {  // 100 * 100 values: wraps around 39 times
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(placed->TryPush(next_in++));
    ASSERT_EQ(attached->SizeApprox(), 100u);
    ASSERT_EQ(attached->PopBatch(out), 100u);
    for (uint64_t v : out) ASSERT_EQ(v, next_out++);
  }
  // And the other way round: the attacher produces.
  ASSERT_TRUE(attached->TryPush(42));
  uint64_t v = 0;
  ASSERT_TRUE(placed->TryPop(v));
  EXPECT_EQ(v, 42u);
}

TEST_F(SpscRingShared, ThreadsThroughTwoMappingsKeepOrder) {
  auto placed = SpscRing<uint64_t>::PlaceAt(InA(), kRingBytes, 64);
  ASSERT_TRUE(placed.ok());
  auto attached = SpscRing<uint64_t>::AttachAt(InB(), kRingBytes);
  ASSERT_TRUE(attached.ok());
  StressTwoThreads(*placed, *attached, 500'000);
}

TEST_F(SpscRingShared, AttachRefusesWhatIsNotItsRing) {
  auto attach = [&] { return SpscRing<uint64_t>::AttachAt(InB(), kRingBytes).status(); };
  ASSERT_TRUE(SpscRing<uint64_t>::PlaceAt(InA(), kRingBytes, kCapacity).ok());
  ASSERT_TRUE(attach().ok());
  SpscRingHeader& h = HeaderInA();

  h.magic ^= 1;
  EXPECT_THAT(std::string(attach().message()), HasSubstr("magic"));
  h.magic ^= 1;

  h.element_bytes = 4;
  EXPECT_THAT(std::string(attach().message()), HasSubstr("elements are 4 bytes"));
  h.element_bytes = sizeof(uint64_t);
  EXPECT_THAT(std::string(SpscRing<uint32_t>::AttachAt(InB(), kRingBytes).status().message()),
              HasSubstr("this side's are 4"));

  for (uint64_t bad : {uint64_t{0}, uint64_t{1}, uint64_t{100}, uint64_t{1} << 40,
                       ~uint64_t{0}}) {
    h.capacity = bad;
    EXPECT_THAT(std::string(attach().message()), HasSubstr("power of two")) << bad;
  }
  h.capacity = 2 * kCapacity;  // a power of two, but more slots than the block holds
  EXPECT_THAT(std::string(attach().message()), HasSubstr("bytes; the block has"));
  h.capacity = kCapacity;

  EXPECT_THAT(std::string(SpscRing<uint64_t>::AttachAt(InB(), kRingBytes - 64).status().message()),
              HasSubstr("bytes; the block has"));
  EXPECT_THAT(std::string(SpscRing<uint64_t>::AttachAt(InB(), 100).status().message()),
              HasSubstr("smaller than a ring header"));
  EXPECT_THAT(std::string(SpscRing<uint64_t>::AttachAt(InB() + 8, kRingBytes).status().message()),
              HasSubstr("aligned"));
  EXPECT_TRUE(attach().ok());
}

// The other process writes a tail ten laps ahead: the consumer keeps to its slots (the page after
// the block is PROT_NONE) and to the size of its output.
TEST_F(SpscRingShared, CorruptedTailNeverTakesTheConsumerOutOfItsSlots) {
  auto producer = SpscRing<uint64_t>::PlaceAt(InA(), kRingBytes, kCapacity);
  ASSERT_TRUE(producer.ok());
  auto consumer = SpscRing<uint64_t>::AttachAt(InB(), kRingBytes);
  ASSERT_TRUE(consumer.ok());
  for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(producer->TryPush(i));
  uint64_t v;
  ASSERT_TRUE(consumer->TryPop(v));

  SpscRingHeader& h = HeaderInA();
  const uint64_t head = h.head.load();
  for (uint64_t tail : {head + 10 * kCapacity, head - 1, head + kCapacity + 3, ~uint64_t{0}}) {
    h.tail.store(tail);
    EXPECT_LE(consumer->SizeApprox(), kCapacity);
    std::vector<uint64_t> out(4 * kCapacity);
    EXPECT_EQ(consumer->PopBatch(std::span<uint64_t>(out.data(), 3)), 3u);
    EXPECT_LE(consumer->PopBatch(out), out.size());
    for (size_t i = 0; i < 3 * kCapacity; ++i) {
      if (!consumer->TryPop(v)) break;
    }
    for (size_t i = 0; i < 3 * kCapacity && consumer->Front() != nullptr; ++i) consumer->PopFront();
  }
  // The header lies too: the views use the capacity they validated, not what the block says now.
  h.capacity = uint64_t{1} << 30;
  h.tail.store(h.head.load() + 5 * kCapacity);
  std::vector<uint64_t> out(8 * kCapacity);
  EXPECT_LE(consumer->PopBatch(out), out.size());
  EXPECT_EQ(consumer->capacity(), kCapacity);
}

// The other process writes a head far beyond the tail: the producer keeps to its slots.
TEST_F(SpscRingShared, CorruptedHeadNeverTakesTheProducerOutOfItsSlots) {
  ASSERT_TRUE(SpscRing<uint64_t>::PlaceAt(InA(), kRingBytes, kCapacity).ok());
  auto producer = SpscRing<uint64_t>::AttachAt(InB(), kRingBytes);
  ASSERT_TRUE(producer.ok());
  SpscRingHeader& h = HeaderInA();
  for (uint64_t head : {uint64_t{7} * kCapacity, ~uint64_t{0} - 3, uint64_t{kCapacity + 1}}) {
    h.head.store(head);
    h.capacity = 3;
    EXPECT_LE(producer->FreeApprox(), kCapacity);
    for (size_t i = 0; i < 3 * kCapacity; ++i) {
      if (!producer->TryPush(i)) break;
    }
  }
}

// A thread of "the other process" writes random words all over the block while this thread uses
// both ends of the ring: nothing faults, no call returns more than asked.
TEST_F(SpscRingShared, RandomWritesIntoTheBlockNeverEscapeIt) {
  auto producer = SpscRing<uint64_t>::PlaceAt(InA(), kRingBytes, kCapacity);
  ASSERT_TRUE(producer.ok());
  auto consumer = SpscRing<uint64_t>::AttachAt(InB(), kRingBytes);
  ASSERT_TRUE(consumer.ok());
  std::atomic<bool> stop{false};
  std::thread hostile([&] {
    std::mt19937_64 rng(1);
    auto* words = reinterpret_cast<uint64_t*>(InA());
    const size_t n = kRingBytes / sizeof(uint64_t);
    while (!stop.load(std::memory_order_relaxed)) {
      std::atomic_ref<uint64_t>(words[rng() % n]).store(rng(), std::memory_order_relaxed);
    }
  });
  std::array<uint64_t, 32> out{};
  for (int i = 0; i < 200'000; ++i) {
    producer->TryPush(i);
    ASSERT_LE(consumer->PopBatch(out), out.size());
    uint64_t v;
    consumer->TryPop(v);
    if (consumer->Front() != nullptr) consumer->PopFront();
    ASSERT_LE(consumer->SizeApprox(), kCapacity);
    ASSERT_LE(producer->FreeApprox(), kCapacity);
  }
  stop.store(true);
  hostile.join();
}

}  // namespace
}  // namespace metaroce::engine
