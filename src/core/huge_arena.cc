#include "core/huge_arena.h"

#include <sys/mman.h>

#include "core/check.h"

namespace ts {
namespace {
constexpr size_t kHuge = size_t(2) << 20;
}

HugeArena::HugeArena(size_t capacity) {
  if (capacity == 0) return;
  const size_t cap = (capacity + kHuge - 1) & ~(kHuge - 1);
  // One extra 2 MiB so the usable part can start on a 2 MiB boundary.
  const size_t len = cap + kHuge;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return;
  const uintptr_t raw = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (raw + kHuge - 1) & ~uintptr_t(kHuge - 1);
  // Give back the unaligned head and the tail beyond the aligned capacity.
  if (aligned > raw) ::munmap(p, aligned - raw);
  const uintptr_t end = raw + len, used_end = aligned + cap;
  if (end > used_end) ::munmap(reinterpret_cast<void*>(used_end), end - used_end);
  base_ = reinterpret_cast<uint8_t*>(aligned);
  capacity_ = cap;
  huge_ = ::madvise(base_, cap, MADV_HUGEPAGE) == 0;  // advisory: 4 KiB pages otherwise
}

HugeArena::~HugeArena() {
  if (base_) ::munmap(base_, capacity_);
}

uint8_t* HugeArena::alloc(size_t bytes, size_t align) {
  TS_CHECK(align > 0 && (align & (align - 1)) == 0 && align <= kHuge);
  const size_t start = (used_ + align - 1) & ~(align - 1);
  if (!base_ || start > capacity_ || bytes > capacity_ - start) return nullptr;
  used_ = start + bytes;
  return base_ + start;
}

}  // namespace ts
