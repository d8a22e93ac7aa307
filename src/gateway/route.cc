#define PCRE2_CODE_UNIT_WIDTH 8
#include "gateway/route.h"

#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "core/rng.h"

namespace ts::gateway {
namespace {

uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

int32_t bucket(std::string_view kind, std::string_view s) {
  return int32_t(fnv1a(s, fnv1a(kind)) % uint64_t(Classifier::kDim));
}

}  // namespace

std::vector<int32_t> Classifier::features(std::string_view text) {
  std::vector<std::string> words;
  std::string cur;
  int digits = 0, ops = 0, fences = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (std::isdigit(c)) ++digits;
    if (std::strchr("+-*/^=<>", c) && c) ++ops;
    if (text.compare(i, 3, "```") == 0) ++fences;
    if (std::isalnum(c) || c >= 0x80 || c == '_') {
      cur.push_back(char(std::tolower(c)));
    } else if (!cur.empty()) {
      words.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  std::vector<int32_t> f;
  f.reserve(words.size() * 2 + 8);
  for (size_t i = 0; i < words.size(); ++i) {
    f.push_back(bucket("w", words[i]));
    if (i + 1 < words.size()) f.push_back(bucket("b", words[i] + " " + words[i + 1]));
  }
  // Shape: the length in words (log2 buckets), digits, operators, code fences.
  const int len_bucket = words.empty() ? 0 : 1 + int(std::log2(double(words.size())));
  f.push_back(bucket("len", std::to_string(std::min(len_bucket, 12))));
  f.push_back(bucket("digits", digits == 0 ? "0" : digits < 4 ? "few" : "many"));
  f.push_back(bucket("ops", ops == 0 ? "0" : ops < 3 ? "few" : "many"));
  if (fences) f.push_back(bucket("fence", "1"));
  return f;
}

bool Classifier::held_out(std::string_view text) { return fnv1a(text) % 5 == 0; }

std::vector<double> Classifier::predict(std::string_view text) const {
  const std::vector<int32_t> f = features(text);
  const double scale = 1.0 / std::sqrt(double(std::max<size_t>(1, f.size())));
  std::vector<double> z(labels_.size(), 0.0);
  for (size_t k = 0; k < labels_.size(); ++k) {
    double s = w_[k][kDim];
    for (int32_t i : f) s += double(w_[k][size_t(i)]) * scale;
    z[k] = s;
  }
  const double mx = z.empty() ? 0 : *std::max_element(z.begin(), z.end());
  double sum = 0;
  for (double& v : z) sum += (v = std::exp(v - mx));
  for (double& v : z) v /= sum;
  return z;
}

Result<Classifier> Classifier::train(const std::vector<Example>& examples, const TrainOptions& opt, TrainReport* report) {
  Classifier c;
  for (const Example& e : examples) {
    if (e.label.empty()) return invalid_argument("an example has an empty label");
    if (std::find(c.labels_.begin(), c.labels_.end(), e.label) == c.labels_.end()) c.labels_.push_back(e.label);
  }
  std::sort(c.labels_.begin(), c.labels_.end());
  if (c.labels_.size() < 2) return invalid_argument("training needs examples of at least two labels");
  auto label_of = [&](const std::string& l) { return int(std::find(c.labels_.begin(), c.labels_.end(), l) - c.labels_.begin()); };
  std::vector<size_t> train_idx, test_idx;
  for (size_t i = 0; i < examples.size(); ++i) (held_out(examples[i].text) ? test_idx : train_idx).push_back(i);
  if (train_idx.empty()) return invalid_argument("no training examples left after the held-out split");
  c.w_.assign(c.labels_.size(), std::vector<float>(kDim + 1, 0.0f));
  std::vector<std::vector<int32_t>> feats(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) feats[i] = features(examples[i].text);
  Rng rng(opt.seed);
  std::vector<double> p(c.labels_.size());
  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    // Fisher-Yates with the seeded generator: the same data gives the same model.
    for (size_t i = train_idx.size(); i > 1; --i) std::swap(train_idx[i - 1], train_idx[size_t(rng.next_u64() % i)]);
    const double lr = opt.learning_rate / (1.0 + 0.1 * epoch);
    for (size_t idx : train_idx) {
      const auto& f = feats[idx];
      const double scale = 1.0 / std::sqrt(double(std::max<size_t>(1, f.size())));
      double mx = -1e300;
      for (size_t k = 0; k < c.labels_.size(); ++k) {
        double s = c.w_[k][kDim];
        for (int32_t i : f) s += double(c.w_[k][size_t(i)]) * scale;
        p[k] = s;
        mx = std::max(mx, s);
      }
      double sum = 0;
      for (double& v : p) sum += (v = std::exp(v - mx));
      const int y = label_of(examples[idx].label);
      for (size_t k = 0; k < c.labels_.size(); ++k) {
        const double g = p[k] / sum - (int(k) == y ? 1.0 : 0.0);
        auto& wk = c.w_[k];
        for (int32_t i : f) wk[size_t(i)] -= float(lr * (g * scale + opt.l2 * wk[size_t(i)]));
        wk[kDim] -= float(lr * g);
      }
    }
  }
  if (report) {
    auto accuracy = [&](const std::vector<size_t>& idx, std::vector<std::vector<int64_t>>* confusion) {
      if (idx.empty()) return 0.0;
      size_t ok = 0;
      for (size_t i : idx) {
        const auto pr = c.predict(examples[i].text);
        const int best = int(std::max_element(pr.begin(), pr.end()) - pr.begin());
        const int y = label_of(examples[i].label);
        ok += best == y;
        if (confusion) ++(*confusion)[size_t(y)][size_t(best)];
      }
      return double(ok) / double(idx.size());
    };
    report->labels = c.labels_;
    report->n_train = train_idx.size();
    report->n_heldout = test_idx.size();
    report->confusion.assign(c.labels_.size(), std::vector<int64_t>(c.labels_.size(), 0));
    report->train_accuracy = accuracy(train_idx, nullptr);
    report->heldout_accuracy = accuracy(test_idx, &report->confusion);
  }
  return c;
}

std::string Classifier::to_json() const {
  nlohmann::json j;
  j["format"] = "tierserve-route-classifier";
  j["version"] = 1;
  j["dim"] = kDim;
  j["labels"] = labels_;
  // Sparse: only the non-zero weights, as [index, value] pairs.
  nlohmann::json w = nlohmann::json::array();
  for (const auto& row : w_) {
    nlohmann::json r = nlohmann::json::array();
    for (size_t i = 0; i < row.size(); ++i)
      if (row[i] != 0.0f) r.push_back({i, row[i]});
    w.push_back(std::move(r));
  }
  j["weights"] = std::move(w);
  return j.dump();
}

Result<Classifier> Classifier::from_json(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != "tierserve-route-classifier")
    return invalid_argument("not a tierserve route classifier (tierserve route-train writes one)");
  if (j.value("version", 0) != 1 || j.value("dim", 0) != kDim)
    return invalid_argument("route classifier: unsupported version or dimension (retrain it with this tierserve)");
  Classifier c;
  if (!j.contains("labels") || !j["labels"].is_array() || !j.contains("weights") || !j["weights"].is_array() ||
      j["labels"].size() != j["weights"].size() || j["labels"].size() < 2)
    return invalid_argument("route classifier: labels and weights do not match");
  for (const auto& l : j["labels"]) {
    if (!l.is_string()) return invalid_argument("route classifier: a label is not a string");
    c.labels_.push_back(l.get<std::string>());
  }
  for (const auto& row : j["weights"]) {
    std::vector<float> w(kDim + 1, 0.0f);
    if (!row.is_array()) return invalid_argument("route classifier: bad weights");
    for (const auto& e : row) {
      if (!e.is_array() || e.size() != 2 || !e[0].is_number_unsigned() || !e[1].is_number() || e[0].get<uint64_t>() > uint64_t(kDim))
        return invalid_argument("route classifier: bad weight entry");
      const double v = e[1].get<double>();
      if (!std::isfinite(v)) return invalid_argument("route classifier: a weight is not finite");
      w[e[0].get<size_t>()] = float(v);
    }
    c.w_.push_back(std::move(w));
  }
  return c;
}

Result<Classifier> Classifier::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read the route classifier " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = from_json(ss.str());
  if (!c.is_ok()) return invalid_argument(path + ": " + c.status().message());
  return c;
}

struct Router::Pattern {
  pcre2_code* code = nullptr;
  ~Pattern() {
    if (code) pcre2_code_free(code);
  }
  bool match(std::string_view s) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr);
    pcre2_match_data_free(md);
    return rc >= 0;
  }
};

Router::~Router() = default;

Result<std::unique_ptr<Router>> Router::create(const RouterConfig& cfg, const std::string& first_model) {
  std::unique_ptr<Router> r(new Router());
  r->cfg_ = cfg;
  r->default_target_ = cfg.default_target.empty() ? first_model : cfg.default_target;
  for (const auto& [name, pat] : cfg.tasks) {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(), PCRE2_CASELESS | PCRE2_UTF | PCRE2_MATCH_INVALID_UTF,
                                     &err, &off, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return invalid_argument("router.tasks." + name + ": " + reinterpret_cast<const char*>(msg) + " at offset " +
                              std::to_string(off));
    }
    auto p = std::make_unique<Pattern>();
    p->code = code;
    r->patterns_.emplace_back(name, std::move(p));
  }
  if (!cfg.classifier.path.empty()) {
    auto c = Classifier::load(cfg.classifier.path);
    if (!c.is_ok()) return c.status();
    for (const auto& l : c->labels())
      if (!cfg.classifier.labels.count(l))
        return invalid_argument("router.classifier.labels: the classifier's label '" + l + "' is not mapped to a model");
    r->classifier_ = std::make_unique<Classifier>(std::move(c).value());
  }
  return r;
}

bool Router::task_matches(const std::string& task, std::string_view text) const {
  for (const auto& [name, p] : patterns_)
    if (name == task) return p->match(text);
  return false;
}

RouteDecision Router::decide(const RouteInput& in) const {
  for (const RouteRule& rule : cfg_.rules) {
    if (rule.min_prompt_tokens >= 0 && in.prompt_tokens < rule.min_prompt_tokens) continue;
    if (rule.max_prompt_tokens >= 0 && in.prompt_tokens > rule.max_prompt_tokens) continue;
    if (!rule.endpoint.empty() && (rule.endpoint == "chat") != in.chat) continue;
    if (!rule.tiers.empty() && std::find(rule.tiers.begin(), rule.tiers.end(), in.tier) == rule.tiers.end()) continue;
    if (!rule.tasks.empty() &&
        std::none_of(rule.tasks.begin(), rule.tasks.end(), [&](const std::string& t) { return task_matches(t, in.text); }))
      continue;
    return {rule.target, "rule", "rule:" + rule.name};
  }
  if (classifier_) {
    const auto p = classifier_->predict(in.text);
    const size_t best = size_t(std::max_element(p.begin(), p.end()) - p.begin());
    if (p[best] >= cfg_.classifier.threshold) {
      char score[32];
      std::snprintf(score, sizeof score, "%.3f", p[best]);
      const std::string& label = classifier_->labels()[best];
      return {cfg_.classifier.labels.at(label), "classifier", "classifier:" + label + ":" + score};
    }
  }
  return {default_target_, "default", "default"};
}

}  // namespace ts::gateway
