// `tierserve gguf-info FILE`: validate a GGUF file and print its metadata and tensors.
// The formatting lives in gguf/dump.h (tested there); this file is only the command line.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "gguf/dump.h"
#include "gguf/gguf.h"

namespace ts::tools {

int cmd_gguf_info(int argc, char** argv) {
  CLI::App app{"Validate a GGUF file and print its metadata and tensors.", "tierserve gguf-info"};
  std::string path;
  bool no_tensors = false;
  bool json = false;
  size_t items = gguf::DumpOptions{}.max_array_items;
  app.add_option("file", path, "GGUF file (v2 or v3)")->required();
  app.add_flag("--no-tensors", no_tensors, "omit the tensor table (totals are still printed)");
  app.add_flag("--json", json, "print one JSON object instead of text");
  app.add_option("--items", items, "array elements shown per key")->check(CLI::Range(0, 1 << 20));
  // CLI11 reports by exception; this is the only place we catch one. --help exits 0,
  // anything else is a usage error (2).
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  Result<std::unique_ptr<gguf::File>> file = gguf::File::open(path);
  if (!file.is_ok()) {
    std::fprintf(stderr, "tierserve: %s\n", file.status().to_string().c_str());
    return 1;
  }
  gguf::DumpOptions opt;
  opt.tensors = !no_tensors;
  opt.max_array_items = items;
  const std::string out = json ? gguf::describe_json(**file, opt) : gguf::describe_text(**file, opt);
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) {
    std::fprintf(stderr, "tierserve: IoError: cannot write to stdout\n");
    return 1;
  }
  return 0;
}

}  // namespace ts::tools
