// gguf_make_testdata BAD_DIR SEED_DIR: writes the crafted bad files and MANIFEST.txt to
// BAD_DIR (tests/data/gguf_bad) and the valid seeds to SEED_DIR (fuzz/seeds). Run it after
// changing bad_files.cc and commit the output; gguf_bad_files_test fails until then.
#include <cstdio>
#include <string>

#include "testing/bad_files.h"

namespace {

bool write_file(const std::string& path, const void* data, size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = (n == 0 || std::fwrite(data, 1, n, f) == n);
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: gguf_make_testdata BAD_DIR SEED_DIR\n");
    return 2;
  }
  const std::string bad_dir = argv[1], seed_dir = argv[2];
  const auto bad = ts::gguf::testing::make_bad_files();
  for (const auto& f : bad) {
    if (!write_file(bad_dir + "/" + f.name, f.bytes.data(), f.bytes.size())) {
      std::fprintf(stderr, "gguf_make_testdata: cannot write %s/%s\n", bad_dir.c_str(), f.name.c_str());
      return 1;
    }
  }
  const std::string manifest = ts::gguf::testing::manifest_text(bad);
  if (!write_file(bad_dir + "/MANIFEST.txt", manifest.data(), manifest.size())) {
    std::fprintf(stderr, "gguf_make_testdata: cannot write %s/MANIFEST.txt\n", bad_dir.c_str());
    return 1;
  }
  const auto seeds = ts::gguf::testing::make_seed_files();
  for (const auto& s : seeds) {
    if (!write_file(seed_dir + "/" + s.name, s.bytes.data(), s.bytes.size())) {
      std::fprintf(stderr, "gguf_make_testdata: cannot write %s/%s\n", seed_dir.c_str(), s.name.c_str());
      return 1;
    }
  }
  std::printf("wrote %zu bad files + MANIFEST.txt to %s, %zu seeds to %s\n", bad.size(), bad_dir.c_str(),
              seeds.size(), seed_dir.c_str());
  return 0;
}
