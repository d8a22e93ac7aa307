#include "engine/model.h"

#include <algorithm>
#include <string>
#include <thread>

#include <sys/stat.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "engine/arch.h"
#include "engine/arch_names.h"
#include "model_impl.h"

namespace ts::engine {
namespace {

// Cells per KV block of a single-sequence context (any size works; the paged engine
// chooses its own).
constexpr int32_t kContextBlockSize = 16;
constexpr int64_t kDefaultMaxCtx = 4096;
constexpr int64_t kMaxCtx = int64_t(1) << 22;

std::string joined_architectures() {
  std::string s;
  for (const auto& n : registered_architectures()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

// --- Model -----------------------------------------------------------------------------

Model::~Model() = default;

namespace {

// Counts what was borrowed from a plan and what was packed in memory, and forwards to
// the plan (find) and to the caller's hook (packed).
class CountingHook : public PackHook {
 public:
  CountingHook(PlanFile* plan, PackHook* inner, PackInfo* info) : plan_(plan), inner_(inner), info_(info) {}
  const uint8_t* find(const kernels::WeightView& w) override {
    if (plan_) return plan_->find(w);
    return inner_ ? inner_->find(w) : nullptr;
  }
  void packed(const kernels::WeightView& w, const kernels::PackedWeight& p) override {
    if (p.panels()) {
      if (p.owns_panels()) {
        ++info_->n_packed;
        info_->bytes_packed += p.bytes_read();
      } else {
        ++info_->n_from_plan;
        info_->bytes_from_plan += p.bytes_read();
      }
    }
    if (inner_) inner_->packed(w, p);
  }

 private:
  PlanFile* plan_;
  PackHook* inner_;
  PackInfo* info_;
};

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const ModelOptions& opts) {
  return load_model(path, opts, nullptr);
}

Result<std::unique_ptr<Model>> load_model(const std::string& path, const ModelOptions& opts, PackHook* hook) {
  const int64_t t0 = now_ns();
  if (opts.n_threads < 0)
    return invalid_argument("n_threads = " + std::to_string(opts.n_threads) + " must be >= 0");
  TS_ASSIGN_OR_RETURN(std::unique_ptr<gguf::File> file, gguf::File::open(path));
  const gguf::Value* av = file->find(names::kArchitecture);
  if (!av) return data_loss(path + ": missing metadata key '" + names::kArchitecture + "'");
  const auto arch_name = av->as_string();
  if (!arch_name) return data_loss(path + ": metadata key '" + names::kArchitecture + "' is not a string");
  const std::string arch(*arch_name);
  ArchFactory factory = find_architecture(arch);
  if (!factory) {
    const std::string known = joined_architectures();
    return unimplemented("unsupported architecture '" + arch + "' (" +
                         (known.empty() ? std::string("no architectures registered: call models::register_all()")
                                        : "supported: " + known) +
                         ")");
  }
  std::unique_ptr<Architecture> a = factory();
  Status st = a->load(*file, arch);
  if (!st.is_ok()) return Status(st.code(), path + ": " + st.message());

  std::unique_ptr<Model> m(new Model());
  m->impl_ = std::make_unique<ModelImpl>();
  ModelImpl& mi = *m->impl_;
  PackInfo& info = mi.pack_info;
  if (opts.use_plan && opts.pack_weights) {
    const bool explicit_plan = !opts.plan_path.empty();
    const std::string plan_path = explicit_plan ? opts.plan_path : default_plan_path(path);
    if (!explicit_plan && !file_exists(plan_path)) {
      // No plan built: the usual in-memory packing, silently.
    } else if (explicit_plan && !file_exists(plan_path)) {
      return not_found("plan file " + plan_path + " does not exist (build it with `tierserve build -m " + path +
                       " -o " + plan_path + "`, or load without a plan)");
    } else if (Result<std::unique_ptr<PlanFile>> plan = PlanFile::open(plan_path, *file); plan.is_ok()) {
      mi.plan = std::move(*plan);
      mi.plan->advise_hugepage();
      mi.plan->advise_willneed();
      info.plan_path = plan_path;
    } else {
      info.plan_warning = plan.status().to_string();
      TS_LOG_WARN("plan %s not used, packing the weights in memory instead (rebuild it with `tierserve build -m %s`): %s",
                  plan_path.c_str(), path.c_str(), info.plan_warning.c_str());
    }
  }
  const int n_threads = opts.n_threads > 0 ? opts.n_threads : int(std::max(1u, std::thread::hardware_concurrency()));
  mi.file = std::move(file);
  mi.arch = std::move(a);
  mi.pool = std::make_unique<ThreadPool>(n_threads);
  {
    CountingHook counting(mi.plan.get(), hook, &info);
    ScopedPackHook scope(&counting);
    mi.arch->prepare(*mi.pool, opts);
  }
  // The matrices now read packed panels (a copy, or the plan's pages); the mapped GGUF is
  // read again only for embedding rows and small tensors, so let its pages leave the
  // resident set instead of holding the model in memory twice.
  if (opts.pack_weights) mi.file->release_pages();
  info.load_ms = double(now_ns() - t0) * 1e-6;
  return m;
}

const PackInfo& Model::pack_info() const { return impl_->pack_info; }

const ModelConfig& Model::config() const { return impl_->arch->config(); }
const gguf::File& Model::gguf() const { return *impl_->file; }
uint64_t Model::weight_bytes() const { return impl_->arch->weight_bytes(); }
int Model::n_threads() const { return impl_->pool->n_threads(); }
const Architecture& Model::arch() const { return *impl_->arch; }
ThreadPool& Model::pool() { return *impl_->pool; }

// --- Context ---------------------------------------------------------------------------

Context::~Context() = default;

Result<std::unique_ptr<Context>> Context::create(Model& model, int64_t n_ctx, int64_t n_batch) {
  const ModelConfig& cfg = model.config();
  if (n_ctx <= 0) n_ctx = cfg.n_ctx_train > 0 ? std::min(cfg.n_ctx_train, kDefaultMaxCtx) : kDefaultMaxCtx;
  if (n_ctx > kMaxCtx)
    return invalid_argument("context size " + std::to_string(n_ctx) + " exceeds the maximum " + std::to_string(kMaxCtx));
  if (n_batch <= 0) return invalid_argument("batch size " + std::to_string(n_batch) + " must be > 0");
  n_batch = std::min(n_batch, n_ctx);

  std::unique_ptr<Context> c(new Context());
  c->impl_ = std::make_unique<ContextImpl>();
  ContextImpl& ci = *c->impl_;
  ci.model = &model;
  ci.n_ctx = n_ctx;
  ci.n_batch = n_batch;
  ci.n_vocab = cfg.n_vocab;
  const int64_t n_blocks = (n_ctx + kContextBlockSize - 1) / kContextBlockSize;
  TS_ASSIGN_OR_RETURN(ci.kv, KvCache::create(model.arch().kv_shape(), n_blocks, kContextBlockSize));
  ci.blocks.resize(size_t(n_blocks));
  for (int64_t i = 0; i < n_blocks; ++i) ci.blocks[size_t(i)] = int32_t(i);
  ci.ws = model.arch().make_workspace(n_batch, model.n_threads());
  ci.positions.resize(size_t(n_batch));
  ci.seq.assign(size_t(n_batch), 0);
  ci.out_rows.resize(size_t(n_batch));
  ci.logits.resize(size_t(cfg.n_vocab));
  return c;
}

int64_t Context::n_ctx() const { return impl_->n_ctx; }
int64_t Context::n_batch() const { return impl_->n_batch; }
int64_t Context::n_past() const { return impl_->n_past; }
uint64_t Context::kv_bytes() const { return impl_->kv->bytes(); }

void Context::reset() {
  impl_->n_past = 0;
  impl_->n_logit_rows = 0;
}

Status Context::eval(std::span<const int32_t> tokens, bool all_logits) {
  ContextImpl& ci = *impl_;
  const int64_t n = int64_t(tokens.size());
  if (n == 0) return invalid_argument("eval: no tokens");
  if (ci.n_past + n > ci.n_ctx)
    return out_of_range("context overflow: " + std::to_string(ci.n_past) + " tokens in the cache + " +
                        std::to_string(n) + " new > context size " + std::to_string(ci.n_ctx));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = tokens[size_t(i)];
    if (t < 0 || t >= ci.n_vocab)
      return invalid_argument("token id " + std::to_string(t) + " at index " + std::to_string(i) +
                              " is outside the vocabulary [0, " + std::to_string(ci.n_vocab) + ")");
  }
  const int64_t rows = all_logits ? n : 1;
  if (ci.logits.size() < size_t(rows * ci.n_vocab)) ci.logits.resize(size_t(rows * ci.n_vocab));
  ci.n_logit_rows = rows;

  const KvSeqView view{ci.blocks, kContextBlockSize};
  const Architecture& arch = ci.model->arch();
  for (int64_t c0 = 0; c0 < n; c0 += ci.n_batch) {
    const int64_t m = std::min(ci.n_batch, n - c0);
    for (int64_t i = 0; i < m; ++i) ci.positions[size_t(i)] = int32_t(ci.n_past + i);
    ForwardBatch b;
    b.tokens = tokens.subspan(size_t(c0), size_t(m));
    b.positions = std::span<const int32_t>(ci.positions.data(), size_t(m));
    b.seq = std::span<const int32_t>(ci.seq.data(), size_t(m));
    b.seqs = std::span<const KvSeqView>(&view, 1);
    int64_t n_out = 0;
    if (all_logits) {
      for (int64_t i = 0; i < m; ++i) ci.out_rows[size_t(i)] = int32_t(i);
      n_out = m;
      b.logits = ci.logits.data() + c0 * ci.n_vocab;
    } else if (c0 + m == n) {
      ci.out_rows[0] = int32_t(m - 1);
      n_out = 1;
      b.logits = ci.logits.data();
    }
    b.out_rows = std::span<const int32_t>(ci.out_rows.data(), size_t(n_out));
    arch.forward(b, *ci.kv, *ci.ws, ci.model->pool());
    ci.n_past += m;
  }
  return Status::ok();
}

std::span<const float> Context::logits(int64_t i) const {
  const ContextImpl& ci = *impl_;
  TS_CHECK(i >= 0 && i < ci.n_logit_rows);
  return std::span<const float>(ci.logits.data() + i * ci.n_vocab, size_t(ci.n_vocab));
}

}  // namespace ts::engine
