#include "bench/workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/arrival.h"

namespace ts::bench {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(*out);
}

// Streams of the synthetic generator: one per field, so changing one distribution does
// not reshuffle the others.
uint64_t stream_seed(uint64_t seed, uint64_t stream, size_t i) {
  return seed * 0x9E3779B97F4A7C15ull + stream * 0xD1B54A32D192ED03ull + uint64_t(i) * 0x8CB92BA72F3D8DD7ull;
}

constexpr const char* kWords[] = {
    "the", "tier", "model", "fast", "request", "token", "queue", "server", "latency", "story",
    "little", "cat", "ran", "over", "hill", "and", "found", "a", "bright", "red", "ball",
    "she", "said", "hello", "to", "her", "friend", "who", "was", "happy", "day", "sun",
    "tree", "bird", "sang", "song", "in", "garden", "with", "flowers", "water", "boat",
};

}  // namespace

int LengthDist::sample(Rng& rng) const {
  double v = a;
  switch (kind) {
    case kFixed: v = a; break;
    case kUniform: v = a + std::floor(rng.uniform() * (b - a + 1)); break;
    case kNormal: v = a + b * sample_normal(rng); break;
    case kExp: v = a * sample_exponential(rng); break;
    case kLogNormal: v = a * std::exp(b * sample_normal(rng)); break;
  }
  v = std::round(v);
  return int(std::clamp(v, 1.0, 1e6));
}

std::string LengthDist::to_string() const {
  std::ostringstream s;
  switch (kind) {
    case kFixed: s << "fixed:" << a; break;
    case kUniform: s << "uniform:" << a << ":" << b; break;
    case kNormal: s << "normal:" << a << ":" << b; break;
    case kExp: s << "exp:" << a; break;
    case kLogNormal: s << "lognormal:" << a << ":" << b; break;
  }
  return s.str();
}

Result<LengthDist> parse_length_dist(const std::string& s) {
  const auto parts = split(s, ':');
  LengthDist d;
  std::vector<double> nums;
  const bool bare = parts.size() == 1;
  for (size_t i = bare ? 0 : 1; i < parts.size(); ++i) {
    double v;
    if (!parse_double(parts[i], &v)) return invalid_argument("bad number '" + parts[i] + "' in '" + s + "'");
    nums.push_back(v);
  }
  const std::string kind = bare ? "fixed" : parts[0];
  auto want = [&](size_t n) { return nums.size() == n; };
  if (kind == "fixed" && want(1)) {
    d = {LengthDist::kFixed, nums[0], 0};
  } else if (kind == "uniform" && want(2) && nums[0] <= nums[1]) {
    d = {LengthDist::kUniform, nums[0], nums[1]};
  } else if (kind == "normal" && want(2) && nums[1] >= 0) {
    d = {LengthDist::kNormal, nums[0], nums[1]};
  } else if (kind == "exp" && want(1)) {
    d = {LengthDist::kExp, nums[0], 0};
  } else if (kind == "lognormal" && want(2) && nums[1] >= 0) {
    d = {LengthDist::kLogNormal, nums[0], nums[1]};
  } else {
    return invalid_argument("'" + s + "' is not N, fixed:N, uniform:A:B, normal:MEAN:STD, exp:MEAN or lognormal:MEDIAN:SIGMA");
  }
  if (d.a < 1) return invalid_argument("'" + s + "': lengths start at 1");
  return d;
}

Result<std::vector<TierWeight>> parse_tier_mix(const std::string& s) {
  std::vector<TierWeight> out;
  if (s.empty()) return std::vector<TierWeight>{{"", 1}};
  for (const std::string& item : split(s, ',')) {
    const size_t eq = item.find('=');
    TierWeight w;
    if (eq == std::string::npos) {
      w.tier = item;
      w.weight = 1;
    } else {
      w.tier = item.substr(0, eq);
      if (!parse_double(item.substr(eq + 1), &w.weight) || w.weight < 0)
        return invalid_argument("bad weight in '" + item + "'");
    }
    if (w.tier.empty()) return invalid_argument("empty tier name in '" + s + "'");
    if (w.tier == "default") w.tier.clear();  // "default=30": no service_tier field
    out.push_back(w);
  }
  double total = 0;
  for (auto& w : out) total += w.weight;
  if (!(total > 0)) return invalid_argument("tier weights of '" + s + "' sum to 0");
  return out;
}

const std::string& pick_tier(const std::vector<TierWeight>& mix, double u) {
  static const std::string kNone;
  if (mix.empty()) return kNone;
  double total = 0;
  for (auto& w : mix) total += w.weight;
  double acc = 0;
  for (auto& w : mix) {
    acc += w.weight / total;
    if (u < acc) return w.tier;
  }
  return mix.back().tier;
}

std::string make_prompt(int n_words, Rng& rng) {
  constexpr size_t kN = sizeof(kWords) / sizeof(kWords[0]);
  std::string out;
  for (int i = 0; i < n_words; ++i) {
    if (i) out += ' ';
    out += kWords[rng.next_u64() % kN];
  }
  return out;
}

Result<Workload> Workload::from_jsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open workload file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return from_jsonl_text(ss.str(), path);
}

Result<Workload> Workload::from_jsonl_text(const std::string& text, const std::string& name) {
  Workload w;
  w.name_ = name;
  std::istringstream lines(text);
  std::string line;
  size_t lineno = 0;
  while (std::getline(lines, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = name + ":" + std::to_string(lineno) + ": ";
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return invalid_argument(where + "not a JSON object");
    RequestSpec r;
    try {
      if (j.contains("messages")) {
        if (!j["messages"].is_array() || j["messages"].empty()) return invalid_argument(where + "messages must be a non-empty array");
        r.messages_json = j["messages"].dump();
        r.endpoint = "chat";
      } else if (j.contains("prompt") && j["prompt"].is_string()) {
        r.prompt = j["prompt"].get<std::string>();
        r.endpoint = "completions";
      } else {
        return invalid_argument(where + "needs \"prompt\" (string) or \"messages\" (array)");
      }
      if (j.contains("endpoint")) {
        r.endpoint = j["endpoint"].get<std::string>();
        if (r.endpoint != "chat" && r.endpoint != "completions") return invalid_argument(where + "endpoint must be chat or completions");
        if (r.endpoint == "completions" && !r.messages_json.empty()) return invalid_argument(where + "messages need the chat endpoint");
      }
      if (j.contains("max_tokens")) r.max_tokens = j["max_tokens"].get<int>();
      if (r.max_tokens < 1) return invalid_argument(where + "max_tokens must be >= 1");
      if (j.contains("tier")) r.tier = j["tier"].get<std::string>();
      else if (j.contains("service_tier")) r.tier = j["service_tier"].get<std::string>();
      if (j.contains("api_key")) r.api_key = j["api_key"].get<std::string>();
      if (j.contains("temperature")) {
        r.temperature = j["temperature"].get<double>();
        if (!(*r.temperature >= 0 && *r.temperature <= 2)) return invalid_argument(where + "temperature must be in [0, 2]");
      }
      if (j.contains("offset_ms")) {
        r.offset_ms = j["offset_ms"].get<double>();
        if (!(*r.offset_ms >= 0)) return invalid_argument(where + "offset_ms must be >= 0");
      }
    } catch (const nlohmann::json::exception& e) {
      return invalid_argument(where + "wrong field type: " + e.what());
    }
    w.replay_.push_back(std::move(r));
  }
  if (w.replay_.empty()) return invalid_argument(name + ": no requests");
  return w;
}

Workload Workload::synthetic(const SyntheticSpec& spec, uint64_t seed) {
  Workload w;
  w.synth_ = spec;
  w.seed_ = seed;
  return w;
}

void Workload::set_tier_mix(std::vector<TierWeight> mix, uint64_t seed) {
  mix_override_ = std::move(mix);
  seed_ = seed;
}

bool Workload::has_offsets() const {
  if (replay_.empty()) return false;
  return std::all_of(replay_.begin(), replay_.end(), [](const RequestSpec& r) { return r.offset_ms.has_value(); });
}

RequestSpec Workload::at(size_t i) const {
  RequestSpec r;
  if (!replay_.empty()) {
    r = replay_[i % replay_.size()];
    // Later passes over the file keep their spacing: shift by the file's span.
    if (r.offset_ms && i >= replay_.size()) {
      const double span = *replay_.back().offset_ms + 1.0;
      *r.offset_ms += span * double(i / replay_.size());
    }
  } else {
    const SyntheticSpec& s = *synth_;
    Rng len_rng(stream_seed(seed_, 1, i)), out_rng(stream_seed(seed_, 2, i)), tier_rng(stream_seed(seed_, 3, i)),
        text_rng(stream_seed(seed_, 4, i));
    r.endpoint = s.endpoint;
    r.approx_prompt_tokens = s.input.sample(len_rng);
    r.prompt = make_prompt(r.approx_prompt_tokens, text_rng);
    r.max_tokens = s.output.sample(out_rng);
    r.tier = pick_tier(s.mix, tier_rng.uniform());
  }
  if (!mix_override_.empty()) {
    Rng tier_rng(stream_seed(seed_, 5, i));
    r.tier = pick_tier(mix_override_, tier_rng.uniform());
  }
  if (max_tokens_override_ > 0) r.max_tokens = max_tokens_override_;
  return r;
}

std::string Workload::describe() const {
  std::ostringstream s;
  if (!replay_.empty()) {
    s << "replay " << name_ << " (" << replay_.size() << " requests)";
  } else {
    s << "synthetic " << synth_->endpoint << " input=" << synth_->input.to_string()
      << " output=" << synth_->output.to_string();
  }
  const auto& mix = mix_override_.empty() && synth_ ? synth_->mix : mix_override_;
  if (!mix.empty() && !(mix.size() == 1 && mix[0].tier.empty())) {
    s << " mix=";
    for (size_t k = 0; k < mix.size(); ++k)
      s << (k ? "," : "") << (mix[k].tier.empty() ? "default" : mix[k].tier) << "=" << mix[k].weight;
  }
  if (max_tokens_override_ > 0) s << " max_tokens=" << max_tokens_override_;
  return s.str();
}

}  // namespace ts::bench
