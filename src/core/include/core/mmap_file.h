// A read-only memory mapping of a whole file. Model weights are used in place from the
// mapping, never copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"

namespace ts {

class MappedFile {
 public:
  // Maps `path` read-only. Errors: kNotFound (missing), kIo (not a regular file, mmap
  // failed). An empty file maps to an empty span.
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Ask the kernel to read the whole mapping ahead (used before warm-up).
  void advise_willneed() const;
  // Ask for 2 MiB page-table entries (MADV_HUGEPAGE; transparent huge pages in "madvise"
  // mode need it). Streaming weights through 4 KiB pages costs a TLB miss every 4 KiB and
  // stops the hardware prefetchers at every page: one thread read ~20 GB/s through 4 KiB
  // pages and ~31 GB/s through 2 MiB ones here. The kernel maps 2 MiB where the page
  // cache holds the file in 2 MiB folios, which read-ahead through such a mapping
  // allocates (`tierserve build` drops the plan it wrote from the cache for that reason).
  // Call before the pages are first touched. False when the kernel refused.
  bool advise_hugepage() const;
  // Drop the mapping's pages from this process's resident set (they stay in the page
  // cache and fault back in on the next access). Used after weights were repacked into
  // their own buffers, so the file is not resident twice.
  void advise_dontneed() const;

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace ts
