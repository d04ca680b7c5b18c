// lib/core/ring_queue.h: FIFO order across wrap-around and growth, value-initialized new
// elements, a grown array released when the queue empties and the smallest one kept, and
// elements that recycle their buffers through their slots.
#include "lib/core/ring_queue.h"

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

namespace metaroce::core {
namespace {

TEST(RingQueue, KeepsFifoOrderAcrossWrapAndGrowth) {
  RingQueue<std::vector<int>> q;
  std::deque<int> model;  // the reference: what the queue must hold, front first
  int next = 0;
  // Pushes and pops interleaved so that the head moves round the array before each growth.
  for (int round = 0; round < 200; ++round) {
    for (int k = 0; k < round % 7 + 1; ++k) {
      std::vector<int>& v = q.emplace_back();
      ASSERT_TRUE(v.empty()) << "a new element is value-initialized";
      v = {next, next * 3};
      model.push_back(next++);
    }
    for (int k = 0; k < round % 5 && !model.empty(); ++k) {
      ASSERT_EQ(q.front(), (std::vector<int>{model.front(), model.front() * 3}));
      q.pop_front();
      model.pop_front();
    }
    ASSERT_EQ(q.size(), model.size());
    for (size_t i = 0; i < model.size(); ++i) ASSERT_EQ(q[i][0], model[i]) << "index " << i;
    size_t seen = 0;
    for (const std::vector<int>& v : q) ASSERT_EQ(v[0], model[seen++]);
    ASSERT_EQ(seen, model.size());
  }
}

TEST(RingQueue, ReleasesItsStorageWhenEmptyAndStartsAgain) {
  RingQueue<std::string> q;
  EXPECT_EQ(q.capacity(), 0u) << "nothing allocated before the first push";
  for (int i = 0; i < 20; ++i) q.emplace_back() = std::string(100, 'a' + i % 26);
  EXPECT_EQ(q.capacity(), 32u);
  while (!q.empty()) q.pop_front();
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(q.capacity(), 0u) << "a grown array goes when the queue empties";
  EXPECT_EQ(q.begin(), q.end());
  q.emplace_back() = "again";
  EXPECT_EQ(q.front(), "again");
  EXPECT_EQ(q.size(), 1u);
}

TEST(RingQueue, KeepsItsSmallestArrayForOneElementAtATime) {
  // A connection with one message at a time empties its queue after each: the smallest array
  // stays, and the elements popped are reset (their own buffers freed) all the same.
  RingQueue<std::string> q;
  for (int i = 0; i < 10; ++i) {
    q.emplace_back() = std::string(100, 'a' + i);
    ASSERT_EQ(q.capacity(), RingQueue<std::string>::kMinCapacity);
    ASSERT_EQ(q.front(), std::string(100, 'a' + i));
    q.pop_front();
    ASSERT_TRUE(q.empty());
    ASSERT_EQ(q.capacity(), RingQueue<std::string>::kMinCapacity);
    ASSERT_TRUE(q.emplace_back().empty()) << "a new element is value-initialized";
    q.pop_front();
  }
}

// An element that keeps its buffer across uses: reset, not freed, when popped.
struct Reusable {
  int value = 0;
  std::vector<int> buffer;
  void Recycle() {
    value = 0;
    buffer.clear();  // the storage stays for the element pushed into this slot next
  }
};

TEST(RingQueue, ARecyclableElementsSlotKeepsItsBufferForTheNextPush) {
  RingQueue<Reusable> q;
  // A pipeline at its depth: four in the queue, two popped and two pushed at a time.
  for (int i = 0; i < 4; ++i) q.emplace_back().buffer.assign(16, i);
  std::vector<const int*> popped;
  for (int round = 0; round < 10; ++round) {
    popped.clear();
    for (int k = 0; k < 2; ++k) {
      popped.push_back(q.front().buffer.data());
      q.pop_front();
    }
    for (int k = 0; k < 2; ++k) {
      Reusable& r = q.emplace_back();
      ASSERT_EQ(r.value, 0) << "reads as a value-initialized element";
      ASSERT_TRUE(r.buffer.empty());
      ASSERT_GE(r.buffer.capacity(), 16u) << "the storage of the element popped from this slot";
      r.buffer.assign(16, round);
      r.value = round + 1;
      EXPECT_EQ(r.buffer.data(), popped[k]) << "no new allocation";
    }
  }
  ASSERT_EQ(q.capacity(), RingQueue<Reusable>::kMinCapacity);
  while (!q.empty()) q.pop_front();
  EXPECT_EQ(q.capacity(), RingQueue<Reusable>::kMinCapacity);
}

}  // namespace
}  // namespace metaroce::core
