#include "gemma3.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "engine/arch_names.h"
#include "engine/weights.h"
#include "models/register.h"

namespace ts::models {

using engine::names::key;
using engine::names::tensor;
namespace names = engine::names;

namespace {

// Gemma-only metadata keys (llama.cpp's names).
constexpr const char* kSlidingWindowPattern = "%s.attention.sliding_window_pattern";
constexpr const char* kRopeFreqBaseSwa = "%s.rope.freq_base_swa";
constexpr const char* kFinalLogitSoftcap = "%s.final_logit_softcapping";

// Every P-th layer is global when the file has no per-layer flags (Gemma 3: 5 local, 1 global).
constexpr int64_t kDefaultSwaPattern = 6;
// llama.cpp's default RoPE base of local layers when rope.freq_base_swa is absent.
constexpr double kDefaultLocalRopeBase = 10000.0;
// The Gemma 3 27B model (62 layers) scales queries by 1/sqrt(n_embd / n_head) instead of
// 1/sqrt(head_dim) (its query_pre_attn_scalar); llama.cpp keys this on the layer count.
constexpr int64_t kLayers27B = 62;

}  // namespace

// --- loading ---------------------------------------------------------------------------

Status Gemma3::load_hparams(const gguf::File& f, const std::string& arch) {
  // Linear RoPE scaling applies to the global layers only (Gemma 3 4B+: factor 8).
  TS_ASSIGN_OR_RETURN(const double freq_scale, engine::read_transformer_hparams(f, arch, 1e-6, &cfg_));
  TS_ASSIGN_OR_RETURN(const double local_base,
                      engine::read_float_or(f, key(kRopeFreqBaseSwa, arch), kDefaultLocalRopeBase, 1e-3, 1e12));
  TS_ASSIGN_OR_RETURN(const double softcap, engine::read_float_or(f, key(kFinalLogitSoftcap, arch), 0.0, 0.0, 1e6));
  softcap_ = float(softcap);

  rms_eps_ = float(cfg_.rms_eps);
  embd_scale_ = std::sqrt(float(cfg_.n_embd));
  const int64_t qpas = cfg_.n_layer == kLayers27B ? cfg_.n_embd / cfg_.n_head : cfg_.head_dim;
  attn_scale_ = 1.0f / std::sqrt(float(qpas));

  rope_global_ = ops::RopeConfig{};
  rope_global_.n_rot = int(cfg_.n_rot);
  rope_global_.freq_base = float(cfg_.rope_freq_base);
  rope_global_.freq_scale = float(freq_scale);
  rope_global_.neox = true;
  rope_local_ = rope_global_;
  rope_local_.freq_base = float(local_base);
  rope_local_.freq_scale = 1.0f;

  // Which layers are local.
  TS_ASSIGN_OR_RETURN(n_swa_, engine::read_int_or(f, key(names::kSlidingWindow, arch), 0, 0, 1 << 26));
  layers_.clear();
  layers_.resize(size_t(cfg_.n_layer));
  if (n_swa_ > 0) {
    const std::string pk = key(kSlidingWindowPattern, arch);
    const gguf::Value* pv = f.find(pk);
    if (pv && pv->is_array()) {
      if (int64_t(pv->size()) != cfg_.n_layer)
        return data_loss("metadata key '" + pk + "' has " + std::to_string(pv->size()) + " entries, expected " +
                         std::to_string(cfg_.n_layer) + " (one per layer)");
      if (pv->elem_type() != gguf::ValueType::kBool && !gguf::is_integer_type(pv->elem_type()))
        return data_loss("metadata key '" + pk + "' is an array of " + gguf::value_type_name(pv->elem_type()) +
                         ", expected per-layer flags");
      for (int64_t l = 0; l < cfg_.n_layer; ++l) layers_[size_t(l)].local = pv->int_at(uint64_t(l)) != 0;
    } else {
      TS_ASSIGN_OR_RETURN(const int64_t pattern, engine::read_int_or(f, pk, kDefaultSwaPattern, 0, 1 << 20));
      for (int64_t l = 0; l < cfg_.n_layer; ++l)
        layers_[size_t(l)].local = pattern == 0 || l % pattern < pattern - 1;
    }
  }
  return Status::ok();
}

Status Gemma3::load(const gguf::File& f, const std::string& arch) {
  TS_RETURN_IF_ERROR(load_hparams(f, arch));

  engine::WeightBinder wb(f);
  const int64_t d = cfg_.n_embd, hd = cfg_.head_dim;
  const int64_t nq = cfg_.n_head * hd, nkv = cfg_.n_head_kv * hd;
  TS_RETURN_IF_ERROR(decoder::bind_embeddings(f, arch, wb, &cfg_, &embd_));
  auto matrix = [&wb](const std::string& name, int64_t n_cols, int64_t n_rows) {
    return decoder::bind_matrix(wb, name, n_cols, n_rows);
  };
  for (int l = 0; l < int(cfg_.n_layer); ++l) {
    Layer& L = layers_[size_t(l)];
    TS_ASSIGN_OR_RETURN(L.attn_norm, wb.vector(tensor(names::kAttnNorm, l), d));
    TS_ASSIGN_OR_RETURN(L.wq, matrix(tensor(names::kAttnQ, l), d, nq));
    TS_ASSIGN_OR_RETURN(L.wk, matrix(tensor(names::kAttnK, l), d, nkv));
    TS_ASSIGN_OR_RETURN(L.wv, matrix(tensor(names::kAttnV, l), d, nkv));
    TS_ASSIGN_OR_RETURN(L.q_norm, wb.vector(tensor(names::kAttnQNorm, l), hd));
    TS_ASSIGN_OR_RETURN(L.k_norm, wb.vector(tensor(names::kAttnKNorm, l), hd));
    TS_ASSIGN_OR_RETURN(L.wo, matrix(tensor(names::kAttnOut, l), nq, d));
    TS_ASSIGN_OR_RETURN(L.attn_post_norm, wb.vector(tensor(names::kAttnPostNorm, l), d));
    TS_ASSIGN_OR_RETURN(L.ffn_norm, wb.vector(tensor(names::kFfnNorm, l), d));
    TS_ASSIGN_OR_RETURN(L.gate, matrix(tensor(names::kFfnGate, l), d, cfg_.n_ff));
    TS_ASSIGN_OR_RETURN(L.up, matrix(tensor(names::kFfnUp, l), d, cfg_.n_ff));
    TS_ASSIGN_OR_RETURN(L.down, matrix(tensor(names::kFfnDown, l), cfg_.n_ff, d));
    TS_ASSIGN_OR_RETURN(L.ffn_post_norm, wb.vector(tensor(names::kFfnPostNorm, l), d));
  }
  weight_bytes_ = decoder::step_weight_bytes(wb, embd_, d);
  return Status::ok();
}

void Gemma3::prepare(ThreadPool& pool, const engine::ModelOptions& opts) {
  attn_numerics_ = opts.attn_numerics;
  decoder::pack(layers_, embd_.output, pool, opts);
}

// --- forward ---------------------------------------------------------------------------

namespace {

struct Gemma3Workspace final : decoder::Workspace {
  std::vector<float> cs_global; // [T, n_rot] rope cos/sin of the global layers
  std::vector<float> cs_local;  // [T, n_rot] ... of the local layers
  // Attention work of one layer: one kv head per unit; window_begin > 0: rows at
  // consecutive positions past a local layer's window, window_begin the first row's
  // window start.
  std::vector<decoder::AttnUnit> units;  // rebuilt per layer (capacity reserved)
  std::vector<int32_t> window_cells;   // per thread: the cells of a unit's windows (their union)
  int64_t window_stride = 0;
};

}  // namespace

// After a projection into ws.tmp: tmp = norm(tmp) * post_w, x += tmp, xn = norm(x) * next_w.
void Gemma3::norm_add_norm(ThreadPool& pool, engine::Workspace& wsb, int64_t n, const float* post_w,
                           const float* next_w) const {
  auto& ws = static_cast<Gemma3Workspace&>(wsb);
  const int64_t d = cfg_.n_embd;
  decoder::for_tokens(pool, n, [&](int64_t b, int64_t e) {
    float* t = ws.tmp.data() + b * d;
    float* x = ws.x.data() + b * d;
    ops::rms_norm_rows(t, d, post_w, t, d, e - b, d, rms_eps_);
    ops::add(x, t, (e - b) * d);
    ops::rms_norm_rows(x, d, next_w, ws.xn.data() + b * d, d, e - b, d, rms_eps_);
  });
}

std::unique_ptr<engine::Workspace> Gemma3::make_workspace(int64_t T, int n_threads) const {
  auto ws = std::make_unique<Gemma3Workspace>();
  const size_t nth = size_t(std::max(1, n_threads));
  ws->size_for(cfg_, T, n_threads);
  ws->cs_global.resize(size_t(T * cfg_.n_rot));
  ws->cs_local.resize(size_t(T * cfg_.n_rot));
  ws->units.reserve(size_t(T * cfg_.n_head_kv + int64_t(nth) * cfg_.n_head));
  // A window unit's cells: the union of the windows of up to kMaxGroupQueries rows, from
  // the tile boundary before it.
  ws->window_stride = n_swa_ + ops::kMaxGroupQueries + ops::kAttnTile;
  ws->window_cells.resize(size_t(ws->window_stride) * nth);
  return ws;
}

bool Gemma3::forward(const engine::ForwardBatch& batch, ops::KvCache& kv, engine::Workspace& wsb,
                     ThreadPool& pool) const {
  auto& ws = static_cast<Gemma3Workspace&>(wsb);
  int64_t n = int64_t(batch.tokens.size());
  TS_CHECK(n > 0 && n <= ws.max_tokens);
  const int64_t d = cfg_.n_embd, hd = cfg_.head_dim, n_ff = cfg_.n_ff;
  const int64_t n_head = cfg_.n_head, n_head_kv = cfg_.n_head_kv;
  const int64_t nq = n_head * hd, nkv = n_head_kv * hd, n_rot = cfg_.n_rot;
  const int64_t n_out = int64_t(batch.out_rows.size());

  // Scaled embeddings, rope tables, first norm.
  decoder::for_tokens(pool, n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float* xi = ws.x.data() + i * d;
      kernels::dequantize_rows(embd_.tok_embd, batch.tokens[size_t(i)], 1, xi);
      for (int64_t j = 0; j < d; ++j) xi[j] *= embd_scale_;
      const int32_t pos = batch.positions[size_t(i)];
      ops::rope_table(rope_global_, pos, ws.cs_global.data() + i * n_rot);
      ops::rope_table(rope_local_, pos, ws.cs_local.data() + i * n_rot);
      ops::rms_norm(xi, layers_[0].attn_norm, ws.xn.data() + i * d, d, rms_eps_);
      ws.rows[size_t(i)] = int32_t(i);
    }
  });

  for (int l = 0; l < int(cfg_.n_layer); ++l) {
    if (batch.interrupted()) return false;
    const Layer& L = layers_[size_t(l)];
    const bool last = l + 1 == int(cfg_.n_layer);
    const ops::RopeConfig& rope = L.local ? rope_local_ : rope_global_;
    const float* cs_all = L.local ? ws.cs_local.data() : ws.cs_global.data();

    // Q, K, V.
    {
      const engine::Product qkv[] = {{&L.wq, ws.q.data(), nq}, {&L.wk, ws.k.data(), nkv}, {&L.wv, ws.v.data(), nkv}};
      engine::matmul_many(qkv, ws.xn.data(), d, n, pool);
    }

    // QK-norm, RoPE, query scale; K and V into the cache.
    decoder::for_tokens(pool, n, [&](int64_t b, int64_t e) {
      // The heads of rows [b, e) are consecutive vectors of hd floats.
      ops::rms_norm_rows(ws.q.data() + b * nq, hd, L.q_norm, ws.q.data() + b * nq, hd, (e - b) * n_head, hd,
                                 rms_eps_);
      ops::rms_norm_rows(ws.k.data() + b * nkv, hd, L.k_norm, ws.k.data() + b * nkv, hd,
                                 (e - b) * n_head_kv, hd, rms_eps_);
      for (int64_t i = b; i < e; ++i) {
        float* qi = ws.q.data() + i * nq;
        float* ki = ws.k.data() + i * nkv;
        const float* cs = cs_all + i * n_rot;
        for (int64_t h = 0; h < n_head; ++h) {
          float* qh = qi + h * hd;
          ops::rope_apply(rope, cs, qh);
          for (int64_t j = 0; j < hd; ++j) qh[j] *= attn_scale_;
        }
        for (int64_t h = 0; h < n_head_kv; ++h) ops::rope_apply(rope, cs, ki + h * hd);
        const ops::KvSeqView& sv = batch.seqs[size_t(batch.seq[size_t(i)])];
        const int64_t cell = sv.cell(batch.positions[size_t(i)]);
        ops::to_f16(ki, kv.k(l, cell), nkv);
        ops::to_f16(ws.v.data() + i * nkv, kv.v(l, cell), nkv);
      }
    });

    // In the last layer only the rows whose logits are wanted go on.
    if (last && n_out < n) {
      if (n_out == 0) return true;
      n = decoder::keep_out_rows(batch, ws, nq, d);
    }

    // Attention. A unit runs the query heads of one kv head for a run of rows of one
    // sequence, so each K/V row is read once for all of them. In a local layer a row at
    // position p sees only [p - n_swa + 1, p]. Rows whose window cuts the sequence go in
    // units of their own: consecutive positions, the union of their windows in a
    // one-cell-per-block table, each query starting at its own window (kv_begin), so the
    // kernel walks exactly each window in position order (llama.cpp skips masked cells: the
    // arithmetic is the same).
    {
      const int64_t group = n_head / n_head_kv;
      const int64_t rows_per_unit = std::max<int64_t>(1, ops::kMaxGroupQueries / group);
      auto window_begin = [&](int64_t row) -> int64_t {
        const int64_t pos = batch.positions[size_t(ws.rows[size_t(row)])];
        return L.local ? std::max<int64_t>(0, pos - n_swa_ + 1) : 0;
      };
      ws.units.clear();
      int64_t kv_rows = 0;
      auto pos_of = [&](int64_t row) { return int64_t(batch.positions[size_t(ws.rows[size_t(row)])]); };
      decoder::for_seq_runs(batch, ws, n, [&](int64_t run_begin, int64_t run_end) {
        for (int64_t i = run_begin; i < run_end;) {
          const int64_t wb = window_begin(i);
          int64_t e = i + 1;
          while (e < run_end && e - i < rows_per_unit &&
                 (wb == 0 ? window_begin(e) == 0 : window_begin(e) > 0 && pos_of(e) == pos_of(e - 1) + 1))
            ++e;
          for (int64_t g = 0; g < n_head_kv; ++g)
            ws.units.push_back({int32_t(i), int32_t(e), int32_t(g), int32_t(g + 1), 0, int32_t(group), wb});
          kv_rows += pos_of(e - 1) + 1 - wb;
          i = e;
        }
      });
      const int64_t kv_bytes = kv_rows * n_head_kv * hd * 2 * int64_t(sizeof(uint16_t));
      // Fewer units than threads (decode: one per kv head): the query heads of a unit are
      // split between threads. Every query's result is independent of the others in its
      // call (ops::attention_group), so the split changes no bit; each part reads the
      // unit's K/V rows again, from cache.
      const int64_t n_whole = int64_t(ws.units.size());
      const int nth_pool = pool.n_threads();
      if (n_whole < nth_pool && kv_bytes >= engine::kMinParallelBytes && group > 1) {
        const int64_t parts = std::min<int64_t>(group, (nth_pool + n_whole - 1) / n_whole);
        for (int64_t u = 0; u < n_whole; ++u) {
          for (int64_t k = 1; k < parts; ++k) {
            decoder::AttnUnit part = ws.units[size_t(u)];
            part.head_begin = int32_t(group * k / parts);
            part.head_end = int32_t(group * (k + 1) / parts);
            ws.units.push_back(part);
          }
          ws.units[size_t(u)].head_end = int32_t(group / parts);
        }
      }
      decoder::run_attn_units(pool, kv_bytes, ws.units, [&](int ith, const decoder::AttnUnit& un) {
        uint16_t* scratch = ws.attn_scratch.data() + ith * ws.attn_scratch_stride;
        int32_t* cells = ws.window_cells.data() + ith * ws.window_stride;
        const float* qs[ops::kMaxGroupQueries];
        float* outs[ops::kMaxGroupQueries];
        int64_t n_kv[ops::kMaxGroupQueries], kv_begin[ops::kMaxGroupQueries];
        {
          const ops::KvSeqView& sv = batch.seqs[size_t(batch.seq[size_t(ws.rows[size_t(un.row_begin)])])];
          // A window unit's table of cells starts at a multiple of kAttnTile, so that the
          // tiles of kTiledF32 sit at the same absolute positions however rows are grouped.
          const int64_t table_begin = un.window_begin - un.window_begin % ops::kAttnTile;
          int n_q = 0;
          for (int64_t i = un.row_begin; i < un.row_end; ++i) {
            const int64_t pos = batch.positions[size_t(ws.rows[size_t(i)])];
            for (int64_t h = un.kv_begin * group + un.head_begin; h < un.kv_begin * group + un.head_end; ++h) {
              qs[n_q] = ws.q.data() + i * nq + h * hd;
              outs[n_q] = ws.attn.data() + i * nq + h * hd;
              n_kv[n_q] = pos + 1 - table_begin;
              kv_begin[n_q] = un.window_begin > 0 ? pos - n_swa_ + 1 - table_begin : 0;
              ++n_q;
            }
          }
          if (un.window_begin == 0) {
            ops::attention_group(qs, n_kv, n_q, kv, l, int(un.kv_begin), sv, 1.0f, outs, scratch,
                                          attn_numerics_);
          } else {
            const int64_t n_win = n_kv[n_q - 1];  // the last row's: the union of the windows
            for (int64_t p = 0; p < n_win; ++p) cells[p] = int32_t(sv.cell(table_begin + p));
            const ops::KvSeqView win{std::span<const int32_t>(cells, size_t(n_win)), 1};
            ops::attention_group(qs, n_kv, n_q, kv, l, int(un.kv_begin), win, 1.0f, outs, scratch,
                                          attn_numerics_, kv_begin);
          }
        }
      });
    }

    // Output projection, post-attention norm, residual, FFN norm.
    L.wo.matmul(ws.attn.data(), nq, n, ws.tmp.data(), d, pool);
    norm_add_norm(pool, wsb, n, L.attn_post_norm, L.ffn_norm);

    // GELU-gated FFN (llama.cpp's F16 GELU table, see ops::geglu_tanh_f16).
    // Gate and up in one dispatch; each thread applies the activation to the rows it
    // computed (elementwise, so the split changes nothing).
    {
      const engine::Product gu[] = {{&L.gate, ws.h.data(), n_ff}, {&L.up, ws.h2.data(), n_ff}};
      engine::matmul_many(gu, ws.xn.data(), d, n, pool, [&](int64_t r0, int64_t r1) {
        for (int64_t i = 0; i < n; ++i) {
          float* hi = ws.h.data() + i * n_ff + r0;
          ops::geglu_tanh_f16(hi, ws.h2.data() + i * n_ff + r0, hi, r1 - r0);
        }
      });
    }
    L.down.matmul(ws.h.data(), n_ff, n, ws.tmp.data(), d, pool);

    // Post-FFN norm, residual, the next norm (the next layer's attention norm or the
    // output norm).
    const float* next_norm = last ? embd_.output_norm : layers_[size_t(l + 1)].attn_norm;
    norm_add_norm(pool, wsb, n, L.ffn_post_norm, next_norm);
  }

  // Logits of the wanted rows (ws.xn holds exactly those rows now, in out_rows order).
  if (n_out == 0) return true;
  if (batch.interrupted()) return false;
  TS_CHECK(n == n_out);
  embd_.output.matmul(ws.xn.data(), d, n, batch.logits, cfg_.n_vocab, pool);
  if (softcap_ > 0.0f) {
    const float inv = 1.0f / softcap_;
    for (int64_t i = 0; i < n * cfg_.n_vocab; ++i) batch.logits[i] = std::tanh(batch.logits[i] * inv) * softcap_;
  }
  return true;
}

// --- registration ----------------------------------------------------------------------

namespace {
std::unique_ptr<engine::Architecture> make_gemma3() { return std::make_unique<Gemma3>(); }
}  // namespace

void register_gemma3() { engine::register_architecture("gemma3", make_gemma3); }

}  // namespace ts::models
