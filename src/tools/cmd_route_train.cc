// tierserve route-train: trains the gateway router's classifier (gateway/route.h) from a
// labelled JSONL — one {"text": ..., "label": ...} per line — and writes the model as JSON.
// A fifth of the examples (chosen by a hash of their text, so the split is the same every
// run) is held out; the accuracy on it is printed with the confusion matrix, and written
// with --report. --eval FILE scores the trained model on a second labelled JSONL written
// apart from the training data (data/route/route_eval.jsonl: prompts written by hand, not
// from the training file's templates), the honest measure of how it generalises.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "gateway/route.h"

namespace ts::tools {

namespace {

// Reads {"text", "label"} lines; false (and a message) on the first bad one.
bool read_examples(const std::string& path, std::vector<gateway::Classifier::Example>* out) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "tierserve route-train: cannot read %s\n", path.c_str());
    return false;
  }
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string() || !j.contains("label") || !j["label"].is_string()) {
      std::fprintf(stderr, "tierserve route-train: %s:%lld: expected {\"text\": string, \"label\": string}\n", path.c_str(),
                   (long long)n);
      return false;
    }
    out->push_back({j["text"].get<std::string>(), j["label"].get<std::string>()});
  }
  return true;
}

void print_confusion(const std::vector<std::string>& labels, const std::vector<std::vector<int64_t>>& confusion) {
  std::printf("%12s", "");
  for (const auto& l : labels) std::printf(" %10s", l.c_str());
  std::printf("\n");
  for (size_t i = 0; i < labels.size(); ++i) {
    std::printf("%12s", labels[i].c_str());
    for (int64_t v : confusion[i]) std::printf(" %10lld", (long long)v);
    std::printf("\n");
  }
}

}  // namespace

int cmd_route_train(int argc, char** argv) {
  std::string data, out, report_path, eval_path;
  gateway::Classifier::TrainOptions opt;
  double min_accuracy = 0;
  CLI::App app{"Train the gateway router's classifier from a labelled JSONL (docs/gateway.md).", "tierserve route-train"};
  app.add_option("--data", data, "JSONL, one {\"text\": ..., \"label\": ...} per line")->required();
  app.add_option("-o,--output", out, "where to write the model (JSON)")->required();
  app.add_option("--epochs", opt.epochs, "passes over the training examples")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--seed", opt.seed, "shuffling seed")->capture_default_str();
  app.add_option("--eval", eval_path, "a second labelled JSONL to score the trained model on (not trained on)");
  app.add_option("--report", report_path, "also write the accuracies and the confusion matrix as JSON");
  app.add_option("--min-accuracy", min_accuracy, "exit 1 when the held-out accuracy is below this")->check(CLI::Range(0.0, 1.0));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  std::vector<gateway::Classifier::Example> examples, eval;
  if (!read_examples(data, &examples)) return 2;
  if (!eval_path.empty() && !read_examples(eval_path, &eval)) return 2;
  gateway::Classifier::TrainReport rep;
  auto c = gateway::Classifier::train(examples, opt, &rep);
  if (!c.is_ok()) {
    std::fprintf(stderr, "tierserve route-train: %s\n", c.status().message().c_str());
    return 2;
  }
  {
    std::ofstream o(out);
    o << c->to_json() << "\n";
    if (!o) {
      std::fprintf(stderr, "tierserve route-train: cannot write %s\n", out.c_str());
      return 1;
    }
  }
  std::printf("trained on %zu examples, held out %zu: accuracy %.3f on the training set, %.3f held out\n", rep.n_train,
              rep.n_heldout, rep.train_accuracy, rep.heldout_accuracy);
  std::printf("held-out confusion (rows: true label, columns: predicted):\n");
  print_confusion(rep.labels, rep.confusion);
  // The second file: every example scored, its labels those the model knows.
  double eval_accuracy = -1;
  std::vector<std::vector<int64_t>> eval_confusion(rep.labels.size(), std::vector<int64_t>(rep.labels.size(), 0));
  if (!eval.empty()) {
    int64_t right = 0;
    for (const auto& e : eval) {
      const auto t = std::find(rep.labels.begin(), rep.labels.end(), e.label);
      if (t == rep.labels.end()) {
        std::fprintf(stderr, "tierserve route-train: %s: label '%s' is not in the training data\n", eval_path.c_str(),
                     e.label.c_str());
        return 2;
      }
      const std::vector<double> p = c->predict(e.text);
      const size_t best = size_t(std::max_element(p.begin(), p.end()) - p.begin());
      const size_t truth = size_t(t - rep.labels.begin());
      ++eval_confusion[truth][best];
      right += best == truth;
    }
    eval_accuracy = double(right) / double(eval.size());
    std::printf("%s: %zu examples, accuracy %.3f\n", eval_path.c_str(), eval.size(), eval_accuracy);
    print_confusion(rep.labels, eval_confusion);
  }
  if (!report_path.empty()) {
    nlohmann::json r = {{"data", data}, {"n_train", rep.n_train}, {"n_heldout", rep.n_heldout},
                        {"train_accuracy", rep.train_accuracy}, {"heldout_accuracy", rep.heldout_accuracy},
                        {"labels", rep.labels}, {"confusion", rep.confusion}};
    if (eval_accuracy >= 0) r["eval"] = {{"data", eval_path}, {"n", eval.size()}, {"accuracy", eval_accuracy}, {"confusion", eval_confusion}};
    std::ofstream(report_path) << r.dump(2) << "\n";
  }
  std::printf("wrote %s\n", out.c_str());
  return rep.heldout_accuracy + 1e-12 < min_accuracy ? 1 : 0;
}

}  // namespace ts::tools
