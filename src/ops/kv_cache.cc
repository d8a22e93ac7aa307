#include "ops/kv_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <string>

namespace ts::ops {

void KvCache::Free::operator()(uint16_t* p) const {
  if (p) ::munmap(p, bytes);
}

namespace {
constexpr size_t kHuge = size_t(2) << 20;
}  // namespace

// Zeroed memory for n halves from an anonymous mapping aligned to 2 MiB and advised
// MADV_HUGEPAGE: decode attention walks every cell of a sequence in every layer, tens of
// MiB per token at long contexts, and with 4 KiB pages that walk misses the TLB about
// once per cell. The pages are still only touched (and zeroed) on first use.
std::unique_ptr<uint16_t[], KvCache::Free> KvCache::map_halves(size_t n) {
  const size_t bytes = std::max<size_t>(1, n * sizeof(uint16_t));
  const size_t len = (bytes + kHuge - 1) / kHuge * kHuge;
  void* raw = ::mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return {nullptr, KvCache::Free{0}};
  const uintptr_t base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (base + kHuge - 1) / kHuge * kHuge;
  if (aligned > base) ::munmap(raw, aligned - base);
  if (const size_t tail = base + len + kHuge - (aligned + len); tail > 0)
    ::munmap(reinterpret_cast<void*>(aligned + len), tail);
  ::madvise(reinterpret_cast<void*>(aligned), len, MADV_HUGEPAGE);  // advisory: ignore failure
  return {reinterpret_cast<uint16_t*>(aligned), KvCache::Free{len}};
}

Result<std::unique_ptr<KvCache>> KvCache::create(const KvShape& shape, int64_t n_blocks,
                                                 int32_t block_size) {
  TS_CHECK(n_blocks > 0 && block_size > 0);
  std::unique_ptr<KvCache> c(new KvCache());
  c->shape_ = shape;
  c->n_cells_ = n_blocks * block_size;
  c->block_size_ = block_size;
  c->n_k_ = size_t(shape.n_layer) * size_t(c->n_cells_) * size_t(c->k_cell_stride());
  c->n_v_ = size_t(shape.n_layer) * size_t(c->n_cells_) * size_t(c->v_cell_stride());
  c->k_ = map_halves(c->n_k_);
  c->v_ = map_halves(c->n_v_);
  if (!c->k_ || !c->v_)
    return resource_exhausted("cannot allocate a KV cache of " +
                              std::to_string((c->n_k_ + c->n_v_) * 2 >> 20) + " MiB");
  return c;
}

void KvCache::touch() {
  // A write per 4 KiB page of zeros over zeros: the contents stay as they are.
  for (auto [p, n] : {std::pair{k_.get(), n_k_}, std::pair{v_.get(), n_v_}})
    for (size_t i = 0; i < n; i += 2048) reinterpret_cast<volatile uint16_t*>(p)[i] = p[i];
}

void KvCache::copy_block(int64_t src, int64_t dst) {
  TS_CHECK(src >= 0 && dst >= 0 && src < n_blocks() && dst < n_blocks());
  for (int l = 0; l < shape_.n_layer; ++l) {
    std::memcpy(k(l, dst * block_size_), k(l, src * block_size_),
                size_t(block_size_) * size_t(k_cell_stride()) * sizeof(uint16_t));
    std::memcpy(v(l, dst * block_size_), v(l, src * block_size_),
                size_t(block_size_) * size_t(v_cell_stride()) * sizeof(uint16_t));
  }
}

}  // namespace ts::ops
