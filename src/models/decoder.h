// What the decoder-only architectures of this folder (llama_family.cc, gemma3.cc) share:
// binding the embedding, output norm and output projection; the weight bytes a decode step
// reads; packing; the KV shape; the per-context buffers every forward pass uses; the
// token-parallel loop; and the last layer's narrowing to the rows whose logits are wanted.
// Private to the models library.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/arch.h"
#include "engine/linear.h"
#include "ops/ops.h"
#include "engine/weights.h"

namespace ts::models::decoder {

// token_embd, output_norm and output (tied to token_embd when the file has no output).
struct Embeddings {
  kernels::WeightView tok_embd;        // [n_embd, n_vocab]
  engine::Matrix output;               // [n_embd -> n_vocab] (views tok_embd when tied)
  const float* output_norm = nullptr;  // [n_embd]
  bool tied = false;
  uint64_t embd_bytes = 0;  // of tok_embd
};

// Checks token_embd's shape ([n_embd, n_vocab]) and the vocab_size key against it, sets
// cfg->n_vocab, then binds the three. Errors name the tensor or key.
Status bind_embeddings(const gguf::File& f, const std::string& arch, engine::WeightBinder& wb,
                       engine::ModelConfig* cfg, Embeddings* out);

// A weight matrix of n_rows rows of n_cols elements.
Result<engine::Matrix> bind_matrix(engine::WeightBinder& wb, const std::string& name, int64_t n_cols, int64_t n_rows);

// Bytes a decode step reads once every tensor is bound: all of them, of an untied
// embedding only one row.
uint64_t step_weight_bytes(const engine::WeightBinder& wb, const Embeddings& e, int64_t n_embd);

ops::KvShape kv_shape(const engine::ModelConfig& cfg);

// Packs the seven matrices of every layer (members wq, wk, wv, wo, gate, up, down) and the
// output projection, when the options ask for packed weights.
template <typename Layer>
void pack(std::vector<Layer>& layers, engine::Matrix& output, ThreadPool& pool, const engine::ModelOptions& opts) {
  if (!opts.pack_weights) return;
  for (Layer& L : layers)
    for (engine::Matrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down}) m->pack(&pool);
  output.pack(&pool);
}

// The buffers of a forward pass over up to max_tokens tokens.
struct Workspace : engine::Workspace {
  int64_t max_tokens = 0;
  std::vector<float> x;         // [T, n_embd] residual stream
  std::vector<float> xn;        // [T, n_embd] normalised input of the next projection
  std::vector<float> q;         // [T, n_head*hd]
  std::vector<float> k, v;      // [T, n_kv*hd]
  std::vector<float> attn;      // [T, n_head*hd]
  std::vector<float> tmp;       // [T, n_embd] projection output before the residual add
  std::vector<float> h, h2;     // [T, n_ff] gate (then the gated activation) and up
  std::vector<int32_t> rows;    // compacted row -> token index (last layer)
  std::vector<uint16_t> attn_scratch;  // per thread
  int64_t attn_scratch_stride = 0;

  // Sizes the buffers above for T tokens and n_threads threads.
  void size_for(const engine::ModelConfig& cfg, int64_t T, int n_threads);
};

// Token-parallel loop that stays on the calling thread for a single token (decode).
template <typename F>
void for_tokens(ThreadPool& pool, int64_t n, const F& fn) {
  if (n <= 1) {
    if (n == 1) fn(0, 1);
    return;
  }
  struct Args {
    const F* fn;
  } args{&fn};
  pool.parallel_for(n, 1, [&args](int64_t b, int64_t e, int) { (*args.fn)(b, e); });
}

// Before the last layer's attention: keeps only the rows of batch.out_rows, moved to the
// front (their queries and residuals; ws.rows maps them to their tokens). Returns the new
// row count.
int64_t keep_out_rows(const engine::ForwardBatch& batch, Workspace& ws, int64_t nq, int64_t d);

// --- attention batching, shared by the families ------------------------------------------
// A layer's attention is cut into units: rows [row_begin, row_end) of one sequence
// (compacted rows: ws.rows maps them to tokens) with query heads [head_begin, head_end) of
// each kv head in [kv_begin, kv_end). Each family builds its units (llama: long runs by
// rows, short ones by kv heads; gemma3: windows of local layers) and runs each with its
// kernel call; the cutting into runs of one sequence and the threads are here.
struct AttnUnit {
  int32_t row_begin, row_end, kv_begin, kv_end, head_begin, head_end;
  int64_t window_begin = 0;  // > 0: a local layer's rows past their window (gemma3)
};

// Calls fn(row_begin, row_end) for each run of consecutive rows of one sequence.
template <typename F>
void for_seq_runs(const engine::ForwardBatch& batch, const Workspace& ws, int64_t n, const F& fn) {
  auto seq_of = [&](int64_t i) { return batch.seq[size_t(ws.rows[size_t(i)])]; };
  for (int64_t i = 0; i < n;) {
    int64_t e = i + 1;
    while (e < n && seq_of(e) == seq_of(i)) ++e;
    fn(i, e);
    i = e;
  }
}

// Runs fn(thread, unit) for every unit: threads claim units one at a time (units differ in
// length, sequences being of different lengths, and a thread that loses its core for a
// while does not hold back the others); on the calling thread alone when the layer reads
// fewer than engine::kMinParallelBytes of KV. Units are independent: which thread runs
// one changes no bit.
template <typename F>
void run_attn_units(ThreadPool& pool, int64_t kv_bytes, const std::vector<AttnUnit>& units, const F& fn) {
  const int64_t n_units = int64_t(units.size());
  std::atomic<int64_t> next{0};
  engine::run_sized(pool, kv_bytes, [&](int ith, int) {
    for (int64_t u = next.fetch_add(1, std::memory_order_relaxed); u < n_units;
         u = next.fetch_add(1, std::memory_order_relaxed))
      fn(ith, units[size_t(u)]);
  });
}

}  // namespace ts::models::decoder
