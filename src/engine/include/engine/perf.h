// Performance accounting shown by every run: the logits hash (numeric drift at a glance)
// and the machine's peak memory read bandwidth (the roofline decode is measured against).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace ts::engine {

// The logits hash: 64-bit FNV-1a over the IEEE bits of the logits of every sampled step,
// in order, one 32-bit word per float (h = (h ^ bits) * FNV prime; word-wise rather than
// byte-wise so that hashing a 262k vocabulary costs ~0.2 ms, not ~1 ms), the hash carried
// from step to step. Identical logits give identical hashes; any drift in any bit changes it.
inline constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
uint64_t fnv1a_update(uint64_t h, std::span<const float> v);

// Measures the read bandwidth of this machine in GB/s (1e9 bytes/s): all cores stream
// through a buffer several times the last-level cache for ~150 ms; the best pass counts.
double measure_read_bandwidth_gbs();

// The cached measurement from `cache_path` (default $TIERSERVE_CACHE_DIR/peak_bw, else
// ~/.cache/tierserve/peak_bw), measured and stored there when absent or unreadable. Never fails: without a usable cache folder
// it just measures.
double peak_read_bandwidth_gbs(const std::string& cache_path = "");

}  // namespace ts::engine
