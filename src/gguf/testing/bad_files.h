// The crafted GGUF corpus: malformed files, each with the exact Status the reader must
// return, and small valid files (fuzzing seeds). `gguf_make_testdata` writes them to
// tests/data/gguf_bad/ (with MANIFEST.txt) and fuzz/seeds/; gguf_bad_files_test checks
// that the committed files still match this generator and give the listed errors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ts::gguf::testing {

struct BadFile {
  std::string name;       // "truncated_kv_key.gguf"
  StatusCode code;        // the code the reader must return
  uint64_t at;            // the message must end with "at byte <at>"
  std::string substring;  // the message must contain this (it names the field)
  std::string what;       // one line for the manifest
  std::vector<uint8_t> bytes;
};
std::vector<BadFile> make_bad_files();

struct SeedFile {
  std::string name;
  std::vector<uint8_t> bytes;
};
// Small valid files covering every value type, nested arrays, several tensor types,
// both versions and a non-default alignment.
std::vector<SeedFile> make_seed_files();

// MANIFEST.txt: one line per bad file, tab-separated: name, code, byte, substring, what.
// Lines starting with '#' are comments.
struct ManifestEntry {
  std::string name;
  std::string code;  // status_code_name(), e.g. "DataLoss"
  uint64_t at = 0;
  std::string substring;
};
std::string manifest_text(const std::vector<BadFile>& files);
Result<std::vector<ManifestEntry>> parse_manifest(std::string_view text);

}  // namespace ts::gguf::testing
