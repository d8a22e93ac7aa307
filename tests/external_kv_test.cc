// The engine with external_kv: the caller (serving's scheduler) owns the KV blocks and
// hands each step its block tables; the engine maps them and computes exactly what an
// engine that allocates for itself computes. Model: stories260K (real weights).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "kv/kv_manager.h"
#include "models/register.h"

namespace ts {
namespace {

using engine::Engine;
using engine::EngineOptions;
using engine::SeqId;
using engine::SeqOutcome;

std::unique_ptr<engine::Model> load_stories() {
  models::register_all();
  engine::ModelOptions mo;
  mo.n_threads = 2;
  auto m = engine::Model::load(std::string(TS_SHARED_DIR) + "/models/stories260K.gguf", mo);
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  return m.is_ok() ? std::move(*m) : nullptr;
}

// The engine with external_kv (serving: the scheduler owns the blocks) maps the blocks it
// is given and computes what an engine owning its blocks computes: same sampled tokens,
// bit-identical logits, for two sequences started at once, one of them reusing the
// other's prefix blocks through the caller's KvManager. Bad block tables are refused.
TEST(ExternalKv, ExternalBlocksEqualOwnBlocks) {
  auto m = load_stories();
  ASSERT_TRUE(m);
  EngineOptions own;
  own.n_blocks = 32;
  own.block_size = 16;
  EngineOptions ext = own;
  ext.external_kv = true;
  auto a = Engine::create(*m, own), b = Engine::create(*m, ext);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  kv::KvOptions ko;
  ko.n_blocks = 32;
  ko.block_size = 16;
  kv::KvManager mgr(ko);
  Rng rng(3);
  std::vector<int32_t> prompt(40);
  for (int32_t& t : prompt) t = int32_t(rng.next_u64() % uint64_t(m->config().n_vocab));
  std::map<SeqId, std::vector<int32_t>> hist;
  for (SeqId id : {SeqId(1), SeqId(2)}) {
    ASSERT_TRUE((*a)->add(id, {}).is_ok());
    ASSERT_TRUE((*b)->add(id, {}).is_ok());
    mgr.add(id, 0);
  }
  // 1 computes the prompt; 2 (same prompt) then reuses its two full blocks.
  auto step_both = [&](std::vector<std::pair<SeqId, std::vector<int32_t>>> work) {
    engine::StepPlan pa, pb;
    std::vector<kv::BlockCopy> copies;
    std::vector<std::vector<int32_t>> tables;
    for (auto& [id, toks] : work) {
      pa.seqs.push_back({id, toks, 1, -1, false});
      pb.seqs.push_back({id, toks, 1, -1, false});
      ASSERT_TRUE(mgr.reserve(id, int64_t(toks.size()), &copies));
    }
    for (auto& [id, toks] : work) {
      const int64_t p0 = mgr.n_computed(id);
      pb.kv.push_back(engine::SeqKv{p0, mgr.blocks(id), hist[id]});
    }
    for (const kv::BlockCopy& c : copies) pb.copies.emplace_back(c.src, c.dst);
    const engine::StepResult ra = (*a)->step(pa), rb = (*b)->step(pb);
    for (size_t i = 0; i < work.size(); ++i) {
      ASSERT_EQ(ra.seqs[i].outcome, SeqOutcome::kOk);
      ASSERT_EQ(rb.seqs[i].outcome, SeqOutcome::kOk) << rb.seqs[i].error;
      EXPECT_EQ(ra.seqs[i].sampled, rb.seqs[i].sampled);
      EXPECT_EQ(ra.seqs[i].n_computed, rb.seqs[i].n_computed);
      const auto la = (*a)->last_logits(i), lb = (*b)->last_logits(i);
      ASSERT_EQ(la.size(), lb.size());
      EXPECT_TRUE(std::equal(la.begin(), la.end(), lb.begin())) << "entry " << i;
      const SeqId id = work[i].first;
      std::vector<int32_t>& h = hist[id];
      h.insert(h.end(), work[i].second.begin(), work[i].second.end());
      mgr.commit(id, work[i].second, int64_t(work[i].second.size()));
      work[i].second = ra.seqs[i].sampled;
    }
  };
  step_both({{1, prompt}});
  ASSERT_EQ((*a)->reuse_prefix(2, prompt).value(), 32);
  ASSERT_EQ(mgr.reuse_prefix(2, prompt, 1 << 20), 32);
  hist[2].assign(prompt.begin(), prompt.begin() + 32);
  std::vector<int32_t> rest(prompt.begin() + 32, prompt.end());
  step_both({{2, rest}, {1, {7}}});
  step_both({{1, {9}}, {2, {11}}});

  // Bad tables: no KV for the entry, too few blocks, a block outside the cache, a
  // history that does not reach pos0 (a new sequence whose sampler saw nothing).
  ASSERT_TRUE((*b)->add(3, {}).is_ok());
  const std::vector<int32_t> one_block = {0}, outside = {0, 99};
  const std::vector<int32_t> short_hist = {1, 2};
  engine::StepPlan bad;
  bad.seqs.push_back({3, {5}, 1, -1, false});
  EXPECT_EQ((*b)->step(bad).seqs[0].outcome, SeqOutcome::kInvalid);
  for (const engine::SeqKv& k : {engine::SeqKv{16, one_block, {}}, engine::SeqKv{16, outside, {}},
                                 engine::SeqKv{4, one_block, short_hist}}) {
    bad.kv = {k};
    const engine::StepResult r = (*b)->step(bad);
    EXPECT_EQ(r.seqs[0].outcome, SeqOutcome::kInvalid);
    EXPECT_FALSE(r.seqs[0].error.empty());
  }
  // A copy outside the cache refuses the whole step (a table that is fine included).
  bad.kv = {engine::SeqKv{0, one_block, {}}};
  bad.copies = {{0, 99}};
  {
    const engine::StepResult r = (*b)->step(bad);
    EXPECT_EQ(r.seqs[0].outcome, SeqOutcome::kInvalid);
    EXPECT_NE(r.seqs[0].error.find("outside the KV cache"), std::string::npos) << r.seqs[0].error;
  }
  bad.copies.clear();
  EXPECT_EQ((*b)->step(bad).seqs[0].outcome, SeqOutcome::kOk);
  // ... and an engine that owns its blocks refuses a table.
  engine::StepPlan given;
  given.seqs.push_back({1, {5}, 1, -1, false});
  given.kv.push_back(engine::SeqKv{0, one_block, {}});
  EXPECT_EQ((*a)->step(given).seqs[0].outcome, SeqOutcome::kInvalid);
  EXPECT_FALSE((*b)->reuse_prefix(1, prompt).is_ok());  // the caller owns the blocks
}

}  // namespace
}  // namespace ts
