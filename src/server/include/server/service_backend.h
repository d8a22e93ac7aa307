// The Backend of a real server: serving::Service, with its tokenizer and chat template.
#pragma once

#include "server/backend.h"

namespace ts::server {

class ServiceBackend final : public Backend {
 public:
  explicit ServiceBackend(serving::Service& s) : s_(s) {}
  Result<serving::RequestId> submit(serving::GenerateRequest req, serving::Callback cb) override;
  void cancel(serving::RequestId id) override;
  std::vector<int32_t> tokenize_prompt(const std::string& text) const override;
  Result<std::vector<int32_t>> tokenize_chat(std::span<const tok::ChatMessage> messages,
                                             bool add_generation_prompt = true) const override;
  std::string detokenize(std::span<const int32_t> ids) const override;
  int64_t max_seq_len() const override;
  int32_t n_vocab() const override;
  serving::Stats stats() const override;

 private:
  serving::Service& s_;
};

}  // namespace ts::server
