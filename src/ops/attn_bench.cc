// Prompt-processing attention of one layer, as the models call it (1 thread): a 512-token
// prompt attending causally to itself.
// - group/256: Gemma 3 270M's shape (head size 256, one kv head, 4 query heads): units of
//   4 rows x 4 heads through ops::attention_group.
// - seq/64: llama 110m's shape (head size 64, 12 heads, no GQA): units of 16 rows of one
//   head through ops::attention_seq; seq/128/gqa4: head size 128, 2 kv heads of 4 query
//   heads, units of 4 rows x 4 heads.
// - group/256/decode, seq/64/decode: one token at position 511 (all query heads of it).
// - seq/64/decode16/T, group/256/decode16/T: a decode step of 16 sequences of 192 cells
//   over all layers (12 layers of llama 110m, 18 of Gemma 3 270M) on T threads, sequences
//   split between threads as llama_family does, each sequence's blocks consecutive (as the
//   block pool places a growing sequence). The caches (113 MB, 28 MB) are far beyond L2
//   and (for 110m) L3, so this measures the streaming case of batched decode.
// - f16_update/{zmm,ymm,ymm_reg}: the F16 accumulator update of the decode attention
//   (acc = f16(v * c + acc), 12 accumulators of 64 dims against 256 keys of F16 V rows in
//   L2) with 512-bit conversions, 256-bit ones stored through vcvtps2ph's memory form, and
//   256-bit ones rounded into a register then stored (attn_avx512.cc's form). Items are
//   16-lane updates.
// Items are (query, key) pairs otherwise; the rate is what to compare between builds.
// The attention numerics: ATTN_BENCH_NUMERICS=flash-f16 (default), tiled-f32 or softmax-f16;
// the flash kernels' F16 conversions: ATTN_BENCH_F16=256 or 512 (default: the CPU's pick).
// GCC 12's AVX-512 intrinsics build on self-initialized "undefined" vectors and warn about
// them at every inlined use (f16_update); the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <memory>
#include <thread>
#include <vector>

#include "core/cpu_features.h"
#include "core/rng.h"
#include "ops/kv_cache.h"
#include "ops/ops.h"
#include "ops_internal.h"

namespace ts::ops {
namespace {

ops::AttnNumerics numerics() {
  static const ops::AttnNumerics n = [] {
    const char* e = std::getenv("ATTN_BENCH_NUMERICS");
    const std::string v = e ? e : "flash-f16";
    if (v == "tiled-f32") return ops::AttnNumerics::kTiledF32;
    if (v == "softmax-f16") return ops::AttnNumerics::kSoftmaxF16;
    return ops::AttnNumerics::kFlashF16;
  }();
  return n;
}

const bool kWidthSet = [] {
  const char* e = std::getenv("ATTN_BENCH_F16");
  const std::string v = e ? e : "";
  detail::set_attention_f16_width(v == "256"   ? detail::F16Width::k256
                                  : v == "512" ? detail::F16Width::k512
                                               : detail::F16Width::kAuto);
  return true;
}();

struct Prompt {
  int n_pos, n_head_kv, dim, group;
  std::unique_ptr<KvCache> kv;
  std::vector<int32_t> blocks;
  std::vector<float> q, out;  // [pos][head][dim]
  std::vector<uint16_t> scratch;

  Prompt(int n_pos_, int n_head_kv_, int dim_, int group_)
      : n_pos(n_pos_), n_head_kv(n_head_kv_), dim(dim_), group(group_) {
    const int bs = 16;
    const int64_t n_blocks = (n_pos + bs - 1) / bs;
    kv = std::move(KvCache::create({1, n_head_kv, dim, dim}, n_blocks, bs)).value();
    for (int64_t b = 0; b < n_blocks; ++b) blocks.push_back(int32_t(b));
    Rng rng(5);
    std::vector<float> row(size_t(dim) * n_head_kv);
    const KvSeqView view{blocks, bs};
    for (int p = 0; p < n_pos; ++p) {
      for (auto& x : row) x = rng.normal();
      ops::to_f16(row.data(), kv->k(0, view.cell(p)), int64_t(row.size()));
      for (auto& x : row) x = rng.normal();
      ops::to_f16(row.data(), kv->v(0, view.cell(p)), int64_t(row.size()));
    }
    q.resize(size_t(n_pos) * n_head_kv * group * dim);
    for (auto& x : q) x = 1.5f * rng.normal();
    out.resize(q.size());
    scratch.resize(size_t(ops::attention_group_scratch_halves(kv->shape())));
  }
  float* qp(int pos, int head) { return q.data() + (size_t(pos) * n_head_kv * group + head) * dim; }
  float* op(int pos, int head) { return out.data() + (size_t(pos) * n_head_kv * group + head) * dim; }
  int64_t pairs() const { return int64_t(n_pos) * (n_pos + 1) / 2 * n_head_kv * group; }
};

void BM_group256(benchmark::State& state) {
  Prompt pr(512, 1, 256, 4);
  const KvSeqView view{pr.blocks, 16};
  const float scale = 1.0f / std::sqrt(256.0f);
  const int rows = ops::kMaxGroupQueries / pr.group;
  for (auto _ : state) {
    for (int r0 = 0; r0 < pr.n_pos; r0 += rows) {
      const float* qs[ops::kMaxGroupQueries];
      float* outs[ops::kMaxGroupQueries];
      int64_t n_kv[ops::kMaxGroupQueries];
      int n_q = 0;
      for (int r = r0; r < r0 + rows; ++r)
        for (int h = 0; h < pr.group; ++h) {
          qs[n_q] = pr.qp(r, h);
          outs[n_q] = pr.op(r, h);
          n_kv[n_q++] = r + 1;
        }
      ops::attention_group(qs, n_kv, n_q, *pr.kv, 0, 0, view, scale, outs, pr.scratch.data(), numerics());
    }
    benchmark::DoNotOptimize(pr.out.data());
  }
  state.SetItemsProcessed(state.iterations() * pr.pairs());
}
BENCHMARK(BM_group256)->Name("group/256")->Unit(benchmark::kMillisecond);

// Prompt units of llama_family: 16 / group rows x the group's query heads of one kv head.
void seq_prompt(benchmark::State& state, int dim, int n_head_kv, int group) {
  Prompt pr(512, n_head_kv, dim, group);
  const KvSeqView view{pr.blocks, 16};
  const float scale = 1.0f / std::sqrt(float(dim));
  const int rows = ops::kMaxGroupQueries / group;
  for (auto _ : state) {
    for (int r0 = 0; r0 < pr.n_pos; r0 += rows)
      for (int g = 0; g < pr.n_head_kv; ++g) {
        ops::AttnQuery qs[ops::kMaxGroupQueries];
        int n_q = 0;
        for (int r = r0; r < r0 + rows; ++r)
          for (int h = g * group; h < (g + 1) * group; ++h) qs[n_q++] = {pr.qp(r, h), pr.op(r, h), r + 1, g};
        ops::attention_seq(qs, n_q, *pr.kv, 0, view, scale, pr.scratch.data(), numerics());
      }
    benchmark::DoNotOptimize(pr.out.data());
  }
  state.SetItemsProcessed(state.iterations() * pr.pairs());
}
BENCHMARK_CAPTURE(seq_prompt, 64, 64, 12, 1)->Name("seq/64")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(seq_prompt, 128, 128, 2, 4)->Name("seq/128/gqa4")->Unit(benchmark::kMillisecond);

void BM_group256_decode(benchmark::State& state) {
  Prompt pr(512, 1, 256, 4);
  const KvSeqView view{pr.blocks, 16};
  const float scale = 1.0f / std::sqrt(256.0f);
  const float* qs[4];
  float* outs[4];
  int64_t n_kv[4];
  for (int h = 0; h < 4; ++h) {
    qs[h] = pr.qp(511, h);
    outs[h] = pr.op(511, h);
    n_kv[h] = 512;
  }
  for (auto _ : state) {
    ops::attention_group(qs, n_kv, 4, *pr.kv, 0, 0, view, scale, outs, pr.scratch.data(), numerics());
    benchmark::DoNotOptimize(pr.out.data());
  }
  state.SetItemsProcessed(state.iterations() * 4 * 512);
}
BENCHMARK(BM_group256_decode)->Name("group/256/decode")->Unit(benchmark::kMicrosecond);

void BM_seq64_decode(benchmark::State& state) {
  Prompt pr(512, 12, 64, 1);
  const KvSeqView view{pr.blocks, 16};
  const float scale = 1.0f / std::sqrt(64.0f);
  ops::AttnQuery qs[12];
  for (int h = 0; h < 12; ++h) qs[h] = {pr.qp(511, h), pr.op(511, h), 512, h};
  for (auto _ : state) {
    ops::attention_seq(qs, 12, *pr.kv, 0, view, scale, pr.scratch.data(), numerics());
    benchmark::DoNotOptimize(pr.out.data());
  }
  state.SetItemsProcessed(state.iterations() * 12 * 512);
}
BENCHMARK(BM_seq64_decode)->Name("seq/64/decode")->Unit(benchmark::kMicrosecond);

// Blocks of the 16 sequences interleaved (as the allocator hands them out during decode),
// keys and values random.
struct Batch {
  static constexpr int kSeqs = 16, kPos = 192, kBs = 16;
  int n_layer, n_head_kv, dim, group;
  std::unique_ptr<KvCache> kv;
  std::vector<std::vector<int32_t>> blocks;
  std::vector<float> q, out;  // [seq][head][dim]
  std::vector<uint16_t> scratch;

  Batch(int n_layer_, int n_head_kv_, int dim_, int group_)
      : n_layer(n_layer_), n_head_kv(n_head_kv_), dim(dim_), group(group_) {
    const int per_seq = kPos / kBs;
    kv = std::move(KvCache::create({n_layer, n_head_kv, dim, dim}, int64_t(kSeqs) * per_seq, kBs)).value();
    blocks.resize(kSeqs);
    for (int b = 0; b < per_seq; ++b)
      for (int s = 0; s < kSeqs; ++s) blocks[size_t(s)].push_back(s * per_seq + b);
    Rng rng(7);
    std::vector<float> row(size_t(dim) * n_head_kv * kBs * kSeqs * per_seq);
    for (int l = 0; l < n_layer; ++l) {
      for (auto& x : row) x = rng.normal();
      ops::to_f16(row.data(), kv->k(l, 0), int64_t(row.size()));
      for (auto& x : row) x = rng.normal();
      ops::to_f16(row.data(), kv->v(l, 0), int64_t(row.size()));
    }
    q.resize(size_t(kSeqs) * n_head_kv * group * dim);
    for (auto& x : q) x = 1.5f * rng.normal();
    out.resize(q.size());
    scratch.resize(size_t(ops::attention_group_scratch_halves(kv->shape())) * 2);
  }
  float* qp(int s, int head) { return q.data() + (size_t(s) * n_head_kv * group + head) * dim; }
  float* op(int s, int head) { return out.data() + (size_t(s) * n_head_kv * group + head) * dim; }

  // Sequences ith, ith + nth, ... of every layer.
  void run(int ith, int nth, float scale) {
    uint16_t* scr = scratch.data() + size_t(ith) * (scratch.size() / 2);
    for (int l = 0; l < n_layer; ++l)
      for (int s = ith; s < kSeqs; s += nth) {
        const KvSeqView view{blocks[size_t(s)], kBs};
        if (n_head_kv == 1) {
          const float* qs[ops::kMaxGroupQueries];
          float* outs[ops::kMaxGroupQueries];
          int64_t n_kv[ops::kMaxGroupQueries];
          for (int h = 0; h < group; ++h) {
            qs[h] = qp(s, h);
            outs[h] = op(s, h);
            n_kv[h] = kPos;
          }
          ops::attention_group(qs, n_kv, group, *kv, l, 0, view, scale, outs, scr, numerics());
        } else {
          ops::AttnQuery qs[ops::kMaxSeqQueries];
          int n_q = 0;
          for (int g = 0; g < n_head_kv; ++g)
            for (int h = g * group; h < (g + 1) * group; ++h) qs[n_q++] = {qp(s, h), op(s, h), kPos, g};
          ops::attention_seq(qs, n_q, *kv, l, view, scale, scr, numerics());
        }
      }
  }
};

void decode16(benchmark::State& state, int n_layer, int n_head_kv, int dim, int group) {
  static std::unique_ptr<Batch> b;
  if (!b || b->dim != dim) b = std::make_unique<Batch>(n_layer, n_head_kv, dim, group);
  const int nth = int(state.range(0));
  const float scale = 1.0f / std::sqrt(float(dim));
  for (auto _ : state) {
    if (nth == 1) {
      b->run(0, 1, scale);
    } else {
      std::thread t([&] { b->run(1, 2, scale); });
      b->run(0, 2, scale);
      t.join();
    }
    benchmark::DoNotOptimize(b->out.data());
  }
  state.SetItemsProcessed(state.iterations() * Batch::kSeqs * Batch::kPos * n_layer);  // cells
}
BENCHMARK_CAPTURE(decode16, 64, 12, 12, 64, 1)->Name("seq/64/decode16")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(decode16, 256, 18, 1, 256, 4)
    ->Name("group/256/decode16")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

enum class Conv { kZmm, kYmm, kYmmReg };

template <Conv C>
__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"), noinline)) void f16_update(
    uint16_t (*acc)[64], const uint16_t* v, int n_keys, float vsc) {
  for (int j = 0; j < n_keys; ++j)
    for (int i = 0; i < 12; ++i) {
      const uint16_t* vr = v + (int64_t(j) * 12 + i) * 64;
      if constexpr (C == Conv::kZmm) {
        const __m512 vv = _mm512_set1_ps(vsc);
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) {
          const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc[i] + 16 * r)));
          const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(vr + 16 * r)));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc[i] + 16 * r),
                              _mm512_cvtps_ph(_mm512_fmadd_ps(x, vv, a), _MM_FROUND_TO_NEAREST_INT));
        }
      } else {
        const __m256 vv = _mm256_set1_ps(vsc);
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) {
          const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc[i] + 8 * r)));
          const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vr + 8 * r)));
          __m128i h = _mm256_cvtps_ph(_mm256_fmadd_ps(x, vv, a), _MM_FROUND_TO_NEAREST_INT);
          if constexpr (C == Conv::kYmmReg) asm("" : "+x"(h));  // no folding into the memory form
          _mm_storeu_si128(reinterpret_cast<__m128i*>(acc[i] + 8 * r), h);
        }
      }
    }
}

template <Conv C>
void bm_f16_update(benchmark::State& state) {
  if (!cpu_features().avx512) {
    state.SkipWithError("needs AVX-512");
    return;
  }
  constexpr int kKeys = 256;
  Rng rng(5);
  std::vector<float> vf(size_t(kKeys) * 12 * 64);
  for (auto& x : vf) x = rng.normal();
  std::vector<uint16_t> v(vf.size());
  ops::to_f16(vf.data(), v.data(), int64_t(vf.size()));
  alignas(64) uint16_t acc[12][64] = {};
  for (auto _ : state) {
    f16_update<C>(acc, v.data(), kKeys, 0.25f);
    benchmark::DoNotOptimize(&acc[0][0]);
  }
  state.SetItemsProcessed(state.iterations() * kKeys * 12 * 4);
}
BENCHMARK(bm_f16_update<Conv::kZmm>)->Name("f16_update/zmm");
BENCHMARK(bm_f16_update<Conv::kYmm>)->Name("f16_update/ymm");
BENCHMARK(bm_f16_update<Conv::kYmmReg>)->Name("f16_update/ymm_reg");

}  // namespace
}  // namespace ts::ops

BENCHMARK_MAIN();
