// InlineVector: a vector that keeps its first N elements inline and moves to the heap beyond — for the values the
// wrap searches copy millions of times (a boundary's busy intervals, a label's memory terms), which are almost always
// small.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

namespace shardplan {

template <class T, std::size_t N>
class InlineVector {
 public:
  InlineVector() = default;
  InlineVector(std::size_t count, const T& value) { assign(count, value); }
  InlineVector(const InlineVector& other) { *this = other; }
  InlineVector(InlineVector&& other) noexcept = default;
  InlineVector& operator=(InlineVector&& other) noexcept = default;
  InlineVector& operator=(const InlineVector& other) {
    if (this == &other) return *this;
    size_ = other.size_;
    if (other.heap_.empty()) {
      heap_.clear();
      std::copy(other.inline_.begin(), other.inline_.begin() + static_cast<std::ptrdiff_t>(size_), inline_.begin());
    } else {
      heap_ = other.heap_;
    }
    return *this;
  }

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T& operator[](std::size_t index) const { return data()[index]; }
  T& operator[](std::size_t index) { return data()[index]; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }

  void assign(std::size_t count, const T& value) {
    clear();
    for (std::size_t i = 0; i < count; ++i) push_back(value);
  }
  void insert(std::size_t at, const T& value) {
    if (heap_.empty() && size_ == N) heap_.assign(inline_.begin(), inline_.end());
    if (heap_.empty()) {
      std::copy_backward(inline_.begin() + static_cast<std::ptrdiff_t>(at),
                         inline_.begin() + static_cast<std::ptrdiff_t>(size_),
                         inline_.begin() + static_cast<std::ptrdiff_t>(size_ + 1));
      inline_[at] = value;
    } else {
      heap_.resize(size_);
      heap_.insert(heap_.begin() + static_cast<std::ptrdiff_t>(at), value);
    }
    ++size_;
  }
  void push_back(const T& value) { insert(size_, value); }
  void erase(std::size_t at) {
    T* items = data();
    std::copy(items + at + 1, items + size_, items + at);
    --size_;
  }
  void clear() {
    size_ = 0;
    heap_.clear();
  }
  bool operator==(const InlineVector& other) const {
    return size_ == other.size_ && std::equal(begin(), end(), other.begin());
  }

 private:
  const T* data() const { return heap_.empty() ? inline_.data() : heap_.data(); }
  T* data() { return heap_.empty() ? inline_.data() : heap_.data(); }
  std::array<T, N> inline_{};
  std::vector<T> heap_;  // all of them, once they outgrow inline_
  std::size_t size_ = 0;
};

}  // namespace shardplan
