#include "pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <utility>

#include "core/utf8.h"

namespace ts::tok::detail {
namespace {

// Unicode White_Space, the set llama.cpp's `\s` stands for (body of a character class).
constexpr std::string_view kWhiteSpace =
    R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// The regexes llama.cpp uses per pre-tokenizer (llama-vocab.cpp, llm_tokenizer_bpe), which
// reproduce the HuggingFace tokenizers' pre-tokenizers.
constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr std::string_view kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct NamedSpec {
  std::string_view name;
  const PreTokenizerSpec* spec;
};

const PreTokenizerSpec kSpecGpt2{"gpt2", {kGpt2}};
const PreTokenizerSpec kSpecLlama3{"llama3", {kLlama3}, /*ignore_merges=*/true, /*add_bos=*/true};
const PreTokenizerSpec kSpecLlama3Plain{"llama3-regex", {kLlama3}};  // dbrx, smaug
const PreTokenizerSpec kSpecQwen2{"qwen2", {kQwen2}};
const PreTokenizerSpec kSpecDeepseekCoder{
    "deepseek-coder",
    {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", R"(\p{N})"}};
const PreTokenizerSpec kSpecFalcon{"falcon", {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, R"([0-9][0-9][0-9])"}};
const PreTokenizerSpec kSpecStarcoder{"starcoder", {R"(\p{N})", kGpt2}};

// Names as written by llama.cpp's converter, grouped by the regexes they share.
const std::array<NamedSpec, 33> kNames = {{
    {"", &kSpecGpt2},
    {"default", &kSpecGpt2},
    {"gpt2", &kSpecGpt2},
    {"gpt-2", &kSpecGpt2},
    {"phi-2", &kSpecGpt2},
    {"mpt", &kSpecGpt2},
    {"olmo", &kSpecGpt2},
    {"jais", &kSpecGpt2},
    {"trillion", &kSpecGpt2},
    {"gigachat", &kSpecGpt2},
    {"exaone4", &kSpecGpt2},
    {"llama3", &kSpecLlama3},
    {"llama-v3", &kSpecLlama3},
    {"llama-bpe", &kSpecLlama3},
    {"falcon3", &kSpecLlama3},
    {"falcon-h1", &kSpecLlama3},
    {"pixtral", &kSpecLlama3},
    {"dbrx", &kSpecLlama3Plain},
    {"smaug-bpe", &kSpecLlama3Plain},
    {"qwen2", &kSpecQwen2},
    {"deepseek-r1-qwen", &kSpecQwen2},
    {"stablelm2", &kSpecQwen2},
    {"megrez", &kSpecQwen2},
    {"hunyuan", &kSpecQwen2},
    {"deepseek-coder", &kSpecDeepseekCoder},
    {"falcon", &kSpecFalcon},
    {"starcoder", &kSpecStarcoder},
    {"refact", &kSpecStarcoder},
    {"command-r", &kSpecStarcoder},
    {"smollm", &kSpecStarcoder},
    {"codeshell", &kSpecStarcoder},
    {"exaone", &kSpecStarcoder},
    {"minerva-7b", &kSpecStarcoder},
}};

}  // namespace

const PreTokenizerSpec* find_pre_tokenizer(std::string_view pre) {
  for (const NamedSpec& n : kNames)
    if (n.name == pre) return n.spec;
  return nullptr;
}

Result<std::string> translate_regex(std::string_view re) {
  std::string out;
  out.reserve(re.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      const char n = re[++i];
      if (n == 's') {
        if (in_class) {
          out += kWhiteSpace;
        } else {
          out += '[';
          out += kWhiteSpace;
          out += ']';
        }
      } else if (n == 'S') {
        if (in_class) return invalid_argument("regex: \\S inside a character class is not supported");
        out += "[^";
        out += kWhiteSpace;
        out += ']';
      } else {
        out += c;
        out += n;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
    } else if (c == ']' && in_class) {
      in_class = false;
    }
    out += c;
  }
  if (in_class) return invalid_argument("regex: unterminated character class");
  return out;
}

// One compiled pattern, shared read-only by all threads (PCRE2 allows that; each match
// brings its own match data).
class Regex {
 public:
  static Result<std::unique_ptr<Regex>> compile(std::string_view llama_re) {
    TS_ASSIGN_OR_RETURN(std::string pattern, translate_regex(llama_re));
    int err = 0;
    PCRE2_SIZE err_off = 0;
    const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     options, &err, &err_off, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return internal_error("pre-tokenizer regex does not compile at offset " +
                            std::to_string(err_off) + ": " + reinterpret_cast<char*>(msg));
    }
    auto r = std::unique_ptr<Regex>(new Regex(code));
    // JIT is an optimization: without it (unsupported CPU) the interpreter runs.
    r->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    return r;
  }
  ~Regex() { pcre2_code_free(code_); }

  // First match in subject[start, n). False when there is none, and also when PCRE2 gives
  // up (resource limits on pathological input): the rest then stays one unmatched piece,
  // the same way every time.
  bool find(const char* subject, size_t n, size_t start, pcre2_match_data* md, size_t& ms,
            size_t& me) const {
    auto s = reinterpret_cast<PCRE2_SPTR>(subject);
    int rc = pcre2_match(code_, s, n, start, 0, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(code_, s, n, start, PCRE2_NO_JIT, md, nullptr);
    if (rc < 0) return false;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    ms = ov[0];
    me = ov[1];
    return ms <= me && me <= n && ms >= start;
  }

 private:
  explicit Regex(pcre2_code* code) : code_(code) {}
  pcre2_code* code_;
  bool jit_ = false;
};

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::create(const PreTokenizerSpec& spec) {
  std::unique_ptr<PreTokenizer> p(new PreTokenizer());
  for (std::string_view re : spec.regexes) {
    TS_ASSIGN_OR_RETURN(auto r, Regex::compile(re));
    p->regexes_.push_back(std::move(r));
  }
  return p;
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  struct MdDeleter {
    void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
  };
  // The whole-match offsets are all we read; with a short ovector PCRE2 still sets them.
  std::unique_ptr<pcre2_match_data, MdDeleter> md(pcre2_match_data_create(1, nullptr));

  std::vector<std::pair<size_t, size_t>> pieces{{0, text.size()}}, next;  // (offset, length)
  for (const auto& re : regexes_) {
    next.clear();
    for (const auto& [off, len] : pieces) {
      const char* sub = text.data() + off;
      size_t pos = 0, done = 0;  // search from `pos`; [0, done) is already emitted
      size_t ms = 0, me = 0;
      while (pos < len && re->find(sub, len, pos, md.get(), ms, me)) {
        if (me == ms) {  // an empty match splits nothing; step over one character
          pos = ms + utf8::char_len(std::string_view(sub, len), ms);
          continue;
        }
        if (ms > done) next.emplace_back(off + done, ms - done);
        next.emplace_back(off + ms, me - ms);
        done = pos = me;
      }
      if (done < len) next.emplace_back(off + done, len - done);
    }
    pieces.swap(next);
  }
  for (const auto& [off, len] : pieces) out.push_back(text.substr(off, len));
}

}  // namespace ts::tok::detail
