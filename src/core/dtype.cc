#include "core/dtype.h"

#include <cctype>
#include <string>

namespace ts {
namespace {

struct Entry {
  DType type;
  DTypeLayout layout;
};

// Layouts from the GGUF format: a K-quant super-block holds 256 elements.
constexpr Entry kTable[] = {
    {DType::F32, {"f32", 1, 4}},       {DType::F16, {"f16", 1, 2}},
    {DType::Q4_0, {"q4_0", 32, 18}},   {DType::Q4_1, {"q4_1", 32, 20}},
    {DType::Q5_0, {"q5_0", 32, 22}},   {DType::Q5_1, {"q5_1", 32, 24}},
    {DType::Q8_0, {"q8_0", 32, 34}},   {DType::Q8_1, {"q8_1", 32, 36}},
    {DType::Q2_K, {"q2_K", 256, 84}},  {DType::Q3_K, {"q3_K", 256, 110}},
    {DType::Q4_K, {"q4_K", 256, 144}}, {DType::Q5_K, {"q5_K", 256, 176}},
    {DType::Q6_K, {"q6_K", 256, 210}}, {DType::Q8_K, {"q8_K", 256, 292}},
    {DType::I8, {"i8", 1, 1}},         {DType::I16, {"i16", 1, 2}},
    {DType::I32, {"i32", 1, 4}},       {DType::I64, {"i64", 1, 8}},
    {DType::F64, {"f64", 1, 8}},       {DType::BF16, {"bf16", 1, 2}},
};

}  // namespace

std::optional<DTypeLayout> dtype_layout(uint32_t id) {
  for (const auto& e : kTable)
    if (uint32_t(e.type) == id) return e.layout;
  return std::nullopt;
}

const char* dtype_name(DType t) {
  auto l = dtype_layout(uint32_t(t));
  return l ? l->name : "unknown";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string lower;
  for (char c : name) lower += char(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& e : kTable) {
    std::string n;
    for (const char* p = e.layout.name; *p; ++p) n += char(std::tolower(static_cast<unsigned char>(*p)));
    if (n == lower) return e.type;
  }
  return std::nullopt;
}

}  // namespace ts
