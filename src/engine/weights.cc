#include "engine/weights.h"

#include <cmath>
#include <string>

#include "engine/arch_names.h"
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

Result<double> read_transformer_hparams(const gguf::File& f, const std::string& arch, double default_rms_eps,
                                        ModelConfig* cfg) {
  using names::key;
  ModelConfig& c = *cfg;
  c = ModelConfig{};
  c.arch = arch;
  if (auto n = f.get_string(names::kModelName); n.is_ok()) c.name = std::string(*n);

  TS_ASSIGN_OR_RETURN(c.n_embd, read_int(f, key(names::kEmbeddingLength, arch), 1, 1 << 20));
  TS_ASSIGN_OR_RETURN(c.n_layer, read_int(f, key(names::kBlockCount, arch), 1, 4096));
  TS_ASSIGN_OR_RETURN(c.n_head, read_int(f, key(names::kHeadCount, arch), 1, 4096));
  TS_ASSIGN_OR_RETURN(c.n_head_kv, read_int_or(f, key(names::kHeadCountKv, arch), c.n_head, 1, c.n_head));
  if (c.n_head % c.n_head_kv != 0)
    return data_loss(key(names::kHeadCount, arch) + " = " + std::to_string(c.n_head) + " is not a multiple of " +
                     key(names::kHeadCountKv, arch) + " = " + std::to_string(c.n_head_kv));
  TS_ASSIGN_OR_RETURN(c.n_ff, read_int(f, key(names::kFeedForwardLength, arch), 1, 1 << 24));
  const int64_t default_hd = c.n_embd % c.n_head == 0 ? c.n_embd / c.n_head : 0;
  TS_ASSIGN_OR_RETURN(c.head_dim, read_int_or(f, key(names::kKeyLength, arch), default_hd, 0, 4096));
  if (c.head_dim <= 0)
    return data_loss(key(names::kEmbeddingLength, arch) + " is not a multiple of the head count and " +
                     key(names::kKeyLength, arch) + " is absent");
  TS_ASSIGN_OR_RETURN(const int64_t v_len, read_int_or(f, key(names::kValueLength, arch), c.head_dim, 1, 4096));
  if (v_len != c.head_dim) return unimplemented(key(names::kValueLength, arch) + " != " + key(names::kKeyLength, arch));
  TS_ASSIGN_OR_RETURN(c.n_ctx_train, read_int_or(f, key(names::kContextLength, arch), 0, 0, 1 << 26));
  TS_ASSIGN_OR_RETURN(c.rms_eps, read_float_or(f, key(names::kRmsEps, arch), default_rms_eps, 0.0, 1.0));
  TS_ASSIGN_OR_RETURN(c.rope_freq_base, read_float_or(f, key(names::kRopeFreqBase, arch), 10000.0, 1e-3, 1e12));
  TS_ASSIGN_OR_RETURN(c.n_rot, read_int_or(f, key(names::kRopeDimensionCount, arch), c.head_dim, 2, c.head_dim));
  if (c.n_rot % 2 != 0) return data_loss(key(names::kRopeDimensionCount, arch) + " is odd");

  // rope.scaling.type + factor, or the older rope.scale_linear.
  double factor = 1.0;
  if (const gguf::Value* st = f.find(key(names::kRopeScalingType, arch))) {
    const auto type = st->as_string();
    if (!type) return data_loss(key(names::kRopeScalingType, arch) + " is not a string");
    if (*type == "linear") {
      TS_ASSIGN_OR_RETURN(factor, read_float_or(f, key(names::kRopeScalingFactor, arch), 1.0, 1e-6, 1e6));
    } else if (*type != "none") {
      return unimplemented("RoPE scaling type '" + std::string(*type) + "'");
    }
  } else {
    TS_ASSIGN_OR_RETURN(factor, read_float_or(f, key(names::kRopeScaleLinear, arch), 1.0, 1e-6, 1e6));
  }
  return 1.0 / factor;
}

}  // namespace ts::engine
