// CompactVector: a vector of trivially copyable values that keeps up to N of them in place of its heap pointer — for
// an Op's dependencies and memory changes, which almost always hold one or two.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <new>
#include <type_traits>
#include <vector>

namespace shardplan {

// Why not std::vector: a lowering emits tens of thousands of ops per step, each with up to four lists; their heap
// allocations and frees were a quarter of a capacity sweep's time (callgrind, `capacity -m llama2-7b` on 8 GPUs).
// The values sit in the object while they fit (the same 24 bytes as a std::vector for N × sizeof(T) ≤ 16) and move
// to one heap block beyond. Only trivially copyable types: copies are memcpy.
template <class T, std::uint32_t N>
class CompactVector {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);
  static_assert(N > 0);

 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;

  CompactVector() = default;
  CompactVector(std::initializer_list<T> values) { assign(values.begin(), values.end()); }
  CompactVector(const std::vector<T>& values) { assign(values.data(), values.data() + values.size()); }  // NOLINT
  CompactVector(const CompactVector& other) { assign(other.begin(), other.end()); }
  CompactVector(CompactVector&& other) noexcept { take(other); }
  CompactVector& operator=(const CompactVector& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  CompactVector& operator=(CompactVector&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  CompactVector& operator=(std::initializer_list<T> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  CompactVector& operator=(const std::vector<T>& values) {
    assign(values.data(), values.data() + values.size());
    return *this;
  }
  ~CompactVector() { release(); }

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return on_heap() ? heap_ : std::launder(reinterpret_cast<T*>(inline_)); }
  const T* data() const { return on_heap() ? heap_ : std::launder(reinterpret_cast<const T*>(inline_)); }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  T& operator[](std::size_t index) { return data()[index]; }
  const T& operator[](std::size_t index) const { return data()[index]; }
  T& front() { return data()[0]; }
  const T& front() const { return data()[0]; }
  T& back() { return data()[size_ - 1]; }
  const T& back() const { return data()[size_ - 1]; }

  void push_back(const T& value) {
    if (size_ == capacity_) grow(size_ + 1);
    data()[size_++] = value;
  }
  template <class Iterator>
  void append(Iterator first, Iterator last) {
    for (; first != last; ++first) push_back(*first);
  }
  void clear() { size_ = 0; }

  friend bool operator==(const CompactVector& a, const CompactVector& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator==(const CompactVector& a, const std::vector<T>& b) {
    return a.size_ == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  bool on_heap() const { return capacity_ > N; }
  void assign(const T* first, const T* last) {
    size_ = 0;
    append_block(first, last);
  }
  void append_block(const T* first, const T* last) {
    const auto count = static_cast<std::uint32_t>(last - first);
    if (count == 0) return;
    if (size_ + count > capacity_) grow(size_ + count);
    std::memcpy(static_cast<void*>(data() + size_), first, count * sizeof(T));
    size_ += count;
  }
  void grow(std::uint32_t needed) {
    const std::uint32_t capacity = std::max(needed, 2 * capacity_);
    T* block = static_cast<T*>(::operator new(capacity * sizeof(T)));
    if (size_ > 0) std::memcpy(static_cast<void*>(block), data(), size_ * sizeof(T));
    release();
    heap_ = block;
    capacity_ = capacity;
  }
  void release() {
    if (on_heap()) ::operator delete(heap_);
    capacity_ = N;
  }
  void take(CompactVector& other) {
    size_ = other.size_;
    capacity_ = other.capacity_;
    if (other.on_heap()) {
      heap_ = other.heap_;
    } else {
      std::memcpy(inline_, other.inline_, sizeof(inline_));
    }
    other.size_ = 0;
    other.capacity_ = N;
  }

  union {
    alignas(T) unsigned char inline_[N * sizeof(T)];
    T* heap_;
  };
  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = N;
};

}  // namespace shardplan
