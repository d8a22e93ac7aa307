// Pack files: the writer and the build step (`tierserve build`). The reader is
// pack_file.cc; the format is docs/pack_format.md.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/clock.h"
#include "engine/pack_file.h"
#include "model_impl.h"

namespace ts::engine {
namespace {

void put32(std::vector<uint8_t>& b, uint64_t off, uint32_t v) { std::memcpy(b.data() + off, &v, 4); }
void put64(std::vector<uint8_t>& b, uint64_t off, uint64_t v) { std::memcpy(b.data() + off, &v, 8); }

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Streams bytes to a FILE, remembering the first error.
class Out {
 public:
  explicit Out(std::FILE* f) : f_(f) {}
  void write(const void* p, size_t n) {
    if (ok_ && n > 0 && std::fwrite(p, 1, n, f_) != n) ok_ = false;
    pos_ += n;
  }
  void pad_to(uint64_t off) {
    static const uint8_t zeros[4096] = {};
    while (pos_ < off) write(zeros, size_t(std::min<uint64_t>(sizeof zeros, off - pos_)));
  }
  bool ok() const { return ok_; }

 private:
  std::FILE* f_;
  bool ok_ = true;
  uint64_t pos_ = 0;
};

// Records the panels of every matrix the architecture packs (deduplicated by source).
class Recorder : public PackHook {
 public:
  const uint8_t* find(const kernels::WeightView&) override { return nullptr; }
  void packed(const kernels::WeightView& w, const kernels::PackedWeight& p) override {
    if (p.panels()) by_source_[w.data] = {w, p.panels()};
  }
  std::map<const void*, std::pair<kernels::WeightView, const uint8_t*>> by_source_;
};

}  // namespace

Status write_pack_file(const std::string& path, const gguf::File& src, std::span<const PackTensor> tensors) {
  using namespace pack_format;
  const uint8_t* base = src.bytes().data();
  struct Item {
    const PackTensor* t;
    uint64_t source_offset, offset, n_bytes;
    uint32_t name_off;
  };
  std::vector<Item> items;
  std::string names;
  for (const PackTensor& t : tensors) {
    const gguf::TensorInfo* info = src.find_tensor(t.name);
    if (!info || info->data != t.view.data || info->type != t.view.type || info->ne[0] != t.view.n_cols ||
        info->n_rows() != t.view.n_rows)
      return invalid_argument("pack tensor '" + t.name + "' is not a whole tensor of the source GGUF");
    const int64_t nb = kernels::packed_bytes(t.view);
    if (nb <= 0 || !t.panels)
      return invalid_argument("pack tensor '" + t.name + "' has no packed panels (type " + dtype_name(t.view.type) + ")");
    if (t.name.empty() || t.name.size() > kMaxNameBytes) return invalid_argument("pack tensor name length");
    items.push_back({&t, uint64_t(info->data - base), 0, uint64_t(nb), uint32_t(names.size())});
    names += t.name;
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.source_offset < b.source_offset; });
  for (size_t i = 1; i < items.size(); ++i)
    if (items[i].source_offset == items[i - 1].source_offset)
      return invalid_argument("pack tensor '" + items[i].t->name + "' given twice");

  const uint64_t n = items.size();
  const uint64_t table = kHeaderBytes;
  const uint64_t names_off = table + n * kEntryBytes;
  const uint64_t data = align_up(names_off + names.size(), kAlignment);
  uint64_t end = data;
  for (Item& it : items) {
    it.offset = align_up(end, kAlignment);
    end = it.offset + it.n_bytes;
  }
  const uint64_t total = end;

  std::vector<uint8_t> head(names_off + names.size(), 0);
  std::memcpy(head.data(), kMagic, 8);
  put32(head, kOffVersion, kVersion);
  put32(head, kOffLayoutVersion, kernels::kPanelLayoutVersion);
  put64(head, kOffLayoutFingerprint, kernels::panel_layout_fingerprint());
  put64(head, kOffPlanBytes, total);
  const SourceIdentity id = source_identity(src);
  put64(head, kOffSourceBytes, id.file_bytes);
  put64(head, kOffSourceDataOffset, id.data_offset);
  put64(head, kOffSourceHeaderHash, id.header_hash);
  put64(head, kOffSourceSampleHash, id.sample_hash);
  put64(head, kOffNTensors, n);
  put64(head, kOffTableOffset, table);
  put64(head, kOffNamesOffset, names_off);
  put64(head, kOffNamesBytes, names.size());
  put64(head, kOffDataOffset, data);
  put32(head, kOffAlignment, uint32_t(kAlignment));
  put32(head, kOffFlags, 0);
  put64(head, kOffBuildTime, uint64_t(std::time(nullptr)));
  for (uint64_t i = 0; i < n; ++i) {
    const Item& it = items[i];
    const uint64_t e = table + i * kEntryBytes;
    put32(head, e + kEntName, it.name_off);
    put32(head, e + kEntNameBytes, uint32_t(it.t->name.size()));
    put32(head, e + kEntType, uint32_t(it.t->view.type));
    put64(head, e + kEntRows, uint64_t(it.t->view.n_rows));
    put64(head, e + kEntCols, uint64_t(it.t->view.n_cols));
    put64(head, e + kEntSourceOffset, it.source_offset);
    put64(head, e + kEntOffset, it.offset);
    put64(head, e + kEntBytes, it.n_bytes);
  }
  if (!names.empty()) std::memcpy(head.data() + names_off, names.data(), names.size());
  TS_CHECK(reseal(std::span<uint8_t>(head)));  // the checksum covers header, table and names

  // Per-process temporary name: two builds of one pack at once must not interleave.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return io_error("cannot create " + tmp + ": " + std::strerror(errno));
  Out out(f);
  out.write(head.data(), head.size());
  for (const Item& it : items) {
    out.pad_to(it.offset);
    out.write(it.t->panels, size_t(it.n_bytes));
  }
  out.pad_to(total);
  const bool ok = out.ok() && std::fflush(f) == 0;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) {
    std::remove(tmp.c_str());
    return io_error("cannot write " + tmp + ": " + std::strerror(errno));
  }
  // Written in small pieces, the file sits in the page cache in 4 KiB pages, which a
  // mapping cannot map with 2 MiB entries (MappedFile::advise_hugepage). Flush it and drop
  // it from the cache: the first load reads it back through a huge-page mapping.
  if (const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    (void)::fdatasync(fd);
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    return io_error("cannot rename " + tmp + " to " + path + ": " + std::strerror(e));
  }
  return Status::ok();
}

Status verify_pack_panels(const PackFile& pack, const gguf::File& src, ThreadPool* pool) {
  for (size_t i = 0; i < pack.entries().size(); ++i) {
    const PackFile::Entry& e = pack.entries()[i];
    const gguf::TensorInfo* t = src.find_tensor(e.name);
    if (!t) return failed_precondition("pack tensor '" + e.name + "' is not in the model");
    const kernels::WeightView w{t->data, e.type, e.n_cols, e.n_rows};
    const kernels::PackedWeight mem = kernels::PackedWeight::pack(w, pool);
    const uint8_t* a = mem.panels();
    const uint8_t* b = pack.panels(i);
    for (uint64_t k = 0; k < e.n_bytes; ++k)
      if (a[k] != b[k])
        return data_loss("pack tensor '" + e.name + "': panel byte " + std::to_string(k) + " (file byte " +
                         std::to_string(e.offset + k) + ") differs from packing the model's weights");
  }
  return Status::ok();
}

Result<BuildReport> build_pack_file(const std::string& model_path, const std::string& pack_path, int n_threads) {
  BuildReport r;
  r.pack_path = pack_path.empty() ? default_pack_path(model_path) : pack_path;
  ModelOptions opts;
  opts.n_threads = n_threads;
  opts.use_pack = false;
  opts.pack_weights = true;
  Recorder rec;
  const int64_t t0 = now_ns();
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, load_model(model_path, opts, &rec));
  const int64_t t1 = now_ns();
  const gguf::File& src = model->gguf();
  std::map<const void*, const gguf::TensorInfo*> by_data;
  for (const gguf::TensorInfo& t : src.tensors()) by_data[t.data] = &t;
  std::vector<PackTensor> tensors;
  for (const auto& [data, vp] : rec.by_source_) {
    auto it = by_data.find(data);
    // A matrix that is not a whole GGUF tensor (a slice) stays packed in memory at load.
    if (it == by_data.end() || it->second->type != vp.first.type || it->second->ne[0] != vp.first.n_cols ||
        it->second->n_rows() != vp.first.n_rows)
      continue;
    tensors.push_back({it->second->name, vp.first, vp.second});
  }
  TS_RETURN_IF_ERROR(write_pack_file(r.pack_path, src, tensors));
  r.write_ms = double(now_ns() - t1) * 1e-6;
  r.load_ms = double(t1 - t0) * 1e-6;
  // Read back through the validating reader: what we report is what the engine will see.
  TS_ASSIGN_OR_RETURN(std::unique_ptr<PackFile> pack, PackFile::open(r.pack_path, src));
  r.pack_bytes = pack->file_bytes();
  r.source_bytes = src.bytes().size();
  r.n_tensors = int64_t(pack->entries().size());
  r.tensors = pack->entries();
  for (const auto& e : r.tensors) r.panel_bytes += e.n_bytes;
  return r;
}

}  // namespace ts::engine
