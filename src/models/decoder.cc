#include "decoder.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "engine/arch_names.h"
#include "kernels/traits.h"

namespace ts::models::decoder {

namespace names = engine::names;

Status bind_embeddings(const gguf::File& f, const std::string& arch, engine::WeightBinder& wb,
                       engine::ModelConfig* cfg, Embeddings* out) {
  const gguf::TensorInfo* te = f.find_tensor(names::kTokenEmbd);
  if (!te) return data_loss(std::string("missing tensor '") + names::kTokenEmbd + "'");
  if (te->n_dims != 2 || te->ne[0] != cfg->n_embd || te->ne[1] < 1)
    return data_loss(std::string("tensor '") + names::kTokenEmbd + "' has shape " + te->shape_string() +
                     ", expected [" + std::to_string(cfg->n_embd) + ", n_vocab]");
  cfg->n_vocab = te->ne[1];
  const std::string vocab_key = names::key(names::kVocabSize, arch);
  if (const gguf::Value* vs = f.find(vocab_key); vs && vs->as_int() && *vs->as_int() != cfg->n_vocab)
    return data_loss(vocab_key + " = " + std::to_string(*vs->as_int()) + " but '" + names::kTokenEmbd + "' has " +
                     std::to_string(cfg->n_vocab) + " rows");

  const uint64_t before = wb.bound_bytes();
  TS_ASSIGN_OR_RETURN(out->tok_embd, wb.matrix(names::kTokenEmbd, cfg->n_embd, cfg->n_vocab));
  out->embd_bytes = wb.bound_bytes() - before;
  TS_ASSIGN_OR_RETURN(out->output_norm, wb.vector(names::kOutputNorm, cfg->n_embd));
  out->tied = !wb.has(names::kOutput);
  if (out->tied) {
    out->output = engine::Matrix(out->tok_embd);
  } else {
    TS_ASSIGN_OR_RETURN(out->output, bind_matrix(wb, names::kOutput, cfg->n_embd, cfg->n_vocab));
  }
  return Status::ok();
}

Result<engine::Matrix> bind_matrix(engine::WeightBinder& wb, const std::string& name, int64_t n_cols, int64_t n_rows) {
  TS_ASSIGN_OR_RETURN(const kernels::WeightView v, wb.matrix(name, n_cols, n_rows));
  return engine::Matrix(v);
}

uint64_t step_weight_bytes(const engine::WeightBinder& wb, const Embeddings& e, int64_t n_embd) {
  const uint64_t all = wb.bound_bytes();
  return e.tied ? all : all - e.embd_bytes + uint64_t(kernels::row_bytes(e.tok_embd.type, n_embd));
}

ops::KvShape kv_shape(const engine::ModelConfig& cfg) {
  ops::KvShape s;
  s.n_layer = int(cfg.n_layer);
  s.n_head_kv = int(cfg.n_head_kv);
  s.head_dim_k = int(cfg.head_dim);
  s.head_dim_v = int(cfg.head_dim);
  return s;
}

void Workspace::size_for(const engine::ModelConfig& cfg, int64_t T, int n_threads) {
  const int64_t d = cfg.n_embd, nq = cfg.n_head * cfg.head_dim, nkv = cfg.n_head_kv * cfg.head_dim;
  max_tokens = T;
  x.resize(size_t(T * d));
  xn.resize(size_t(T * d));
  q.resize(size_t(T * nq));
  k.resize(size_t(T * nkv));
  v.resize(size_t(T * nkv));
  attn.resize(size_t(T * nq));
  tmp.resize(size_t(T * d));
  h.resize(size_t(T * cfg.n_ff));
  h2.resize(size_t(T * cfg.n_ff));
  rows.resize(size_t(T));
  attn_scratch_stride = ops::attention_group_scratch_halves(kv_shape(cfg)) + 32;
  attn_scratch.resize(size_t(attn_scratch_stride) * size_t(std::max(1, n_threads)));
}

int64_t keep_out_rows(const engine::ForwardBatch& batch, Workspace& ws, int64_t nq, int64_t d) {
  const int64_t n = int64_t(batch.tokens.size()), n_out = int64_t(batch.out_rows.size());
  for (int64_t j = 0; j < n_out; ++j) {
    const int64_t src = batch.out_rows[size_t(j)];
    TS_CHECK(src >= j && src < n);
    ws.rows[size_t(j)] = int32_t(src);
    if (src == j) continue;
    std::memcpy(ws.q.data() + j * nq, ws.q.data() + src * nq, size_t(nq) * sizeof(float));
    std::memcpy(ws.x.data() + j * d, ws.x.data() + src * d, size_t(d) * sizeof(float));
  }
  return n_out;
}

}  // namespace ts::models::decoder
