// `tierserve run`: load a model, evaluate a prompt (one batched pass), sample tokens and
// stream their text to stdout; finish with stderr lines of readiness (load + warm-up time,
// resident memory, the pack file used) and performance accounting (prompt and decode
// tok/s, achieved GB/s against the machine's measured peak, the logits hash). --json
// prints one JSON object instead of the stream.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "commands.h"
#include "model_path.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/cpu_features.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "engine/perf.h"
#include "engine/sampling.h"
#include "kernels/traits.h"
#include "models/register.h"
#include "tokenizer/chat.h"
#include "tokenizer/text_output.h"
#include "tokenizer/tokenizer.h"

namespace ts::tools {
namespace {

struct RunOptions {
  std::string model;
  std::string prompt;
  int n_predict = 128;
  int n_threads = 0;
  int64_t n_ctx = 0;
  int64_t n_batch = 512;
  float temp = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  int repeat_last_n = 64;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int64_t seed = -1;
  std::vector<std::string> stops;
  bool ignore_eos = false;
  bool json = false;
  std::string flash_attn = "on";
  bool chat = false;
  std::string system;
  std::string chat_template;  // family name overriding detection
  std::string pack;           // pack file (empty: MODEL.gguf.tspack when present)
  bool no_pack = false;
  bool map_pack = false;
  bool no_warmup = false;
  int64_t warmup_tokens = 1;
};

// Resident-set figures of this process from /proc/self/status (0 where unavailable).
struct MemoryUse {
  uint64_t rss_bytes = 0, hwm_bytes = 0, anon_bytes = 0, file_bytes = 0;
};

MemoryUse memory_use() {
  MemoryUse m;
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return m;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long kb = 0;
    if (std::sscanf(line, "VmRSS: %llu kB", &kb) == 1) m.rss_bytes = kb * 1024;
    else if (std::sscanf(line, "VmHWM: %llu kB", &kb) == 1) m.hwm_bytes = kb * 1024;
    else if (std::sscanf(line, "RssAnon: %llu kB", &kb) == 1) m.anon_bytes = kb * 1024;
    else if (std::sscanf(line, "RssFile: %llu kB", &kb) == 1) m.file_bytes = kb * 1024;
  }
  std::fclose(f);
  return m;
}

nlohmann::json memory_json(const MemoryUse& m) {
  return {{"rss_bytes", m.rss_bytes}, {"hwm_bytes", m.hwm_bytes}, {"anon_bytes", m.anon_bytes},
          {"file_bytes", m.file_bytes}};
}

// The prompt as the model sees it: the raw text, or with --chat one user turn (after an
// optional system turn) rendered by the model's chat template with the generation prompt.
Result<std::string> build_prompt(const RunOptions& o, const gguf::File& f) {
  if (!o.chat) {
    if (!o.system.empty() || !o.chat_template.empty())
      return invalid_argument("--system and --chat-template need --chat");
    return o.prompt;
  }
  Result<tok::ChatTemplate> tmpl =
      o.chat_template.empty() ? tok::ChatTemplate::detect(f) : tok::ChatTemplate::from_name(o.chat_template);
  if (!tmpl.is_ok()) return tmpl.status();
  std::fprintf(stderr, "tierserve run: chat template %s (%s)\n", std::string(tok::chat_family_name(tmpl->family())).c_str(),
               tmpl->reason().c_str());
  std::vector<tok::ChatMessage> msgs;
  if (!o.system.empty()) msgs.push_back({"system", o.system});
  msgs.push_back({"user", o.prompt});
  return tmpl->render(msgs, /*add_generation_prompt=*/true);
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "tierserve run: error: %s\n", msg.c_str());
  return 1;
}

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "tierserve run: %s (see tierserve run --help)\n", msg.c_str());
  return 2;
}

void emit(const std::string& s, bool json) {
  if (json || s.empty()) return;
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

int cmd_run(int argc, char** argv) {
  RunOptions o;
  CLI::App app{"Generate text from a prompt.", "tierserve run"};
  app.add_option("-m,--model", o.model,
                 "GGUF model file (default: $TIERSERVE_MODEL, else the installed default model)");
  app.add_option("-p,--prompt", o.prompt, "prompt text")->required();
  app.add_option("-n,--n-predict", o.n_predict, "tokens to generate (> 0)")->capture_default_str();
  app.add_option("-t,--threads", o.n_threads, "threads (0: one per core)")
      ->check(CLI::Range(0, kMaxThreads))
      ->capture_default_str();
  app.add_option("-c,--ctx", o.n_ctx, "context size in tokens (0: the model's, at most 4096)")->capture_default_str();
  app.add_option("-b,--batch", o.n_batch, "prompt tokens per forward pass")->capture_default_str();
  app.add_option("--temp", o.temp, "temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", o.top_k, "top-k (0: off)")->capture_default_str();
  app.add_option("--top-p", o.top_p, "top-p (1: off; 0: the most probable token only)")->capture_default_str();
  app.add_option("--min-p", o.min_p, "min-p (0: off)")->capture_default_str();
  app.add_option("--repeat-penalty", o.repeat_penalty, "repetition penalty (1: off)")->capture_default_str();
  app.add_option("--repeat-last-n", o.repeat_last_n, "tokens the penalties look back")->capture_default_str();
  app.add_option("--frequency-penalty", o.frequency_penalty, "frequency penalty")->capture_default_str();
  app.add_option("--presence-penalty", o.presence_penalty, "presence penalty")->capture_default_str();
  app.add_option("-s,--seed", o.seed, "sampling seed (-1: random)")->capture_default_str();
  app.add_option("--stop", o.stops, "stop string (repeatable)");
  app.add_flag("--ignore-eos", o.ignore_eos, "keep generating past end-of-generation tokens");
  app.add_option("--fa,--flash-attn", o.flash_attn,
                 "attention numerics: tiled (F32 tiles), or the rounding of llama.cpp with flash attention on or "
                 "off")
      ->check(CLI::IsMember({"tiled", "on", "off"}))
      ->capture_default_str();
  app.add_flag("--chat", o.chat, "render the prompt as a user message with the model's chat template");
  app.add_option("--system", o.system, "system message (with --chat)");
  app.add_option("--chat-template", o.chat_template,
                 "chat template family instead of the detected one (gemma, llama3, chatml, qwen3, mistral, phi3)");
  app.add_flag("--json", o.json, "print one JSON object instead of streaming text");
  app.add_option("--pack", o.pack, "pack file from `tierserve build` (default: MODEL.gguf.tspack when present)");
  app.add_flag("--no-pack", o.no_pack, "pack the weights in memory even when a pack file exists");
  app.add_flag("--map-pack", o.map_pack, "read the pack's panels from its mapping instead of copying them to 2 MiB pages");
  app.add_flag("--no-warmup", o.no_warmup, "skip the warm-up pass before the prompt");
  app.add_option("--warmup-tokens", o.warmup_tokens,
                 "tokens of the warm-up pass (in steps of -b; llama-bench's warm-up runs the whole prompt)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  if (o.n_predict <= 0) return usage_error("-n must be > 0, got " + std::to_string(o.n_predict));
  if (o.n_threads < 0) return usage_error("-t must be >= 0, got " + std::to_string(o.n_threads));
  if (o.warmup_tokens < 1) return usage_error("--warmup-tokens must be >= 1, got " + std::to_string(o.warmup_tokens));
  if (o.n_ctx < 0) return usage_error("--ctx must be >= 0, got " + std::to_string(o.n_ctx));
  if (o.n_batch <= 0) return usage_error("--batch must be > 0, got " + std::to_string(o.n_batch));
  engine::SamplingParams sp;
  sp.temperature = o.temp;
  sp.top_k = o.top_k;
  sp.top_p = o.top_p;
  sp.min_p = o.min_p;
  sp.repeat_penalty = o.repeat_penalty;
  sp.penalty_last_n = o.repeat_last_n;
  sp.frequency_penalty = o.frequency_penalty;
  sp.presence_penalty = o.presence_penalty;
  sp.seed = o.seed >= 0 ? uint64_t(o.seed) : uint64_t(std::random_device{}());
  if (Status st = engine::validate(sp); !st.is_ok()) return usage_error(st.message());

  if (o.model.empty()) {
    // A chat needs a chat model: SmolLM2 135M Instruct; plain text the default base model.
    o.model = o.chat ? default_chat_model_path() : default_model_path();
    struct stat st {};
    if (::stat(o.model.c_str(), &st) != 0)
      return fail("no -m given and the default " + std::string(o.chat ? "chat " : "") + "model " + o.model +
                  " is not installed: run scripts/setup-model.sh (or pass -m MODEL.gguf)");
  }
  if (o.no_pack && !o.pack.empty()) return usage_error("--pack and --no-pack exclude each other");
  models::register_all();
  const int64_t t_load = now_ns();
  engine::ModelOptions mo;
  mo.pack_path = o.pack;
  mo.use_pack = !o.no_pack;
  mo.copy_pack = !o.map_pack;
  mo.n_threads = o.n_threads;
  // The CLI or the config has checked the name.
  TS_CHECK(ops::parse_attn_numerics(o.flash_attn, &mo.attn_numerics));
  auto model_r = engine::Model::load(o.model, mo);
  if (!model_r.is_ok()) return fail(model_r.status().to_string());
  engine::Model& model = **model_r;
  auto tok_r = tok::Tokenizer::from_gguf(model.gguf());
  if (!tok_r.is_ok()) return fail("tokenizer: " + tok_r.status().to_string());
  const tok::Tokenizer& tokenizer = **tok_r;
  // One sequence on the serving engine (engine::Engine): the same KV, sampling and step
  // code as `serve`, and the same end-of-text rules (tok::TextOutput).
  // --ctx 0: the model's training context, at most kDefaultCtx.
  constexpr int64_t kDefaultCtx = 4096;
  const int64_t n_train = model.config().n_ctx_train;
  const int64_t want_ctx = o.n_ctx > 0 ? o.n_ctx : n_train > 0 ? std::min(n_train, kDefaultCtx) : kDefaultCtx;
  engine::EngineOptions eo;
  eo.max_seq_len = want_ctx;
  eo.n_blocks = (want_ctx + eo.block_size - 1) / eo.block_size;  // one sequence's worth
  eo.max_step_tokens = std::min(o.n_batch, want_ctx);
  eo.prefix_cache = false;
  auto engine_r = engine::Engine::create(model, eo);
  if (!engine_r.is_ok()) return fail(engine_r.status().to_string());
  engine::Engine& eng = **engine_r;
  const int64_t n_ctx = eng.max_seq_len();
  // Warm-up: --warmup-tokens tokens (in steps of at most -b) through every layer fault the
  // weights in (from the page cache or the pack file) and size the scratch buffers for steps
  // of that many tokens, and every KV page is faulted in (as llama.cpp clears its KV buffer
  // at load), so the prompt is timed at steady state, as llama-bench's warm-up (the whole
  // prompt) leaves it. (perf of a 512-token llama 110m run: 5-24% of its samples in the
  // kernel zeroing fresh pages, load included.) Its sequence is removed; the prompt
  // overwrites its KV cells.
  double warmup_ms = 0;
  constexpr engine::SeqId kWarmSeq = 1, kSeq = 0;
  if (!o.no_warmup) {
    const int64_t tw = now_ns();
    if (Status st = eng.add(kWarmSeq, {}); !st.is_ok()) return fail(st.to_string());
    const int64_t n_warm = std::min(o.warmup_tokens, n_ctx - 1);
    for (int64_t done = 0; done < std::max<int64_t>(1, n_warm);) {
      const int64_t n_step = std::clamp<int64_t>(n_warm - done, 1, eo.max_step_tokens);
      engine::StepPlan warm;  // any ids: only pages and buffers matter
      warm.seqs.push_back({.seq = kWarmSeq, .tokens = std::vector<int32_t>(size_t(n_step), 0)});
      const engine::StepResult wr = eng.step(warm);
      if (wr.seqs[0].outcome != engine::SeqOutcome::kOk) return fail("warm-up step: " + wr.seqs[0].error);
      done += n_step;
    }
    (void)eng.remove(kWarmSeq);
    eng.touch_kv();
    warmup_ms = double(now_ns() - tw) * 1e-6;
  }
  const double ready_ms = double(now_ns() - t_load) * 1e-6;
  const MemoryUse mem_ready = memory_use();

  if (o.prompt.empty()) return usage_error("the prompt is empty");
  Result<std::string> prompt_text = build_prompt(o, model.gguf());
  if (!prompt_text.is_ok()) return fail(prompt_text.status().to_string());
  const std::vector<int32_t> prompt = tokenizer.encode(*prompt_text, /*add_special=*/true, /*parse_special=*/true);
  if (prompt.empty()) return fail("the prompt has no tokens");
  if (int64_t(prompt.size()) >= n_ctx)
    return fail("the prompt has " + std::to_string(prompt.size()) + " tokens, which does not fit the context of " +
                std::to_string(n_ctx) + " tokens with room to generate (use a shorter prompt or a larger --ctx)");
  for (int32_t t : prompt)
    if (t < 0 || t >= model.config().n_vocab)
      return fail("the tokenizer produced id " + std::to_string(t) + " outside the model's vocabulary");

  engine::SeqConfig sc;
  sc.sampling = sp;
  if (Status st = eng.add(kSeq, sc); !st.is_ok()) return fail(st.to_string());
  // A step of `tokens`: the next token sampled by the engine, its row hashed (a
  // diagnostic: its time is not decode time).
  uint64_t hash = engine::kFnvOffset;
  int64_t hash_ns = 0;
  engine::StepPlan plan;
  plan.seqs.push_back({.seq = kSeq, .tokens = {}});
  auto step = [&](std::span<const int32_t> tokens, int32_t* next) -> Status {
    plan.seqs[0].tokens.assign(tokens.begin(), tokens.end());
    engine::StepResult r = eng.step(plan);
    engine::SeqResult& sr = r.seqs[0];
    if (sr.outcome != engine::SeqOutcome::kOk)
      return internal_error(std::string("step: ") + engine::seq_outcome_name(sr.outcome) + " " + sr.error);
    const int64_t th = now_ns();
    hash = engine::fnv1a_update(hash, eng.last_logits(0));
    hash_ns += now_ns() - th;
    *next = sr.sampled.back();
    return Status::ok();
  };

  // Prompt: one step (forward passes of at most --batch tokens).
  const int64_t t0 = now_ns();
  int32_t id = -1;
  if (Status st = step(prompt, &id); !st.is_ok()) return fail(st.to_string());
  const int64_t t1 = now_ns();

  // Decode.
  std::vector<int32_t> out;
  int64_t n_passes = 0;  // decode forward passes (the first token comes from the prompt's)
  tok::TextOutput text_out(tokenizer, o.stops, o.ignore_eos, o.n_predict);
  std::string stop_reason = "length";
  for (;;) {
    tok::TextEnd end = tok::TextEnd::kNone;
    const std::string shown = text_out.push(id, &end);
    if (end != tok::TextEnd::kEog) out.push_back(id);
    emit(shown, o.json);
    if (end != tok::TextEnd::kNone) {
      stop_reason = end == tok::TextEnd::kEog ? "eos" : end == tok::TextEnd::kStopString ? "stop" : "length";
      break;
    }
    if (int64_t(prompt.size()) + n_passes >= n_ctx) {  // the KV holds no further token
      stop_reason = "context";
      emit(text_out.finish(), o.json);
      break;
    }
    if (Status st = step(std::span<const int32_t>(&id, 1), &id); !st.is_ok()) return fail(st.to_string());
    ++n_passes;
  }
  const std::string& text = text_out.shown();
  const int64_t t2 = now_ns();
  const MemoryUse mem_end = memory_use();
  const engine::PackInfo& pi = model.pack_info();

  const double prompt_ms = double(t1 - t0) * 1e-6;
  // Decode time: forward passes, sampling, detokenization, output; not the logits hash
  // (0.3 ms per token over a 262k vocabulary; llama-bench, the peer, hashes nothing).
  const double gen_ms = double(t2 - t1 - hash_ns) * 1e-6;
  const double prompt_tok_s = prompt_ms > 0 ? double(prompt.size()) * 1e3 / prompt_ms : 0.0;
  // Decode speed is forward passes per second, as llama-bench's tg counts them: n tokens
  // take n - 1 passes (the first is sampled from the prompt's logits), so counting tokens
  // would overstate it by 1/(n-1), and a 1-token run has no decode pass at all (0).
  const double gen_tok_s = gen_ms > 0 && n_passes > 0 ? double(n_passes) * 1e3 / gen_ms : 0.0;
  const double gbs = double(model.weight_bytes()) * gen_tok_s / 1e9;
  const double peak = engine::peak_read_bandwidth_gbs();
  char hash_hex[17];
  std::snprintf(hash_hex, sizeof hash_hex, "%016llx", static_cast<unsigned long long>(hash));

  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["arch"] = model.config().arch;
    j["prompt_tokens"] = prompt;
    j["tokens"] = out;
    j["text"] = text;
    j["stop_reason"] = stop_reason;
    j["prompt_ms"] = prompt_ms;
    j["gen_ms"] = gen_ms;
    j["hash_ms"] = double(hash_ns) * 1e-6;
    j["prompt_tok_s"] = prompt_tok_s;
    j["gen_tok_s"] = gen_tok_s;
    j["decode_passes"] = n_passes;
    j["weight_bytes"] = model.weight_bytes();
    j["gb_s"] = gbs;
    j["peak_gb_s"] = peak;
    j["n_threads"] = model.n_threads();
    j["kernels"] = kernels::isa_name(kernels::best_isa());  // the matrix kernels' path
    j["attention"] = ops::attn_numerics_name(mo.attn_numerics);  // --fa
    j["cpu_features"] = cpu_features().to_string();
    j["n_ctx"] = n_ctx;
    j["seed"] = sp.seed;
    j["logits_hash"] = hash_hex;
    j["load_ms"] = pi.load_ms;
    j["warmup_ms"] = warmup_ms;
    j["ready_ms"] = ready_ms;
    j["pack"] = pi.pack_path;
    j["pack_warning"] = pi.pack_warning;
    j["matrices_from_pack"] = pi.n_from_pack;
    j["matrices_packed"] = pi.n_packed;
    j["weight_bytes_on_2mib_pages"] = pi.arena_huge ? pi.bytes_in_arena : 0;
    j["memory_ready"] = memory_json(mem_ready);
    j["memory_end"] = memory_json(mem_end);
    std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::printf("%s\n", s.c_str());
  } else if (isatty(STDOUT_FILENO)) {
    std::printf("\n");
  }
  std::fflush(stdout);
  std::fprintf(stderr, "ready in %.1f ms (load %.1f, warm-up %.1f) | RSS %.1f MiB (%.1f anon, %.1f file), peak %.1f MiB | %s\n",
               ready_ms, pi.load_ms, warmup_ms, double(mem_end.rss_bytes) / 1048576.0,
               double(mem_end.anon_bytes) / 1048576.0, double(mem_end.file_bytes) / 1048576.0,
               double(mem_end.hwm_bytes) / 1048576.0,
               pi.pack_path.empty() ? "weights packed in memory" : ("pack " + pi.pack_path).c_str());
  std::fprintf(stderr,
               "prompt %zu tok %.2f ms (%.1f tok/s) | decode %zu tok, %lld passes %.2f ms (%.1f tok/s) | "
               "%.2f GB/s of %.1f GB/s peak (%.1f%%) | %d threads | logits hash %s | stop: %s\n",
               prompt.size(), prompt_ms, prompt_tok_s, out.size(), static_cast<long long>(n_passes), gen_ms,
               gen_tok_s, gbs, peak,
               peak > 0 ? 100.0 * gbs / peak : 0.0, model.n_threads(), hash_hex, stop_reason.c_str());
  return 0;
}

}  // namespace ts::tools
