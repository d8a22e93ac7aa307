// Binding an architecture's weights and hyperparameters from a GGUF file, with the checks
// every architecture needs: each tensor present, of the expected shape and of a type we have
// kernels for; each hyperparameter present, of an integer/float type and in range. Error
// messages name the tensor or key.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
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

}  // namespace ts::engine
