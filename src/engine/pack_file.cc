// Pack files: validation and look-up (reader side). The writer and the build step live in
// pack_build.cc; the format is specified in docs/pack_format.md.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_set>

#include "core/check.h"
#include "core/safe_math.h"
#include "engine/pack_file.h"
#include "kernels/traits.h"

namespace ts::engine {
namespace {

uint32_t rd32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t rd64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

std::string at(uint64_t off) { return " at byte " + std::to_string(off); }

Status bad(const std::string& what, uint64_t off) { return data_loss("pack " + what + at(off)); }

}  // namespace

namespace pack_format {

uint64_t hash_bytes(std::span<const uint8_t> bytes, uint64_t seed) {
  // Word-at-a-time multiply/rotate mixing with a final avalanche: ~1 GB/s+ on one core,
  // enough to hash a GGUF header (metadata with a 262k-entry vocabulary) in milliseconds.
  constexpr uint64_t kP1 = 0x9e3779b185ebca87ull, kP2 = 0xc2b2ae3d27d4eb4full, kP3 = 0x165667b19e3779f9ull;
  uint64_t h = seed ^ (uint64_t(bytes.size()) * kP3);
  const uint8_t* p = bytes.data();
  size_t n = bytes.size();
  for (; n >= 8; n -= 8, p += 8) h = rotl(h ^ (rd64(p) * kP2), 31) * kP1;
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = rotl(h ^ (w * kP2), 31) * kP1;
  }
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

namespace {
// Checksum over the header (less its checksum field), the table and the names.
uint64_t checksum(std::span<const uint8_t> pack, uint64_t table_off, uint64_t table_bytes, uint64_t names_off,
                  uint64_t names_bytes) {
  uint64_t h = hash_bytes(pack.subspan(0, kOffChecksum), 1);
  h = hash_bytes(pack.subspan(table_off, table_bytes), h);
  return hash_bytes(pack.subspan(names_off, names_bytes), h);
}
}  // namespace

bool reseal(std::span<uint8_t> pack) {
  if (pack.size() < kHeaderBytes) return false;
  const uint64_t n = rd64(pack.data() + kOffNTensors);
  const uint64_t table = rd64(pack.data() + kOffTableOffset);
  const uint64_t names = rd64(pack.data() + kOffNamesOffset);
  const uint64_t names_bytes = rd64(pack.data() + kOffNamesBytes);
  if (n > kMaxTensors || table > pack.size() || n * kEntryBytes > pack.size() - table) return false;
  if (names > pack.size() || names_bytes > pack.size() - names) return false;
  const uint64_t c = checksum(pack, table, n * kEntryBytes, names, names_bytes);
  std::memcpy(pack.data() + kOffChecksum, &c, 8);
  return true;
}

}  // namespace pack_format

std::string default_pack_path(const std::string& model_path) { return model_path + ".tspack"; }

SourceIdentity source_identity(const gguf::File& src) {
  SourceIdentity id;
  const std::span<const uint8_t> b = src.bytes();
  id.file_bytes = b.size();
  id.data_offset = src.data_offset();
  id.header_hash = pack_format::hash_bytes(b.subspan(0, std::min<uint64_t>(src.data_offset(), b.size())), 2);
  uint64_t h = 3;
  for (const gguf::TensorInfo& t : src.tensors()) {
    if (!t.data || t.n_bytes == 0) continue;
    const size_t off = size_t(t.data - b.data());
    const size_t n = size_t(std::min<uint64_t>(32, t.n_bytes));
    h = pack_format::hash_bytes(b.subspan(off, n), h);
    h = pack_format::hash_bytes(b.subspan(off + size_t(t.n_bytes) - n, n), h);
  }
  id.sample_hash = h;
  return id;
}

Result<std::unique_ptr<PackFile>> PackFile::open(const std::string& path, const gguf::File& src) {
  TS_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> m, MappedFile::open(path));
  std::unique_ptr<PackFile> p(new PackFile());
  p->bytes_ = m->bytes();
  p->mapping_ = std::move(m);
  p->path_ = path;
  if (Status st = p->validate(src); !st.is_ok()) return Status(st.code(), path + ": " + st.message());
  return p;
}

Result<std::unique_ptr<PackFile>> PackFile::parse(std::span<const uint8_t> bytes, const gguf::File& src) {
  std::unique_ptr<PackFile> p(new PackFile());
  p->bytes_ = bytes;
  TS_RETURN_IF_ERROR(p->validate(src));
  return p;
}

Status PackFile::validate(const gguf::File& src) {
  using namespace pack_format;
  const uint8_t* b = bytes_.data();
  const uint64_t size = bytes_.size();
  if (size < kHeaderBytes)
    return bad("header: file of " + std::to_string(size) + " bytes is shorter than the " +
                   std::to_string(kHeaderBytes) + "-byte header",
               0);
  if (std::memcmp(b, kMagic, 8) != 0) return bad("magic: not a tierserve pack file", 0);
  // Stale before malformed: another version may lay out everything else differently.
  if (const uint32_t v = rd32(b + kOffVersion); v != kVersion)
    return failed_precondition("pack format version " + std::to_string(v) + " (this build reads version " +
                               std::to_string(kVersion) + ")" + at(kOffVersion));
  if (const uint32_t v = rd32(b + kOffLayoutVersion); v != kernels::kPanelLayoutVersion)
    return failed_precondition("pack panel layout version " + std::to_string(v) + " (these kernels use " +
                               std::to_string(kernels::kPanelLayoutVersion) + ")" + at(kOffLayoutVersion));
  if (rd64(b + kOffLayoutFingerprint) != kernels::panel_layout_fingerprint())
    return failed_precondition("pack panel layout fingerprint differs from these kernels' (built by other code)" +
                               at(kOffLayoutFingerprint));
  if (const uint64_t v = rd64(b + kOffPlanBytes); v != size)
    return bad("header: pack_bytes = " + std::to_string(v) + " but the file has " + std::to_string(size) +
                   " bytes (truncated or appended to)",
               kOffPlanBytes);

  const uint64_t n = rd64(b + kOffNTensors);
  const uint64_t table = rd64(b + kOffTableOffset);
  const uint64_t names = rd64(b + kOffNamesOffset);
  const uint64_t names_bytes = rd64(b + kOffNamesBytes);
  const uint64_t data = rd64(b + kOffDataOffset);
  const uint32_t align = rd32(b + kOffAlignment);
  if (n > kMaxTensors)
    return bad("header: n_tensors = " + std::to_string(n) + " exceeds " + std::to_string(kMaxTensors), kOffNTensors);
  uint64_t table_end = 0;
  if (table < kHeaderBytes || !checked_add(table, n * kEntryBytes, &table_end) || table_end > size)
    return bad("header: tensor table [" + std::to_string(table) + ", +" + std::to_string(n * kEntryBytes) +
                   ") is outside [" + std::to_string(kHeaderBytes) + ", " + std::to_string(size) + ")",
               kOffTableOffset);
  uint64_t names_end = 0;
  if (names < table_end || !checked_add(names, names_bytes, &names_end) || names_end > size)
    return bad("header: names [" + std::to_string(names) + ", +" + std::to_string(names_bytes) +
                   ") overlap the table or run past end of file (size " + std::to_string(size) + ")",
               kOffNamesOffset);
  if (align < 64 || (align & (align - 1)) != 0 || align > (1u << 20))
    return bad("header: alignment = " + std::to_string(align) + " is not a power of two in [64, 1 MiB]",
               kOffAlignment);
  if (data < names_end || data % align != 0 || data > size)
    return bad("header: data_offset = " + std::to_string(data) + " is not an aligned offset in [" +
                   std::to_string(names_end) + ", " + std::to_string(size) + "]",
               kOffDataOffset);
  if (const uint32_t f = rd32(b + kOffFlags); f != 0)
    return bad("header: unknown flags " + std::to_string(f), kOffFlags);
  if (rd64(b + kOffChecksum) != checksum(bytes_, table, n * kEntryBytes, names, names_bytes))
    return bad("header: checksum mismatch (header, tensor table or names corrupted)", kOffChecksum);
  build_unix_s_ = rd64(b + kOffBuildTime);

  const SourceIdentity id = source_identity(src);
  auto stale = [](const std::string& field, uint64_t pack_v, uint64_t gguf_v, uint64_t off) {
    return failed_precondition("pack was built from another GGUF: " + field + " " + std::to_string(pack_v) +
                               " in the pack, " + std::to_string(gguf_v) + " in the model" + at(off));
  };
  if (rd64(b + kOffSourceBytes) != id.file_bytes)
    return stale("file size", rd64(b + kOffSourceBytes), id.file_bytes, kOffSourceBytes);
  if (rd64(b + kOffSourceDataOffset) != id.data_offset)
    return stale("data section offset", rd64(b + kOffSourceDataOffset), id.data_offset, kOffSourceDataOffset);
  if (rd64(b + kOffSourceHeaderHash) != id.header_hash)
    return stale("header hash", rd64(b + kOffSourceHeaderHash), id.header_hash, kOffSourceHeaderHash);
  if (rd64(b + kOffSourceSampleHash) != id.sample_hash)
    return stale("tensor data sample hash", rd64(b + kOffSourceSampleHash), id.sample_hash, kOffSourceSampleHash);

  src_base_ = src.bytes().data();
  src_bytes_ = src.bytes().size();
  entries_.clear();
  entries_.reserve(size_t(n));
  uint64_t prev_end = data;
  std::unordered_set<uint64_t> sources;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t e = table + i * kEntryBytes;
    const uint8_t* p = b + e;
    Entry en;
    const std::string who = "tensor #" + std::to_string(i);
    const uint32_t name_off = rd32(p + kEntName), name_len = rd32(p + kEntNameBytes);
    if (name_len == 0 || name_len > kMaxNameBytes || name_off > names_bytes || name_len > names_bytes - name_off)
      return bad(who + ": name [" + std::to_string(name_off) + ", +" + std::to_string(name_len) +
                     ") is empty or outside the names (" + std::to_string(names_bytes) + " bytes)",
                 e + kEntName);
    en.name.assign(reinterpret_cast<const char*>(b + names + name_off), name_len);
    const std::string whon = who + " '" + en.name + "'";
    const uint32_t type_id = rd32(p + kEntType);
    en.type = DType(type_id);
    if (type_id >= kDTypeIdLimit || !dtype_layout(type_id) || !kernels::is_packed_type(en.type))
      return bad(whon + ": type id " + std::to_string(type_id) + " is not a packed weight type", e + kEntType);
    if (rd32(p + kEntReserved) != 0 || rd64(p + kEntReserved2) != 0)
      return bad(whon + ": reserved field is not zero", rd32(p + kEntReserved) != 0 ? e + kEntReserved : e + kEntReserved2);
    en.n_rows = int64_t(rd64(p + kEntRows));
    en.n_cols = int64_t(rd64(p + kEntCols));
    if (en.n_rows <= 0 || en.n_rows > kMaxDim)
      return bad(whon + ": n_rows = " + std::to_string(en.n_rows) + " is outside [1, 2^32]", e + kEntRows);
    const int64_t bs = int64_t(dtype_layout(type_id)->block_size);
    if (en.n_cols <= 0 || en.n_cols > kMaxDim || en.n_cols % bs != 0)
      return bad(whon + ": n_cols = " + std::to_string(en.n_cols) + " is not a multiple of " + std::to_string(bs) +
                     " in [1, 2^32]",
                 e + kEntCols);
    en.source_offset = rd64(p + kEntSourceOffset);
    en.offset = rd64(p + kEntOffset);
    en.n_bytes = rd64(p + kEntBytes);
    const int64_t want = kernels::packed_bytes(en.type, en.n_rows, en.n_cols);
    if (want <= 0 || en.n_bytes != uint64_t(want))
      return bad(whon + ": n_bytes = " + std::to_string(en.n_bytes) + ", but " + std::to_string(en.n_rows) + " x " +
                     std::to_string(en.n_cols) + " " + dtype_name(en.type) + " packs into " + std::to_string(want),
                 e + kEntBytes);
    uint64_t end = 0;
    if (en.offset % align != 0 || !checked_add(en.offset, en.n_bytes, &end) || end > size)
      return bad(whon + ": data [" + std::to_string(en.offset) + ", +" + std::to_string(en.n_bytes) +
                     ") is unaligned or runs past end of file (size " + std::to_string(size) + ")",
                 e + kEntOffset);
    if (en.offset < prev_end)
      return bad(whon + ": data at " + std::to_string(en.offset) + " overlaps the previous tensor or the header (ends at " +
                     std::to_string(prev_end) + ")",
                 e + kEntOffset);
    prev_end = end;
    if (!sources.insert(en.source_offset).second)
      return bad(whon + ": source offset " + std::to_string(en.source_offset) + " appears twice", e + kEntSourceOffset);
    // Bound to this GGUF: the tensor must be exactly the one the panels were packed from.
    const gguf::TensorInfo* t = src.find_tensor(en.name);
    if (!t)
      return failed_precondition("pack " + whon + " is not in the model" + at(e + kEntName));
    if (t->type != en.type || t->ne[0] != en.n_cols || t->n_rows() != en.n_rows || !t->data ||
        uint64_t(t->data - src_base_) != en.source_offset)
      return failed_precondition("pack " + whon + " (" + dtype_name(en.type) + " " + std::to_string(en.n_rows) + " x " +
                                 std::to_string(en.n_cols) + " at source byte " + std::to_string(en.source_offset) +
                                 ") does not match the model's tensor (" + dtype_name(t->type) + " " +
                                 t->shape_string() + ")" + at(e));
    entries_.push_back(std::move(en));
  }
  std::sort(entries_.begin(), entries_.end(),
            [](const Entry& a, const Entry& c) { return a.source_offset < c.source_offset; });
  return Status::ok();
}

const uint8_t* PackFile::find(const kernels::WeightView& w) {
  const auto* d = static_cast<const uint8_t*>(w.data);
  if (!d || d < src_base_ || d >= src_base_ + src_bytes_) return nullptr;
  const uint64_t off = uint64_t(d - src_base_);
  auto it = std::lower_bound(entries_.begin(), entries_.end(), off,
                             [](const Entry& e, uint64_t o) { return e.source_offset < o; });
  if (it == entries_.end() || it->source_offset != off || it->type != w.type || it->n_rows != w.n_rows ||
      it->n_cols != w.n_cols)
    return nullptr;
  return bytes_.data() + it->offset;
}

}  // namespace ts::engine
