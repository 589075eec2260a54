// SizeClassPool: one stream pool of PyTorch's CUDA caching allocator, modelled by the size classes of its segments —
// how much it reserves when tensors larger than every earlier one arrive (Note [Allocator size classes]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace shardplan {

// Note [Allocator size classes]: without expandable segments (PyTorch's default), the caching allocator serves a
// large request from a cached free block at least as large, splitting it, and otherwise cudaMallocs a new segment of
// the request's own (rounded) size; freed blocks merge only with their neighbours inside one segment, and segments
// are kept until empty_cache() (c10/cuda/CUDACachingAllocator.cpp: get_free_block, alloc_block, try_merge_blocks).
// So memory freed in segments made for smaller tensors cannot serve a larger one: "allocating small then large blocks
// can cause fragmentation" (E. Yang, "When does fragmentation occur in the CUDA caching allocator?", PyTorch DevLog,
// 2026-06-01, docs.pytorch.org/devlogs/eager/2026-06-01-cuda-caching-allocator/). A training step meets this at
// the loss: its fp32 logits tensors (V per token, several GiB) are larger than any tensor of the blocks before it,
// so they get segments of their own on top of all the blocks' segments, including the blocks' freed working memory.
//
// The schedule knows memory by lumps (a layer's kept activations, its workspace), not by tensor, so the model keeps
// one region per size class: the bytes of segments grown by lumps whose largest tensor is that class. A lump of
// class c takes free bytes from the regions of class ≥ c, smallest class first (best fit; a free block may be split
// for a smaller tensor), and grows its own region by what they lack. A freed lump returns its bytes to the regions
// its class took them from, the latest first (a pass frees its workspace, the last thing it allocated, at its end). Within a class free bytes are taken as one: blocks of one class merge and
// split among tensors no larger than the class, which is what the lumps are made of. The pool reserves the sum of
// its regions, which never shrinks (no empty_cache in a training step). Class 0 (a lump whose tensors are not
// described: parameters, gradients, buffers) takes free bytes from any region and grows a region of its own; with
// one class throughout, reserved is the pool's allocated peak. Expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) map one growing segment
// per stream, so a large tensor may extend the free tail of the last segment: there this model is an upper bound by
// at most that tail.
class SizeClassPool {
 public:
  SizeClassPool() = default;
  // A pool that knows its classes up front (ascending, distinct; MemoryEffects::size_classes): the *_at calls then
  // name a class by its index there. A class without a region yet takes part in nothing, so knowing it early changes
  // no result.
  explicit SizeClassPool(const std::vector<std::int64_t>& size_classes);
  void allocate(std::int64_t bytes, std::int64_t size_class);
  void free(std::int64_t bytes, std::int64_t size_class);
  void allocate_at(std::int64_t bytes, std::size_t class_index);
  void free_at(std::int64_t bytes, std::size_t class_index);
  std::int64_t reserved_bytes() const;
  std::int64_t allocated_bytes() const;

 private:
  struct SizeClass {
    std::int64_t size_class = 0;
    std::int64_t reserved_bytes = 0;  // its region: the segments its lumps grew (0: it has none yet)
    std::int64_t used_bytes = 0;      // of them, what live lumps of any class hold
    // Where this class's live bytes were placed, in allocation order: (index of the region's class, bytes).
    std::vector<std::pair<std::size_t, std::int64_t>> placed;
  };
  // The classes met so far, ascending: a flat array, as a step has a handful of classes (0 and its layers' largest
  // tensors) and the simulator allocates and frees thousands of lumps per step.
  std::vector<SizeClass> classes_;
  std::size_t last_found_ = 0;  // lumps come in runs of one class: looked at first
  std::size_t find(std::int64_t size_class);  // lower bound in classes_
};

}  // namespace shardplan
