// The AVX-512 attention (attn_avx512.cc) against the AVX2 one, bit for bit: head sizes
// 64/128/256, 1..16 queries with different causal lengths, paged block tables of several
// block sizes, scores from flat to very peaked (the running max moves often or never).
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/cpu_features.h"
#include "core/rng.h"
#include "ops/kv_cache.h"
#include "ops/ops.h"
#include "ops_internal.h"

namespace ts::ops {
namespace {

using detail::F16Width;

// The flash kernels in both forms of their F16 conversions (8 and 16 lanes per
// instruction; the CPU picks one), whatever this CPU would pick.
class AttentionWidth : public testing::TestWithParam<F16Width> {
 protected:
  void SetUp() override { detail::set_attention_f16_width(GetParam()); }
  void TearDown() override { detail::set_attention_f16_width(F16Width::kAuto); }
};
INSTANTIATE_TEST_SUITE_P(F16, AttentionWidth, testing::Values(F16Width::k256, F16Width::k512),
                         [](const testing::TestParamInfo<F16Width>& i) {
                           return i.param == F16Width::k256 ? "ymm" : "zmm";
                         });

TEST_P(AttentionWidth, Avx512BitIdenticalToAvx2) {
  if (!cpu_features().avx512 || !cpu_features().avx2) GTEST_SKIP() << "no AVX-512 on this CPU";
  Rng rng(17);
  for (int dim : {64, 128, 256})
    for (int bs : {16, 5, 2})
      for (float q_scale : {0.1f, 1.0f, 6.0f}) {
        const int n_pos = 83, n_head_kv = 2;
        const int64_t n_blocks = (n_pos + bs - 1) / bs + 3;
        auto kv = std::move(KvCache::create({1, n_head_kv, dim, dim}, n_blocks, bs)).value();
        std::vector<int32_t> blocks;
        for (int64_t b = 0; b < n_blocks; ++b) blocks.push_back(int32_t((b * 7 + 3) % n_blocks));
        // A permutation only if gcd(7, n_blocks) == 1; otherwise fall back to reversed.
        std::vector<int32_t> seen(size_t(n_blocks), 0);
        bool perm = true;
        for (int32_t b : blocks) perm &= !seen[size_t(b)]++;
        if (!perm)
          for (int64_t b = 0; b < n_blocks; ++b) blocks[size_t(b)] = int32_t(n_blocks - 1 - b);
        const KvSeqView view{blocks, bs};
        std::vector<float> row(size_t(dim) * n_head_kv);
        for (int p = 0; p < n_pos; ++p) {
          for (auto& x : row) x = rng.normal();
          ops::to_f16(row.data(), kv->k(0, view.cell(p)), int64_t(row.size()));
          for (auto& x : row) x = rng.normal();
          ops::to_f16(row.data(), kv->v(0, view.cell(p)), int64_t(row.size()));
        }
        for (int n_q : {1, 3, ops::kMaxGroupQueries}) {
          const std::vector<float> zero(static_cast<size_t>(dim), 0.0f);
          std::vector<std::vector<float>> q(static_cast<size_t>(n_q), zero), a = q, b = q;
          std::vector<const float*> qp;
          std::vector<float*> ap, bp;
          std::vector<int64_t> n_kv;
          for (int i = 0; i < n_q; ++i) {
            for (auto& x : q[size_t(i)]) x = q_scale * rng.normal();
            qp.push_back(q[size_t(i)].data());
            ap.push_back(a[size_t(i)].data());
            bp.push_back(b[size_t(i)].data());
            n_kv.push_back(n_q == 1 ? n_pos : 1 + (i * 29 + 5) % n_pos);
          }
          std::vector<uint16_t> scratch(size_t(ops::attention_group_scratch_halves(kv->shape())));
          const float scale = 1.0f / std::sqrt(float(dim));
          // Without and with first positions per query (windows: query i takes [begin_i, n_kv_i)).
          std::vector<int64_t> begin;
          for (int i = 0; i < n_q; ++i) begin.push_back((i * 13 + 2) % n_kv[size_t(i)]);
          for (const int64_t* kb : {static_cast<const int64_t*>(nullptr), static_cast<const int64_t*>(begin.data())})
            for (int h = 0; h < n_head_kv; ++h) {
              ASSERT_TRUE(ops::detail::attention_group_avx512(qp.data(), n_kv.data(), n_q, *kv, 0, h, view, scale,
                                                              ap.data(), kb));
              ops::detail::attention_group_avx2(qp.data(), n_kv.data(), n_q, *kv, 0, h, view, scale, bp.data(),
                                                scratch.data(), kb);
              for (int i = 0; i < n_q; ++i)
                ASSERT_EQ(0, std::memcmp(a[size_t(i)].data(), b[size_t(i)].data(), size_t(dim) * sizeof(float)))
                    << "dim " << dim << " block " << bs << " q_scale " << q_scale << " n_q " << n_q << " query " << i
                    << " head " << h << " begins " << (kb != nullptr);
            }
        }
      }
}

// attention_seq (all heads of a cell per key, chains interleaved) against attention_group
// per kv head, bit for bit, in both numerics: decode-like (every head, one length) and
// prompt-like (one head, many lengths) query sets, GQA groups of 1 and 4.
TEST_P(AttentionWidth, SeqBitIdenticalToGroups) {
  Rng rng(23);
  for (int dim : {40, 64, 128, 256})
    for (int bs : {16, 3}) {
      const int n_pos = 70, n_head_kv = 6;
      const int64_t n_blocks = (n_pos + bs - 1) / bs + 2;
      auto kv = std::move(KvCache::create({2, n_head_kv, dim, dim}, n_blocks, bs)).value();
      std::vector<int32_t> blocks;
      for (int64_t b = 0; b < n_blocks; ++b) blocks.push_back(int32_t(n_blocks - 1 - b));
      const KvSeqView view{blocks, bs};
      std::vector<float> row(size_t(dim) * n_head_kv);
      for (int p = 0; p < n_pos; ++p) {
        for (auto& x : row) x = rng.normal();
        ops::to_f16(row.data(), kv->k(1, view.cell(p)), int64_t(row.size()));
        for (auto& x : row) x = rng.normal();
        ops::to_f16(row.data(), kv->v(1, view.cell(p)), int64_t(row.size()));
      }
      for (int group : {1, 4})
        for (bool decode : {true, false})
          for (auto numerics :
               {ops::AttnNumerics::kFlashF16, ops::AttnNumerics::kSoftmaxF16, ops::AttnNumerics::kTiledF32}) {
            std::vector<ops::AttnQuery> qs;
            std::vector<std::vector<float>> q, a, b;
            const int n_q = decode ? std::min(ops::kMaxSeqQueries, n_head_kv * group) : ops::kMaxGroupQueries;
            for (int i = 0; i < n_q; ++i) {
              q.emplace_back(size_t(dim));
              for (auto& x : q.back()) x = 2.0f * rng.normal();
              a.emplace_back(size_t(dim));
              b.emplace_back(size_t(dim));
            }
            for (int i = 0; i < n_q; ++i)
              qs.push_back({q[size_t(i)].data(), a[size_t(i)].data(), decode ? n_pos : 1 + (i * 13 + 2) % n_pos,
                            int32_t(decode ? i / group : 2)});
            std::vector<uint16_t> scratch(size_t(ops::attention_group_scratch_halves(kv->shape())));
            const float scale = 1.0f / std::sqrt(float(dim));
            ops::attention_seq(qs.data(), n_q, *kv, 1, view, scale, scratch.data(), numerics);
            for (int i = 0; i < n_q; ++i) {
              const float* qp = q[size_t(i)].data();
              float* bp = b[size_t(i)].data();
              ops::attention_group(&qp, &qs[size_t(i)].n_kv, 1, *kv, 1, qs[size_t(i)].kv_head, view, scale, &bp,
                                   scratch.data(), numerics);
              ASSERT_EQ(0, std::memcmp(a[size_t(i)].data(), bp, size_t(dim) * sizeof(float)))
                  << "dim " << dim << " block " << bs << " group " << group << " decode " << decode << " query " << i;
            }
          }
    }
}

// attention_seq at query counts around the 16 scores reduced together: 1, 2, 17 and 32
// queries, all of one kv head (value rows shared by the whole call) or of heads taken in
// runs of 3 (rows per query), lengths from 1 to past two chunks.
TEST_P(AttentionWidth, SeqAnyQueryCountBitIdenticalToGroups) {
  Rng rng(29);
  for (int dim : {64, 256}) {
    const int n_pos = 45, n_head_kv = 4, bs = 16;
    const int64_t n_blocks = (n_pos + bs - 1) / bs;
    auto kv = std::move(KvCache::create({1, n_head_kv, dim, dim}, n_blocks, bs)).value();
    std::vector<int32_t> blocks;
    for (int64_t b = 0; b < n_blocks; ++b) blocks.push_back(int32_t(b));
    const KvSeqView view{blocks, bs};
    std::vector<float> row(size_t(dim) * n_head_kv);
    for (int p = 0; p < n_pos; ++p) {
      for (auto& x : row) x = rng.normal();
      ops::to_f16(row.data(), kv->k(0, view.cell(p)), int64_t(row.size()));
      for (auto& x : row) x = 3.0f * rng.normal();
      ops::to_f16(row.data(), kv->v(0, view.cell(p)), int64_t(row.size()));
    }
    for (int n_q : {1, 2, 17, ops::kMaxSeqQueries})
      for (bool one_head : {true, false}) {
        std::vector<std::vector<float>> q, a;
        std::vector<ops::AttnQuery> qs;
        for (int i = 0; i < n_q; ++i) {
          q.emplace_back(size_t(dim));
          for (auto& x : q.back()) x = 3.0f * rng.normal();
          a.emplace_back(size_t(dim));
        }
        for (int i = 0; i < n_q; ++i)
          qs.push_back({q[size_t(i)].data(), a[size_t(i)].data(), 1 + (i * 7 + 3) % n_pos,
                        int32_t(one_head ? 1 : (i / 3) % n_head_kv)});
        std::vector<uint16_t> scratch(size_t(ops::attention_group_scratch_halves(kv->shape())));
        const float scale = 1.0f / std::sqrt(float(dim));
        ops::attention_seq(qs.data(), n_q, *kv, 0, view, scale, scratch.data());
        std::vector<float> b(static_cast<size_t>(dim));
        for (int i = 0; i < n_q; ++i) {
          const float* qp = q[size_t(i)].data();
          float* bp = b.data();
          ops::attention_group(&qp, &qs[size_t(i)].n_kv, 1, *kv, 0, qs[size_t(i)].kv_head, view, scale, &bp,
                               scratch.data());
          ASSERT_EQ(0, std::memcmp(a[size_t(i)].data(), bp, size_t(dim) * sizeof(float)))
              << "dim " << dim << " n_q " << n_q << " one head " << one_head << " query " << i;
        }
      }
  }
}

TEST(AttentionAvx512, DeclinesOtherHeadSizes) {
  if (!cpu_features().avx512 || !cpu_features().avx2) GTEST_SKIP() << "no AVX-512 on this CPU";
  auto kv = std::move(KvCache::create({1, 1, 40, 40}, 2, 16)).value();
  std::vector<int32_t> blocks{0, 1};
  std::vector<float> q(40, 1.0f), o(40);
  const float* qp = q.data();
  float* op = o.data();
  const int64_t n_kv = 3;
  EXPECT_FALSE(ops::detail::attention_group_avx512(&qp, &n_kv, 1, *kv, 0, 0, {blocks, 16}, 1.0f, &op));
}

// First positions per query mean what they say: query i of attention_group over
// [begin_i, n_kv_i) equals attention_head over a table of exactly those cells, on every
// path (AVX-512, AVX2, scalar; both numerics).
TEST(AttentionAvx512, GroupBeginsEqualHeadOverTheRange) {
  // 256: Gemma 3's heads (libm calls between the updates); 64: factors 8 and 16 queries per
  // register.
  for (int dim : {256, 64}) {
  SCOPED_TRACE(dim);
  Rng rng(23);
  const int n_pos = 70, bs = 16;
  const int64_t n_blocks = (n_pos + bs - 1) / bs;
  auto kv = std::move(KvCache::create({1, 1, dim, dim}, n_blocks, bs)).value();
  std::vector<int32_t> blocks;
  for (int64_t b = 0; b < n_blocks; ++b) blocks.push_back(int32_t(n_blocks - 1 - b));
  const KvSeqView view{blocks, bs};
  std::vector<float> row(static_cast<size_t>(dim));
  for (int p = 0; p < n_pos; ++p) {
    for (auto& x : row) x = rng.normal();
    ops::to_f16(row.data(), kv->k(0, view.cell(p)), dim);
    for (auto& x : row) x = rng.normal();
    ops::to_f16(row.data(), kv->v(0, view.cell(p)), dim);
  }
  const int n_q = 16;
  std::vector<std::vector<float>> q(n_q, std::vector<float>(size_t(dim))), got = q, want = q;
  std::vector<const float*> qp;
  std::vector<float*> gp;
  std::vector<int64_t> n_kv, begin;
  for (int i = 0; i < n_q; ++i) {
    for (auto& x : q[size_t(i)]) x = 2.0f * rng.normal();
    qp.push_back(q[size_t(i)].data());
    gp.push_back(got[size_t(i)].data());
    n_kv.push_back(n_pos - 3 + i % 4);  // four rows of a prompt, four heads each
    begin.push_back(n_kv.back() - 50);  // each row's window of 50
  }
  std::vector<uint16_t> scratch(size_t(ops::attention_group_scratch_halves(kv->shape())));
  auto check = [&](const char* path, ops::AttnNumerics numerics) {
    for (int i = 0; i < n_q; ++i) {
      std::vector<int32_t> cells;
      for (int64_t p = begin[size_t(i)]; p < n_kv[size_t(i)]; ++p) cells.push_back(int32_t(view.cell(p)));
      const KvSeqView range{cells, 1};
      ops::attention_head(qp[size_t(i)], *kv, 0, 0, range, int64_t(cells.size()), 0.0625f, want[size_t(i)].data(),
                          scratch.data(), numerics);
      // The group kernels equal the single-head one bit for bit (GroupEqualsSingleHeadsBitForBit).
      ASSERT_EQ(0, std::memcmp(got[size_t(i)].data(), want[size_t(i)].data(), size_t(dim) * sizeof(float)))
          << "query " << i << " path " << path << " numerics " << int(numerics);
    }
  };
  // The best path here (AVX-512 on this machine), both numerics (kSoftmaxF16 is scalar).
  for (auto numerics : {ops::AttnNumerics::kFlashF16, ops::AttnNumerics::kSoftmaxF16}) {
    ops::attention_group(qp.data(), n_kv.data(), n_q, *kv, 0, 0, view, 0.0625f, gp.data(), scratch.data(), numerics,
                         begin.data());
    check("best", numerics);
  }
  if (cpu_features().avx2) {
    ops::detail::attention_group_avx2(qp.data(), n_kv.data(), n_q, *kv, 0, 0, view, 0.0625f, gp.data(), scratch.data(),
                                      begin.data());
    check("avx2", ops::AttnNumerics::kFlashF16);
  }
  }
}

// kTiledF32 -----------------------------------------------------------------------------

// A cache of n_pos positions of random K/V (V scaled by v_scale) behind a shuffled block table.
struct TiledFixture {
  std::unique_ptr<KvCache> kv;
  std::vector<int32_t> blocks;
  KvSeqView view;
  TiledFixture(Rng& rng, int dim, int n_head_kv, int n_pos, int bs, float v_scale = 1.0f) {
    const int64_t n_blocks = (n_pos + bs - 1) / bs + 1;
    kv = std::move(KvCache::create({1, n_head_kv, dim, dim}, n_blocks, bs)).value();
    for (int64_t b = 0; b < n_blocks; ++b) blocks.push_back(int32_t(n_blocks - 1 - b));
    view = KvSeqView{blocks, bs};
    std::vector<float> row(size_t(dim) * n_head_kv);
    for (int p = 0; p < n_pos; ++p) {
      for (auto& x : row) x = rng.normal();
      ops::to_f16(row.data(), kv->k(0, view.cell(p)), int64_t(row.size()));
      for (auto& x : row) x = v_scale * rng.normal();
      ops::to_f16(row.data(), kv->v(0, view.cell(p)), int64_t(row.size()));
    }
  }
};

// n queries of dim floats (q_scale x normal), outputs of the same size, and the pointer
// arrays the attention calls take.
struct QuerySet {
  std::vector<std::vector<float>> q, out;
  std::vector<const float*> qp;
  std::vector<float*> op;
  QuerySet(Rng& rng, int n, int dim, float q_scale)
      : q(size_t(n), std::vector<float>(static_cast<size_t>(dim))), out(q) {
    for (int i = 0; i < n; ++i) {
      for (auto& x : q[size_t(i)]) x = q_scale * rng.normal();
      qp.push_back(q[size_t(i)].data());
      op.push_back(out[size_t(i)].data());
    }
  }
};

// The AVX-512 kernels and the AVX2 build against the one-lane-at-a-time definition, bit for
// bit: head sizes
// with and without a kernel of their own, 1..16 queries, lengths across tile edges,
// windows starting inside tiles, flat to peaked scores.
TEST(AttentionTiled, Avx512BitIdenticalToReference) {
  if (!cpu_features().avx512 || !cpu_features().avx2) GTEST_SKIP() << "no AVX-512 on this CPU";
  Rng rng(31);
  for (int dim : {32, 64, 80, 128, 256})
    for (int bs : {16, 5})
      for (float q_scale : {0.1f, 1.0f, 8.0f}) {
        const int n_pos = 75;
        TiledFixture f(rng, dim, 2, n_pos, bs);
        for (int n_q : {1, 5, ops::kMaxGroupQueries}) {
          QuerySet qa(rng, n_q, dim, q_scale), qb(rng, n_q, dim, 0.0f);
          const auto& qp = qa.qp;
          auto &ap = qa.op, &bp = qb.op;
          auto &a = qa.out, &b = qb.out;
          std::vector<int64_t> n_kv, begin;
          for (int i = 0; i < n_q; ++i) {
            n_kv.push_back(n_q == 1 ? n_pos : 1 + (i * 29 + 5) % n_pos);
            begin.push_back((i * 13 + 2) % n_kv.back());
          }
          std::vector<uint16_t> scratch(size_t(ops::attention_group_scratch_halves(f.kv->shape())));
          const float scale = 1.0f / std::sqrt(float(dim));
          for (const int64_t* kb : {static_cast<const int64_t*>(nullptr), static_cast<const int64_t*>(begin.data())})
            for (int h = 0; h < 2; ++h) {
              const bool own = ops::detail::attention_tiled_avx512(qp.data(), n_kv.data(), kb, n_q, *f.kv, 0, h,
                                                                   f.view, scale, ap.data(), scratch.data());
              ASSERT_TRUE(own) << dim;
              ops::detail::attention_tiled_ref(qp.data(), n_kv.data(), kb, n_q, *f.kv, 0, h, f.view, scale, bp.data());
              for (int i = 0; i < n_q; ++i)
                ASSERT_EQ(0, std::memcmp(a[size_t(i)].data(), b[size_t(i)].data(), size_t(dim) * sizeof(float)))
                    << "dim " << dim << " block " << bs << " q_scale " << q_scale << " n_q " << n_q << " query " << i
                    << " head " << h << " begins " << (kb != nullptr);
              // The AVX2 build of the reference (the path of CPUs without AVX-512).
              ops::detail::attention_tiled_avx2(qp.data(), n_kv.data(), kb, n_q, *f.kv, 0, h, f.view, scale,
                                                ap.data());
              for (int i = 0; i < n_q; ++i)
                ASSERT_EQ(0, std::memcmp(a[size_t(i)].data(), b[size_t(i)].data(), size_t(dim) * sizeof(float)))
                    << "avx2: dim " << dim << " n_q " << n_q << " query " << i;
            }
        }
      }
}

// What makes batched == solo hold: a query's result does not depend on the other queries
// of its call (their lengths change the tiles the call walks, not this query's).
TEST(AttentionTiled, QueryIndependentOfItsGroup) {
  Rng rng(37);
  for (int dim : {64, 256, 40}) {
    const int n_pos = 70;
    TiledFixture f(rng, dim, 1, n_pos, 16);
    const int n_q = ops::kMaxGroupQueries;
    QuerySet qs(rng, n_q, dim, 2.0f);
    auto& qp = qs.qp;
    auto& ap = qs.op;
    auto& a = qs.out;
    std::vector<int64_t> n_kv, begin;
    for (int i = 0; i < n_q; ++i) {
      n_kv.push_back(20 + (i * 17) % (n_pos - 20));
      begin.push_back(i % 3 == 0 ? 0 : (i * 7) % 19);
    }
    std::vector<uint16_t> scratch(size_t(ops::attention_group_scratch_halves(f.kv->shape())));
    ops::attention_group(qp.data(), n_kv.data(), n_q, *f.kv, 0, 0, f.view, 0.125f, ap.data(), scratch.data(),
                         ops::AttnNumerics::kTiledF32, begin.data());
    std::vector<float> alone(static_cast<size_t>(dim));
    for (int i = 0; i < n_q; ++i) {
      float* op = alone.data();
      ops::attention_group(&qp[size_t(i)], &n_kv[size_t(i)], 1, *f.kv, 0, 0, f.view, 0.125f, &op, scratch.data(),
                           ops::AttnNumerics::kTiledF32, &begin[size_t(i)]);
      ASSERT_EQ(0, std::memcmp(a[size_t(i)].data(), alone.data(), size_t(dim) * sizeof(float)))
          << "dim " << dim << " query " << i;
    }
  }
}

// Against attention in double over the same F16 cache (no rounding of q or of the
// accumulator): F32 accumulation stays within 2e-6 of it, where llama.cpp's F16
// accumulator (kFlashF16) is off by ~1e-3.
TEST(AttentionTiled, CloseToExactAttention) {
  Rng rng(41);
  for (int dim : {64, 128, 256}) {
    const int n_pos = 300;
    TiledFixture f(rng, dim, 1, n_pos, 16);
    std::vector<float> q(static_cast<size_t>(dim)), got(q.size()), want(q.size()), f16(q.size());
    std::vector<uint16_t> scratch(size_t(ops::attention_group_scratch_halves(f.kv->shape())));
    double worst_tiled = 0, worst_f16 = 0;
    for (int trial = 0; trial < 8; ++trial) {
      for (auto& x : q) x = 3.0f * rng.normal();
      const int64_t n_kv = 1 + (trial * 97) % n_pos;
      const float scale = 1.0f / std::sqrt(float(dim));
      ops::attention_head(q.data(), *f.kv, 0, 0, f.view, n_kv, scale, got.data(), scratch.data(),
                          ops::AttnNumerics::kTiledF32);
      ops::attention_head(q.data(), *f.kv, 0, 0, f.view, n_kv, scale, f16.data(), scratch.data(),
                          ops::AttnNumerics::kFlashF16);
      ops::attention_head_ref(q.data(), *f.kv, 0, 0, f.view, n_kv, scale, want.data());
      for (int d = 0; d < dim; ++d) {
        worst_tiled = std::max(worst_tiled, std::abs(double(got[size_t(d)]) - want[size_t(d)]));
        worst_f16 = std::max(worst_f16, std::abs(double(f16[size_t(d)]) - want[size_t(d)]));
      }
    }
    EXPECT_LT(worst_tiled, 2e-6) << dim;
    EXPECT_GT(worst_f16, 10 * worst_tiled) << dim;  // the test can tell the two apart
  }
}

}  // namespace
}  // namespace ts::ops
