#include "server/service_backend.h"

namespace ts::server {

Result<serving::RequestId> ServiceBackend::submit(serving::GenerateRequest req, serving::Callback cb) {
  return s_.submit(std::move(req), std::move(cb));
}

void ServiceBackend::cancel(serving::RequestId id) { s_.cancel(id); }

std::vector<int32_t> ServiceBackend::tokenize_prompt(const std::string& text) const {
  return s_.tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/false);
}

Result<std::vector<int32_t>> ServiceBackend::tokenize_chat(std::span<const tok::ChatMessage> messages,
                                                           bool add_generation_prompt) const {
  const tok::ChatTemplate& t = s_.chat_template();
  Result<std::string> text = t.render(messages, add_generation_prompt);
  if (!text.is_ok()) return text.status();
  std::vector<int32_t> ids = s_.tokenizer().encode(*text, /*add_special=*/true, /*parse_special=*/true);
  // A template that writes {{ bos_token }} for a vocabulary that does not add BOS itself.
  const tok::Tokenizer& tk = s_.tokenizer();
  if (t.template_adds_bos() && !tk.add_bos() && tk.bos_id() >= 0 && (ids.empty() || ids.front() != tk.bos_id()))
    ids.insert(ids.begin(), tk.bos_id());
  return ids;
}

std::string ServiceBackend::detokenize(std::span<const int32_t> ids) const { return s_.tokenizer().decode(ids); }

int64_t ServiceBackend::max_seq_len() const { return s_.max_seq_len(); }

int32_t ServiceBackend::n_vocab() const { return int32_t(s_.model().config().n_vocab); }

serving::Stats ServiceBackend::stats() const { return s_.stats(); }

}  // namespace ts::server
