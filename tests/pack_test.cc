// The build step end to end: `tierserve build` writes a pack, Model::load maps it and the
// forward pass reads the panels in place, and every logit equals those of in-memory packing
// (stories260K, random-weight Q4_K_M and Q8_0 models, and the default Gemma 3 model when
// installed). A stale pack is ignored with a warning, never used.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/pack_file.h"
#include "models/register.h"

namespace ts {
namespace {

namespace fs = std::filesystem;

const std::string kWork = std::string(TS_BINARY_DIR) + "/pack_test";

// Runs the binary with `args`; returns its exit status, stdout+stderr in *out.
int tierserve(const std::string& args, std::string* out = nullptr) {
  fs::create_directories(kWork);
  const std::string log = kWork + "/cmd.log";
  const std::string cmd = std::string("'") + TS_TIERSERVE_BIN + "' " + args + " >'" + log + "' 2>&1";
  const int st = std::system(cmd.c_str());
  if (out) {
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    *out = ss.str();
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string make_model(const std::string& type, int seed) {
  const std::string path = kWork + "/tiny-" + type + "-" + std::to_string(seed) + ".gguf";
  if (!fs::exists(path)) {
    EXPECT_EQ(tierserve("make-model --arch llama --shape tiny --type " + type + " --seed " + std::to_string(seed) +
                        " -o '" + path + "'"),
              0);
  }
  return path;
}

// Logits of an 8-token prompt (every row) and 8 greedy decode steps.
std::vector<float> run_logits(const std::string& model_path, const engine::ModelOptions& mo,
                              engine::PackInfo* info = nullptr) {
  models::register_all();
  auto model = engine::Model::load(model_path, mo);
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  if (!model.is_ok()) return {};
  if (info) *info = (*model)->pack_info();
  auto ctx = engine::Context::create(**model, 64, 16);
  EXPECT_TRUE(ctx.is_ok());
  const int64_t n_vocab = (*model)->config().n_vocab;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 8; ++i) prompt.push_back(int32_t((1 + 37 * i) % n_vocab));
  std::vector<float> all;
  EXPECT_TRUE((*ctx)->eval(prompt, /*all_logits=*/true).is_ok());
  for (int64_t r = 0; r < 8; ++r) {
    auto l = (*ctx)->logits(r);
    all.insert(all.end(), l.begin(), l.end());
  }
  int32_t id = 0;
  for (int step = 0; step < 8; ++step) {
    auto l = (*ctx)->logits(step == 0 ? 7 : 0);
    id = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    EXPECT_TRUE((*ctx)->eval(std::span<const int32_t>(&id, 1)).is_ok());
    auto n = (*ctx)->logits(0);
    all.insert(all.end(), n.begin(), n.end());
  }
  return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return !a.empty() && a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

void expect_plan_matches_packing(const std::string& model, int64_t min_from_pack) {
  const std::string pack = engine::default_pack_path(model);
  fs::remove(pack);
  std::string out;
  ASSERT_EQ(tierserve("build -m '" + model + "' -t 2", &out), 0) << out;
  EXPECT_NE(out.find("built " + pack), std::string::npos) << out;
  ASSERT_TRUE(fs::exists(pack));

  engine::ModelOptions no_pack;
  no_pack.use_pack = false;
  engine::PackInfo packed_info, pack_info;
  const std::vector<float> want = run_logits(model, no_pack, &packed_info);
  const std::vector<float> got = run_logits(model, {}, &pack_info);  // auto-detected
  EXPECT_TRUE(same_bits(want, got)) << model;
  EXPECT_EQ(pack_info.pack_path, pack);
  EXPECT_TRUE(pack_info.pack_warning.empty()) << pack_info.pack_warning;
  EXPECT_GE(pack_info.n_from_pack, min_from_pack);
  EXPECT_EQ(pack_info.n_packed, 0);
  EXPECT_EQ(pack_info.n_from_pack, packed_info.n_packed);
  EXPECT_EQ(pack_info.bytes_from_pack, packed_info.bytes_packed);
  EXPECT_TRUE(packed_info.pack_path.empty());
  // Both ways every panel lands in the model's arena (the pack's are copied there).
  EXPECT_EQ(packed_info.bytes_in_arena, packed_info.bytes_packed);
  EXPECT_EQ(pack_info.bytes_in_arena, pack_info.bytes_from_pack);
  if (min_from_pack > 0) {
    EXPECT_GT(pack_info.bytes_in_arena, 0u);
  }

  // Re-running keeps a valid pack.
  ASSERT_EQ(tierserve("build -m '" + model + "'", &out), 0) << out;
  EXPECT_NE(out.find("up to date"), std::string::npos) << out;
}

TEST(Pack, Q4KMLogitsEqualInMemoryPacking) { expect_plan_matches_packing(make_model("q4_k_m", 1), 15); }

TEST(Pack, Q80LogitsEqualInMemoryPacking) { expect_plan_matches_packing(make_model("q8_0", 1), 15); }

TEST(Pack, Stories260KLoadsWithItsPlan) {
  // stories260K's matrices are F32, used in place: the pack is empty but valid.
  const std::string model = kWork + "/stories260K.gguf";
  fs::copy_file(std::string(TS_SHARED_DIR) + "/models/stories260K.gguf", model, fs::copy_options::overwrite_existing);
  expect_plan_matches_packing(model, 0);
}

TEST(Pack, StalePlanIsIgnoredWithAWarning) {
  const std::string a = make_model("q8_0", 1), b = make_model("q8_0", 2);
  const std::string pack_b = engine::default_pack_path(b);
  ASSERT_EQ(tierserve("build -m '" + a + "' -o '" + pack_b + "' --force"), 0);
  engine::ModelOptions no_pack;
  no_pack.use_pack = false;
  engine::PackInfo info;
  const std::vector<float> want = run_logits(b, no_pack);
  const std::vector<float> got = run_logits(b, {}, &info);
  EXPECT_TRUE(same_bits(want, got));
  EXPECT_TRUE(info.pack_path.empty());
  EXPECT_NE(info.pack_warning.find("another GGUF"), std::string::npos) << info.pack_warning;
  EXPECT_EQ(info.n_from_pack, 0);
  EXPECT_EQ(info.n_packed, 15);

  // `tierserve build` notices and rebuilds it.
  std::string out;
  ASSERT_EQ(tierserve("build -m '" + b + "'", &out), 0) << out;
  EXPECT_NE(out.find("rebuilding"), std::string::npos) << out;
  EXPECT_TRUE(engine::PackFile::open(pack_b, *gguf::File::open(b).value()).is_ok());

  // A truncated pack: same fallback.
  fs::resize_file(pack_b, fs::file_size(pack_b) - 4096);
  run_logits(b, {}, &info);
  EXPECT_NE(info.pack_warning.find("truncated"), std::string::npos) << info.pack_warning;
  EXPECT_EQ(info.n_from_pack, 0);
}

TEST(Pack, VerifyFindsACorruptedPanelAndRebuilds) {
  const std::string model = make_model("q8_0", 1);
  const std::string pack = engine::default_pack_path(model);
  ASSERT_EQ(tierserve("build -m '" + model + "' --force"), 0);
  {
    // Flip one panel byte: load-time validation does not read the panels, --verify does.
    std::fstream f(pack, std::ios::in | std::ios::out | std::ios::binary);
    uint64_t data = 0;
    f.seekg(engine::pack_format::kOffDataOffset);
    f.read(reinterpret_cast<char*>(&data), 8);
    char c = 0;
    f.seekg(std::streamoff(data + 100));
    f.read(&c, 1);
    c = char(c ^ 0x40);
    f.seekp(std::streamoff(data + 100));
    f.write(&c, 1);
  }
  std::string out;
  ASSERT_EQ(tierserve("build -m '" + model + "'", &out), 0) << out;
  EXPECT_NE(out.find("up to date"), std::string::npos) << out;
  ASSERT_EQ(tierserve("build -m '" + model + "' --verify", &out), 0) << out;
  EXPECT_NE(out.find("differs from packing"), std::string::npos) << out;
  EXPECT_NE(out.find("built"), std::string::npos) << out;
  ASSERT_EQ(tierserve("build -m '" + model + "' --verify", &out), 0) << out;
  EXPECT_NE(out.find("verified every panel"), std::string::npos) << out;
}

TEST(Pack, ExplicitPlanMustExist) {
  models::register_all();
  engine::ModelOptions mo;
  mo.pack_path = kWork + "/no-such.tspack";
  auto m = engine::Model::load(make_model("q8_0", 1), mo);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("tierserve build"), std::string::npos);
}

TEST(Pack, RunReportsPlanReadinessAndMemory) {
  const std::string model = make_model("q4_k_m", 1);
  ASSERT_EQ(tierserve("build -m '" + model + "' --force"), 0);
  std::string with, without;
  const std::string args = "run -m '" + model + "' -p 'Once upon a time' -n 8 --temp 0 --json -t 1";
  ASSERT_EQ(tierserve(args, &with), 0) << with;
  ASSERT_EQ(tierserve(args + " --no-pack", &without), 0) << without;
  auto field = [](const std::string& s, const std::string& key) {
    const size_t p = s.find("\"" + key + "\":");
    return p == std::string::npos ? std::string() : s.substr(p, s.find_first_of(",}", p) - p);
  };
  EXPECT_EQ(field(with, "logits_hash"), field(without, "logits_hash"));
  EXPECT_FALSE(field(with, "logits_hash").empty());
  EXPECT_NE(field(with, "pack").find(".tspack"), std::string::npos) << with;
  EXPECT_EQ(field(without, "pack"), "\"pack\":\"\"");
  for (const char* k : {"ready_ms", "load_ms", "warmup_ms", "rss_bytes", "hwm_bytes", "anon_bytes", "file_bytes"})
    EXPECT_FALSE(field(with, k).empty()) << k;
  EXPECT_NE(with.find("ready in"), std::string::npos);
  // --map-pack reads the panels from the pack's mapping: same logits, nothing on the arena.
  std::string mapped;
  ASSERT_EQ(tierserve(args + " --map-pack", &mapped), 0) << mapped;
  EXPECT_EQ(field(mapped, "logits_hash"), field(with, "logits_hash"));
  EXPECT_EQ(field(mapped, "weight_bytes_on_2mib_pages"), "\"weight_bytes_on_2mib_pages\":0");
  std::string err;
  EXPECT_EQ(tierserve(args + " --pack x --no-pack", &err), 2) << err;
}

TEST(Pack, DefaultGemmaModelLogitsEqualInMemoryPacking) {
  const char* home = std::getenv("HOME");
  const std::string gemma = std::string(home ? home : ".") + "/.cache/tierserve/models/gemma-3-270m-q4_k_m.gguf";
  if (!fs::exists(gemma)) {
    if (std::getenv("TIERSERVE_REQUIRE_DEFAULT_MODEL")) FAIL() << "missing " << gemma;
    GTEST_SKIP() << "default model not installed";
  }
  // Build beside a link to it, so the test never touches the installed pack.
  const std::string model = kWork + "/gemma.gguf";
  fs::remove(model);
  fs::create_symlink(gemma, model);
  expect_plan_matches_packing(model, 100);
}

}  // namespace
}  // namespace ts
