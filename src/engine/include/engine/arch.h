// Architectures: what a model family must provide (read its hyperparameters and weights
// from a GGUF file, run the forward pass over a batch of tokens) and the registry that maps
// `general.architecture` names to them.
//
// Each architecture lives in its own file in src/models and is registered by
// models::register_all() (an explicit call, because static registration objects in a
// static library are dropped by the linker when nothing references them).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "ops/kv_cache.h"
#include "engine/model.h"
#include "gguf/gguf.h"

namespace ts::engine {

// The KV tensors belong to the ops layer (attention reads them); the engine maps blocks
// onto them.
using ops::KvCache;
using ops::KvSeqView;
using ops::KvShape;

// A batch of tokens to run through the model. Tokens of one sequence appear in position
// order; position p of a sequence attends to its positions 0..p (those before the batch
// must already be in the cache). Token i's K/V are written at seqs[seq[i]].cell(pos[i]).
struct ForwardBatch {
  std::span<const int32_t> tokens;     // ids, validated against n_vocab by the caller
  std::span<const int32_t> positions;  // one per token
  std::span<const int32_t> seq;        // one per token: index into `seqs`
  std::span<const KvSeqView> seqs;
  std::span<const int32_t> out_rows;   // token indices whose logits are wanted, ascending
  float* logits = nullptr;             // out_rows.size() x n_vocab
  // Interruptible passes: when set and true at a layer boundary, the pass stops there
  // (forward returns false). The batch's KV cells are then partly written; the caller
  // drops them (the tokens are not committed) and computes them again later.
  const std::atomic<bool>* interrupt = nullptr;

  bool interrupted() const { return interrupt && interrupt->load(std::memory_order_relaxed); }
};

// Per-context buffers an architecture needs for batches of up to max_tokens tokens.
// Allocated once when a context is created; the forward pass does not allocate.
class Workspace {
 public:
  virtual ~Workspace() = default;
};

class Architecture {
 public:
  virtual ~Architecture() = default;

  // Reads hyperparameters and binds weights (views into the mapping of `f`, which outlives
  // this object). `arch` is the general.architecture name. Errors name the key or tensor:
  // kDataLoss (missing/wrong shape), kUnimplemented (tensor type, feature).
  virtual Status load(const gguf::File& f, const std::string& arch) = 0;

  virtual const ModelConfig& config() const = 0;
  virtual KvShape kv_shape() const = 0;
  // Bytes of weights one decode step reads (every matrix once, embeddings one row).
  virtual uint64_t weight_bytes() const = 0;

  // Called once after load with the model's thread pool (e.g. to repack weights).
  virtual void prepare(ThreadPool& pool, const ModelOptions& opts) {}

  virtual std::unique_ptr<Workspace> make_workspace(int64_t max_tokens, int n_threads) const = 0;

  // Runs the batch (at most max_tokens tokens) and writes the logits of out_rows. Returns
  // false when batch.interrupted() stopped it at a layer boundary (logits not written).
  virtual bool forward(const ForwardBatch& batch, KvCache& kv, Workspace& ws, ThreadPool& pool) const = 0;
};

using ArchFactory = std::unique_ptr<Architecture> (*)();

// Registers `name` (a general.architecture value). Re-registering a name replaces it.
void register_architecture(std::string_view name, ArchFactory factory);
// nullptr when `name` is not registered.
ArchFactory find_architecture(std::string_view name);
std::vector<std::string> registered_architectures();

}  // namespace ts::engine
