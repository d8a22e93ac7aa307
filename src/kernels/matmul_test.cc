// matvec / matmul invariants: every output equals the per-row vec_dot bit for bit, for any
// number of tokens, rows, threads, ISA path, and packed or unpacked weights.
#include "kernels/matmul.h"

#include <algorithm>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "act.h"
#include "gemm_amx.h"
#include "panel.h"
#include "testing/random_rows.h"

namespace ts::kernels {
namespace {

using testing::bits;
using testing::convert_act;
using testing::gemm_paths;
using testing::kWeightTypes;
using testing::random_floats;
using testing::random_rows;

struct Problem {
  DType t;
  int64_t n_rows, n_cols, n_tok;
  std::vector<uint8_t> w;
  std::vector<float> x;     // n_tok x n_cols
  std::vector<float> want;  // n_tok x n_rows, from vec_dot

  Problem(Rng& rng, DType type, int64_t rows, int64_t cols, int64_t tok)
      : t(type), n_rows(rows), n_cols(cols), n_tok(tok) {
    w = random_rows(rng, t, rows, cols);
    x = random_floats(rng, tok * cols);
    want.resize(size_t(tok * rows));
    const int64_t rb = row_bytes(t, cols);
    for (int64_t k = 0; k < tok; ++k) {
      const auto xa = convert_act(t, x.data() + k * cols, cols);
      for (int64_t r = 0; r < rows; ++r)
        want[size_t(k * rows + r)] = traits(t).vec_dot(cols, w.data() + r * rb, xa.data());
    }
  }
  WeightView view() const { return {w.data(), t, n_cols, n_rows}; }
  std::string label() const {
    return std::string(dtype_name(t)) + " rows=" + std::to_string(n_rows) +
           " cols=" + std::to_string(n_cols) + " tok=" + std::to_string(n_tok);
  }
};

void expect_same(const Problem& p, const std::vector<float>& got, int64_t y_stride, const std::string& what) {
  for (int64_t k = 0; k < p.n_tok; ++k) {
    for (int64_t r = 0; r < p.n_rows; ++r) {
      const float g = got[size_t(k * y_stride + r)], w = p.want[size_t(k * p.n_rows + r)];
      ASSERT_EQ(bits(g), bits(w)) << what << " " << p.label() << " tok " << k << " row " << r << ": " << g
                                  << " vs " << w;
    }
  }
}

int64_t cols_for(DType t, int blocks) {
  return traits(t).block_size == 1 ? 16 * blocks + 5 : traits(t).block_size * blocks;
}

TEST(Matmul, MatvecEqualsVecDot) {
  Rng rng(10);
  ThreadPool pool(2);
  for (DType t : kWeightTypes) {
    for (int64_t rows : {1, 15, 16, 17, 50}) {
      Problem p(rng, t, rows, cols_for(t, 7), 1);
      std::vector<float> y(size_t(rows), -1.0f);
      matvec(p.view(), p.x.data(), y.data(), &pool);
      expect_same(p, y, rows, "matvec");
      const PackedWeight pw = pack(p.view());
      std::fill(y.begin(), y.end(), -1.0f);
      matvec(pw, p.x.data(), y.data(), nullptr);
      expect_same(p, y, rows, "matvec packed");
    }
  }
}

TEST(Matmul, BatchedEqualsSoloForEveryThreadCount) {
  Rng rng(11);
  for (DType t : kWeightTypes) {
    for (int64_t n_tok : {1, 2, 3, 5, 8, 17, 33}) {
      const int64_t rows = n_tok % 2 ? 37 : 18;
      Problem p(rng, t, rows, cols_for(t, n_tok % 3 == 0 ? 3 : 1), n_tok);
      const PackedWeight pw = pack(p.view());
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        const int64_t y_stride = rows + 3;
        std::vector<float> y(size_t(n_tok * y_stride), -1.0f);
        matmul(p.view(), p.x.data(), p.n_cols, n_tok, y.data(), y_stride, &pool);
        expect_same(p, y, y_stride, "matmul threads=" + std::to_string(threads));
        std::fill(y.begin(), y.end(), -1.0f);
        matmul(pw, p.x.data(), p.n_cols, n_tok, y.data(), y_stride, &pool);
        expect_same(p, y, y_stride, "matmul packed threads=" + std::to_string(threads));
      }
    }
  }
}

// The invariant the engine relies on ("batched greedy == solo greedy"), stated directly.
TEST(Matmul, MatmulOfNTokensEqualsNMatvecs) {
  Rng rng(15);
  ThreadPool pool(2);
  for (DType t : kWeightTypes) {
    const int64_t n_tok = 11, rows = 45, cols = cols_for(t, 5);
    const auto w = random_rows(rng, t, rows, cols);
    const auto x = random_floats(rng, n_tok * cols);
    const WeightView v{w.data(), t, cols, rows};
    const PackedWeight pw = pack(v);
    std::vector<float> batched(static_cast<size_t>(n_tok * rows)), solo(static_cast<size_t>(rows));
    matmul(pw, x.data(), cols, n_tok, batched.data(), rows, &pool);
    for (int64_t k = 0; k < n_tok; ++k) {
      matvec(v, x.data() + k * cols, solo.data(), nullptr);
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(bits(batched[size_t(k * rows + r)]), bits(solo[size_t(r)])) << dtype_name(t) << " tok " << k;
    }
  }
}

// Several products of the same activations in one dispatch (Q/K/V, gate/up): every output
// equals its own matmul's bit for bit, whatever the mix of types (shared or separate
// activation conversions), shapes, token counts and threads; with an epilogue every row
// of every output is final when the epilogue sees it, and every row is seen exactly once.
TEST(Matmul, MatmulManyEqualsSeparateMatmuls) {
  Rng rng(21);
  const std::vector<std::vector<DType>> mixes = {
      {DType::Q5_0, DType::Q5_0, DType::Q8_0}, {DType::Q4_K, DType::Q6_K}, {DType::Q8_0},
      {DType::F16, DType::Q4_0, DType::Q4_1, DType::Q5_1}, {DType::Q5_K, DType::Q5_K}};
  for (const auto& types : mixes) {
    int64_t bs = 1;
    for (DType t : types) bs = std::max<int64_t>(bs, traits(t).block_size);
    const int64_t cols = bs * 2;
    for (int64_t n_tok : {1, 2, 7}) {
      for (bool same_rows : {false, true}) {
        std::vector<std::vector<uint8_t>> ws;
        std::vector<PackedWeight> pws;
        std::vector<int64_t> rows;
        for (size_t i = 0; i < types.size(); ++i) {
          rows.push_back(same_rows ? 40 : int64_t(16 * (i + 1) + 3 * i + 1));
          ws.push_back(random_rows(rng, types[i], rows[i], cols));
        }
        for (size_t i = 0; i < types.size(); ++i) pws.push_back(pack({ws[i].data(), types[i], cols, rows[i]}));
        const auto x = random_floats(rng, n_tok * cols);
        for (int threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          std::vector<std::vector<float>> want, got;
          std::vector<MatmulJob> jobs;
          for (size_t i = 0; i < types.size(); ++i) {
            want.emplace_back(size_t(n_tok * rows[i]));
            matmul(pws[i], x.data(), cols, n_tok, want[i].data(), rows[i], &pool);
            got.emplace_back(size_t(n_tok * (rows[i] + 2)), -1.0f);
          }
          for (size_t i = 0; i < types.size(); ++i) jobs.push_back({&pws[i], got[i].data(), rows[i] + 2});
          std::vector<int> seen(size_t(rows[0]), 0);
          std::function<void(int64_t, int64_t)> epilogue;
          if (same_rows) {
            epilogue = [&](int64_t r0, int64_t r1) {
              ASSERT_TRUE(0 <= r0 && r0 < r1 && r1 <= rows[0]);
              for (int64_t r = r0; r < r1; ++r) {
                ++seen[size_t(r)];
                for (size_t i = 0; i < types.size(); ++i)
                  for (int64_t k = 0; k < n_tok; ++k)
                    ASSERT_EQ(bits(got[i][size_t(k * (rows[i] + 2) + r)]), bits(want[i][size_t(k * rows[i] + r)]));
              }
            };
          }
          matmul_many(jobs, x.data(), cols, n_tok, &pool, epilogue);
          for (size_t i = 0; i < types.size(); ++i)
            for (int64_t k = 0; k < n_tok; ++k)
              for (int64_t r = 0; r < rows[i]; ++r)
                ASSERT_EQ(bits(got[i][size_t(k * (rows[i] + 2) + r)]), bits(want[i][size_t(k * rows[i] + r)]))
                    << dtype_name(types[i]) << " job " << i << " threads " << threads << " tok " << k << " row " << r;
          if (same_rows) {
            for (int64_t r = 0; r < rows[0]; ++r) ASSERT_EQ(seen[size_t(r)], 1) << "row " << r;
          }
        }
      }
    }
  }
}

// The panel kernel of every ISA path, not only the best one.
TEST(Matmul, EveryIsaPanelKernelEqualsVecDot) {
  Rng rng(12);
  for (DType t : kWeightTypes) {
    for (int64_t n_tok : {1, 3, 8, 13}) {
      Problem p(rng, t, 21, cols_for(t, 13), n_tok);
      ActBuffer ab;
      const Act& act = ab.prepare(t, p.x.data(), p.n_cols, p.n_cols, int(n_tok), nullptr);
      const int64_t rb = row_bytes(t, p.n_cols);
      for (const auto& path : gemm_paths(t)) {
        std::vector<float> y(size_t(n_tok * p.n_rows), -1.0f);
        std::vector<uint8_t> panel(size_t(std::max<int64_t>(panel_bytes(t, p.n_cols), 1)));
        for (int64_t r0 = 0; r0 < p.n_rows; r0 += kPanelRows) {
          const int rows = int(std::min<int64_t>(kPanelRows, p.n_rows - r0));
          const uint8_t* src = p.w.data() + r0 * rb;
          if (is_panel_type(t)) {
            pack_panel(t, src, rb, rows, p.n_cols, panel.data());
            src = panel.data();
          }
          // Tokens in two calls, to check that t0 > 0 works.
          const int split = int(n_tok / 2);
          path.fn(src, rb, rows, act, 0, split, y.data() + r0, p.n_rows);
          path.fn(src, rb, rows, act, split, int(n_tok) - split, y.data() + r0, p.n_rows);
        }
        expect_same(p, y, p.n_rows, "gemm " + path.name);
      }
    }
  }
}

// Every path's gemm of all of p's panels for tokens [first, n_tok) of act, for each first
// (the tokens before it are taken from p.want), against p.want.
void expect_gemm_from(const Problem& p, DType t, const Act& act, std::initializer_list<int> firsts) {
  const int64_t rb = row_bytes(t, p.n_cols), n_tok = act.n_tok;
  std::vector<uint8_t> panel(size_t(panel_bytes(t, p.n_cols)));
  for (const auto& path : gemm_paths(t)) {
    for (int first : firsts) {
      if (first >= n_tok) continue;
      std::vector<float> y(size_t(n_tok * p.n_rows), -1.0f);
      if (first > 0) std::copy(p.want.begin(), p.want.begin() + first * p.n_rows, y.begin());
      for (int64_t r0 = 0; r0 < p.n_rows; r0 += kPanelRows) {
        const int rows = int(std::min<int64_t>(kPanelRows, p.n_rows - r0));
        pack_panel(t, p.w.data() + r0 * rb, rb, rows, p.n_cols, panel.data());
        path.fn(panel.data(), rb, rows, act, first, int(n_tok) - first, y.data() + r0, p.n_rows);
      }
      expect_same(p, y, p.n_rows, "gemm " + path.name + " from " + std::to_string(first));
    }
  }
}

// The 32-element block types with every token count up to a few tiles of the interleaved
// activations (Act::tiles): full tiles, every remainder, panels unpacked once for many
// tiles, and a second call starting at a later group.
TEST(Matmul, EveryTileShapeEqualsVecDot) {
  Rng rng(16);
  constexpr int kG = Act::kTileTokens;
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    for (int64_t n_tok = 1; n_tok <= 3 * kG + 2; ++n_tok) {
      Problem p(rng, t, 19, cols_for(t, 2), n_tok);
      ActBuffer ab;
      const Act& act = ab.prepare(t, p.x.data(), p.n_cols, p.n_cols, int(n_tok), nullptr);
      if (best_isa() >= Isa::kAvx512) {
        ASSERT_EQ(act.tiles != nullptr, n_tok > 1) << p.label();
      }
      // All tokens at once, then again from the second group on.
      expect_gemm_from(p, t, act, {0, kG});
    }
  }
}

// The K-quant types likewise on their interleaved activations (Act::ktiles): every token
// count up to a few groups (full tiles, every remainder, panels unpacked once for many
// tiles), a second call starting at a later group, and one starting inside a group (the
// per-token pointer tiles).
TEST(Matmul, EveryKQuantTileShapeEqualsVecDot) {
  Rng rng(17);
  constexpr int kG = Act::kKTileTokens;
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    for (int64_t n_tok = 1; n_tok <= 4 * kG + 3; ++n_tok) {
      Problem p(rng, t, n_tok % 2 ? 19 : 32, cols_for(t, n_tok % 3 == 0 ? 1 : 2), n_tok);
      ActBuffer ab;
      const Act& act = ab.prepare(t, p.x.data(), p.n_cols, p.n_cols, int(n_tok), nullptr);
      if (best_isa() >= Isa::kAvx512) {
        ASSERT_EQ(act.ktiles != nullptr, n_tok > 1) << p.label();
      }
      expect_gemm_from(p, t, act, {0, kG, 3});
    }
  }
}

// Calls of many tokens, where a path may unpack a panel's levels once for all its tiles
// (AVX2 Q4_K from 64 tokens, AVX-512 Q5_K and Q6_K from 17): from the first token, a later
// group, and from inside a group; one call just at the AVX2 threshold and one below it.
TEST(Matmul, KQuantPanelsUnpackedOnceEqualVecDot) {
  Rng rng(18);
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    for (int64_t n_tok : {64, 72, 77}) {
      Problem p(rng, t, 19, cols_for(t, 2), n_tok);
      ActBuffer ab;
      const Act& act = ab.prepare(t, p.x.data(), p.n_cols, p.n_cols, int(n_tok), nullptr);
      expect_gemm_from(p, t, act, {0, Act::kKTileTokens, 3});
    }
  }
}

// The AMX kernels (on AMX CPUs the tiles, elsewhere their software emulation; compared
// through gemm_paths): groups of 16 tokens and a remainder, one or more blocks (the next
// block's tile multiply is issued before this one's float work), calls starting at a
// token that is not a multiple of 16, and fewer than the kernel's minimum (16 tokens, 32
// for the unpacked types: handed to the VNNI tiles).
TEST(Matmul, AmxTileGroupsEqualVecDot) {
  Rng rng(18);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K}) {
    for (int blocks : {1, 3, 4}) {
      for (int64_t n_tok : {16, 17, 32, 33, 48}) {
        Problem p(rng, t, blocks == 3 ? 35 : 16, cols_for(t, blocks), n_tok);
        ActBuffer ab;
        const Act& act = ab.prepare(t, p.x.data(), p.n_cols, p.n_cols, int(n_tok), nullptr);
        expect_gemm_from(p, t, act, {0, 1, 16, int(n_tok) - 15});
      }
    }
  }
}

// The AMX kernels check themselves against VNNI before their first tile multiply: the
// check passes for the (emulated) tile kernels and fails for a kernel that is off.
TEST(Matmul, AmxSelfCheck) {
  if (best_isa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  EXPECT_EQ(amx::quant_gemm(DType::Q6_K), nullptr);  // VNNI is faster (gemm_amx_avx512.cc)
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K}) {
    EXPECT_TRUE(amx::agrees_with_vnni(t, amx::emulated_gemm(t))) << dtype_name(t);
    EXPECT_TRUE(amx::agrees_with_vnni(t, traits_for(t, Isa::kAvx512).gemm)) << dtype_name(t);
    const PanelGemmFn zeros = [](const uint8_t*, int64_t, int n_rows, const Act&, int t0, int nt, float* y,
                                 int64_t ys) {
      for (int k = t0; k < t0 + nt; ++k)
        for (int r = 0; r < n_rows; ++r) y[k * ys + r] = 0.0f;
    };
    EXPECT_FALSE(amx::agrees_with_vnni(t, zeros)) << dtype_name(t);
  }
  // A kernel of another type reading the same panel.
  EXPECT_FALSE(amx::agrees_with_vnni(DType::Q8_0, traits_for(DType::Q4_0, Isa::kAvx512).gemm));
}

TEST(Matmul, DequantizeRowsMatchesReference) {
  Rng rng(13);
  for (DType t : kWeightTypes) {
    const int64_t cols = cols_for(t, 3), rows = 9;
    const auto w = random_rows(rng, t, rows, cols);
    std::vector<float> got(size_t(4 * cols)), want(size_t(4 * cols));
    dequantize_rows({w.data(), t, cols, rows}, 5, 4, got.data());
    ref::to_float(t, w.data() + 5 * row_bytes(t, cols), want.data(), 4 * cols);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6f * std::fabs(want[i])) << dtype_name(t);
  }
}

TEST(Matmul, PackedWeightReportsBytes) {
  Rng rng(14);
  const auto w = random_rows(rng, DType::Q8_0, 33, 64);
  const PackedWeight pw = pack({w.data(), DType::Q8_0, 64, 33});
  EXPECT_EQ(pw.bytes_read(), uint64_t(3 * 2 * 544));  // 3 panels x 2 blocks
  const auto f = random_rows(rng, DType::F16, 5, 8);
  const PackedWeight pf = pack({f.data(), DType::F16, 8, 5});
  EXPECT_EQ(pf.panels(), nullptr);
  EXPECT_EQ(pf.bytes_read(), uint64_t(5 * 16));
}

}  // namespace
}  // namespace ts::kernels
