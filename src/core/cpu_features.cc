#include "core/cpu_features.h"

#include <cpuid.h>
#include <cstdint>
#include <cstdlib>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ts {
namespace {

uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

// Linux requires a process to ask for AMX tile state before it may execute tile
// instructions (ARCH_REQ_XCOMP_PERM); without it they fault.
bool request_amx_permission() {
#if defined(__linux__)
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr int kXfeatureXtileData = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
#else
  return false;
#endif
}

// The family of an AMD CPU (base + extended family, as AMD numbers them), 0 for others.
unsigned amd_family() {
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
  const bool amd = b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;  // "AuthenticAMD"
  if (!amd || !__get_cpuid(1, &a, &b, &c, &d)) return 0;
  const unsigned base = (a >> 8) & 0xF, ext = (a >> 20) & 0xFF;
  return base == 0xF ? base + ext : base;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  const bool fma = c & (1u << 12);
  const bool f16c = c & (1u << 29);
  if (!osxsave) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool ymm_ok = (xcr0 & 0x6) == 0x6;
  const bool zmm_ok = (xcr0 & 0xE6) == 0xE6;
  const bool tile_ok = (xcr0 & (3ull << 17)) == (3ull << 17);
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = b & (1u << 5);
  const bool avx512f = b & (1u << 16), avx512dq = b & (1u << 17);
  const bool avx512bw = b & (1u << 30), avx512vl = b & (1u << 31);
  const bool vnni = c & (1u << 11);
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24), amx_int8 = d & (1u << 25);
  __cpuid_count(7, 1, a, b, c, d);
  const bool avx512bf16 = a & (1u << 5);

  f.avx2 = ymm_ok && avx2 && fma && f16c;
  f.avx512 = f.avx2 && zmm_ok && avx512f && avx512dq && avx512bw && avx512vl;
  f.avx512_vnni = f.avx512 && vnni;
  f.avx512_bf16 = f.avx512 && avx512bf16;
  f.avx512_split = f.avx512 && amd_family() == 0x19;
  if (f.avx512 && tile_ok && amx_tile && request_amx_permission()) {
    f.amx_int8 = amx_int8;
    f.amx_bf16 = amx_bf16;
  }
  return f;
}

}  // namespace

CpuFeatures cap_features(const CpuFeatures& in, const std::string& isa) {
  CpuFeatures f = in;
  if (isa == "scalar") return CpuFeatures{};
  if (isa == "avx2") {
    CpuFeatures g;
    g.avx2 = f.avx2;
    return g;
  }
  if (isa == "avx512") {
    f.amx_int8 = f.amx_bf16 = false;
    return f;
  }
  if (isa == "amx-emulated") {  // the AMX kernels with their tiles in software (for tests)
    f.amx_int8 = f.amx_emulated = f.avx512_vnni;
    f.amx_bf16 = false;
    return f;
  }
  return f;  // "native" or unknown: everything detected
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = [] {
    const char* e = std::getenv("TIERSERVE_ISA");
    return cap_features(detect(), e ? e : "native");
  }();
  return f;
}

std::string CpuFeatures::to_string() const {
  std::string s;
  auto add = [&](bool b, const char* n) {
    if (!b) return;
    if (!s.empty()) s += ' ';
    s += n;
  };
  add(avx2, "avx2");
  add(avx512, "avx512");
  add(avx512_vnni, "avx512_vnni");
  add(avx512_bf16, "avx512_bf16");
  add(avx512_split, "avx512_split");
  add(amx_int8 && !amx_emulated, "amx_int8");
  add(amx_emulated, "amx_int8(emulated)");
  add(amx_bf16, "amx_bf16");
  return s.empty() ? "scalar" : s;
}

}  // namespace ts
