// Pack files: round trip against in-memory packing, and crafted bad pack files (truncated, bad
// magic, stale versions, another source GGUF, overlapping or out-of-range tensors, every
// prefix, every flipped header byte) each ending in a typed error, never a crash.
#include "engine/pack_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kernels/matmul.h"

namespace ts::engine {
namespace {

using namespace pack_format;

const std::string kWork = std::string(TS_BINARY_DIR) + "/pack_file_test";

// A quantized matrix of random levels with sane fp16 scales (1.0), so products are finite.
std::vector<uint8_t> random_matrix(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const DTypeLayout l = *dtype_layout(uint32_t(t));
  const int64_t blocks = rows * cols / l.block_size;
  std::vector<uint8_t> b(size_t(blocks * l.type_size));
  std::mt19937 rng(seed);
  for (auto& x : b) x = uint8_t(rng());
  for (int64_t i = 0; i < blocks; ++i) {
    uint8_t* blk = b.data() + i * l.type_size;
    const uint16_t one = 0x3C00, small = 0x2000;
    switch (t) {
      case DType::Q8_0:
        std::memcpy(blk, &one, 2);
        break;
      case DType::Q4_K:
        std::memcpy(blk, &small, 2);
        std::memcpy(blk + 2, &small, 2);
        break;
      case DType::Q6_K:
        std::memcpy(blk + 208, &small, 2);
        break;
      default:
        break;
    }
  }
  return b;
}

struct Fixture : ::testing::Test {
  struct Mat {
    std::string name;
    DType type;
    int64_t rows, cols;
  };
  // Rows that are not a multiple of 16 exercise the zero-padded last panel.
  const std::vector<Mat> mats = {{"a.weight", DType::Q8_0, 37, 64},
                                 {"b.weight", DType::Q4_K, 16, 512},
                                 {"c.weight", DType::Q6_K, 20, 256}};

  std::vector<uint8_t> gguf_bytes;
  std::unique_ptr<gguf::File> src;
  std::vector<kernels::PackedWeight> packed;
  std::vector<uint8_t> pack;  // the pack image
  std::string pack_path;

  static std::vector<uint8_t> make_gguf(const std::vector<Mat>& mats, uint32_t seed, const std::string& note) {
    gguf::Writer w;
    w.add_string("general.architecture", "test");
    w.add_string("general.name", note);
    for (size_t i = 0; i < mats.size(); ++i)
      w.add_tensor(mats[i].name, mats[i].type, {mats[i].cols, mats[i].rows},
                   random_matrix(mats[i].type, mats[i].rows, mats[i].cols, seed + uint32_t(i)));
    std::vector<float> norm(64, 1.0f);
    std::vector<uint8_t> nb(norm.size() * 4);
    std::memcpy(nb.data(), norm.data(), nb.size());
    w.add_tensor("norm.weight", DType::F32, {64}, nb);
    return w.to_bytes();
  }

  kernels::WeightView view(const gguf::File& f, const Mat& m) const {
    const gguf::TensorInfo* t = f.find_tensor(m.name);
    return {t->data, t->type, m.cols, m.rows};
  }

  void SetUp() override {
    std::filesystem::create_directories(kWork);
    gguf_bytes = make_gguf(mats, 1, "model");
    auto r = gguf::File::parse(gguf_bytes);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    src = std::move(*r);
    std::vector<PackTensor> ts;
    for (const Mat& m : mats) packed.push_back(kernels::PackedWeight::pack(view(*src, m)));
    for (size_t i = 0; i < mats.size(); ++i) ts.push_back({mats[i].name, view(*src, mats[i]), packed[i].panels()});
    pack_path = kWork + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".tspack";
    ASSERT_TRUE(write_pack_file(pack_path, *src, ts).is_ok());
    std::ifstream in(pack_path, std::ios::binary);
    pack.assign(std::istreambuf_iterator<char>(in), {});
  }

  Status parse(const std::vector<uint8_t>& bytes) const { return PackFile::parse(bytes, *src).status(); }

  uint64_t get64(uint64_t off) const {
    uint64_t v;
    std::memcpy(&v, pack.data() + off, 8);
    return v;
  }
  static void set64(std::vector<uint8_t>& b, uint64_t off, uint64_t v) { std::memcpy(b.data() + off, &v, 8); }
  static void set32(std::vector<uint8_t>& b, uint64_t off, uint32_t v) { std::memcpy(b.data() + off, &v, 4); }
  uint64_t entry(int i) const { return get64(kOffTableOffset) + uint64_t(i) * kEntryBytes; }

  // Edits a copy, reseals it (so only the intended check can fire) and parses it.
  template <typename F>
  Status edited(F&& edit, bool seal = true) const {
    std::vector<uint8_t> b = pack;
    edit(b);
    if (seal) reseal(b);
    return parse(b);
  }
};

void expect_error(const Status& st, StatusCode code, const std::string& needle) {
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.to_string();
}

TEST_F(Fixture, RoundTripGivesThePanelsOfInMemoryPacking) {
  auto r = PackFile::open(pack_path, *src);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  PackFile& p = **r;
  ASSERT_EQ(p.entries().size(), mats.size());
  EXPECT_EQ(p.file_bytes(), pack.size());
  for (size_t i = 0; i < mats.size(); ++i) {
    const kernels::WeightView w = view(*src, mats[i]);
    const uint8_t* panels = p.find(w);
    ASSERT_NE(panels, nullptr) << mats[i].name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(panels) % kAlignment, 0u);
    const int64_t nb = kernels::packed_bytes(w);
    ASSERT_GT(nb, 0);
    EXPECT_EQ(std::memcmp(panels, packed[i].panels(), size_t(nb)), 0) << mats[i].name;

    // The borrowed view computes the same products, bit for bit.
    const kernels::PackedWeight borrowed = kernels::PackedWeight::borrow(w, panels);
    EXPECT_FALSE(borrowed.owns_panels());
    EXPECT_EQ(borrowed.bytes_read(), packed[i].bytes_read());
    const int64_t n_tok = 3;
    std::vector<float> x(size_t(n_tok * w.n_cols)), y1(size_t(n_tok * w.n_rows)), y2(y1.size());
    for (size_t k = 0; k < x.size(); ++k) x[k] = float(int(k % 17) - 8) * 0.125f;
    kernels::matmul(packed[i], x.data(), w.n_cols, n_tok, y1.data(), w.n_rows, nullptr);
    kernels::matmul(borrowed, x.data(), w.n_cols, n_tok, y2.data(), w.n_rows, nullptr);
    EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * 4), 0) << mats[i].name;
  }
  // Not exactly a planned tensor: pack in memory instead.
  kernels::WeightView w = view(*src, mats[0]);
  w.n_rows -= 1;
  EXPECT_EQ(p.find(w), nullptr);
  w = view(*src, mats[1]);
  w.data = static_cast<const uint8_t*>(w.data) + 144;
  w.n_rows -= 1;
  EXPECT_EQ(p.find(w), nullptr);
  int x = 0;
  EXPECT_EQ(p.find({&x, DType::Q8_0, 32, 1}), nullptr);
}

TEST_F(Fixture, RejectsTruncationAtEveryPrefix) {
  // Every prefix of the header, table and names, then a sample of longer ones.
  const uint64_t data = get64(kOffDataOffset);
  for (uint64_t n = 0; n < pack.size(); n += (n < data + 64 ? 1 : 997)) {
    std::vector<uint8_t> b(pack.begin(), pack.begin() + int64_t(n));
    const Status st = parse(b);
    ASSERT_FALSE(st.is_ok()) << "prefix " << n;
    ASSERT_EQ(st.code(), StatusCode::kDataLoss) << st.to_string();
  }
  expect_error(parse({pack.begin(), pack.end() - 1}), StatusCode::kDataLoss, "truncated");
  std::vector<uint8_t> longer = pack;
  longer.push_back(0);
  expect_error(parse(longer), StatusCode::kDataLoss, "pack_bytes");
}

TEST_F(Fixture, RejectsEveryFlippedByteBeforeTheData) {
  // The checksum covers header, table and names; the panel data is not hashed (that would
  // read the whole pack at every start) but every field describing it is checked.
  const uint64_t data = get64(kOffDataOffset);
  const uint64_t names_end = get64(kOffNamesOffset) + get64(kOffNamesBytes);
  for (uint64_t i = 0; i < names_end; ++i) {
    std::vector<uint8_t> b = pack;
    b[i] ^= 0x10;
    ASSERT_FALSE(parse(b).is_ok()) << "byte " << i;
  }
  // Flipped and resealed: whatever the field, a typed error or a pack whose tensors still
  // lie inside the file (the panels are then different numbers, as with any other file).
  for (uint64_t i = 0; i < names_end; ++i) {
    std::vector<uint8_t> b = pack;
    b[i] ^= 0x01;
    if (i < kOffChecksum || i >= kOffChecksum + 8) reseal(b);
    auto r = PackFile::parse(b, *src);
    if (!r.is_ok()) {
      const StatusCode c = r.status().code();
      ASSERT_TRUE(c == StatusCode::kDataLoss || c == StatusCode::kFailedPrecondition) << r.status().to_string();
      continue;
    }
    for (const auto& e : (*r)->entries()) ASSERT_LE(e.offset + e.n_bytes, b.size());
  }
  EXPECT_LT(names_end, data);
}

TEST_F(Fixture, SurvivesRandomResealedMutations) {
  // A poor man's fuzzer over the described part: random bytes at random places, checksum
  // recomputed so the field checks are reached. Never a crash; an accepted pack stays
  // inside the file.
  std::mt19937 rng(7);
  const uint64_t names_end = get64(kOffNamesOffset) + get64(kOffNamesBytes);
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> b = pack;
    const int n = 1 + int(rng() % 8);
    for (int k = 0; k < n; ++k) b[rng() % names_end] = uint8_t(rng());
    reseal(b);
    auto r = PackFile::parse(b, *src);
    if (r.is_ok()) {
      for (const auto& e : (*r)->entries()) ASSERT_LE(e.offset + e.n_bytes, b.size());
    }
  }
}

TEST_F(Fixture, HeaderErrorsAreTypedAndNamed) {
  expect_error(edited([](auto& b) { b[0] = 'X'; }, false), StatusCode::kDataLoss, "magic");
  expect_error(edited([](auto& b) { set32(b, kOffVersion, kVersion + 1); }), StatusCode::kFailedPrecondition,
               "format version");
  expect_error(edited([](auto& b) { set32(b, kOffLayoutVersion, kernels::kPanelLayoutVersion + 1); }),
               StatusCode::kFailedPrecondition, "layout version");
  expect_error(edited([](auto& b) { set64(b, kOffLayoutFingerprint, 42); }), StatusCode::kFailedPrecondition,
               "fingerprint");
  expect_error(edited([](auto& b) { b[kOffChecksum] ^= 1; }, false), StatusCode::kDataLoss, "checksum");
  expect_error(edited([](auto& b) { set64(b, kOffNTensors, uint64_t(1) << 40); }), StatusCode::kDataLoss,
               "n_tensors");
  expect_error(edited([](auto& b) { set64(b, kOffTableOffset, ~uint64_t(0) - 8); }, false), StatusCode::kDataLoss,
               "tensor table");
  expect_error(edited([](auto& b) { set64(b, kOffNamesBytes, uint64_t(1) << 62); }, false), StatusCode::kDataLoss,
               "names");
  expect_error(edited([](auto& b) { set32(b, kOffAlignment, 100); }), StatusCode::kDataLoss, "alignment");
  expect_error(edited([](auto& b) { set64(b, kOffDataOffset, 4097); }), StatusCode::kDataLoss, "data_offset");
  expect_error(edited([](auto& b) { set32(b, kOffFlags, 1); }), StatusCode::kDataLoss, "flags");
  // Messages carry the byte offset of the field.
  expect_error(edited([](auto& b) { set32(b, kOffAlignment, 100); }), StatusCode::kDataLoss,
               "at byte " + std::to_string(kOffAlignment));
}

TEST_F(Fixture, TensorErrorsAreTypedAndNamed) {
  const uint64_t e0 = entry(0), e1 = entry(1);
  const uint64_t off0 = get64(e0 + kEntOffset);
  expect_error(edited([&](auto& b) { set64(b, e1 + kEntOffset, off0); }), StatusCode::kDataLoss, "overlaps");
  expect_error(edited([&](auto& b) { set64(b, e1 + kEntOffset, uint64_t(1) << 40); }), StatusCode::kDataLoss,
               "past end of file");
  expect_error(edited([&](auto& b) { set64(b, e1 + kEntOffset, ~uint64_t(0) - 4095); }), StatusCode::kDataLoss,
               "past end of file");
  expect_error(edited([&](auto& b) { set64(b, e0 + kEntOffset, off0 + 64); }), StatusCode::kDataLoss, "unaligned");
  expect_error(edited([&](auto& b) { set64(b, e0 + kEntBytes, get64(e0 + kEntBytes) - 1); }),
               StatusCode::kDataLoss, "packs into");
  expect_error(edited([&](auto& b) { set32(b, e0 + kEntType, uint32_t(DType::F16)); }), StatusCode::kDataLoss,
               "not a packed weight type");
  expect_error(edited([&](auto& b) { set32(b, e0 + kEntType, 1000); }), StatusCode::kDataLoss,
               "not a packed weight type");
  expect_error(edited([&](auto& b) { set64(b, e0 + kEntRows, 0); }), StatusCode::kDataLoss, "n_rows");
  expect_error(edited([&](auto& b) { set64(b, e0 + kEntCols, 33); }), StatusCode::kDataLoss, "n_cols");
  expect_error(edited([&](auto& b) { set64(b, e0 + kEntCols, uint64_t(1) << 63); }), StatusCode::kDataLoss,
               "n_cols");
  expect_error(edited([&](auto& b) { set32(b, e0 + kEntName, 1u << 30); }), StatusCode::kDataLoss, "name");
  expect_error(edited([&](auto& b) { set32(b, e0 + kEntNameBytes, 0); }), StatusCode::kDataLoss, "name");
  expect_error(edited([&](auto& b) { set64(b, e0 + kEntReserved2, 1); }), StatusCode::kDataLoss, "reserved");
  expect_error(edited([&](auto& b) { set64(b, e1 + kEntSourceOffset, get64(e0 + kEntSourceOffset)); }),
               StatusCode::kDataLoss, "appears twice");
  // Well-formed but not this model's tensor.
  expect_error(edited([&](auto& b) { set64(b, e0 + kEntSourceOffset, get64(e0 + kEntSourceOffset) + 32); }),
               StatusCode::kFailedPrecondition, "does not match");
  expect_error(edited([&](auto& b) { b[get64(kOffNamesOffset)] = 'z'; }), StatusCode::kFailedPrecondition,
               "not in the model");
  // Shape and byte count edited together: still bound to the GGUF's shape.
  expect_error(edited([&](auto& b) {
                 set64(b, e0 + kEntRows, 16);
                 set64(b, e0 + kEntBytes, uint64_t(kernels::packed_bytes(DType::Q8_0, 16, 64)));
               }),
               StatusCode::kFailedPrecondition, "does not match");
}

TEST_F(Fixture, RejectsAPlanBuiltFromAnotherGguf) {
  // Same shapes and names, other weights: only the data sample differs.
  const std::vector<uint8_t> other_weights = make_gguf(mats, 2, "model");
  auto o1 = gguf::File::parse(other_weights);
  ASSERT_TRUE(o1.is_ok());
  expect_error(PackFile::parse(pack, **o1).status(), StatusCode::kFailedPrecondition, "tensor data sample hash");
  // Other metadata of the same size: the header hash differs.
  const std::vector<uint8_t> other_meta = make_gguf(mats, 1, "modeX");
  auto o2 = gguf::File::parse(other_meta);
  ASSERT_TRUE(o2.is_ok());
  expect_error(PackFile::parse(pack, **o2).status(), StatusCode::kFailedPrecondition, "header hash");
  const std::vector<uint8_t> other_size = make_gguf(mats, 1, std::string(200, 'n'));
  auto o3 = gguf::File::parse(other_size);
  ASSERT_TRUE(o3.is_ok());
  expect_error(PackFile::parse(pack, **o3).status(), StatusCode::kFailedPrecondition, "file size");
}

TEST_F(Fixture, OpenNamesThePathAndMissingFilesAreNotFound) {
  EXPECT_EQ(PackFile::open(kWork + "/missing.tspack", *src).status().code(), StatusCode::kNotFound);
  const std::string bad = kWork + "/bad.tspack";
  std::ofstream(bad, std::ios::binary) << "not a pack";
  expect_error(PackFile::open(bad, *src).status(), StatusCode::kDataLoss, bad + ": pack header");
  EXPECT_EQ(default_pack_path("/x/m.gguf"), "/x/m.gguf.tspack");
}

TEST_F(Fixture, WriterRejectsViewsThatAreNotWholeTensors) {
  kernels::WeightView w = view(*src, mats[0]);
  w.n_rows -= 1;
  const std::vector<PackTensor> ts = {{mats[0].name, w, packed[0].panels()}};
  EXPECT_EQ(write_pack_file(kWork + "/w.tspack", *src, ts).code(), StatusCode::kInvalidArgument);
  const std::vector<PackTensor> twice = {{mats[0].name, view(*src, mats[0]), packed[0].panels()},
                                         {mats[0].name, view(*src, mats[0]), packed[0].panels()}};
  EXPECT_EQ(write_pack_file(kWork + "/w.tspack", *src, twice).code(), StatusCode::kInvalidArgument);
  // An empty pack is valid (a model of float matrices has nothing to pack).
  ASSERT_TRUE(write_pack_file(kWork + "/empty.tspack", *src, {}).is_ok());
  auto r = PackFile::open(kWork + "/empty.tspack", *src);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE((*r)->entries().empty());
}

TEST(PanelLayout, FingerprintIsPinnedToTheLayoutVersion) {
  // Changing the panel layout (src/kernels/panel.h, pack.cc) changes the fingerprint, which
  // alone already keeps old pack files from being used. This pin makes the change visible: bump
  // kernels::kPanelLayoutVersion, then update both values here.
  EXPECT_EQ(kernels::kPanelLayoutVersion, 1u);
  EXPECT_EQ(kernels::panel_layout_fingerprint(), 0xb06b86c3b11155feull)
      << "the packed panel layout changed: bump kernels::kPanelLayoutVersion and update this test";
}

TEST(PanelLayout, SizesOverflowSafely) {
  EXPECT_EQ(kernels::packed_bytes(DType::F32, 10, 10), 0);
  EXPECT_EQ(kernels::packed_bytes(DType::Q8_0, 10, 33), -1);
  EXPECT_EQ(kernels::packed_bytes(DType::Q8_0, -1, 32), -1);
  EXPECT_EQ(kernels::packed_bytes(DType::Q6_K, int64_t(1) << 40, int64_t(1) << 40), -1);
  EXPECT_EQ(kernels::packed_bytes(DType::Q8_0, 17, 64), 2 * 2 * 544);
}

}  // namespace
}  // namespace ts::engine
