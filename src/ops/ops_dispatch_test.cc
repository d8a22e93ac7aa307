// Every row of the ops table (dispatch.h) that this CPU runs against the scalar row, in
// what each op's contract promises: bit for bit, or within the stated ulps and tolerance.
#include "dispatch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "ops_internal.h"

namespace ts::ops {
namespace {

std::vector<OpsIsa> rows_here() {
  std::vector<OpsIsa> r;
  for (int i = 0; i <= int(best_ops_isa()); ++i) r.push_back(OpsIsa(i));
  return r;
}

const OpsRow& scalar() { return ops_row(OpsIsa::kScalar); }

int32_t ulps(float a, float b) {
  int32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return std::abs(x - y);
}

TEST(OpsTable, RowsAreNamedAndTheActiveOneIsTheBest) {
  for (int i = 0; i < kNumOpsIsas; ++i) EXPECT_EQ(ops_row(OpsIsa(i)).isa, OpsIsa(i));
  EXPECT_EQ(&active_ops(), &ops_row(best_ops_isa()));
  EXPECT_STREQ(ops_isa_name(OpsIsa::kAvx2), "avx2");
}

TEST(OpsTable, ElementwiseOpsEqualTheScalarRow) {
  Rng rng(3);
  for (OpsIsa isa : rows_here()) {
    const OpsRow& row = ops_row(isa);
    for (int64_t n : {1, 7, 16, 33, 100, 1000}) {
      std::vector<float> x(static_cast<size_t>(n) * 8), g(static_cast<size_t>(n)), u(static_cast<size_t>(n));
      for (auto& v : x) v = float(rng.normal() * 3.0);
      for (auto& v : g) v = float(rng.uniform() * 26.0 - 13.0);  // past GELU's +-10 cut-offs
      for (auto& v : u) v = float(rng.normal());
      x[0] = 70000.0f;  // F16 overflow: inf
      x[1] = 1e-6f;     // an F16 subnormal
      std::vector<uint16_t> h(x.size()), h_ref(x.size());
      row.to_f16(x.data(), h.data(), n);
      scalar().to_f16(x.data(), h_ref.data(), n);
      EXPECT_EQ(0, std::memcmp(h.data(), h_ref.data(), size_t(n) * 2)) << ops_isa_name(isa) << " n=" << n;
      double s[8] = {}, s_ref[8] = {};
      row.sum_squares8(x.data(), n, n, s);
      scalar().sum_squares8(x.data(), n, n, s_ref);
      EXPECT_EQ(0, std::memcmp(s, s_ref, sizeof s)) << ops_isa_name(isa) << " n=" << n;
      std::vector<float> y(static_cast<size_t>(n)), y_ref(static_cast<size_t>(n));
      row.geglu_f16(detail::gelu_f16_table(), g.data(), u.data(), y.data(), n);
      scalar().geglu_f16(detail::gelu_f16_table(), g.data(), u.data(), y_ref.data(), n);
      EXPECT_EQ(0, std::memcmp(y.data(), y_ref.data(), size_t(n) * 4)) << ops_isa_name(isa) << " n=" << n;
      row.swiglu(g.data(), u.data(), y.data(), n);
      scalar().swiglu(g.data(), u.data(), y_ref.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_LE(ulps(y[size_t(i)], y_ref[size_t(i)]), 4) << ops_isa_name(isa) << " g=" << g[size_t(i)];
      const double t = row.exp_shifted(g.data(), n, 2.0f, 0.5f, -9.0f, y.data(), 0, nullptr);
      const double t_ref = scalar().exp_shifted(g.data(), n, 2.0f, 0.5f, -9.0f, y_ref.data(), 0, nullptr);
      EXPECT_NEAR(t, t_ref, 1e-6 * t_ref) << ops_isa_name(isa);
      for (int64_t i = 0; i < n; ++i) EXPECT_LE(ulps(y[size_t(i)], y_ref[size_t(i)]), 2) << ops_isa_name(isa);
    }
  }
}

// A cache of one layer with random F16 keys and values in a scattered block table.
struct Cache {
  Cache(int dim, int n_head_kv, int n_pos, int bs, uint64_t seed) {
    const int64_t n_blocks = (n_pos + bs - 1) / bs + 1;
    kv = std::move(KvCache::create({1, n_head_kv, dim, dim}, n_blocks, bs)).value();
    for (int64_t b = 0; b < n_blocks; ++b) blocks.push_back(int32_t(n_blocks - 1 - b));
    view = KvSeqView{blocks, bs};
    Rng rng(seed);
    std::vector<float> row(size_t(dim) * size_t(n_head_kv));
    for (int p = 0; p < n_pos; ++p) {
      for (auto& x : row) x = float(rng.normal());
      scalar().to_f16(row.data(), kv->k(0, view.cell(p)), int64_t(row.size()));
      for (auto& x : row) x = float(rng.normal());
      scalar().to_f16(row.data(), kv->v(0, view.cell(p)), int64_t(row.size()));
    }
  }
  std::unique_ptr<KvCache> kv;
  std::vector<int32_t> blocks;
  KvSeqView view;
};

// Queries of one kv head: q, outputs per row, lengths and first positions.
struct Queries {
  Queries(int n_q, int dim, int n_pos, uint64_t seed) {
    Rng rng(seed);
    q.assign(size_t(n_q), std::vector<float>(size_t(dim)));
    for (auto& v : q)
      for (auto& x : v) x = float(rng.normal());
    for (int i = 0; i < n_q; ++i) {
      n_kv.push_back(1 + (i * 29 + 5) % n_pos);
      begin.push_back((i * 13 + 2) % n_kv.back());
    }
    for (auto& v : q) qp.push_back(v.data());
  }
  std::vector<std::vector<float>> outputs() const {
    return std::vector<std::vector<float>>(q.size(), std::vector<float>(q[0].size()));
  }
  std::vector<std::vector<float>> q;
  std::vector<const float*> qp;
  std::vector<int64_t> n_kv, begin;
};

std::vector<float*> ptrs(std::vector<std::vector<float>>& v) {
  std::vector<float*> p;
  for (auto& x : v) p.push_back(x.data());
  return p;
}

TEST(OpsTable, TiledAttentionEqualsTheScalarRowBitForBit) {
  for (int dim : {32, 64, 80, 128})
    for (int n_q : {1, 5, kMaxGroupQueries}) {
      const int n_pos = 70;
      Cache c(dim, 2, n_pos, 16, uint64_t(dim + n_q));
      Queries qs(n_q, dim, n_pos, 7);
      std::vector<uint16_t> scratch(size_t(attention_group_scratch_halves(c.kv->shape())));
      const float scale = 1.0f / std::sqrt(float(dim));
      for (const int64_t* kb : {static_cast<const int64_t*>(nullptr), static_cast<const int64_t*>(qs.begin.data())}) {
        auto ref = qs.outputs();
        auto rp = ptrs(ref);
        scalar().tiled_group(qs.qp.data(), qs.n_kv.data(), kb, n_q, *c.kv, 0, 1, c.view, scale, rp.data(), nullptr);
        for (OpsIsa isa : rows_here()) {
          auto out = qs.outputs();
          auto op = ptrs(out);
          ops_row(isa).tiled_group(qs.qp.data(), qs.n_kv.data(), kb, n_q, *c.kv, 0, 1, c.view, scale, op.data(),
                                   scratch.data());
          for (int i = 0; i < n_q; ++i)
            EXPECT_EQ(out[size_t(i)], ref[size_t(i)]) << ops_isa_name(isa) << " dim " << dim << " query " << i;
        }
      }
    }
}

TEST(OpsTable, FlashAttentionRowsAgreeAndAGroupIsItsQueries) {
  // 8 and 40: dot products partly or wholly in the scalar tail; 256: Gemma 3's heads.
  for (int dim : {8, 40, 64, 80, 128, 256})
    for (int n_q : {1, 4, kMaxGroupQueries}) {
      const int n_pos = 90;
      Cache c(dim, 2, n_pos, 16, uint64_t(dim * 3 + n_q));
      Queries qs(n_q, dim, n_pos, 11);
      std::vector<uint16_t> scratch(size_t(attention_group_scratch_halves(c.kv->shape())));
      const float scale = 1.0f / std::sqrt(float(dim));
      auto ref = qs.outputs();
      auto rp = ptrs(ref);
      scalar().flash_group(qs.qp.data(), qs.n_kv.data(), n_q, *c.kv, 0, 0, c.view, scale, rp.data(), scratch.data(),
                           nullptr);
      std::vector<std::vector<float>> avx2;
      for (OpsIsa isa : rows_here()) {
        const OpsRow& row = ops_row(isa);
        auto out = qs.outputs();
        auto op = ptrs(out);
        row.flash_group(qs.qp.data(), qs.n_kv.data(), n_q, *c.kv, 0, 0, c.view, scale, op.data(), scratch.data(),
                        nullptr);
        for (int i = 0; i < n_q; ++i) {
          std::vector<float> one(static_cast<size_t>(dim));
          row.flash_head(qs.qp[size_t(i)], *c.kv, 0, 0, c.view, qs.n_kv[size_t(i)], scale, one.data(), scratch.data());
          EXPECT_EQ(one, out[size_t(i)]) << ops_isa_name(isa) << " dim " << dim << " query " << i;
          for (int d = 0; d < dim; ++d)  // F16 accumulator steps rounded in another order
            EXPECT_NEAR(out[size_t(i)][size_t(d)], ref[size_t(i)][size_t(d)], 5e-3) << ops_isa_name(isa);
        }
        if (isa == OpsIsa::kAvx2) avx2 = out;
        if (isa == OpsIsa::kAvx512) {
          EXPECT_EQ(out, avx2) << "dim " << dim;
        }
      }
    }
}

// A sequence's queries over several kv heads in one call (decode: every head of a token;
// prompts: rows of different lengths), or all on one kv head (prompt units), are each
// exactly flash_head's result.
TEST(OpsTable, FlashSeqIsItsQueriesOverAnyHeads) {
  for (int dim : {8, 40, 64, 128, 256})
    for (int n_q : {1, 12, kMaxSeqQueries})
    for (bool one_head : {false, true}) {
      const int n_pos = 75, n_head_kv = 4;
      Cache c(dim, n_head_kv, n_pos, 16, uint64_t(dim * 7 + n_q));
      Queries qs(n_q, dim, n_pos, 13);
      auto out = qs.outputs();
      std::vector<AttnQuery> aq;
      for (int i = 0; i < n_q; ++i)
        aq.push_back({qs.qp[size_t(i)], out[size_t(i)].data(), qs.n_kv[size_t(i)],
                      one_head ? 2 : int32_t(i * n_head_kv / n_q)});
      std::vector<uint16_t> scratch(size_t(attention_group_scratch_halves(c.kv->shape())));
      const float scale = 1.0f / std::sqrt(float(dim));
      for (OpsIsa isa : rows_here()) {
        const OpsRow& row = ops_row(isa);
        if (!row.flash_seq(aq.data(), n_q, *c.kv, 0, c.view, scale)) {
          EXPECT_EQ(isa, OpsIsa::kScalar) << "dim " << dim;  // the vector rows take every size up to 256
          continue;
        }
        for (int i = 0; i < n_q; ++i) {
          std::vector<float> one(static_cast<size_t>(dim));
          row.flash_head(qs.qp[size_t(i)], *c.kv, 0, aq[size_t(i)].kv_head, c.view, qs.n_kv[size_t(i)], scale,
                         one.data(), scratch.data());
          EXPECT_EQ(one, out[size_t(i)]) << ops_isa_name(isa) << " dim " << dim << " query " << i;
        }
      }
    }
}

}  // namespace
}  // namespace ts::ops
