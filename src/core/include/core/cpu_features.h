// CPU feature detection (cpuid + xgetbv, so OS support for wide registers is checked too).
//
// TIERSERVE_ISA=scalar|avx2|avx512|native caps the detected level, so tests and benchmarks
// can force each kernel path on one machine (avx512: everything but AMX; native, or amx:
// everything detected). TIERSERVE_ISA=amx-emulated, on a CPU with AVX-512 VNNI, runs the
// AMX kernels with their tile instructions executed in software: slow, for end-to-end
// tests of that path on machines without AMX.
#pragma once

#include <string>

namespace ts {

struct CpuFeatures {
  bool avx2 = false;        // with FMA and F16C
  bool avx512 = false;      // F + BW + VL + DQ
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  // AVX-512 operations executed as two 256-bit halves (AMD family 19h: Zen 4), where some
  // kernels run faster in 256-bit forms (attn_avx512.cc's F16 conversions).
  bool avx512_split = false;
  bool amx_int8 = false;    // AMX-TILE + AMX-INT8, and the OS granted tile state
  bool amx_bf16 = false;
  bool amx_emulated = false;  // amx_int8 by software tiles (TIERSERVE_ISA=amx-emulated)
  std::string to_string() const;  // "avx2 avx512 avx512_vnni avx512_bf16 avx512_split"
};

// Detected once, then capped by TIERSERVE_ISA.
const CpuFeatures& cpu_features();

// Detected features capped at `isa` ("scalar", "avx2", "avx512", "amx" or "native"), or
// with AMX emulated ("amx-emulated").
CpuFeatures cap_features(const CpuFeatures& f, const std::string& isa);

}  // namespace ts
