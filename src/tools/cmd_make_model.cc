// `tierserve make-model`: writes a deterministic random-weight GGUF model (make_model.h).
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "models/make_model.h"

namespace ts::tools {

int cmd_make_model(int argc, char** argv) {
  using models::arch_from_name, models::shape_from_name, models::type_from_name, models::shape_names, models::type_names;
  CLI::App app{"Write a deterministic random-weight GGUF model of a real shape, with a usable vocabulary.\n"
               "Same arguments, same bytes.",
               "tierserve make-model"};
  std::string arch_s, shape_s, type_s, out;
  uint64_t seed = 1;
  int n_threads = 0;
  app.add_option("--arch", arch_s, "architecture")->required()->check(CLI::IsMember({"llama", "qwen2", "qwen3"}));
  app.add_option("--shape", shape_s,
                 "tiny (dim 256, 2 layers, vocab 1024), 15m / 110m (llama2.c stories), 0.5b (Qwen2.5-0.5B)")
      ->required()
      ->check(CLI::IsMember(shape_names()));
  app.add_option("--type", type_s, "tensor type of the 2-D weights, or a llama.cpp mix (q4_k_m, q5_k_m)")
      ->required()
      ->check(CLI::IsMember(type_names()));
  app.add_option("--seed", seed, "weight seed (the vocabulary does not depend on it)")->capture_default_str();
  app.add_option("-t,--threads", n_threads, "threads (0: one per core; the output does not depend on it)")
      ->check(CLI::Range(0, kMaxThreads));
  app.add_option("-o,--output", out, "output GGUF file")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  models::MakeModelOptions opts;
  opts.arch = *arch_from_name(arch_s);
  opts.shape = *shape_from_name(shape_s);
  opts.type = *type_from_name(type_s);
  opts.seed = seed;
  opts.n_threads = n_threads;
  const Status st = models::make_model(opts, out);
  if (!st.is_ok()) {
    std::fprintf(stderr, "tierserve make-model: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}

}  // namespace ts::tools
