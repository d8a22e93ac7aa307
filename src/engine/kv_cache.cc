#include "engine/kv_cache.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace ts::engine {

void KvCache::Free::operator()(uint16_t* p) const { std::free(p); }

Result<std::unique_ptr<KvCache>> KvCache::create(const KvShape& shape, int64_t n_blocks,
                                                 int32_t block_size) {
  TS_CHECK(n_blocks > 0 && block_size > 0);
  std::unique_ptr<KvCache> c(new KvCache());
  c->shape_ = shape;
  c->n_cells_ = n_blocks * block_size;
  c->block_size_ = block_size;
  c->n_k_ = size_t(shape.n_layer) * size_t(c->n_cells_) * size_t(c->k_cell_stride());
  c->n_v_ = size_t(shape.n_layer) * size_t(c->n_cells_) * size_t(c->v_cell_stride());
  c->k_.reset(static_cast<uint16_t*>(std::calloc(c->n_k_ ? c->n_k_ : 1, sizeof(uint16_t))));
  c->v_.reset(static_cast<uint16_t*>(std::calloc(c->n_v_ ? c->n_v_ : 1, sizeof(uint16_t))));
  if (!c->k_ || !c->v_)
    return resource_exhausted("cannot allocate a KV cache of " +
                              std::to_string((c->n_k_ + c->n_v_) * 2 >> 20) + " MiB");
  return c;
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

}  // namespace ts::engine
