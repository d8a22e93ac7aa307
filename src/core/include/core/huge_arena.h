// A bump allocator over one anonymous mapping on 2 MiB pages (MADV_HUGEPAGE), for memory
// that is streamed end to end many times and freed all at once: the packed weights of a
// model. Streaming through 4 KiB pages costs a TLB miss every 4 KiB and stops the hardware
// prefetchers at every page (see MappedFile::advise_hugepage); one arena gives every
// matrix 2 MiB pages without rounding each one up to 2 MiB.
//
// The mapping is reserved at once (MAP_NORESERVE): pages cost memory only when written.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ts {

class HugeArena {
 public:
  // Reserves `capacity` bytes (rounded up to 2 MiB). A failed reservation leaves an arena
  // of capacity 0 whose alloc() always returns nullptr.
  explicit HugeArena(size_t capacity);
  ~HugeArena();
  HugeArena(const HugeArena&) = delete;
  HugeArena& operator=(const HugeArena&) = delete;

  // `bytes` at an address aligned to `align` (a power of two, at most 2 MiB), or nullptr
  // when the rest of the arena is too small. Zero-filled on first use.
  uint8_t* alloc(size_t bytes, size_t align = 64);

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  // Whether the kernel accepted MADV_HUGEPAGE for the mapping.
  bool huge() const { return huge_; }

 private:
  uint8_t* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  bool huge_ = false;
};

}  // namespace ts
