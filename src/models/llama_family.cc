#include "llama_family.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "engine/arch_names.h"
#include "engine/weights.h"

namespace ts::models {

using engine::names::key;
using engine::names::tensor;
namespace names = engine::names;

// --- loading ---------------------------------------------------------------------------

Status LlamaFamily::load(const gguf::File& f, const std::string& arch) {
  TS_ASSIGN_OR_RETURN(const double freq_scale, engine::read_transformer_hparams(f, arch, 1e-5, &cfg_));

  rms_eps_ = float(cfg_.rms_eps);
  rope_ = ops::RopeConfig{};
  rope_.n_rot = int(cfg_.n_rot);
  rope_.freq_base = float(cfg_.rope_freq_base);
  rope_.freq_scale = float(freq_scale);
  rope_.neox = variant_.neox_rope;

  engine::WeightBinder wb(f);
  const int64_t d = cfg_.n_embd, hd = cfg_.head_dim;
  const int64_t nq = cfg_.n_head * hd, nkv = cfg_.n_head_kv * hd;
  TS_RETURN_IF_ERROR(decoder::bind_embeddings(f, arch, wb, &cfg_, &embd_));
  TS_ASSIGN_OR_RETURN(rope_.freq_factors, wb.optional_vector(names::kRopeFreqs, cfg_.n_rot / 2));

  layers_.clear();
  layers_.resize(size_t(cfg_.n_layer));
  for (int l = 0; l < int(cfg_.n_layer); ++l) {
    Layer& L = layers_[size_t(l)];
    TS_ASSIGN_OR_RETURN(L.attn_norm, wb.vector(tensor(names::kAttnNorm, l), d));
    TS_ASSIGN_OR_RETURN(L.wq, decoder::bind_matrix(wb, tensor(names::kAttnQ, l), d, nq));
    TS_ASSIGN_OR_RETURN(L.wk, decoder::bind_matrix(wb, tensor(names::kAttnK, l), d, nkv));
    TS_ASSIGN_OR_RETURN(L.wv, decoder::bind_matrix(wb, tensor(names::kAttnV, l), d, nkv));
    TS_ASSIGN_OR_RETURN(L.wo, decoder::bind_matrix(wb, tensor(names::kAttnOut, l), nq, d));
    if (variant_.require_qkv_bias) {
      TS_ASSIGN_OR_RETURN(L.bq, wb.vector(tensor(names::kAttnQBias, l), nq));
      TS_ASSIGN_OR_RETURN(L.bk, wb.vector(tensor(names::kAttnKBias, l), nkv));
      TS_ASSIGN_OR_RETURN(L.bv, wb.vector(tensor(names::kAttnVBias, l), nkv));
    } else {
      TS_ASSIGN_OR_RETURN(L.bq, wb.optional_vector(tensor(names::kAttnQBias, l), nq));
      TS_ASSIGN_OR_RETURN(L.bk, wb.optional_vector(tensor(names::kAttnKBias, l), nkv));
      TS_ASSIGN_OR_RETURN(L.bv, wb.optional_vector(tensor(names::kAttnVBias, l), nkv));
    }
    TS_ASSIGN_OR_RETURN(L.bo, wb.optional_vector(tensor(names::kAttnOutBias, l), d));
    if (variant_.qk_norm) {
      TS_ASSIGN_OR_RETURN(L.q_norm, wb.vector(tensor(names::kAttnQNorm, l), hd));
      TS_ASSIGN_OR_RETURN(L.k_norm, wb.vector(tensor(names::kAttnKNorm, l), hd));
    }
    TS_ASSIGN_OR_RETURN(L.ffn_norm, wb.vector(tensor(names::kFfnNorm, l), d));
    TS_ASSIGN_OR_RETURN(L.gate, decoder::bind_matrix(wb, tensor(names::kFfnGate, l), d, cfg_.n_ff));
    TS_ASSIGN_OR_RETURN(L.up, decoder::bind_matrix(wb, tensor(names::kFfnUp, l), d, cfg_.n_ff));
    TS_ASSIGN_OR_RETURN(L.down, decoder::bind_matrix(wb, tensor(names::kFfnDown, l), cfg_.n_ff, d));
  }
  weight_bytes_ = decoder::step_weight_bytes(wb, embd_, d);
  return Status::ok();
}

void LlamaFamily::prepare(ThreadPool& pool, const engine::ModelOptions& opts) {
  attn_numerics_ = opts.attn_numerics;
  decoder::pack(layers_, embd_.output, pool, opts);
}

// --- forward ---------------------------------------------------------------------------

namespace {

struct LlamaWorkspace final : decoder::Workspace {
  std::vector<float> cs;  // [T, n_rot] rope cos/sin
  std::vector<decoder::AttnUnit> units;  // attention work, rebuilt per layer (capacity reserved)
};

}  // namespace

std::unique_ptr<engine::Workspace> LlamaFamily::make_workspace(int64_t T, int n_threads) const {
  auto ws = std::make_unique<LlamaWorkspace>();
  ws->size_for(cfg_, T, n_threads);
  ws->cs.resize(size_t(T * cfg_.n_rot));
  ws->units.reserve(size_t(T * cfg_.n_head_kv));
  return ws;
}

bool LlamaFamily::forward(const engine::ForwardBatch& batch, ops::KvCache& kv, engine::Workspace& wsb,
                          ThreadPool& pool) const {
  auto& ws = static_cast<LlamaWorkspace&>(wsb);
  int64_t n = int64_t(batch.tokens.size());
  TS_CHECK(n > 0 && n <= ws.max_tokens);
  const int64_t d = cfg_.n_embd, hd = cfg_.head_dim, n_ff = cfg_.n_ff;
  const int64_t n_head = cfg_.n_head, n_head_kv = cfg_.n_head_kv;
  const int64_t nq = n_head * hd, nkv = n_head_kv * hd, n_rot = cfg_.n_rot;
  const int64_t n_out = int64_t(batch.out_rows.size());
  const float kq_scale = 1.0f / std::sqrt(float(hd));

  // Embeddings, rope tables, first norm.
  decoder::for_tokens(pool, n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      kernels::dequantize_rows(embd_.tok_embd, batch.tokens[size_t(i)], 1, ws.x.data() + i * d);
      ops::rope_table(rope_, batch.positions[size_t(i)], ws.cs.data() + i * n_rot);
      ops::rms_norm(ws.x.data() + i * d, layers_[0].attn_norm, ws.xn.data() + i * d, d, rms_eps_);
      ws.rows[size_t(i)] = int32_t(i);
    }
  });

  for (int l = 0; l < int(cfg_.n_layer); ++l) {
    if (batch.interrupted()) return false;
    const Layer& L = layers_[size_t(l)];
    const bool last = l + 1 == int(cfg_.n_layer);

    // Q, K, V.
    {
      const engine::Product qkv[] = {{&L.wq, ws.q.data(), nq}, {&L.wk, ws.k.data(), nkv}, {&L.wv, ws.v.data(), nkv}};
      engine::matmul_many(qkv, ws.xn.data(), d, n, pool);
    }

    // Bias, QK-norm, RoPE; K and V into the cache.
    decoder::for_tokens(pool, n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if (L.bq) ops::add(ws.q.data() + i * nq, L.bq, nq);
        if (L.bk) ops::add(ws.k.data() + i * nkv, L.bk, nkv);
        if (L.bv) ops::add(ws.v.data() + i * nkv, L.bv, nkv);
      }
      // The heads of rows [b, e) are consecutive vectors of hd floats.
      if (L.q_norm)
        ops::rms_norm_rows(ws.q.data() + b * nq, hd, L.q_norm, ws.q.data() + b * nq, hd, (e - b) * n_head,
                                   hd, rms_eps_);
      if (L.k_norm)
        ops::rms_norm_rows(ws.k.data() + b * nkv, hd, L.k_norm, ws.k.data() + b * nkv, hd,
                                   (e - b) * n_head_kv, hd, rms_eps_);
      for (int64_t i = b; i < e; ++i) {
        float* qi = ws.q.data() + i * nq;
        float* ki = ws.k.data() + i * nkv;
        float* vi = ws.v.data() + i * nkv;
        const float* cs = ws.cs.data() + i * n_rot;
        for (int64_t h = 0; h < n_head; ++h) ops::rope_apply(rope_, cs, qi + h * hd);
        for (int64_t h = 0; h < n_head_kv; ++h) ops::rope_apply(rope_, cs, ki + h * hd);
        const ops::KvSeqView& sv = batch.seqs[size_t(batch.seq[size_t(i)])];
        const int64_t cell = sv.cell(batch.positions[size_t(i)]);
        ops::to_f16(ki, kv.k(l, cell), nkv);
        ops::to_f16(vi, kv.v(l, cell), nkv);
      }
    });

    // In the last layer only the rows whose logits are wanted go on.
    if (last && n_out < n) {
      if (n_out == 0) return true;
      n = decoder::keep_out_rows(batch, ws, nq, d);
    }

    // Attention work units: (rows of one sequence, range of kv heads), each one
    // ops::attention_seq call over the rows' query heads of those kv heads.
    // - Long runs of rows (prompts): kMaxGroupQueries queries of one kv head per unit, so
    //   that a head's K/V slice is read once for many rows.
    // - Short runs (decode): all kv heads of the rows in one unit (contiguous cell reads,
    //   interleaved accumulator chains), split only to give every thread work.
    {
      const int64_t group = n_head / n_head_kv;
      const int64_t rows_per_unit = std::max<int64_t>(1, ops::kMaxGroupQueries / group);
      auto pos_of = [&](int64_t i) { return int64_t(batch.positions[size_t(ws.rows[size_t(i)])]); };
      int64_t kv_bytes = 0, n_short = 0;
      decoder::for_seq_runs(batch, ws, n, [&](int64_t i, int64_t e) {
        if (e - i < rows_per_unit) {
          kv_bytes += pos_of(e - 1) + 1;
          ++n_short;
        } else {
          for (int64_t b = i; b < e; b += rows_per_unit) kv_bytes += pos_of(std::min(e, b + rows_per_unit) - 1) + 1;
        }
      });
      kv_bytes *= n_head_kv * hd * 2 * int64_t(sizeof(uint16_t));
      const int64_t nth = kv_bytes < engine::kMinParallelBytes ? 1 : pool.n_threads();
      // Pieces per short run: its kv heads are split between threads only when each serves
      // several queries (GQA: compute-bound, and the split shares the work). With one query
      // per kv head a unit streams the cache: two threads reading halves of every cell were
      // slower than one thread reading whole cells (llama 110m Q8_0, one sequence at depth
      // 512, 2 threads: 169 vs 205 tok/s decode), the prefetchers of both cores pulling in
      // the other half too; qwen2 0.5b (7 queries per kv head) gains 6% from the split.
      const int64_t pieces =
          group < 2 ? 1 : std::clamp<int64_t>(n_short > 0 ? (nth + n_short - 1) / n_short : 1, 1, n_head_kv);
      ws.units.clear();
      const int32_t all = int32_t(group);
      decoder::for_seq_runs(batch, ws, n, [&](int64_t i, int64_t e) {
        if (e - i < rows_per_unit) {
          const int64_t cap = std::max<int64_t>(1, ops::kMaxSeqQueries / ((e - i) * group));
          const int64_t per = std::min(cap, (n_head_kv + pieces - 1) / pieces);
          for (int64_t g = 0; g < n_head_kv; g += per)
            ws.units.push_back({int32_t(i), int32_t(e), int32_t(g), int32_t(std::min(n_head_kv, g + per)), 0, all});
        } else {
          for (int64_t b = i; b < e; b += rows_per_unit)
            for (int64_t g = 0; g < n_head_kv; ++g)
              ws.units.push_back({int32_t(b), int32_t(std::min(e, b + rows_per_unit)), int32_t(g), int32_t(g + 1), 0, all});
        }
      });
      decoder::run_attn_units(pool, kv_bytes, ws.units, [&](int ith, const decoder::AttnUnit& un) {
        uint16_t* scratch = ws.attn_scratch.data() + ith * ws.attn_scratch_stride;
        ops::AttnQuery qs[ops::kMaxSeqQueries];
        int n_q = 0;
        for (int64_t g = un.kv_begin; g < un.kv_end; ++g)
          for (int64_t i = un.row_begin; i < un.row_end; ++i)
            for (int64_t h = g * group + un.head_begin; h < g * group + un.head_end; ++h)
              qs[n_q++] = {ws.q.data() + i * nq + h * hd, ws.attn.data() + i * nq + h * hd, pos_of(i) + 1, int32_t(g)};
        const ops::KvSeqView& sv = batch.seqs[size_t(batch.seq[size_t(ws.rows[size_t(un.row_begin)])])];
        ops::attention_seq(qs, n_q, kv, l, sv, kq_scale, scratch, attn_numerics_);
      });
    }

    // Output projection, residual, FFN norm.
    L.wo.matmul(ws.attn.data(), nq, n, ws.tmp.data(), d, pool);
    decoder::for_tokens(pool, n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float* xi = ws.x.data() + i * d;
        if (L.bo) ops::add(ws.tmp.data() + i * d, L.bo, d);
        ops::add(xi, ws.tmp.data() + i * d, d);
      }
      ops::rms_norm_rows(ws.x.data() + b * d, d, L.ffn_norm, ws.xn.data() + b * d, d, e - b, d, rms_eps_);
    });

    // FFN, residual, the next norm (the next layer's attention norm or the output norm).
    engine::linear_gated(L.gate, L.up, engine::GateAct::kSilu, ws.xn.data(), d, n, ws.h.data(), ws.h2.data(),
                         pool);
    L.down.matmul(ws.h.data(), n_ff, n, ws.tmp.data(), d, pool);
    const float* next_norm = last ? embd_.output_norm : layers_[size_t(l + 1)].attn_norm;
    decoder::for_tokens(pool, n, [&](int64_t b, int64_t e) {
      ops::add(ws.x.data() + b * d, ws.tmp.data() + b * d, (e - b) * d);
      ops::rms_norm_rows(ws.x.data() + b * d, d, next_norm, ws.xn.data() + b * d, d, e - b, d, rms_eps_);
    });
  }

  // Logits of the wanted rows (ws.xn holds exactly those rows now, in out_rows order).
  if (n_out == 0) return true;
  if (batch.interrupted()) return false;
  TS_CHECK(n == n_out);
  embd_.output.matmul(ws.xn.data(), d, n, batch.logits, cfg_.n_vocab, pool);
  return true;
}

}  // namespace ts::models
