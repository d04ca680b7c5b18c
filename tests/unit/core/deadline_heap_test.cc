// DeadlineHeap: the endpoint's timer structure. Checked against a plain ordered set under long
// random sequences of inserts, moves and removals, and for the order of equal deadlines.
#include "lib/core/deadline_heap.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace metaroce::core {
namespace {

struct Item {
  uint32_t id = 0;
  HeapSlot slot;
  HeapSlot& deadline_slot() { return slot; }
  uint32_t local_id() const { return id; }
};

Instant At(int64_t ns) { return Instant{ns}; }

TEST(DeadlineHeap, EmptyHasNoDeadline) {
  DeadlineHeap<Item> heap;
  EXPECT_TRUE(heap.empty());
  EXPECT_EQ(heap.top_deadline(), kNever);
}

TEST(DeadlineHeap, KNeverRemovesAndRemoveIsIdempotent) {
  DeadlineHeap<Item> heap;
  Item a{1}, b{2};
  heap.Update(a, At(10));
  heap.Update(b, At(5));
  EXPECT_EQ(&heap.top(), &b);
  heap.Update(b, kNever);
  EXPECT_FALSE(heap.Contains(b));
  EXPECT_EQ(&heap.top(), &a);
  heap.Remove(b);
  heap.Remove(a);
  heap.Remove(a);
  EXPECT_TRUE(heap.empty());
  EXPECT_EQ(a.slot.index, HeapSlot::kNone);
}

TEST(DeadlineHeap, EqualDeadlinesComeOutInIdOrderWhateverTheInsertionOrder) {
  DeadlineHeap<Item> heap;
  std::vector<Item> items(50);
  for (uint32_t i = 0; i < items.size(); ++i) items[i].id = 1000 - 7 * i;  // descending ids
  for (Item& it : items) heap.Update(it, At(42));
  uint32_t last = 0;
  while (!heap.empty()) {
    Item& top = heap.top();
    EXPECT_GT(top.id, last);
    last = top.id;
    heap.Remove(top);
  }
}

// Every operation of a long random sequence agrees with a std::set of (deadline, id), and every
// item's slot names its own position.
TEST(DeadlineHeap, AgreesWithAnOrderedSetUnderRandomOperations) {
  constexpr uint32_t kItems = 300;
  std::vector<Item> items(kItems);
  for (uint32_t i = 0; i < kItems; ++i) items[i].id = i;
  std::vector<Instant> deadline(kItems, kNever);
  std::set<std::pair<Instant, uint32_t>> model;
  DeadlineHeap<Item> heap;
  std::mt19937_64 rng(12);
  for (int step = 0; step < 200'000; ++step) {
    const uint32_t i = rng() % kItems;
    const uint64_t op = rng() % 10;
    Instant d = kNever;
    if (op < 7) d = At(static_cast<int64_t>(rng() % 1000));  // few values: many ties
    if (op == 9) {
      heap.Remove(items[i]);
    } else {
      heap.Update(items[i], d);
    }
    if (deadline[i] != kNever) model.erase({deadline[i], i});
    deadline[i] = op == 9 ? kNever : d;
    if (deadline[i] != kNever) model.insert({deadline[i], i});

    ASSERT_EQ(heap.size(), model.size()) << "step " << step;
    if (model.empty()) {
      ASSERT_EQ(heap.top_deadline(), kNever);
    } else {
      ASSERT_EQ(heap.top_deadline(), model.begin()->first) << "step " << step;
      ASSERT_EQ(heap.top().id, model.begin()->second) << "step " << step;
    }
    ASSERT_EQ(heap.Contains(items[i]), deadline[i] != kNever);
  }
  // Draining yields the model's order exactly.
  for (const auto& [d, id] : model) {
    ASSERT_EQ(heap.top().id, id);
    ASSERT_EQ(heap.top_deadline(), d);
    heap.Remove(heap.top());
  }
  EXPECT_TRUE(heap.empty());
}

}  // namespace
}  // namespace metaroce::core
