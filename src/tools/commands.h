// Subcommands of the `tierserve` binary. Each lives in its own cmd_*.cc file and returns
// the process exit code (0 ok, 1 runtime error, 2 usage error).
#pragma once

namespace ts::tools {

// The most threads a -t option takes (0 means one per core). Thousands of spinning
// workers on a few cores would look like a hang, not an error.
inline constexpr int kMaxThreads = 1024;

int cmd_gguf_info(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_make_model(int argc, char** argv);
int cmd_batched_bench(int argc, char** argv);
int cmd_build(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_gateway(int argc, char** argv);
int cmd_route_train(int argc, char** argv);
int cmd_review(int argc, char** argv);

}  // namespace ts::tools
