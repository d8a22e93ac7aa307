// What the handlers need from the serving layer, as an interface: the real one wraps
// serving::Service (server/service_backend.h); handler tests use a scripted fake that
// delivers serving::Update events by hand.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "serving/service.h"
#include "tokenizer/chat.h"

namespace ts::server {

class Backend {
 public:
  virtual ~Backend() = default;
  // Thread-safe; see serving::Service::submit/cancel.
  virtual Result<serving::RequestId> submit(serving::GenerateRequest req, serving::Callback cb) = 0;
  virtual void cancel(serving::RequestId id) = 0;
  // Prompt token ids of a completion prompt (BOS as the vocabulary asks, no special-token
  // parsing: user text stays text).
  virtual std::vector<int32_t> tokenize_prompt(const std::string& text) const = 0;
  // Chat messages rendered with the model's template (with the assistant's turn opened when
  // add_generation_prompt) and tokenized (special tokens parsed); kInvalidArgument when
  // the template refuses the message order.
  virtual Result<std::vector<int32_t>> tokenize_chat(std::span<const tok::ChatMessage> messages,
                                                     bool add_generation_prompt = true) const = 0;
  // The text of token ids as llama.cpp detokenizes (control tokens left out).
  virtual std::string detokenize(std::span<const int32_t> ids) const = 0;
  virtual int64_t max_seq_len() const = 0;
  virtual int32_t n_vocab() const = 0;
  virtual serving::Stats stats() const = 0;
};

}  // namespace ts::server
