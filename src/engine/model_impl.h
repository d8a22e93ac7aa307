// Private state behind Model and Context.
#pragma once

#include <memory>
#include <vector>

#include "core/huge_arena.h"
#include "core/thread_pool.h"
#include "engine/arch.h"
#include "engine/engine.h"
#include "ops/kv_cache.h"
#include "engine/linear.h"
#include "engine/model.h"
#include "engine/pack_file.h"
#include "gguf/gguf.h"

namespace ts::engine {

class ModelImpl {
 public:
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<PackFile> pack;  // before arch: its matrices may point into the pack
  std::unique_ptr<HugeArena> arena;  // ... or into this (weights packed at load, no pack)
  std::unique_ptr<Architecture> arch;
  std::unique_ptr<ThreadPool> pool;
  PackInfo pack_info;
};

// Model::load, with `hook` (may be null) installed while the architecture packs its
// matrices when no pack is used (`tierserve build` records the packing through it).
Result<std::unique_ptr<Model>> load_model(const std::string& path, const ModelOptions& opts, PackHook* hook);

class ContextImpl {
 public:
  static constexpr SeqId kSeq = 0;
  int64_t n_ctx = 0;
  int64_t n_batch = 0;
  int64_t n_past = 0;
  int64_t n_vocab = 0;
  std::unique_ptr<Engine> engine;  // one sequence, kSeq; its last step's rows are the logits
  int64_t n_logit_rows = 0;
};

}  // namespace ts::engine
