// `tierserve batched-bench`: prompt processing and decode speed of B parallel sequences,
// mirroring llama.cpp's llama-batched-bench (same flags, same columns) so the two compare
// directly. For every (PP, TG, B): B sequences of PP random prompt tokens go through the
// engine in steps of at most -b tokens (forward passes of at most -ub), then TG steps
// decode one token of every sequence each (greedy), all B tokens in one forward pass, so
// every weight matrix is read once per step for all sequences.
//
//   PP, TG, B   prompt tokens, generated tokens, parallel sequences
//   N_KV        KV cells in use at the end: B*(PP+TG), or PP+B*TG with -pps
//   T_PP, S_PP  prompt time and B*PP/T_PP (PP/T_PP with -pps)
//   T_TG, S_TG  decode time and B*TG/T_TG (aggregate decode tokens/s)
//   T, S        both, and N_KV/T
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/rng.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "models/register.h"

namespace ts::tools {
namespace {

struct BenchOptions {
  std::string model;
  std::vector<int> npp{128, 256, 512};
  std::vector<int> ntg{128, 256};
  std::vector<int> npl{1, 2, 4, 8, 16, 32};
  int n_threads = 0;
  int64_t n_batch = 2048;   // tokens per step
  int64_t n_ubatch = 512;   // tokens per forward pass
  int64_t n_ctx = 0;        // KV cells; 0: enough for the largest case
  bool pps = false;         // prompt shared by all sequences
  bool json = false;
  std::string flash_attn = "on";
  uint64_t seed = 1;
};

int fail(const std::string& msg) {
  std::fprintf(stderr, "tierserve batched-bench: error: %s\n", msg.c_str());
  return 1;
}

bool failed(const Status& st) {
  fail(st.to_string());
  return false;
}

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "tierserve batched-bench: %s (see tierserve batched-bench --help)\n", msg.c_str());
  return 2;
}

struct Row {
  int pp, tg, pl;
  int64_t n_kv;
  double t_pp, t_tg;
};

// One case. Returns false (after printing why) when a step fails.
bool run_case(engine::Engine& e, const BenchOptions& o, int pp, int tg, int pl, int64_t n_vocab, Row* row) {
  Rng rng(o.seed * 1000003 + uint64_t(pp) * 131 + uint64_t(pl));
  const int n_prompts = o.pps ? 1 : pl;
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(n_prompts));
  for (auto& p : prompts)
    for (int i = 0; i < pp; ++i) p.push_back(int32_t(rng.next_u64() % uint64_t(n_vocab)));
  for (int s = 0; s < pl; ++s)
    if (Status st = e.add(engine::SeqId(s), {}); !st.is_ok()) return failed(st);

  auto run = [&](const engine::StepPlan& plan, std::vector<int32_t>* next) {
    const engine::StepResult r = e.step(plan);
    for (size_t i = 0; i < r.seqs.size(); ++i) {
      const engine::SeqResult& sr = r.seqs[i];
      if (sr.outcome != engine::SeqOutcome::kOk) {
        fail(std::string("step: sequence ") + std::to_string(sr.seq) + ": " + engine::seq_outcome_name(sr.outcome) +
             (sr.error.empty() ? "" : " (" + sr.error + ")"));
        return false;
      }
      if (!sr.sampled.empty()) (*next)[size_t(sr.seq)] = sr.sampled.back();
    }
    return true;
  };

  // Prompt processing: chunks of every prompt under the step budget.
  std::vector<int32_t> next(size_t(pl), 0);
  std::vector<int64_t> done(size_t(n_prompts), 0);
  const int64_t t0 = now_ns();
  for (bool more = true; more;) {
    engine::StepPlan plan;
    int64_t left = o.n_batch;
    more = false;
    for (int s = 0; s < n_prompts && left > 0; ++s) {
      const int64_t k = std::min<int64_t>(pp - done[size_t(s)], left);
      if (k <= 0) continue;
      engine::SeqStep st;
      st.seq = engine::SeqId(s);
      st.tokens.assign(prompts[size_t(s)].begin() + done[size_t(s)], prompts[size_t(s)].begin() + done[size_t(s)] + k);
      st.n_outputs = done[size_t(s)] + k == pp ? 1 : 0;
      done[size_t(s)] += k;
      left -= k;
      plan.seqs.push_back(std::move(st));
    }
    for (int s = 0; s < n_prompts; ++s) more |= done[size_t(s)] < pp;
    if (!run(plan, &next)) return false;
  }
  if (o.pps) {
    // The other sequences share the prompt's KV (copy-on-write) and its first token.
    for (int s = 1; s < pl; ++s) {
      if (Status st = e.remove(engine::SeqId(s)); !st.is_ok()) return failed(st);
      if (Status st = e.fork(0, engine::SeqId(s), {}); !st.is_ok()) return failed(st);
      next[size_t(s)] = next[0];
    }
  }
  const int64_t t1 = now_ns();

  // Decode: one token of every sequence per step.
  for (int i = 0; i < tg; ++i) {
    engine::StepPlan plan;
    plan.seqs.resize(size_t(pl));
    for (int s = 0; s < pl; ++s) {
      plan.seqs[size_t(s)].seq = engine::SeqId(s);
      plan.seqs[size_t(s)].tokens = {next[size_t(s)]};
    }
    if (!run(plan, &next)) return false;
  }
  const int64_t t2 = now_ns();

  for (int s = 0; s < pl; ++s)
    if (Status st = e.remove(engine::SeqId(s)); !st.is_ok()) return failed(st);
  e.clear_prefix_cache();
  *row = {pp, tg, pl, o.pps ? int64_t(pp) + int64_t(pl) * tg : int64_t(pl) * (pp + tg), double(t1 - t0) * 1e-9,
          double(t2 - t1) * 1e-9};
  return true;
}

}  // namespace

int cmd_batched_bench(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{"Prompt and decode speed of parallel sequences (as llama-batched-bench).", "tierserve batched-bench"};
  app.add_option("-m,--model", o.model, "GGUF model file")->required();
  app.add_option("--npp", o.npp, "prompt lengths (comma-separated)")->delimiter(',')->capture_default_str();
  app.add_option("--ntg", o.ntg, "tokens to generate (comma-separated)")->delimiter(',')->capture_default_str();
  app.add_option("--npl", o.npl, "parallel sequences (comma-separated)")->delimiter(',')->capture_default_str();
  app.add_option("-t,--threads", o.n_threads, "threads (0: one per core)")
      ->check(CLI::Range(0, kMaxThreads))
      ->capture_default_str();
  app.add_option("-b,--batch-size", o.n_batch, "tokens per engine step while processing prompts")->capture_default_str();
  app.add_option("--ub,--ubatch-size", o.n_ubatch, "tokens per forward pass")->capture_default_str();
  app.add_option("-c,--ctx-size", o.n_ctx, "KV cells (0: enough for the largest case)")->capture_default_str();
  app.add_flag("--pps", o.pps, "one prompt shared by all sequences (forked, copy-on-write)");
  app.add_option("--fa,--flash-attn", o.flash_attn,
                 "attention numerics: tiled (F32 tiles), or llama.cpp's rounding with flash attention on/off")
      ->check(CLI::IsMember({"tiled", "on", "off"}))
      ->capture_default_str();
  app.add_option("-s,--seed", o.seed, "seed of the random prompts")->capture_default_str();
  app.add_flag("--json", o.json, "print one JSON object (llama.cpp's jsonl fields per row) instead of the table");
  // llama.cpp spells these with one dash; CLI11 wants two for multi-letter names.
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) {
    std::string a = argv[i];
    for (const char* name : {"-npp", "-ntg", "-npl", "-pps", "-ub"})
      if (a == name || a.rfind(std::string(name) + "=", 0) == 0) a = "-" + a;
    args.push_back(std::move(a));
  }
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  auto positive = [](const std::vector<int>& v) {
    return !v.empty() && std::all_of(v.begin(), v.end(), [](int x) { return x > 0; });
  };
  if (!positive(o.npp) || !positive(o.ntg) || !positive(o.npl))
    return usage_error("-npp, -ntg and -npl need positive values");
  if (o.n_threads < 0) return usage_error("-t must be >= 0");
  if (o.n_batch <= 0 || o.n_ubatch <= 0) return usage_error("-b and -ub must be > 0");
  if (o.n_ctx < 0) return usage_error("-c must be >= 0");

  models::register_all();
  engine::ModelOptions mo;
  mo.n_threads = o.n_threads;
  // The CLI or the config has checked the name.
  TS_CHECK(ops::parse_attn_numerics(o.flash_attn, &mo.attn_numerics));
  auto model_r = engine::Model::load(o.model, mo);
  if (!model_r.is_ok()) return fail(model_r.status().to_string());
  engine::Model& model = **model_r;

  int64_t max_len = 0, max_kv = 0;
  for (int pp : o.npp)
    for (int tg : o.ntg)
      for (int pl : o.npl) {
        max_len = std::max<int64_t>(max_len, pp + tg);
        max_kv = std::max<int64_t>(max_kv, int64_t(pl) * (pp + tg));
      }
  engine::EngineOptions eo;
  eo.block_size = 16;
  eo.max_step_tokens = o.n_ubatch;
  eo.max_seq_len = max_len;
  // Room for every sequence's cells plus one partly filled block each.
  const int64_t n_cells = o.n_ctx > 0 ? o.n_ctx : max_kv;
  int64_t max_pl = *std::max_element(o.npl.begin(), o.npl.end());
  eo.n_blocks = (n_cells + eo.block_size - 1) / eo.block_size + max_pl;
  eo.prefix_cache = o.pps;  // distinct random prompts: nothing to reuse otherwise
  auto engine_r = engine::Engine::create(model, eo);
  if (!engine_r.is_ok()) return fail(engine_r.status().to_string());
  engine::Engine& e = **engine_r;
  // Pages faulted in before the first case, as llama.cpp's cleared KV buffer is: the
  // pool places sequences apart (room to grow), and each case's first writes to fresh
  // 2 MiB pages would otherwise land in its prompt time.
  e.touch_kv();

  if (!o.json) {
    std::printf("main: model = %s, n_kv_max = %lld, n_batch = %lld, n_ubatch = %lld, flash_attn = %d, is_pp_shared = %d, "
                "n_threads = %d, block_size = %d\n\n",
                o.model.c_str(), static_cast<long long>(e.kv_stats().total) * e.kv_stats().block_size,
                static_cast<long long>(o.n_batch), static_cast<long long>(o.n_ubatch), o.flash_attn != "off",
                int(o.pps), model.n_threads(), e.kv_stats().block_size);
    std::printf("|%6s | %6s | %4s | %6s | %8s | %8s | %8s | %8s | %8s | %8s |\n", "PP", "TG", "B", "N_KV", "T_PP s",
                "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s");
    std::printf("|%6s-|-%6s-|-%4s-|-%6s-|-%8s-|-%8s-|-%8s-|-%8s-|-%8s-|-%8s-|\n", "------", "------", "----",
                "------", "--------", "--------", "--------", "--------", "--------", "--------");
    std::fflush(stdout);
  }

  // Warm-up: page in the weights and the KV, spin up the threads.
  {
    Row w;
    BenchOptions wo = o;
    wo.pps = false;
    if (!run_case(e, wo, 16, 4, 1, model.config().n_vocab, &w)) return 1;
  }

  nlohmann::json rows = nlohmann::json::array();
  for (int pp : o.npp)
    for (int tg : o.ntg)
      for (int pl : o.npl) {
        Row r;
        if (int64_t(pl) * (pp + tg) > n_cells && !o.pps) {
          std::fprintf(stderr, "skipping PP %d TG %d B %d: needs %lld KV cells > -c %lld\n", pp, tg, pl,
                       static_cast<long long>(int64_t(pl) * (pp + tg)), static_cast<long long>(n_cells));
          continue;
        }
        if (!run_case(e, o, pp, tg, pl, model.config().n_vocab, &r)) return 1;
        const double pp_tok = o.pps ? double(pp) : double(pl) * pp;
        const double s_pp = pp_tok / r.t_pp, s_tg = double(pl) * tg / r.t_tg;
        const double t = r.t_pp + r.t_tg, s = double(r.n_kv) / t;
        if (o.json) {
          rows.push_back({{"pp", pp}, {"tg", tg}, {"pl", pl}, {"n_kv", r.n_kv}, {"t_pp", r.t_pp},
                          {"speed_pp", s_pp}, {"t_tg", r.t_tg}, {"speed_tg", s_tg}, {"t", t}, {"speed", s}});
        } else {
          std::printf("|%6d | %6d | %4d | %6lld | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |\n", pp, tg, pl,
                      static_cast<long long>(r.n_kv), r.t_pp, s_pp, r.t_tg, s_tg, t, s);
          std::fflush(stdout);
        }
      }
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["n_kv_max"] = int64_t(e.kv_stats().total) * e.kv_stats().block_size;
    j["n_batch"] = o.n_batch;
    j["n_ubatch"] = o.n_ubatch;
    j["flash_attn"] = o.flash_attn;
    j["is_pp_shared"] = o.pps;
    j["n_threads"] = model.n_threads();
    j["block_size"] = e.kv_stats().block_size;
    j["weight_bytes"] = model.weight_bytes();
    j["results"] = rows;
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace ts::tools
