// `tierserve build`: the build step. Loads a GGUF model through the engine, packs every
// matrix into the kernels' interleaved panels once, and writes them to a pack file
// (default MODEL.gguf.tspack, format in docs/pack_format.md) that later loads map and use
// in place. Re-running is cheap: a pack that validates against the model is kept unless
// --force.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <string>
#include <sys/stat.h>
#include <thread>

#include "commands.h"
#include "core/clock.h"
#include "engine/pack_file.h"
#include "model_path.h"
#include "models/register.h"

namespace ts::tools {
namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "tierserve build: error: %s\n", msg.c_str());
  return 1;
}

double mib(uint64_t b) { return double(b) / (1024.0 * 1024.0); }

}  // namespace

int cmd_build(int argc, char** argv) {
  std::string model, out;
  int n_threads = 0;
  bool force = false, verbose = false, verify = false;
  CLI::App app{"Pack a model's weight matrices once into a pack file that loads map and use in place.",
               "tierserve build"};
  app.add_option("-m,--model", model, "GGUF model file (default: $TIERSERVE_MODEL, else the installed default model)");
  app.add_option("-o,--output", out, "pack file (default: MODEL.gguf.tspack beside the model)");
  app.add_option("-t,--threads", n_threads, "packing threads (0: one per core)")
      ->check(CLI::Range(0, kMaxThreads))
      ->capture_default_str();
  app.add_flag("-f,--force", force, "rebuild even when the existing pack is valid for the model");
  app.add_flag("-v,--verbose", verbose, "list every packed tensor");
  app.add_flag("--verify", verify,
               "also compare every panel of the pack with packing the model again (reads the whole pack)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (n_threads < 0) {
    std::fprintf(stderr, "tierserve build: -t must be >= 0, got %d\n", n_threads);
    return 2;
  }
  if (model.empty()) model = default_model_path();
  if (out.empty()) out = engine::default_pack_path(model);

  struct stat st {};
  if (!force && ::stat(out.c_str(), &st) == 0) {
    Result<std::unique_ptr<gguf::File>> src = gguf::File::open(model);
    if (!src.is_ok()) return fail(src.status().to_string());
    Result<std::unique_ptr<engine::PackFile>> pack = engine::PackFile::open(out, **src);
    Status why = pack.status();
    if (pack.is_ok() && verify) {
      const int64_t t0 = now_ns();
      ThreadPool pool(n_threads > 0 ? n_threads : int(std::max(1u, std::thread::hardware_concurrency())));
      why = engine::verify_pack_panels(**pack, **src, &pool);
      if (why.is_ok())
        std::printf("verified every panel of %s in %.0f ms\n", out.c_str(), double(now_ns() - t0) * 1e-6);
    }
    if (why.is_ok()) {
      std::printf("pack %s is up to date for %s (%zu tensors, %.1f MiB); use --force to rebuild\n", out.c_str(),
                  model.c_str(), (*pack)->entries().size(), mib((*pack)->file_bytes()));
      return 0;
    }
    std::printf("rebuilding %s: %s\n", out.c_str(), why.to_string().c_str());
  }

  models::register_all();
  const int64_t t0 = now_ns();
  Result<engine::BuildReport> r = engine::build_pack_file(model, out, n_threads);
  if (!r.is_ok()) return fail(r.status().to_string());
  const double total_ms = double(now_ns() - t0) * 1e-6;

  std::map<std::string, std::pair<int, uint64_t>> by_type;
  for (const auto& e : r->tensors) {
    auto& [n, bytes] = by_type[dtype_name(e.type)];
    ++n;
    bytes += e.n_bytes;
    if (verbose)
      std::printf("  %-40s %-5s %7lld x %-6lld %10.2f MiB at %llu\n", e.name.c_str(), dtype_name(e.type),
                  static_cast<long long>(e.n_rows), static_cast<long long>(e.n_cols), mib(e.n_bytes),
                  static_cast<unsigned long long>(e.offset));
  }
  std::printf("built %s from %s\n", r->pack_path.c_str(), model.c_str());
  for (const auto& [type, nb] : by_type)
    std::printf("  %-5s %4d matrices %10.2f MiB of panels\n", type.c_str(), nb.first, mib(nb.second));
  std::printf("  %lld matrices, %.2f MiB of panels, pack %.2f MiB (model %.2f MiB); "
              "load+pack %.0f ms, write %.0f ms, total %.0f ms\n",
              static_cast<long long>(r->n_tensors), mib(r->panel_bytes), mib(r->pack_bytes), mib(r->source_bytes),
              r->load_ms, r->write_ms, total_ms);
  return 0;
}

}  // namespace ts::tools
