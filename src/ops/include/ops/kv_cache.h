// The KV tensors: keys and values of every layer, stored in F16 as llama.cpp does (this
// matters for matching its numerics), in fixed-size blocks of cells.
//
// Layout: per layer, cells in order, each cell holding n_head_kv heads of head_dim halves.
// A sequence sees its cells through a KvSeqView, a block table that maps positions to
// cells: position p lives in cell blocks[p / block_size] * block_size + p % block_size.
// The engine (engine/engine.h) hands out blocks from one pool and keeps the tables (block
// accounting lives outside this class).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/check.h"
#include "core/status.h"

namespace ts::ops {

struct KvShape {
  int n_layer = 0;
  int n_head_kv = 0;
  int head_dim_k = 0;
  int head_dim_v = 0;
};

// Which cells hold a sequence's positions.
struct KvSeqView {
  std::span<const int32_t> blocks;  // physical block ids in position order
  int32_t block_size = 0;           // cells per block

  int64_t cell(int64_t pos) const {
    return int64_t(blocks[size_t(pos / block_size)]) * block_size + pos % block_size;
  }
  int64_t capacity() const { return int64_t(blocks.size()) * block_size; }
};

class KvCache {
 public:
  // Storage for n_blocks * block_size cells of every layer, zero-filled (calloc: pages are
  // only touched when first written). kResourceExhausted when it cannot be allocated.
  static Result<std::unique_ptr<KvCache>> create(const KvShape& shape, int64_t n_blocks, int32_t block_size);

  const KvShape& shape() const { return shape_; }
  int64_t n_cells() const { return n_cells_; }
  int64_t n_blocks() const { return n_cells_ / block_size_; }
  int32_t block_size() const { return block_size_; }
  uint64_t bytes() const { return uint64_t(n_k_ + n_v_) * sizeof(uint16_t); }
  // Faults in every page now (zero-filled, 2 MiB pages where the kernel gives them), so
  // that the first steps to write a region do not pay for it. The cells read as zeros
  // before and after. For benchmarks that measure steady state.
  void touch();

  // Halves of one cell (all kv heads) of `layer`; head h starts at h * head_dim.
  uint16_t* k(int layer, int64_t cell) { return k_.get() + offset_k(layer, cell); }
  uint16_t* v(int layer, int64_t cell) { return v_.get() + offset_v(layer, cell); }
  const uint16_t* k(int layer, int64_t cell) const { return k_.get() + offset_k(layer, cell); }
  const uint16_t* v(int layer, int64_t cell) const { return v_.get() + offset_v(layer, cell); }
  // Halves between consecutive cells of one layer.
  int64_t k_cell_stride() const { return int64_t(shape_.n_head_kv) * shape_.head_dim_k; }
  int64_t v_cell_stride() const { return int64_t(shape_.n_head_kv) * shape_.head_dim_v; }

  // Copies the cells of block `src` into block `dst` in every layer (copy-on-write forks).
  void copy_block(int64_t src, int64_t dst);

 private:
  KvCache() = default;
  size_t offset_k(int layer, int64_t cell) const {
    return (size_t(layer) * size_t(n_cells_) + size_t(cell)) * size_t(k_cell_stride());
  }
  size_t offset_v(int layer, int64_t cell) const {
    return (size_t(layer) * size_t(n_cells_) + size_t(cell)) * size_t(v_cell_stride());
  }

  KvShape shape_;
  int64_t n_cells_ = 0;
  int32_t block_size_ = 0;
  // An anonymous mapping of `bytes` bytes (zeroed, 2 MiB-aligned, MADV_HUGEPAGE).
  struct Free {
    size_t bytes;  // no initializer: the nested class must stay default-constructible here
    void operator()(uint16_t* p) const;
  };
  static std::unique_ptr<uint16_t[], Free> map_halves(size_t n);
  size_t n_k_ = 0, n_v_ = 0;
  std::unique_ptr<uint16_t[], Free> k_, v_;
};

}  // namespace ts::ops
