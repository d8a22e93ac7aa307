// tierserve: one binary, many subcommands.
#include <cstdio>
#include <cstring>

#include "commands.h"
#include "core/build_info.h"
#include "core/cpu_features.h"
#include "kernels/traits.h"

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**);
  const char* help;
};

constexpr Command kCommands[] = {
    {"run", ts::tools::cmd_run, "generate text from a prompt"},
    {"gguf-info", ts::tools::cmd_gguf_info, "print a GGUF file's metadata and tensors"},
    {"make-model", ts::tools::cmd_make_model, "write a deterministic random-weight GGUF model"},
    {"batched-bench", ts::tools::cmd_batched_bench, "prompt and decode speed of parallel sequences"},
    {"build", ts::tools::cmd_build, "pack a model's weights for this machine's kernels into a pack file"},
    {"serve", ts::tools::cmd_serve, "OpenAI-compatible HTTP server with service tiers"},
    {"bench", ts::tools::cmd_bench, "load-test an OpenAI-compatible server: percentiles, SLOs, knee, cost"},
    {"gateway", ts::tools::cmd_gateway, "one tier-aware OpenAI endpoint in front of many workers and models"},
    {"route-train", ts::tools::cmd_route_train, "train the gateway router's classifier from a labelled JSONL"},
    {"review", ts::tools::cmd_review, "the blind A/B review of the gateway's shadow pairs, in a browser"},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: tierserve <command> [options]\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.help);
  std::fprintf(out, "\n`tierserve <command> --help` describes a command's options; `tierserve --version`.\n");
}

int version() {
  std::printf("tierserve %s (git %s)\ncompiler: %s\nkernels: %s (%s)\n", ts::build_version(), ts::build_git_revision(),
              ts::build_compiler(), ts::kernels::isa_name(ts::kernels::best_isa()), ts::cpu_features().to_string().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "version")) return version();
  for (const auto& c : kCommands)
    if (!std::strcmp(argv[1], c.name)) return c.fn(argc - 1, argv + 1);
  std::fprintf(stderr, "tierserve: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
