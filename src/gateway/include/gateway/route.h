// Which model serves a request to the router's virtual model ("auto"): the ordered rules
// first (prompt tokens, chat or completion, task patterns, the tier), then the classifier for
// what no rule decides (when it is sure enough), then the default. Every decision says who
// made it: x-tierserve-route is "rule:NAME", "classifier:LABEL:P" or "default".
//
// The classifier is a multinomial logistic regression over hashed features of the prompt
// text (lowercased word unigrams and bigrams, and a few shape features: length, digits,
// operators, code fences), trained by `tierserve route-train` from a labelled JSONL
// ({"text": ..., "label": ...} per line) with a deterministic split: a fifth of the examples
// (by a hash of their text) is held out and its accuracy reported. The model is a JSON file.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gateway/config.h"

namespace ts::gateway {

class Classifier {
 public:
  static constexpr int kDim = 1 << 13;  // hashed feature buckets

  struct Example {
    std::string text, label;
  };
  struct TrainOptions {
    int epochs = 40;
    double learning_rate = 0.5;
    double l2 = 1e-5;
    uint64_t seed = 7;
  };
  struct TrainReport {
    size_t n_train = 0, n_heldout = 0;
    double train_accuracy = 0, heldout_accuracy = 0;
    std::vector<std::string> labels;
    std::vector<std::vector<int64_t>> confusion;  // heldout: [true][predicted]
  };
  // Trains on the examples not held out (held out: hash(text) % 5 == 0).
  static Result<Classifier> train(const std::vector<Example>& examples, const TrainOptions& opt, TrainReport* report);
  static bool held_out(std::string_view text);
  // Reads the JSON written by to_json(); kInvalidArgument for anything else.
  static Result<Classifier> from_json(std::string_view text);
  static Result<Classifier> load(const std::string& path);
  std::string to_json() const;

  const std::vector<std::string>& labels() const { return labels_; }
  // Probabilities per label (sums to 1).
  std::vector<double> predict(std::string_view text) const;

  // The sparse features of a text (bucket indices, repeated for counts), for tests.
  static std::vector<int32_t> features(std::string_view text);

 private:
  std::vector<std::string> labels_;
  std::vector<std::vector<float>> w_;  // [label][kDim + 1]: the last is the bias
};

struct RouteInput {
  std::string_view text;      // the prompt's text (chat: the messages' contents)
  int64_t prompt_tokens = 0;  // counted or estimated (RouteDecision says which)
  bool chat = true;
  std::string tier;           // the tier it is served on
};

struct RouteDecision {
  std::string target;  // a model name
  std::string by;      // "rule", "classifier" or "default" (the metric's reason label)
  std::string route;   // x-tierserve-route: "rule:NAME", "classifier:LABEL:0.93", "default"
};

class Router {
 public:
  // Compiles the task patterns and loads the classifier; kInvalidArgument naming the
  // pattern or the file. `first_model`: the default when the config names none.
  static Result<std::unique_ptr<Router>> create(const RouterConfig& cfg, const std::string& first_model);
  ~Router();

  RouteDecision decide(const RouteInput& in) const;
  bool task_matches(const std::string& task, std::string_view text) const;
  const RouterConfig& config() const { return cfg_; }

 private:
  struct Pattern;
  Router() = default;
  RouterConfig cfg_;
  std::string default_target_;
  std::vector<std::pair<std::string, std::unique_ptr<Pattern>>> patterns_;
  std::unique_ptr<Classifier> classifier_;
};

}  // namespace ts::gateway
