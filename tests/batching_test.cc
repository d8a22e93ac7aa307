// The continuous-batching engine (engine/engine.h) against the single-sequence Context:
// every sequence of a batch, started at any step, prefilled in chunks of any size, with or
// without prefix reuse, forked, preempted and recomputed, produces exactly the tokens it
// produces alone; KV accounting never leaks under random operation sequences.
//
// Models: stories260K (real weights) and random-weight `make-model --shape tiny` models of
// llama, qwen2 and qwen3 in Q4_K and Q8_0, written by the tierserve binary at test time.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/rng.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "engine/sampling.h"
#include "models/register.h"

namespace ts {
namespace {

using engine::Engine;
using engine::EngineOptions;
using engine::SamplingParams;
using engine::SeqId;
using engine::SeqOutcome;

const std::string kStories = std::string(TS_SHARED_DIR) + "/models/stories260K.gguf";

std::string tmp_dir() {
  static const std::string dir = [] {
    const std::string d = std::string(TS_BINARY_DIR) + "/batching_test";
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// `tierserve make-model` once per (arch, type) per run; returns the path ("" on failure).
std::string tiny_model(const std::string& arch, const std::string& type) {
  static std::map<std::string, std::string> made;
  const std::string name = arch + "-tiny-" + type;
  if (auto it = made.find(name); it != made.end()) return it->second;
  const std::string path = tmp_dir() + "/" + name + ".gguf";
  const std::string cmd = std::string("'") + TS_TIERSERVE_BIN + "' make-model --arch " + arch +
                          " --shape tiny --type " + type + " -o '" + path + "' >/dev/null 2>&1";
  const int st = std::system(cmd.c_str());
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return "";
  made[name] = path;
  return path;
}

// The default model's file (scripts/setup-model.sh puts it there), present or not.
std::string default_model_path() {
  const char* dir = std::getenv("TIERSERVE_MODEL_DIR");
  const char* home = std::getenv("HOME");
  return (dir && *dir ? std::string(dir) : std::string(home ? home : "") + "/.cache/tierserve/models") +
         "/gemma-3-270m-q4_k_m.gguf";
}

// BATCHING_TEST_ATTN names the attention numerics (ops::parse_attn_numerics; CTest's
// batching_tiled_test runs the invariants with "tiled").
std::unique_ptr<engine::Model> load(const std::string& path) {
  models::register_all();
  engine::ModelOptions mo;
  mo.n_threads = 2;
  if (const char* a = std::getenv("BATCHING_TEST_ATTN")) {
    EXPECT_TRUE(ops::parse_attn_numerics(a, &mo.attn_numerics)) << "BATCHING_TEST_ATTN=" << a;
  }
  auto m = engine::Model::load(path, mo);
  EXPECT_TRUE(m.is_ok()) << path << ": " << m.status().to_string();
  return m.is_ok() ? std::move(*m) : nullptr;
}

SamplingParams greedy() { return SamplingParams{}; }

SamplingParams seeded(uint64_t seed) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.repeat_penalty = 1.1f;
  p.seed = seed;
  return p;
}

// The reference: one sequence through the single-sequence Context, token by token.
std::vector<int32_t> solo(engine::Model& m, const std::vector<int32_t>& prompt, int n_gen, const SamplingParams& sp) {
  auto ctx = engine::Context::create(m, int64_t(prompt.size()) + n_gen + 1, 32);
  EXPECT_TRUE(ctx.is_ok());
  engine::Sampler s(sp);
  for (int32_t t : prompt) s.accept(t);
  EXPECT_TRUE((*ctx)->eval(prompt).is_ok());
  std::vector<int32_t> out;
  for (int i = 0; i < n_gen; ++i) {
    const int32_t t = s.sample((*ctx)->logits(0));
    out.push_back(t);
    s.accept(t);
    if (i + 1 < n_gen) {
      EXPECT_TRUE((*ctx)->eval(std::vector<int32_t>{t}).is_ok());
    }
  }
  return out;
}

std::vector<int32_t> random_tokens(Rng& rng, int n, int64_t n_vocab) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(int32_t(1 + rng.next_u64() % uint64_t(n_vocab - 1)));
  return v;
}

struct Req {
  SeqId id = 0;
  std::vector<int32_t> prompt;
  int start_step = 0;
  int n_gen = 0;
  engine::SeqConfig cfg;
  std::vector<int32_t> known;  // prompt + sampled tokens
  int64_t n_done = 0;          // tokens computed
  std::vector<int32_t> out;
  bool added = false, done = false;
  int64_t reused = 0;
};

// A minimal scheduler: every step, sequences with one token left (decode) first, then
// prompt chunks of at most `chunk` tokens, all under a token budget. Optionally preempts
// sequence `preempt_id` at step `preempt_at` and lets it recompute.
struct Driver {
  int budget = 48;
  int chunk = 13;
  bool reuse = false;
  SeqId preempt_id = 0;
  int preempt_at = -1;
  int64_t total_reused = 0;
  // Interruptible steps: every step is first tried with the engine's interrupt flag raised
  // by a thread after a random delay (0: before the step starts); an interrupted step must
  // change nothing and is then run again without interruption.
  std::atomic<bool>* interrupt = nullptr;
  // Speculative decode steps: drafts taken from each sequence's reference output
  // (spec_ref, by id), correct for a random number of tokens and then wrong.
  const std::map<SeqId, std::vector<int32_t>>* spec_ref = nullptr;
  int spec_max = 4;
  int64_t n_drafted = 0, n_accepted = 0;

  void add_drafts(const Req& r, engine::SeqStep& s) {
    const std::vector<int32_t>& ref = spec_ref->at(r.id);
    const int64_t have = int64_t(r.out.size());  // ref[have] is the token this step samples
    const int64_t room = std::min<int64_t>(spec_max, r.n_gen - have - 1);
    if (room <= 0) return;
    const int64_t k = 1 + int64_t(rng.next_u64() % uint64_t(room));
    const int64_t n_good = int64_t(rng.next_u64() % uint64_t(k + 1));
    for (int64_t j = 0; j < k; ++j) {
      const int32_t good = ref[size_t(have + j)];
      s.tokens.push_back(j < n_good ? good : (good + 1) % 32);  // a wrong draft once wrong
    }
    s.n_outputs = int32_t(s.tokens.size());
    s.speculative = true;
  }

  int n_interrupted = 0, n_interrupted_mid = 0;  // of which by the thread, during the step
  Rng rng{99};
  int64_t last_step_ns = 0;
  std::atomic<int64_t> fire_at_ns{-1};

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // The thread that raises the flag at fire_at_ns (spinning: a sleeping thread wakes too late).
  void start_raiser(std::thread* th, std::atomic<bool>* stop) {
    *th = std::thread([this, stop] {
      while (!stop->load()) {
        const int64_t t = fire_at_ns.load();
        if (t >= 0 && now_ns() >= t) {
          interrupt->store(true);
          fire_at_ns.store(-1);
        }
      }
    });
  }

  void run(Engine& e, std::vector<Req>& reqs) {
    for (int step = 0; step < 10000; ++step) {
      bool all_done = true;
      for (Req& r : reqs) {
        if (!r.added && r.start_step <= step) {
          ASSERT_TRUE(e.add(r.id, r.cfg).is_ok());
          r.added = true;
          r.known = r.prompt;
          if (reuse) {
            auto n = e.reuse_prefix(r.id, r.known);
            ASSERT_TRUE(n.is_ok());
            r.n_done = r.reused = *n;
            total_reused += *n;
          }
        }
        all_done &= r.done;
      }
      if (all_done) return;
      if (step == preempt_at) {
        for (Req& r : reqs)
          if (r.id == preempt_id && r.added && !r.done) {
            ASSERT_TRUE(e.preempt(r.id).is_ok());
            r.n_done = 0;
            if (reuse) r.n_done = *e.reuse_prefix(r.id, r.known);
          }
      }
      engine::StepPlan plan;
      int left = budget;
      for (int pass = 0; pass < 2; ++pass)
        for (Req& r : reqs) {
          if (!r.added || r.done || left == 0) continue;
          const int64_t remaining = int64_t(r.known.size()) - r.n_done;
          if ((pass == 0) != (remaining == 1)) continue;
          const int64_t k = std::min<int64_t>({remaining, chunk, left});
          engine::SeqStep s;
          s.seq = r.id;
          s.tokens.assign(r.known.begin() + r.n_done, r.known.begin() + r.n_done + k);
          s.n_outputs = r.n_done + k == int64_t(r.known.size()) ? 1 : 0;
          if (spec_ref && remaining == 1) add_drafts(r, s);
          plan.seqs.push_back(std::move(s));
          left -= int(k);
        }
      if (interrupt) {
        const engine::KvStats before = e.kv_stats();
        plan.interruptible = true;
        // A third of the steps with the flag up from the start; the others with it raised
        // by the spinning thread at a random point of the previous step's duration.
        const bool at_start = rng.next_u64() % 3 == 0;
        const int64_t delay_ns = at_start ? 0 : 1 + int64_t(rng.next_u64() % uint64_t(last_step_ns + 1));
        interrupt->store(at_start);
        if (!at_start) fire_at_ns.store(now_ns() + delay_ns);
        const engine::StepResult tried = e.step(plan);
        fire_at_ns.store(-1);
        interrupt->store(false);
        plan.interruptible = false;
        EXPECT_TRUE(e.check_consistency());
        if (tried.stats.interrupted) {
          ++n_interrupted;
          n_interrupted_mid += !at_start;
          for (size_t i = 0; i < plan.seqs.size(); ++i) {
            ASSERT_EQ(tried.seqs[i].outcome, SeqOutcome::kInterrupted);
            const Req& r = *std::find_if(reqs.begin(), reqs.end(), [&](const Req& q) { return q.id == plan.seqs[i].seq; });
            ASSERT_EQ(tried.seqs[i].n_computed, r.n_done);
            ASSERT_EQ(e.info(r.id)->n_computed, r.n_done);
          }
          EXPECT_EQ(e.kv_stats().used, before.used);
        } else {
          // Not interrupted (the flag came too late): it is the step; use its results.
          apply(e, reqs, plan, tried);
          continue;
        }
      }
      const engine::StepResult res = e.step(plan);
      apply(e, reqs, plan, res);
    }
    FAIL() << "did not finish";
  }

  void apply(Engine& e, std::vector<Req>& reqs, const engine::StepPlan& plan, const engine::StepResult& res) {
    last_step_ns = res.stats.time_ns;
    {
      ASSERT_EQ(res.seqs.size(), plan.seqs.size());
      EXPECT_FALSE(res.stats.interrupted);
      EXPECT_TRUE(e.check_consistency());
      for (size_t i = 0; i < plan.seqs.size(); ++i) {
        ASSERT_EQ(res.seqs[i].outcome, SeqOutcome::kOk) << res.seqs[i].error;
        Req& r = *std::find_if(reqs.begin(), reqs.end(), [&](const Req& q) { return q.id == plan.seqs[i].seq; });
        if (plan.seqs[i].speculative) {
          // Committed: the last token and the accepted drafts, one per sampled token.
          const auto& sampled = res.seqs[i].sampled;
          ASSERT_GE(sampled.size(), 1u);
          ASSERT_LE(sampled.size(), plan.seqs[i].tokens.size());
          for (size_t j = 0; j + 1 < sampled.size(); ++j) ASSERT_EQ(sampled[j], plan.seqs[i].tokens[j + 1]);
          if (sampled.size() < plan.seqs[i].tokens.size()) {
            ASSERT_NE(sampled.back(), plan.seqs[i].tokens[sampled.size()]);
          }
          n_drafted += int64_t(plan.seqs[i].tokens.size()) - 1;
          n_accepted += int64_t(sampled.size()) - 1;
          r.n_done += int64_t(sampled.size());
          ASSERT_EQ(res.seqs[i].n_computed, r.n_done);
          for (int32_t t : sampled) {
            r.out.push_back(t);
            r.known.push_back(t);
          }
          ASSERT_LE(int(r.out.size()), r.n_gen);
        } else {
          r.n_done += int64_t(plan.seqs[i].tokens.size());
          ASSERT_EQ(res.seqs[i].n_computed, r.n_done);
          ASSERT_EQ(res.seqs[i].sampled.size(), size_t(plan.seqs[i].n_outputs));
          if (plan.seqs[i].n_outputs == 0) continue;
          r.out.push_back(res.seqs[i].sampled[0]);
          r.known.push_back(res.seqs[i].sampled[0]);
        }
        if (int(r.out.size()) == r.n_gen) {
          ASSERT_TRUE(e.remove(r.id).is_ok());
          r.done = true;
        }
      }
    }
  }
};

// 16 sequences, prompt lengths 1..~60, started at different steps.
std::vector<Req> make_reqs(int64_t n_vocab, int n, int n_gen, uint64_t seed, bool sample) {
  Rng rng(seed);
  std::vector<Req> reqs;
  for (int i = 0; i < n; ++i) {
    Req r;
    r.id = SeqId(100 + i);
    r.prompt = random_tokens(rng, 1 + int((i * 37 + 11) % 61), n_vocab);
    r.start_step = int(rng.next_u64() % 12);
    r.n_gen = n_gen;
    r.cfg.sampling = sample ? seeded(1000 + uint64_t(i)) : greedy();
    reqs.push_back(std::move(r));
  }
  return reqs;
}

void expect_batched_equals_solo(const std::string& path, bool sample, int64_t max_step_tokens, int n_seqs = 16,
                                int n_gen = 12) {
  auto m = load(path);
  ASSERT_TRUE(m);
  EngineOptions eo;
  eo.max_step_tokens = max_step_tokens;
  eo.n_blocks = 256;
  auto e = Engine::create(*m, eo);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  std::vector<Req> reqs = make_reqs(m->config().n_vocab, n_seqs, n_gen, 7, sample);
  Driver d;
  d.run(**e, reqs);
  for (const Req& r : reqs) {
    SCOPED_TRACE("sequence " + std::to_string(r.id) + ", prompt of " + std::to_string(r.prompt.size()));
    EXPECT_EQ(r.out, solo(*m, r.prompt, r.n_gen, r.cfg.sampling));
  }
  // The check means something only if the outputs depend on the prompts.
  std::vector<std::vector<int32_t>> distinct;
  for (const Req& r : reqs)
    if (std::find(distinct.begin(), distinct.end(), r.out) == distinct.end()) distinct.push_back(r.out);
  EXPECT_GE(distinct.size(), size_t(n_seqs / 2));
  EXPECT_EQ((*e)->kv_stats().used, 0);
  EXPECT_TRUE((*e)->check_consistency());
}

class BatchedEqualsSolo : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(BatchedEqualsSolo, Greedy) {
  const auto& [arch, type] = GetParam();
  const std::string path = tiny_model(arch, type);
  ASSERT_FALSE(path.empty()) << "make-model failed";
  expect_batched_equals_solo(path, false, 512);
}

INSTANTIATE_TEST_SUITE_P(Tiny, BatchedEqualsSolo,
                         ::testing::Values(std::pair{"llama", "q4_k"}, std::pair{"llama", "q8_0"},
                                           std::pair{"qwen2", "q4_k"}, std::pair{"qwen2", "q8_0"},
                                           std::pair{"qwen3", "q4_k"}, std::pair{"qwen3", "q8_0"}),
                         [](const auto& info) { return info.param.first + "_" + info.param.second; });

TEST(Batching, Stories260kGreedyEqualsSolo) { expect_batched_equals_solo(kStories, false, 512); }

// Forward passes smaller than the step: sequences straddle two passes.
TEST(Batching, Stories260kSmallForwardPasses) { expect_batched_equals_solo(kStories, false, 20); }

// The default model (gemma3: sliding-window layers, head size 256), when present.
TEST(Batching, DefaultModelGreedyEqualsSolo) {
  const std::string path = default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found";
  expect_batched_equals_solo(path, false, 512, 6, 6);
}

TEST(Batching, SeededSamplingEqualsSolo) { expect_batched_equals_solo(tiny_model("qwen2", "q8_0"), true, 512); }

// Seeded sampling over the default model's 262144-word vocabulary: enough logits that the
// sequences of a step sample in parallel (Engine::step); each keeps its own random stream.
TEST(Batching, DefaultModelSeededSamplingEqualsSolo) {
  const std::string path = default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found";
  expect_batched_equals_solo(path, true, 512, 6, 6);
}

// Prompts sharing a long prefix: with reuse, the later ones compute only their suffix, and
// every output equals no reuse (and solo). Other isolation keys reuse nothing.
TEST(Batching, PrefixReuseMatchesNoReuse) {
  auto m = load(kStories);
  ASSERT_TRUE(m);
  Rng rng(3);
  const std::vector<int32_t> shared = random_tokens(rng, 53, m->config().n_vocab);
  auto make = [&](uint64_t key_of_odd) {
    Rng r2(9);
    std::vector<Req> reqs;
    for (int i = 0; i < 8; ++i) {
      Req r;
      r.id = SeqId(i + 1);
      r.prompt = shared;
      const auto suffix = random_tokens(r2, 1 + i * 3, m->config().n_vocab);
      r.prompt.insert(r.prompt.end(), suffix.begin(), suffix.end());
      if (i == 7) r.prompt.resize(48);  // a prompt that is a strict prefix of the others
      r.start_step = i == 0 ? 0 : 6 + i;
      r.n_gen = 10;
      r.cfg.isolation_key = i % 2 ? key_of_odd : 1;
      reqs.push_back(std::move(r));
    }
    return reqs;
  };
  std::vector<std::vector<int32_t>> outs[2];
  for (int reuse = 0; reuse < 2; ++reuse) {
    EngineOptions eo;
    eo.n_blocks = 128;
    eo.prefix_cache = reuse == 1;
    auto e = Engine::create(*m, eo);
    ASSERT_TRUE(e.is_ok());
    std::vector<Req> reqs = make(1);
    Driver d;
    d.reuse = reuse == 1;
    d.run(**e, reqs);
    for (const Req& r : reqs) outs[reuse].push_back(r.out);
    if (reuse) {
      EXPECT_GE(d.total_reused, 6 * 48);  // 3 full blocks of 16 for each later prompt
      for (const Req& r : reqs) EXPECT_EQ(r.out, solo(*m, r.prompt, r.n_gen, r.cfg.sampling));
    }
  }
  EXPECT_EQ(outs[0], outs[1]);

  // Odd sequences under another key: they reuse nothing from the even ones' cache...
  for (bool share : {false, true}) {
    EngineOptions eo;
    eo.n_blocks = 128;
    eo.share_prefixes = share;
    auto e = Engine::create(*m, eo);
    std::vector<Req> reqs = make(2);
    reqs.resize(2);  // sequence 1 (key 1) first, then sequence 2 (key 2)
    reqs[1].start_step = 10;
    Driver d;
    d.reuse = true;
    d.run(**e, reqs);
    EXPECT_EQ(reqs[1].reused, share ? 48 : 0) << "share_prefixes " << share;
    EXPECT_EQ(reqs[1].out, solo(*m, reqs[1].prompt, reqs[1].n_gen, reqs[1].cfg.sampling));
  }
}

// Fork after all but the last prompt token (a partly filled, shared block): each fork
// samples with its own seed, diverges, and equals its solo run; the parent is unchanged.
TEST(Batching, ForkedSequencesDivergeCorrectly) {
  auto m = load(tiny_model("llama", "q8_0"));
  ASSERT_TRUE(m);
  EngineOptions eo;
  eo.n_blocks = 64;
  auto er = Engine::create(*m, eo);
  ASSERT_TRUE(er.is_ok());
  Engine& e = **er;
  Rng rng(5);
  const std::vector<int32_t> prompt = random_tokens(rng, 37, m->config().n_vocab);
  const int n_gen = 20;
  ASSERT_TRUE(e.add(1, {seeded(11), 0}).is_ok());
  engine::StepPlan p;
  p.seqs.push_back({1, std::vector<int32_t>(prompt.begin(), prompt.end() - 1), 0, false});
  ASSERT_EQ(e.step(p).seqs[0].outcome, SeqOutcome::kOk);
  const int32_t used_before = e.kv_stats().used;
  for (SeqId f = 2; f <= 4; ++f) ASSERT_TRUE(e.fork(1, f, {seeded(10 + f), 0}).is_ok());
  EXPECT_EQ(e.kv_stats().used, used_before);  // forks share everything until they write
  std::map<SeqId, std::vector<int32_t>> out;
  std::map<SeqId, int32_t> next;
  for (SeqId s = 1; s <= 4; ++s) next[s] = prompt.back();
  int copies = 0;
  for (int i = 0; i < n_gen; ++i) {
    engine::StepPlan q;
    for (SeqId s = 1; s <= 4; ++s) q.seqs.push_back({s, {next[s]}, 1, false});
    const engine::StepResult r = e.step(q);
    copies += r.stats.n_cow_copies;
    for (const auto& sr : r.seqs) {
      ASSERT_EQ(sr.outcome, SeqOutcome::kOk);
      out[sr.seq].push_back(sr.sampled[0]);
      next[sr.seq] = sr.sampled[0];
    }
    EXPECT_TRUE(e.check_consistency());
  }
  EXPECT_EQ(copies, 3);  // the shared partial block: copied by the first three writers
  for (SeqId s = 1; s <= 4; ++s)
    EXPECT_EQ(out[s], solo(*m, prompt, n_gen, seeded(s == 1 ? 11 : 10 + s))) << "sequence " << s;
  EXPECT_NE(out[2], out[3]);
  EXPECT_NE(out[3], out[4]);
  for (SeqId s = 1; s <= 4; ++s) ASSERT_TRUE(e.remove(s).is_ok());
  EXPECT_EQ(e.kv_stats().used, 0);
}

// A sequence preempted in the middle of its generation recomputes its tokens and goes on
// exactly as if nothing happened (greedy and seeded sampling).
TEST(Batching, PreemptedSequenceRecomputesSameOutput) {
  auto m = load(kStories);
  ASSERT_TRUE(m);
  for (bool sample : {false, true})
    for (bool reuse : {false, true}) {
      EngineOptions eo;
      eo.n_blocks = 128;
      auto e = Engine::create(*m, eo);
      std::vector<Req> reqs = make_reqs(m->config().n_vocab, 6, 16, 11, sample);
      Driver d;
      d.reuse = reuse;
      d.preempt_id = reqs[2].id;
      d.preempt_at = reqs[2].start_step + 9;
      d.run(**e, reqs);
      EXPECT_FALSE((*e)->contains(reqs[2].id));  // removed when done
      for (const Req& r : reqs) EXPECT_EQ(r.out, solo(*m, r.prompt, r.n_gen, r.cfg.sampling)) << r.id;
    }
}

// Steps interrupted at random layer boundaries (a thread raises the flag mid-step) or
// before they start change nothing: the KV pool is as before, and running the plan again
// gives every sequence exactly its solo output (llama family and, when present, the
// default Gemma 3 model). Greedy and seeded sampling, with prefix reuse.
void expect_interrupted_steps_change_nothing(const std::string& path, int n_seqs, int n_gen, bool sample) {
  auto m = load(path);
  ASSERT_TRUE(m);
  EngineOptions eo;
  eo.n_blocks = 256;
  auto e = Engine::create(*m, eo);
  ASSERT_TRUE(e.is_ok());
  std::atomic<bool> flag{false};
  (*e)->set_interrupt_flag(&flag);
  std::vector<Req> reqs = make_reqs(m->config().n_vocab, n_seqs, n_gen, 5, sample);
  Driver d;
  d.reuse = true;
  d.interrupt = &flag;
  std::thread raiser;
  std::atomic<bool> stop{false};
  d.start_raiser(&raiser, &stop);
  d.run(**e, reqs);
  stop.store(true);
  raiser.join();
  for (const Req& r : reqs) EXPECT_EQ(r.out, solo(*m, r.prompt, r.n_gen, r.cfg.sampling)) << r.id;
  EXPECT_GT(d.n_interrupted, 0);  // a third of the steps at least (flag raised before them)
  // How many stopped mid-pass depends on thread timing (typically most of the others).
  std::printf("%s: %d steps interrupted, %d of them during the step\n", path.c_str(), d.n_interrupted,
              d.n_interrupted_mid);
  EXPECT_EQ((*e)->kv_stats().used, 0);
  EXPECT_TRUE((*e)->check_consistency());
}

TEST(Batching, InterruptedStepsChangeNothing) {
  expect_interrupted_steps_change_nothing(kStories, 8, 12, false);
  expect_interrupted_steps_change_nothing(kStories, 8, 12, true);
  expect_interrupted_steps_change_nothing(tiny_model("qwen3", "q4_k"), 6, 8, false);
}

TEST(Batching, DefaultModelInterruptedStepsChangeNothing) {
  const std::string path = default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found";
  expect_interrupted_steps_change_nothing(path, 4, 4, false);
}

// Speculative verification: drafts right for a random number of tokens, then wrong.
// Every sequence still produces exactly its solo output (greedy and seeded sampling: the
// sampler sees the same accept/sample calls as in plain decoding), only matching drafts
// are committed, and the KV of rejected ones is dropped (the pool empties at the end).
TEST(Batching, SpeculativeVerificationEqualsPlainDecoding) {
  for (const std::string& path : {kStories, tiny_model("llama", "q4_k")}) {
    auto m = load(path);
    ASSERT_TRUE(m);
    for (bool sample : {false, true}) {
      SCOPED_TRACE(path + (sample ? " seeded" : " greedy"));
      EngineOptions eo;
      eo.n_blocks = 256;
      auto e = Engine::create(*m, eo);
      ASSERT_TRUE(e.is_ok());
      std::vector<Req> reqs = make_reqs(m->config().n_vocab, 8, 24, 13, sample);
      std::map<SeqId, std::vector<int32_t>> ref;
      for (const Req& r : reqs) ref[r.id] = solo(*m, r.prompt, r.n_gen, r.cfg.sampling);
      Driver d;
      d.spec_ref = &ref;
      d.run(**e, reqs);
      for (const Req& r : reqs) EXPECT_EQ(r.out, ref[r.id]) << r.id;
      EXPECT_GT(d.n_drafted, 0);
      EXPECT_GT(d.n_accepted, 0);
      EXPECT_LT(d.n_accepted, d.n_drafted);
      EXPECT_EQ((*e)->kv_stats().used, 0);
      EXPECT_TRUE((*e)->check_consistency());
    }
  }
}

// A speculative entry must ask for an output after every token.
TEST(Batching, SpeculativeEntryNeedsEveryOutput) {
  auto m = load(kStories);
  ASSERT_TRUE(m);
  auto e = Engine::create(*m, EngineOptions{});
  ASSERT_TRUE(e.is_ok());
  ASSERT_TRUE((*e)->add(1, engine::SeqConfig{}).is_ok());
  engine::StepPlan p;
  engine::SeqStep s;
  s.seq = 1;
  s.tokens = {1, 5, 6};
  s.n_outputs = 1;
  s.speculative = true;
  p.seqs.push_back(s);
  const engine::StepResult r = (*e)->step(p);
  ASSERT_EQ(r.seqs.size(), 1u);
  EXPECT_EQ(r.seqs[0].outcome, SeqOutcome::kInvalid);
  EXPECT_NE(r.seqs[0].error.find("speculative"), std::string::npos);
  EXPECT_EQ((*e)->info(1)->n_computed, 0);
}

TEST(Batching, NoRoomIsAnAnswer) {
  auto m = load(kStories);
  ASSERT_TRUE(m);
  EngineOptions eo;
  eo.n_blocks = 4;
  eo.block_size = 16;
  auto er = Engine::create(*m, eo);
  ASSERT_TRUE(er.is_ok());
  Engine& e = **er;
  ASSERT_TRUE(e.add(1, {}).is_ok());
  ASSERT_TRUE(e.add(2, {}).is_ok());
  engine::StepPlan p;
  p.seqs.push_back({1, std::vector<int32_t>(40, 5), 1, false});  // 3 blocks
  p.seqs.push_back({2, std::vector<int32_t>(20, 5), 1, false});  // 2 blocks: no room
  p.seqs.push_back({3, {5}, 1, false});                          // unknown
  p.seqs.push_back({1, {5}, 1, false});                          // twice
  engine::StepResult r = e.step(p);
  EXPECT_EQ(r.seqs[0].outcome, SeqOutcome::kOk);
  EXPECT_EQ(r.seqs[1].outcome, SeqOutcome::kNoRoom);
  EXPECT_EQ(r.seqs[1].n_computed, 0);
  EXPECT_EQ(r.seqs[2].outcome, SeqOutcome::kInvalid);
  EXPECT_EQ(r.seqs[3].outcome, SeqOutcome::kInvalid);
  EXPECT_EQ(r.stats.kv_blocks_used, 3);
  EXPECT_EQ(e.blocks_needed(2, 20), 2);
  ASSERT_TRUE(e.preempt(1).is_ok());
  p.seqs.resize(2);
  p.seqs[0].tokens = {7};
  r = e.step(p);
  EXPECT_EQ(r.seqs[0].outcome, SeqOutcome::kOk);
  EXPECT_EQ(r.seqs[1].outcome, SeqOutcome::kOk);
  // Paused sequences are kept but not computed.
  ASSERT_TRUE(e.pause(2).is_ok());
  r = e.step(p);
  EXPECT_EQ(r.seqs[1].outcome, SeqOutcome::kInvalid);
  EXPECT_EQ((*e.info(2)).n_computed, 20);
  EXPECT_TRUE(e.check_consistency());
}

// Random add / step / fork / pause / resume / preempt / truncate / finish / cancel on a
// small pool: invariants hold after every operation, and once every sequence is gone no
// block is referenced (and after dropping the cache, all are free).
TEST(Batching, KvAccountingNeverLeaks) {
  auto m = load(tiny_model("qwen3", "q8_0"));
  ASSERT_TRUE(m);
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    EngineOptions eo;
    eo.n_blocks = 24;
    eo.block_size = 8;
    eo.max_step_tokens = 64;
    auto er = Engine::create(*m, eo);
    ASSERT_TRUE(er.is_ok());
    Engine& e = **er;
    Rng rng(seed);
    std::vector<SeqId> live;
    std::map<SeqId, std::vector<int32_t>> hist;  // tokens computed
    SeqId next_id = 1;
    const std::vector<int32_t> common = random_tokens(rng, 24, m->config().n_vocab);
    int n_no_room = 0;
    for (int op = 0; op < 400; ++op) {
      const uint64_t k = rng.next_u64() % 10;
      auto pick = [&] { return live[rng.next_u64() % live.size()]; };
      if (k == 0 || live.empty()) {
        const SeqId id = next_id++;
        ASSERT_TRUE(e.add(id, {greedy(), rng.next_u64() % 2}).is_ok());
        live.push_back(id);
        std::vector<int32_t> toks(common.begin(), common.begin() + ptrdiff_t(rng.next_u64() % common.size()));
        const auto tail = random_tokens(rng, 1 + int(rng.next_u64() % 6), m->config().n_vocab);
        toks.insert(toks.end(), tail.begin(), tail.end());
        auto n = e.reuse_prefix(id, toks);
        ASSERT_TRUE(n.is_ok());
        hist[id].assign(toks.begin(), toks.begin() + *n);
      } else if (k <= 4) {
        engine::StepPlan p;
        for (SeqId id : live) {
          if (rng.next_u64() % 2) continue;
          const int n = 1 + int(rng.next_u64() % 12);
          p.seqs.push_back({id, random_tokens(rng, n, m->config().n_vocab), int32_t(rng.next_u64() % 2), false});
        }
        const engine::StepResult r = e.step(p);
        for (size_t i = 0; i < p.seqs.size(); ++i) {
          if (r.seqs[i].outcome == SeqOutcome::kNoRoom) ++n_no_room;
          if (r.seqs[i].outcome == SeqOutcome::kOk) {
            auto& h = hist[p.seqs[i].seq];
            h.insert(h.end(), p.seqs[i].tokens.begin(), p.seqs[i].tokens.end());
          }
          ASSERT_EQ(r.seqs[i].n_computed, int64_t(hist[p.seqs[i].seq].size()));
        }
      } else if (k == 5) {
        const SeqId src = pick(), dst = next_id++;
        ASSERT_TRUE(e.fork(src, dst, {greedy(), 0}).is_ok());
        live.push_back(dst);
        hist[dst] = hist[src];
      } else if (k == 6) {
        const SeqId id = pick();
        ASSERT_TRUE((rng.next_u64() % 2 ? e.pause(id) : e.resume(id)).is_ok());
      } else if (k == 7) {
        const SeqId id = pick();
        ASSERT_TRUE(e.preempt(id).is_ok());
        hist[id].clear();
      } else if (k == 8) {
        const SeqId id = pick();
        const int64_t keep = int64_t(rng.next_u64() % (hist[id].size() + 1));
        ASSERT_TRUE(e.truncate(id, keep).is_ok());
        hist[id].resize(size_t(keep));
      } else {
        const size_t i = rng.next_u64() % live.size();
        ASSERT_TRUE(e.remove(live[i]).is_ok());  // finish or cancel: the same to the KV
        live.erase(live.begin() + ptrdiff_t(i));
      }
      ASSERT_TRUE(e.check_consistency()) << "op " << op;
      const auto kv = e.kv_stats();
      ASSERT_EQ(kv.used + kv.cached + kv.free, kv.total);
    }
    EXPECT_GT(n_no_room, 0);  // the pool was small enough to say no
    for (SeqId id : live) ASSERT_TRUE(e.remove(id).is_ok());
    EXPECT_EQ(e.kv_stats().used, 0);
    e.clear_prefix_cache();
    EXPECT_EQ(e.kv_stats().free, e.kv_stats().total);
    EXPECT_TRUE(e.check_consistency());
  }
}

}  // namespace
}  // namespace ts
