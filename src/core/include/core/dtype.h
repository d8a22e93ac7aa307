// Tensor element types, numbered as in the GGUF file format (ggml type ids), with their
// block layout. Both the GGUF reader (size validation) and the kernels (dispatch) use this
// table; the kernel function pointers live in kernels/traits.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ts {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

// Number of ids in the GGUF numbering that we know the layout of (ids above are rejected).
inline constexpr uint32_t kDTypeIdLimit = 40;

struct DTypeLayout {
  const char* name;     // "q4_K", as ggml prints it
  uint32_t block_size;  // elements per block (1 for plain types)
  uint32_t type_size;   // bytes per block
};

// Layout of a type id from a file, or nullopt when the id is unknown or the type has no
// fixed layout we support (e.g. the removed Q4_2/Q4_3 ids).
std::optional<DTypeLayout> dtype_layout(uint32_t id);

// "q4_K" etc., "unknown(7)" for ids without a layout.
const char* dtype_name(DType t);

// Parses "f32", "f16", "bf16", "q8_0", "q4_k", ... (case-insensitive).
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes in a row of `n` elements; requires n % block_size == 0 (caller validates).
inline uint64_t dtype_row_bytes(const DTypeLayout& l, uint64_t n) { return n / l.block_size * l.type_size; }

}  // namespace ts
