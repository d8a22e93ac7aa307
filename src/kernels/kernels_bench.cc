// Kernel benchmarks: matvec GB/s of weight bytes per type / ISA / shape / threads, and
// matmul GFLOP/s for batches of tokens.
//
// Decode reads every weight once per token from DRAM, so matvec cycles through enough
// copies of the matrix (>= 160 MiB) that the last-level cache cannot hold them; the GB/s
// are DRAM figures. Filter with --benchmark_filter, e.g. 'matvec/q4_K/.*/t2'.
// GCC 12's AVX-512 intrinsics build on self-initialized "undefined" vectors and warn
// about them at every inlined use (the ceiling/ loop below); the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/traits.h"
#include "act.h"
#include "matmul_internal.h"
#include "testing/random_rows.h"

namespace ts::kernels {
namespace {

struct Shape {
  const char* name;
  int64_t rows, cols;
};
constexpr Shape kShapes[] = {{"768x2048", 768, 2048},
                             {"896x4864", 896, 4864},
                             {"4864x896", 4864, 896},
                             {"4096x2048", 4096, 2048},
                             {"262144x640", 262144, 640}};

ThreadPool* pool_of(int n) {
  static ThreadPool p1(1), p2(2);
  return n == 1 ? &p1 : &p2;
}

// Copies of one random matrix, packed, totalling at least min_total bytes.
struct Matrices {
  std::vector<std::vector<uint8_t>> raw;
  std::vector<PackedWeight> packed;
  uint64_t bytes_each = 0;
};

Matrices make_matrices(DType t, const Shape& s, uint64_t min_total) {
  Matrices m;
  Rng rng(42);
  m.raw.push_back(testing::random_rows(rng, t, s.rows, s.cols));
  m.bytes_each = m.raw[0].size();
  const uint64_t copies = std::max<uint64_t>(1, (min_total + m.bytes_each - 1) / m.bytes_each);
  for (uint64_t i = 1; i < copies; ++i) m.raw.push_back(m.raw[0]);
  for (auto& r : m.raw) m.packed.push_back(pack({r.data(), t, s.cols, s.rows}, pool_of(2)));
  return m;
}

// hot: one copy, which stays in the last-level cache (768x2048 is 0.4-1.6 MiB): the GB/s
// the kernel's instructions allow without DRAM, its ceiling.
void bm_matvec(benchmark::State& st, DType t, Isa isa, Shape s, int threads, bool packed, bool hot) {
  const Matrices m = make_matrices(t, s, hot ? 0 : uint64_t(160) << 20);
  Rng rng(7);
  const auto x = testing::random_floats(rng, s.cols);
  std::vector<float> y(size_t(s.rows));
  size_t i = 0;
  for (auto _ : st) {
    const PackedWeight& w = m.packed[i];
    if (packed)
      matmul_isa(isa, w.view(), w.panels(), w.panel_bytes(), x.data(), s.cols, 1, y.data(), s.rows,
                 pool_of(threads));
    else
      matmul_isa(isa, w.view(), nullptr, 0, x.data(), s.cols, 1, y.data(), s.rows, pool_of(threads));
    benchmark::DoNotOptimize(y.data());
    if (++i == m.packed.size()) i = 0;
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(m.bytes_each));
}

// The roofline: a plain read of 160 MiB (summing 64-bit words), split across the threads
// as matvec splits its rows. Run next to matvec, it shows what fraction of the bandwidth
// the machine gives right now the kernels reach.
void bm_read(benchmark::State& st, int threads) {
  const size_t n = size_t(160) << 20;
  std::vector<uint64_t> buf(n / 8, 1);
  ThreadPool* pool = pool_of(threads);
  std::vector<uint64_t> sums(2);
  for (auto _ : st) {
    pool->parallel_for(int64_t(buf.size()), 1 << 16, [&](int64_t b, int64_t e, int ti) {
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (int64_t i = b; i + 4 <= e; i += 4) {
        s0 += buf[size_t(i)];
        s1 += buf[size_t(i + 1)];
        s2 += buf[size_t(i + 2)];
        s3 += buf[size_t(i + 3)];
      }
      sums[size_t(ti)] = s0 + s1 + s2 + s3;
    });
    benchmark::DoNotOptimize(sums.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(n));
}

void bm_matmul(benchmark::State& st, DType t, Isa isa, Shape s, int n_tok, int threads) {
  Rng rng(42);
  const auto raw = testing::random_rows(rng, t, s.rows, s.cols);
  const PackedWeight w = pack({raw.data(), t, s.cols, s.rows}, pool_of(2));
  const auto x = testing::random_floats(rng, s.cols * n_tok);
  std::vector<float> y(size_t(s.rows * n_tok));
  for (auto _ : st) {
    matmul_isa(isa, w.view(), w.panels(), w.panel_bytes(), x.data(), s.cols, n_tok, y.data(), s.rows,
               pool_of(threads));
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["flops"] = benchmark::Counter(2.0 * double(s.rows) * double(s.cols) * n_tok,
                                            benchmark::Counter::kIsIterationInvariantRate);
  st.counters["tok/s"] = benchmark::Counter(n_tok, benchmark::Counter::kIsIterationInvariantRate);
}

// Activation conversion (ActRowFns) of one row of `cols` floats: what every matmul does
// to each token first. q8_0: for Q8_0/Q4_0/Q5_0 weights; q8_k: for the K-quants.
void bm_act(benchmark::State& st, Isa isa, bool k_quant, int64_t cols) {
  Rng rng(7);
  const auto x = testing::random_floats(rng, cols);
  std::vector<int8_t> qs(static_cast<size_t>(cols));
  std::vector<float> d(static_cast<size_t>(cols / 32));
  std::vector<int32_t> corr(static_cast<size_t>(cols / 16));
  std::vector<int16_t> xs(static_cast<size_t>(cols / 32));
  const ActRowFns& f = act_row_fns(isa);
  for (auto _ : st) {
    if (k_quant) f.q8_k(x.data(), cols, qs.data(), d.data(), corr.data(), xs.data());
    else f.q8_0(x.data(), cols, 128, qs.data(), d.data(), corr.data());
    benchmark::DoNotOptimize(qs.data());
  }
  st.counters["floats/s"] = benchmark::Counter(double(cols), benchmark::Counter::kIsIterationInvariantRate);
}

// The ceiling benchmarks' data: 16 Q8_0 panel groups (544 bytes: 8 x 64 bytes of levels,
// 16 F16 row scales) and 16 activation records (400 bytes: 10 tokens x 32 levels, 10 F32
// scales, 10 corrections), random levels and normal scales (random bytes would make
// denormal floats and halves, whose assists would be timed instead of the tile).
struct CeilingData {
  std::vector<uint8_t> panels = std::vector<uint8_t>(16 * 544), recs = std::vector<uint8_t>(16 * 400);
  CeilingData() {
    Rng rng(3);
    for (auto& v : panels) v = uint8_t(rng.next_u64());
    for (auto& v : recs) v = uint8_t(rng.next_u64());
    for (size_t r = 0; r < 16; ++r) {
      for (size_t t = 0; t < 10; ++t) {
        const float dx = 0.01f * float(t + 1);
        std::memcpy(&recs[r * 400 + 320 + 4 * t], &dx, 4);
      }
      for (size_t k = 0; k < 16; ++k) {
        const uint16_t half = 0x3800;  // F16 0.5
        std::memcpy(&panels[r * 544 + 512 + 2 * k], &half, 2);
      }
    }
  }
};

// The ceiling of the Q8_0 tiles' instruction mix, on data that stays in L1: per block of
// 32 columns, gemm_avx512.cc's tile32x for 10 tokens issues 8 level loads flipped to
// unsigned, 80 vpdpbusd on broadcast activations, and per token an int->float conversion,
// the product of the two scales and the FMA into the float sum. kFloats = false leaves the
// float part out. Its "flops" compare directly with matmul/q8_0/avx512/*/n128/t1 in the
// same run: the tile's distance to what its own instructions allow.
#define TS_BENCH_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
TS_BENCH_AVX512 inline __attribute__((always_inline)) __m512i bcast32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

template <bool kFloats>
TS_BENCH_AVX512 __attribute__((noinline)) void q8_0_mix(
    const uint8_t* panels, const uint8_t* recs, int64_t n_blocks, float* out) {
  constexpr int kT = 10, kPanel = 544, kRec = 400;  // records: 10 x 32 levels, 10 scales, 10 corrections
  __m512 acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm512_setzero_ps();
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* g = panels + (b & 15) * kPanel;
    const uint8_t* x = recs + (b & 15) * kRec;
    __m512i s[kT];
#pragma GCC unroll 10
    for (int t = 0; t < kT; ++t) s[t] = bcast32(x + 360 + 4 * t);
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {
      const __m512i lo = _mm512_xor_si512(_mm512_loadu_si512(g + 64 * h), flip);
      const __m512i hi = _mm512_xor_si512(_mm512_loadu_si512(g + 64 * (h + 4)), flip);
#pragma GCC unroll 10
      for (int t = 0; t < kT; ++t) s[t] = _mm512_dpbusd_epi32(s[t], lo, bcast32(x + 32 * t + 4 * h));
#pragma GCC unroll 10
      for (int t = 0; t < kT; ++t) s[t] = _mm512_dpbusd_epi32(s[t], hi, bcast32(x + 32 * t + 16 + 4 * h));
    }
    if constexpr (kFloats) {
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 512)));
#pragma GCC unroll 10
      for (int t = 0; t < kT; ++t) {
        float dx;
        std::memcpy(&dx, x + 320 + 4 * t, 4);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_mul_ps(dw, _mm512_set1_ps(dx)), acc[t]);
      }
    } else {
#pragma GCC unroll 10
      for (int t = 0; t < kT; ++t) acc[t] = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(acc[t]), s[t]));
    }
  }
  for (int t = 0; t < kT; ++t) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

// The same for gemm_avx2.cc's Q8_0 tile of 6 tokens on one 8-row half (AVX2 has no
// vpdpbusd): per block, 8 level loads and their absolute values, and per level vector and
// token a broadcast, the sign of the activations by the weights', vpmaddubsw, vpmaddwd by
// ones and the 32-bit add (4 vector operations per 32 products, 2 of them multiplies);
// then the float part per token. Compares with matmul/q8_0/avx2/*/n16/t1 (tiles of 6, 6, 4).
#define TS_BENCH_AVX2 __attribute__((target("avx2,fma,f16c")))
template <bool kFloats>
TS_BENCH_AVX2 __attribute__((noinline)) void q8_0_mix_avx2(
    const uint8_t* panels, const uint8_t* recs, int64_t n_blocks, float* out) {
  constexpr int kT = 6, kPanel = 544, kRec = 400;  // the AVX-512 records' layout, 6 of its 10 tokens
  __m256 acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* g = panels + (b & 15) * kPanel;
    const uint8_t* x = recs + (b & 15) * kRec;
    __m256i s[kT];
#pragma GCC unroll 6
    for (int t = 0; t < kT; ++t) s[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 64 * j));
      const __m256i aw = _mm256_sign_epi8(w, w);
#pragma GCC unroll 6
      for (int t = 0; t < kT; ++t) {
        int32_t v;
        std::memcpy(&v, x + 32 * t + 4 * j, 4);
        const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_set1_epi32(v), w));
        s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(p, ones));
        asm("" : "+x"(s[t]));  // in order, as gemm_avx2.cc's keep_chain
      }
    }
    if constexpr (kFloats) {
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 512)));
#pragma GCC unroll 6
      for (int t = 0; t < kT; ++t) {
        float dx;
        std::memcpy(&dx, x + 320 + 4 * t, 4);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_mul_ps(dw, _mm256_set1_ps(dx)), acc[t]);
      }
    } else {
#pragma GCC unroll 6
      for (int t = 0; t < kT; ++t) acc[t] = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(acc[t]), s[t]));
    }
  }
  for (int t = 0; t < kT; ++t) _mm256_storeu_ps(out + 8 * t, acc[t]);
}

// One ceiling kernel over CeilingData's 16 groups, 4096 blocks per call; `flops` counts
// the products of a block (rows x 32 columns x tokens) twice.
using CeilingFn = void (*)(const uint8_t*, const uint8_t*, int64_t, float*);
void bm_ceiling(benchmark::State& st, CeilingFn mix, bool supported, const char* needs, double flops_per_block) {
  if (!supported) {
    st.SkipWithError(needs);
    return;
  }
  const CeilingData data;
  std::vector<float> out(160);  // up to 10 tokens x 16 rows
  constexpr int64_t kBlocks = 4096;
  for (auto _ : st) {
    mix(data.panels.data(), data.recs.data(), kBlocks, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["flops"] = benchmark::Counter(flops_per_block * kBlocks, benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  const CpuFeatures& f = cpu_features();
  const bool vnni = f.avx512 && f.avx512_vnni;
  constexpr double k512 = 2.0 * 16 * 32 * 10, k256 = 2.0 * 8 * 32 * 6;  // rows x columns x tokens
  benchmark::RegisterBenchmark("ceiling/q8_0_tile10/full", bm_ceiling, q8_0_mix<true>, vnni, "needs AVX-512 VNNI", k512);
  benchmark::RegisterBenchmark("ceiling/q8_0_tile10/integer_only", bm_ceiling, q8_0_mix<false>, vnni,
                               "needs AVX-512 VNNI", k512);
  benchmark::RegisterBenchmark("ceiling/q8_0_avx2_tile6/full", bm_ceiling, q8_0_mix_avx2<true>, f.avx2, "needs AVX2",
                               k256);
  benchmark::RegisterBenchmark("ceiling/q8_0_avx2_tile6/integer_only", bm_ceiling, q8_0_mix_avx2<false>, f.avx2,
                               "needs AVX2", k256);
  // AMX adds kernels for many tokens only: its conversions and matvecs are AVX-512's.
  for (Isa isa : testing::isas_here())
    for (bool k_quant : {false, true})
      for (int64_t cols : {768, 2048}) {
        if (k_quant && cols % 256 != 0) continue;
        if (isa == Isa::kAmx) continue;
        const std::string name = std::string("act/") + (k_quant ? "q8_k/" : "q8_0/") + isa_name(isa) + "/" +
                                 std::to_string(cols);
        benchmark::RegisterBenchmark(name.c_str(), bm_act, isa, k_quant, cols);
      }
  for (int threads : {1, 2})
    benchmark::RegisterBenchmark(("roofline/read/t" + std::to_string(threads)).c_str(), bm_read, threads)
        ->UseRealTime();
  for (DType t : testing::kWeightTypes) {
    for (Isa isa : testing::isas_here()) {
      if (isa == Isa::kAmx) continue;
      for (const Shape& s : kShapes) {
        if (s.cols % traits(t).block_size != 0) continue;  // K-quants need 256 | cols
        const uint64_t bytes = uint64_t(row_bytes(t, s.cols)) * uint64_t(s.rows);
        if (bytes > (uint64_t(400) << 20)) continue;  // F32 output projection: too big here
        for (int threads : {1, 2}) {
          const std::string name = std::string("matvec/") + dtype_name(t) + "/" + isa_name(isa) + "/" +
                                   s.name + "/t" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), bm_matvec, t, isa, s, threads, true, false)->UseRealTime();
          if (threads == 2 && isa == std::min(best_isa(), Isa::kAvx512) && s.rows == 896)
            benchmark::RegisterBenchmark((name + "/unpacked").c_str(), bm_matvec, t, isa, s, threads, false, false)
                ->UseRealTime();
          if (threads == 1 && s.rows == 768 && isa != Isa::kScalar)
            benchmark::RegisterBenchmark((name + "/hot").c_str(), bm_matvec, t, isa, s, threads, true, true)
                ->UseRealTime();
        }
      }
    }
  }
  for (DType t : testing::kWeightTypes) {
    for (Isa isa : testing::isas_here()) {
      if (isa == Isa::kScalar) continue;
      // 4096x640: Gemma 3 270M's width (K = 640), where a panel and a tile's activations
      // stay in L1 across the tiles of tokens; 262144x640: its output projection, read from
      // DRAM, at a batched decode step of 16 sequences.
      // 640x2048: Gemma 3 270M's FFN down projection, a K-quant tensor of its q4_k_m file
      // (K-quants need 256 | cols, so they skip the 640-column shapes).
      for (const Shape& s : {kShapes[1], kShapes[3], Shape{"4096x640", 4096, 640}, kShapes[4],
                             Shape{"640x2048", 640, 2048}}) {
        if (s.cols % traits(t).block_size != 0) continue;
        if (s.rows == 640 && traits(t).block_size != 256) continue;
        for (int n_tok : {16, 32, 128, 512}) {
          if (s.rows == kShapes[4].rows && (n_tok != 16 || (t != DType::Q8_0 && t != DType::Q5_0))) continue;
          for (int threads : {1, 2}) {
            const std::string name = std::string("matmul/") + dtype_name(t) + "/" + isa_name(isa) + "/" +
                                     s.name + "/n" + std::to_string(n_tok) + "/t" + std::to_string(threads);
            benchmark::RegisterBenchmark(name.c_str(), bm_matmul, t, isa, s, n_tok, threads)->UseRealTime();
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ts::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  ts::kernels::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
