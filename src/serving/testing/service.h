// Shared pieces of the serving tests: models loaded once, a thread-safe recorder of a
// request's updates, and the single-sequence reference the Service must reproduce.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "engine/model.h"
#include "engine/sampling.h"
#include "gguf/gguf.h"
#include "core/utf8.h"
#include "models/make_model.h"
#include "models/register.h"
#include "serving/service.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace ts::serving::testing {

struct LoadedModel {
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<tok::Tokenizer> tok;
  std::unique_ptr<tok::ChatTemplate> chat;
};

inline LoadedModel load_model(const std::string& path) {
  models::register_all();
  LoadedModel m;
  engine::ModelOptions mo;
  mo.n_threads = 1;  // the loop is one thread; tests run beside other builds
  auto r = engine::Model::load(path, mo);
  if (!r.is_ok()) {
    ADD_FAILURE() << path << ": " << r.status().to_string();
    return m;
  }
  m.model = std::move(r).value();
  auto t = tok::Tokenizer::from_gguf(m.model->gguf());
  if (!t.is_ok()) {
    ADD_FAILURE() << "tokenizer: " << t.status().to_string();
    m.model.reset();
    return m;
  }
  m.tok = std::move(t).value();
  auto c = tok::ChatTemplate::detect(m.model->gguf());
  m.chat = std::make_unique<tok::ChatTemplate>(c.is_ok() ? std::move(c).value() : *tok::ChatTemplate::from_name("chatml"));
  return m;
}

// stories260K: a tiny real llama (SPM vocabulary, 512 tokens of context).
inline LoadedModel& stories() {
  static LoadedModel m = load_model(std::string(TS_SHARED_DIR) + "/models/stories260K.gguf");
  return m;
}

// A random-weight llama of the "tiny" shape (Q8_0), written by the model maker once per run.
inline LoadedModel& random_llama() {
  static LoadedModel m = [] {
    const std::string dir = std::string(TS_BINARY_DIR) + "/service_test";
    std::filesystem::create_directories(dir);
    const std::string path = dir + "/llama-tiny-q8_0.gguf";
    models::MakeModelOptions o;
    o.arch = models::Arch::kLlama;
    o.shape = *models::shape_from_name("tiny");
    o.type = *models::type_from_name("q8_0");
    o.n_threads = 1;
    const Status st = models::make_model(o, path);
    if (!st.is_ok()) {
      ADD_FAILURE() << "make_model: " << st.to_string();
      return LoadedModel{};
    }
    return load_model(path);
  }();
  return m;
}

// Every update of one request, recorded from the loop thread. The state lives as long as
// the callback does, so a test that fails early (and destroys its recorders before the
// service) does not leave the loop writing to freed memory.
class Recorder {
 public:
  Callback callback() {
    std::shared_ptr<State> st = st_;
    return [st](const Update& u) {
      std::unique_lock<std::mutex> lk(st->mu);
      st->updates.push_back(u);
      if (u.kind == Update::Kind::kDelta) st->text += u.text;
      const bool final = u.kind == Update::Kind::kDone || u.kind == Update::Kind::kFailed ||
                         (u.kind == Update::Kind::kAdmitted && !u.accepted);
      if (final) {
        ++st->n_final;
        if (st->n_final > 1 || st->after_final) ++st->violations;
      } else if (st->n_final > 0) {
        ++st->after_final;
        ++st->violations;
      }
      st->cv.notify_all();
      auto hook = u.kind == Update::Kind::kDelta ? st->on_delta : st->on_update;
      lk.unlock();
      if (hook) hook(u);
    };
  }
  // Run on the loop thread inside the callback (tests use them to act at an exact point):
  // on kDelta, and on every other update (e.g. to hold the loop at kAdmitted).
  void on_delta(std::function<void(const Update&)> f) { st_->on_delta = std::move(f); }
  void on_update(std::function<void(const Update&)> f) { st_->on_update = std::move(f); }

  bool wait_final(int64_t timeout_ms = 20000) {
    std::unique_lock<std::mutex> lk(st_->mu);
    return st_->cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return st_->n_final > 0; });
  }
  bool wait_kind(Update::Kind k, int64_t timeout_ms = 20000) {
    std::unique_lock<std::mutex> lk(st_->mu);
    return st_->cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] {
      for (const Update& u : st_->updates)
        if (u.kind == k) return true;
      return false;
    });
  }
  std::vector<Update> updates() const {
    std::lock_guard<std::mutex> lk(st_->mu);
    return st_->updates;
  }
  std::string text() const {
    std::lock_guard<std::mutex> lk(st_->mu);
    return st_->text;
  }
  int n_final() const {
    std::lock_guard<std::mutex> lk(st_->mu);
    return st_->n_final;
  }
  int violations() const {
    std::lock_guard<std::mutex> lk(st_->mu);
    return st_->violations;
  }
  // The final update (kDone / kFailed / refused kAdmitted); kind kDelta when none yet.
  Update final_update() const {
    std::lock_guard<std::mutex> lk(st_->mu);
    for (const Update& u : st_->updates)
      if (u.kind == Update::Kind::kDone || u.kind == Update::Kind::kFailed ||
          (u.kind == Update::Kind::kAdmitted && !u.accepted))
        return u;
    return Update{};
  }
  int count(Update::Kind k) const {
    std::lock_guard<std::mutex> lk(st_->mu);
    int n = 0;
    for (const Update& u : st_->updates) n += u.kind == k;
    return n;
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Update> updates;
    std::string text;
    int n_final = 0, after_final = 0, violations = 0;
    std::function<void(const Update&)> on_delta, on_update;
  };
  std::shared_ptr<State> st_ = std::make_shared<State>();
};

// A one-shot gate: the loop thread waits in a callback until the test opens it, so that
// requests submitted meanwhile are admitted together.
class Gate {
 public:
  void wait() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, std::chrono::seconds(20), [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// The reference: one sequence alone through the single-sequence Context, token by token,
// stopping at EOG unless ignore_eos. Returns the generated token ids.
inline std::vector<int32_t> solo_tokens(engine::Model& m, const tok::Tokenizer& tk, const std::vector<int32_t>& prompt,
                                        int n_gen, const engine::SamplingParams& sp, bool ignore_eos) {
  auto ctx = engine::Context::create(m, int64_t(prompt.size()) + n_gen + 1, 64);
  EXPECT_TRUE(ctx.is_ok());
  if (!ctx.is_ok()) return {};
  engine::Sampler s(sp);
  for (int32_t t : prompt) s.accept(t);
  EXPECT_TRUE((*ctx)->eval(prompt).is_ok());
  std::vector<int32_t> out;
  for (int i = 0; i < n_gen; ++i) {
    const int32_t t = s.sample((*ctx)->logits(0));
    out.push_back(t);
    s.accept(t);
    if (!ignore_eos && tk.is_eog(t)) break;
    if (i + 1 < n_gen) {
      EXPECT_TRUE((*ctx)->eval(std::vector<int32_t>{t}).is_ok());
    }
  }
  return out;
}

// The text a client sees for these generated tokens (EOG tokens are not text).
inline std::string tokens_text(const tok::Tokenizer& tk, const std::vector<int32_t>& toks, bool ignore_eos) {
  tok::StreamDecoder d(tk);
  std::string s;
  for (int32_t t : toks) {
    if (!ignore_eos && tk.is_eog(t)) break;
    s += d.push(t);
  }
  return s + d.flush();
}

inline std::vector<int32_t> random_prompt(Rng& rng, int n, int64_t n_vocab) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(int32_t(3 + rng.next_u64() % uint64_t(n_vocab - 3)));
  return v;
}

inline bool valid_utf8(const std::string& s) { return utf8::is_valid(s); }

inline sched::TierConfig tier(const std::string& name, int32_t prio, double share_min, double share_max, bool borrow) {
  sched::TierConfig t;
  t.name = name;
  t.priority = prio;
  t.share_min = share_min;
  t.share_max = share_max;
  t.borrow = borrow;
  t.max_queue_wait_ms = 0;  // no timeouts unless a test sets them
  return t;
}

// The tests' tiers by rank (serving's TierId): "fast" and "slow" of two_tier_options, and
// "bulk" where a test adds it below them; unknown names get a rank no service has.
inline sched::TierId rank_of(const std::string& name) {
  return name == "fast" ? 0 : name == "slow" ? 1 : name == "bulk" ? 2 : 99;
}

// Two tiers: "fast" (cap 0.6, borrows) and "slow" (floor 0.3).
inline ServiceOptions two_tier_options(int64_t n_blocks = 256, int64_t budget = 64, int64_t chunk = 16) {
  ServiceOptions o;
  o.engine.block_size = 16;
  o.engine.n_blocks = n_blocks;
  o.engine.max_step_tokens = 256;
  o.sched.tiers = {tier("fast", 0, 0.0, 0.6, true), tier("slow", 1, 0.3, 1.0, true)};
  o.sched.step_token_budget = budget;
  o.sched.max_chunk_tokens = chunk;
  o.idle_poll_ms = 5;
  return o;
}

}  // namespace ts::serving::testing

namespace ts::sched {
// gtest messages print a reason by its name.
inline std::ostream& operator<<(std::ostream& os, Reason r) { return os << reason_name(r); }
inline void PrintTo(Reason r, std::ostream* os) { *os << reason_name(r); }
}  // namespace ts::sched
