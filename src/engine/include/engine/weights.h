// Binding an architecture's weights and hyperparameters from a GGUF file, with the checks
// every architecture needs: each tensor present, of the expected shape and of a type we have
// kernels for; each hyperparameter present, of an integer/float type and in range. Error
// messages name the tensor or key.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "engine/model.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"

namespace ts::engine {

class WeightBinder {
 public:
  explicit WeightBinder(const gguf::File& f) : f_(f) {}

  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }

  // A matrix of n_rows rows of n_cols elements (GGUF shape [n_cols, n_rows]) of any type
  // the kernels support. kDataLoss when missing or misshapen, kUnimplemented for the type.
  Result<kernels::WeightView> matrix(const std::string& name, int64_t n_cols, int64_t n_rows);

  // An F32 vector of n elements (norm weights, biases).
  Result<const float*> vector(const std::string& name, int64_t n);
  // Same, but nullptr when the tensor is absent.
  Result<const float*> optional_vector(const std::string& name, int64_t n);

  // Bytes of all tensors bound so far.
  uint64_t bound_bytes() const { return bound_bytes_; }

 private:
  Result<const gguf::TensorInfo*> find(const std::string& name) const;

  const gguf::File& f_;
  uint64_t bound_bytes_ = 0;
};

// Hyperparameters. Each fails with kDataLoss naming the key when it is absent (unless a
// default is given), of the wrong type, or outside [lo, hi].
Result<int64_t> read_int(const gguf::File& f, const std::string& key, int64_t lo, int64_t hi);
Result<int64_t> read_int_or(const gguf::File& f, const std::string& key, int64_t dflt, int64_t lo,
                            int64_t hi);
Result<double> read_float_or(const gguf::File& f, const std::string& key, double dflt, double lo,
                             double hi);

// The hyperparameters every decoder-only transformer shares, into `cfg` (names in
// arch_names.h): n_embd, n_layer, n_head, n_head_kv (a divisor of n_head), n_ff, head_dim
// (key_length, else n_embd / n_head; value_length must equal it), n_ctx_train, rms_eps
// (default `default_rms_eps`), rope_freq_base, n_rot (even). Returns the linear RoPE
// frequency scale (1 / factor; kUnimplemented for other scaling types).
Result<double> read_transformer_hparams(const gguf::File& f, const std::string& arch, double default_rms_eps,
                                        ModelConfig* cfg);

}  // namespace ts::engine
