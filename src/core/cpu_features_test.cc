// CPU feature detection against what the kernel reports in /proc/cpuinfo, and the caps of
// TIERSERVE_ISA.
#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace ts {
namespace {

struct CpuInfo {
  std::string vendor, flags;
  int family = -1;
  bool has(const std::string& flag) const { return (" " + flags + " ").find(" " + flag + " ") != std::string::npos; }
};

CpuInfo first_cpu() {
  CpuInfo c;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line) && !line.empty()) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "vendor_id") c.vendor = value;
    if (key == "cpu family") c.family = std::stoi(value);
    if (key == "flags") c.flags = value;
  }
  return c;
}

TEST(CpuFeatures, AgreesWithProcCpuinfo) {
  const CpuInfo c = first_cpu();
  if (c.family < 0) GTEST_SKIP() << "no /proc/cpuinfo";
  const char* isa = std::getenv("TIERSERVE_ISA");
  if (isa && (std::string(isa) == "avx2" || std::string(isa) == "scalar"))
    GTEST_SKIP() << "features capped by TIERSERVE_ISA=" << isa;
  const CpuFeatures f = cap_features(cpu_features(), "native");
  EXPECT_EQ(f.avx2, c.has("avx2") && c.has("fma") && c.has("f16c"));
  EXPECT_EQ(f.avx512, c.has("avx512f") && c.has("avx512bw") && c.has("avx512vl") && c.has("avx512dq"));
  // Zen 4 (AMD family 19h with AVX-512) executes 512-bit operations in two halves.
  EXPECT_EQ(f.avx512_split, f.avx512 && c.vendor == "AuthenticAMD" && c.family == 0x19)
      << c.vendor << " family " << c.family;
}

TEST(CpuFeatures, CapsDropWhatTheIsaLacks) {
  CpuFeatures all;
  all.avx2 = all.avx512 = all.avx512_vnni = all.avx512_bf16 = all.avx512_split = true;
  all.amx_int8 = all.amx_bf16 = true;
  const CpuFeatures avx2 = cap_features(all, "avx2");
  EXPECT_TRUE(avx2.avx2);
  EXPECT_FALSE(avx2.avx512 || avx2.avx512_vnni || avx2.avx512_bf16 || avx2.avx512_split || avx2.amx_int8);
  const CpuFeatures avx512 = cap_features(all, "avx512");
  EXPECT_TRUE(avx512.avx512 && avx512.avx512_split);
  EXPECT_FALSE(avx512.amx_int8 || avx512.amx_bf16);
  EXPECT_EQ(cap_features(all, "scalar").to_string(), "scalar");
  EXPECT_EQ(avx512.to_string(), "avx2 avx512 avx512_vnni avx512_bf16 avx512_split");
}

}  // namespace
}  // namespace ts
