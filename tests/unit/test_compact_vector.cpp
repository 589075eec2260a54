// Tests for CompactVector (planner/compact_vector.h): in place up to N values, on the heap beyond, copies and moves
// keep the values, and the op lists that use it compare with std::vector.
#include <doctest/doctest.h>

#include <span>
#include <utility>
#include <vector>

#include "compact_vector.h"
#include "schedule.h"

using shardplan::CompactVector;
using shardplan::MemoryCategory;
using shardplan::MemoryChange;

TEST_CASE("CompactVector keeps its values in place, then on the heap, through copies and moves") {
  CompactVector<int, 2> values;
  CHECK(values.empty());
  values.push_back(1);
  values.push_back(2);
  const int* in_place = values.data();
  CHECK(reinterpret_cast<const unsigned char*>(in_place) >= reinterpret_cast<const unsigned char*>(&values));
  CHECK(reinterpret_cast<const unsigned char*>(in_place) < reinterpret_cast<const unsigned char*>(&values + 1));
  for (int value = 3; value <= 9; ++value) values.push_back(value);  // past N: one heap block, grown twice
  CHECK(values.size() == 9);
  CHECK(values == std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(values.front() == 1);
  CHECK(values.back() == 9);

  CompactVector<int, 2> copy = values;
  copy[0] = 10;
  CHECK(values[0] == 1);  // a copy owns its own block
  CHECK(copy == std::vector<int>{10, 2, 3, 4, 5, 6, 7, 8, 9});

  CompactVector<int, 2> moved = std::move(copy);
  CHECK(moved.size() == 9);
  CHECK(copy.empty());  // NOLINT(bugprone-use-after-move): a moved-from list is empty and reusable
  copy.push_back(4);
  CHECK(copy == std::vector<int>{4});

  CompactVector<int, 2> small{7};
  moved = small;  // from the heap back to one value in place
  CHECK(moved == std::vector<int>{7});
  moved = std::vector<int>{1, 2, 3};
  moved.append(values.begin() + 3, values.begin() + 5);
  CHECK(moved == std::vector<int>{1, 2, 3, 4, 5});
  moved.clear();
  CHECK(moved.empty());
}

TEST_CASE("an op's memory changes in a CompactVector read as a span") {
  shardplan::Op op;
  op.allocates.push_back({MemoryCategory::activations, 100});
  op.allocates.push_back({MemoryCategory::unsharded_grads, 50, 3});
  std::int64_t total = 0;
  for (const MemoryChange& change : std::span<const MemoryChange>(op.allocates)) total += change.bytes;
  CHECK(total == 150);
  CHECK(op.allocates[1].owner_unit == 3);
  shardplan::Op copied = op;
  CHECK(copied.allocates.size() == 2);
  CHECK(copied.allocates[0].bytes == 100);
}
