#include "engine/weights.h"

#include <cmath>
#include <string>

#include "kernels/traits.h"

namespace ts::engine {
namespace {

std::string shape_of(int64_t a, int64_t b) {
  return "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
}

}  // namespace

Result<const gguf::TensorInfo*> WeightBinder::find(const std::string& name) const {
  const gguf::TensorInfo* t = f_.find_tensor(name);
  if (!t) return data_loss("missing tensor '" + name + "'");
  return t;
}

Result<kernels::WeightView> WeightBinder::matrix(const std::string& name, int64_t n_cols, int64_t n_rows) {
  TS_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, find(name));
  if (t->n_dims != 2 || t->ne[0] != n_cols || t->ne[1] != n_rows)
    return data_loss("tensor '" + name + "' has shape " + t->shape_string() + ", expected " +
                     shape_of(n_cols, n_rows));
  if (!kernels::is_supported(t->type))
    return unimplemented("tensor '" + name + "' has unsupported type " + dtype_name(t->type));
  const auto& tr = kernels::traits(t->type);
  if (n_cols % tr.block_size != 0)
    return data_loss("tensor '" + name + "': row of " + std::to_string(n_cols) +
                     " elements is not a whole number of " + dtype_name(t->type) + " blocks");
  const uint64_t need = uint64_t(kernels::row_bytes(t->type, n_cols)) * uint64_t(n_rows);
  if (t->n_bytes < need || !t->data)
    return data_loss("tensor '" + name + "' holds " + std::to_string(t->n_bytes) + " bytes, expected " +
                     std::to_string(need));
  bound_bytes_ += need;
  kernels::WeightView w;
  w.data = t->data;
  w.type = t->type;
  w.n_cols = n_cols;
  w.n_rows = n_rows;
  return w;
}

Result<const float*> WeightBinder::vector(const std::string& name, int64_t n) {
  TS_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, find(name));
  if (t->n_elements() != n || t->ne[0] != n)
    return data_loss("tensor '" + name + "' has shape " + t->shape_string() + ", expected [" +
                     std::to_string(n) + "]");
  if (t->type != DType::F32)
    return unimplemented("tensor '" + name + "' has type " + dtype_name(t->type) + ", expected f32");
  if (t->n_bytes < uint64_t(n) * 4 || !t->data)
    return data_loss("tensor '" + name + "' is truncated");
  if (reinterpret_cast<uintptr_t>(t->data) % alignof(float) != 0)
    return data_loss("tensor '" + name + "' is not 4-byte aligned");
  bound_bytes_ += uint64_t(n) * 4;
  return reinterpret_cast<const float*>(t->data);
}

Result<const float*> WeightBinder::optional_vector(const std::string& name, int64_t n) {
  if (!has(name)) return static_cast<const float*>(nullptr);
  return vector(name, n);
}

Result<int64_t> read_int(const gguf::File& f, const std::string& key, int64_t lo, int64_t hi) {
  const gguf::Value* v = f.find(key);
  if (!v) return data_loss("missing metadata key '" + key + "'");
  const auto i = v->as_int();
  if (!i) return data_loss("metadata key '" + key + "' has type " + gguf::value_type_name(v->type()) +
                           ", expected an integer");
  if (*i < lo || *i > hi)
    return data_loss("metadata key '" + key + "' = " + std::to_string(*i) + " is outside [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return *i;
}

Result<int64_t> read_int_or(const gguf::File& f, const std::string& key, int64_t dflt, int64_t lo,
                            int64_t hi) {
  if (!f.find(key)) return dflt;
  return read_int(f, key, lo, hi);
}

Result<double> read_float_or(const gguf::File& f, const std::string& key, double dflt, double lo,
                             double hi) {
  const gguf::Value* v = f.find(key);
  if (!v) return dflt;
  const auto x = v->as_float();
  if (!x) return data_loss("metadata key '" + key + "' has type " + gguf::value_type_name(v->type()) +
                           ", expected a number");
  if (!std::isfinite(*x) || *x < lo || *x > hi)
    return data_loss("metadata key '" + key + "' = " + std::to_string(*x) + " is outside [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return *x;
}

}  // namespace ts::engine
