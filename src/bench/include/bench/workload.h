// Workloads: the requests a run sends, either replayed from a JSONL file of real
// payloads or generated from length distributions and a tier mix. Both are seeded, so
// the same flags produce the same requests in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/status.h"

namespace ts::bench {

// One request as the workload describes it (before it is given a send time).
struct RequestSpec {
  std::string endpoint = "chat";  // "chat" (/v1/chat/completions) or "completions"
  std::string prompt;             // completions prompt, or the single user message
  std::string messages_json;      // a JSON array of chat messages; overrides prompt
  int max_tokens = 64;
  std::string tier;               // requested service tier; "" = the server's default
  std::string api_key;            // "" = the run's key for this tier (or none)
  std::optional<double> offset_ms;  // replay: arrival offset from the start of the file
  std::optional<double> temperature;  // sent as "temperature" when set
  int approx_prompt_tokens = 0;   // generator's length target (0 = unknown)
};

// A length distribution, parsed from "N" or "fixed:N", "uniform:A:B", "normal:MEAN:STD",
// "exp:MEAN" or "lognormal:MEDIAN:SIGMA". Samples are rounded and clamped to [1, 1e6].
struct LengthDist {
  enum Kind { kFixed, kUniform, kNormal, kExp, kLogNormal } kind = kFixed;
  double a = 64, b = 0;
  int sample(Rng& rng) const;
  std::string to_string() const;
};
Result<LengthDist> parse_length_dist(const std::string& s);

// "ultrafast=20,standard=70,batch=10" (weights, any positive scale). An empty string
// gives one entry with an empty tier (the server's default).
struct TierWeight {
  std::string tier;
  double weight = 1;
};
Result<std::vector<TierWeight>> parse_tier_mix(const std::string& s);

struct SyntheticSpec {
  LengthDist input{LengthDist::kFixed, 64, 0};   // prompt length in words (~tokens)
  LengthDist output{LengthDist::kFixed, 32, 0};  // max_tokens
  std::vector<TierWeight> mix{{"", 1}};
  std::string endpoint = "chat";
};

// The source of requests. Replay cycles through the file in order; synthetic draws
// every field from its own seeded stream, so request i is the same whatever the rate.
class Workload {
 public:
  static Result<Workload> from_jsonl(const std::string& path);
  static Result<Workload> from_jsonl_text(const std::string& text, const std::string& name);
  static Workload synthetic(const SyntheticSpec& spec, uint64_t seed);

  // The i-th request of the run (i counts across all phases).
  RequestSpec at(size_t i) const;
  size_t replay_size() const { return replay_.size(); }  // 0 for synthetic
  bool has_offsets() const;  // every replayed line carries offset_ms
  // Overrides applied to every request: a tier mix replacing the file's tiers (for
  // replayed payloads with a chosen mix), and a max_tokens cap.
  void set_tier_mix(std::vector<TierWeight> mix, uint64_t seed);
  void set_max_tokens_override(int n) { max_tokens_override_ = n; }
  std::string describe() const;

 private:
  std::vector<RequestSpec> replay_;
  std::string name_;
  std::optional<SyntheticSpec> synth_;
  std::vector<TierWeight> mix_override_;
  uint64_t seed_ = 0;
  int max_tokens_override_ = 0;
};

// Picks a tier from a mix with a uniform draw u in [0, 1).
const std::string& pick_tier(const std::vector<TierWeight>& mix, double u);

// A deterministic prompt of about `n_words` words (a fixed vocabulary, seeded).
std::string make_prompt(int n_words, Rng& rng);

}  // namespace ts::bench
