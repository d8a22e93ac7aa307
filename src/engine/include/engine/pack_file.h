// Packed-weights files (`.tspack`, `--pack` on the command line: their historic name, kept
// for compatibility; in the code "pack" means only the scheduler's step pack): the
// kernels' packed weight panels of one GGUF model, written once by
// `tierserve build` and mapped by the engine, which uses the panels in place (no copy; the
// pages are shared by every process mapping the pack and only the pages touched become
// resident). The format is specified in docs/pack_format.md.
//
// A pack is trusted only after validation: every field is range-checked with overflow-safe
// arithmetic against the file size (kDataLoss naming the field and its byte offset, e.g.
// "pack tensor #3 'blk.0.ffn_up.weight': data [8192, +1048576) is unaligned or runs past
// end of file (size 40960) at byte 360"), and it must have been built from this very GGUF
// by kernels with this panel layout (kFailedPrecondition: a stale pack). Model::load then
// warns and packs in memory instead, so a bad pack costs start-up time, never correctness.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/mmap_file.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/linear.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"

namespace ts::engine {

namespace pack_format {
inline constexpr char kMagic[8] = {'T', 'S', 'P', 'L', 'A', 'N', '\x1a', '\n'};
inline constexpr uint32_t kVersion = 1;
inline constexpr uint64_t kHeaderBytes = 128;
inline constexpr uint64_t kEntryBytes = 64;
inline constexpr uint64_t kAlignment = 4096;  // of every tensor's panels: page-aligned
inline constexpr uint64_t kMaxTensors = 1u << 20;
inline constexpr uint64_t kMaxNameBytes = 65535;
inline constexpr int64_t kMaxDim = int64_t(1) << 32;
// Byte offsets of the header fields used in error messages and tests.
inline constexpr uint64_t kOffVersion = 8, kOffLayoutVersion = 12, kOffLayoutFingerprint = 16,
                          kOffPlanBytes = 24, kOffSourceBytes = 32, kOffSourceDataOffset = 40,
                          kOffSourceHeaderHash = 48, kOffSourceSampleHash = 56, kOffNTensors = 64,
                          kOffTableOffset = 72, kOffNamesOffset = 80, kOffNamesBytes = 88,
                          kOffDataOffset = 96, kOffAlignment = 104, kOffFlags = 108, kOffBuildTime = 112,
                          kOffChecksum = 120;
// Fields of a table entry (relative to the entry).
inline constexpr uint64_t kEntName = 0, kEntNameBytes = 4, kEntType = 8, kEntReserved = 12, kEntRows = 16,
                          kEntCols = 24, kEntSourceOffset = 32, kEntOffset = 40, kEntBytes = 48,
                          kEntReserved2 = 56;

// The 64-bit hash the format uses (header checksum, source identity).
uint64_t hash_bytes(std::span<const uint8_t> bytes, uint64_t seed = 0);
// Recomputes the checksum of a pack image in memory (tests that edit a field, tools).
// False, changing nothing, when the image is shorter than the header or its table or
// names are out of range.
bool reseal(std::span<uint8_t> pack);
}  // namespace pack_format

// MODEL.gguf -> MODEL.gguf.tspack, where `tierserve build` writes and the engine looks.
std::string default_pack_path(const std::string& model_path);

// The cheap identity of a source GGUF the pack records: its size, the start of its data
// section, a hash of every byte before it (header, metadata, tensor table with names,
// shapes, types and data offsets) and a hash of the first and last 32 bytes of each
// tensor's data. Not a full-file hash (that would read the whole model at every start).
struct SourceIdentity {
  uint64_t file_bytes = 0;
  uint64_t data_offset = 0;
  uint64_t header_hash = 0;
  uint64_t sample_hash = 0;
};
SourceIdentity source_identity(const gguf::File& src);

// One matrix's packed panels to write.
struct PackTensor {
  std::string name;            // the GGUF tensor
  kernels::WeightView view;    // into the source GGUF's mapping
  const uint8_t* panels = nullptr;  // kernels::packed_bytes(view) bytes
};

// Writes a pack for `src` through `path`.tmp.PID, renamed at the end (a reader never sees
// half a pack). Tensors are stored in the order of their source offsets.
// kInvalidArgument for a view that is not a whole GGUF tensor of `src`, kIo on write errors.
Status write_pack_file(const std::string& path, const gguf::File& src, std::span<const PackTensor> tensors);

// A validated pack, mapped (open) or over caller-owned bytes (parse), bound to the GGUF
// it was checked against; both must outlive it.
class PackFile : public PackHook {
 public:
  struct Entry {
    std::string name;
    DType type = DType::F32;
    int64_t n_rows = 0, n_cols = 0;
    uint64_t source_offset = 0;  // of the tensor's data in the GGUF file
    uint64_t offset = 0, n_bytes = 0;
  };

  // Errors: those of MappedFile::open (kNotFound when missing), kDataLoss (malformed),
  // kFailedPrecondition (stale: other format or layout version, other source GGUF).
  static Result<std::unique_ptr<PackFile>> open(const std::string& path, const gguf::File& src);
  static Result<std::unique_ptr<PackFile>> parse(std::span<const uint8_t> bytes, const gguf::File& src);

  const std::vector<Entry>& entries() const { return entries_; }  // by source offset
  uint64_t file_bytes() const { return bytes_.size(); }
  uint64_t build_unix_s() const { return build_unix_s_; }
  const std::string& path() const { return path_; }
  // Panels of the entry that is exactly w (same start in the GGUF, type and shape).
  const uint8_t* find(const kernels::WeightView& w) override;
  // The panels of entries()[i].
  const uint8_t* panels(size_t i) const { return bytes_.data() + entries_[i].offset; }
  // Starts reading the whole mapping ahead (cold start from disk).
  void advise_hugepage() const {
    if (mapping_) (void)mapping_->advise_hugepage();
  }
  void advise_willneed() const {
    if (mapping_) mapping_->advise_willneed();
  }

 private:
  PackFile() = default;
  Status validate(const gguf::File& src);

  std::unique_ptr<MappedFile> mapping_;
  std::span<const uint8_t> bytes_;
  const uint8_t* src_base_ = nullptr;
  uint64_t src_bytes_ = 0;
  uint64_t build_unix_s_ = 0;
  std::string path_;
  std::vector<Entry> entries_;
};

// Repacks every planned tensor of `src` in memory and compares the panels with the pack's,
// byte for byte (reads the whole pack; load-time validation does not look at the panels).
// kDataLoss naming the first tensor that differs and the byte.
Status verify_pack_panels(const PackFile& pack, const gguf::File& src, ThreadPool* pool);

// What `tierserve build` did.
struct BuildReport {
  std::string pack_path;
  uint64_t pack_bytes = 0;
  uint64_t source_bytes = 0;
  uint64_t panel_bytes = 0;   // sum over tensors
  int64_t n_tensors = 0;
  std::vector<PackFile::Entry> tensors;
  double load_ms = 0;  // model load + packing
  double write_ms = 0;
};

// Loads `model_path` with the registered architectures (packing in memory, no pack),
// records every matrix the architecture packs, and writes them as a pack to `pack_path`
// (empty: default_pack_path). n_threads as ModelOptions.
Result<BuildReport> build_pack_file(const std::string& model_path, const std::string& pack_path, int n_threads);

}  // namespace ts::engine
