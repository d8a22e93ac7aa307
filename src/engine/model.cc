#include "engine/model.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

#include <sys/stat.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "engine/arch.h"
#include "engine/arch_names.h"
#include "engine/engine.h"
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

// Where Matrix::pack gets its panels while a model loads, onto the model's arena (2 MiB
// pages) whenever it has room: copied from the pack when there is one, else packed there.
// Without room (or without an arena: `tierserve build` records the packing through the
// caller's hook) a matrix borrows the pack's mapping or is packed into a buffer of its own.
// Counts what came from where.
class LoadHook : public PackHook {
 public:
  LoadHook(PackFile* pack, PackHook* inner, HugeArena* arena, ThreadPool* pool, PackInfo* info)
      : pack_(pack), inner_(inner), arena_(arena), pool_(pool), info_(info) {}
  const uint8_t* find(const kernels::WeightView& w) override {
    from_plan_ = false;
    const int64_t bytes = kernels::packed_bytes(w);
    uint8_t* dst = arena_ && bytes > 0 ? arena_->alloc(size_t(bytes), 64) : nullptr;
    if (pack_) {
      if (const uint8_t* p = pack_->find(w)) {
        from_plan_ = true;
        if (!dst) {
          borrowed_plan_ = true;
          return p;
        }
        copy(p, dst, bytes);
        info_->bytes_in_arena += uint64_t(bytes);
        return dst;
      }
    }
    if (inner_) return inner_->find(w);
    if (dst) {
      kernels::pack_into(w, dst, pool_);
      info_->bytes_in_arena += uint64_t(bytes);
    }
    return dst;
  }
  void packed(const kernels::WeightView& w, const kernels::PackedWeight& p) override {
    if (p.panels()) {
      if (!from_plan_) {
        ++info_->n_packed;
        info_->bytes_packed += p.bytes_read();
      } else {
        ++info_->n_from_pack;
        info_->bytes_from_pack += p.bytes_read();
      }
    }
    if (inner_) inner_->packed(w, p);
  }

  // Whether some matrix still reads the pack's mapping.
  bool borrowed_pack() const { return borrowed_plan_; }

 private:
  // The pack's panels onto the arena, in parallel (the first touch of each 2 MiB page
  // zeroes it, which the threads share too).
  void copy(const uint8_t* src, uint8_t* dst, int64_t bytes) {
    constexpr int64_t kChunk = int64_t(1) << 20;
    const int64_t n = (bytes + kChunk - 1) / kChunk;
    auto part = [&](int64_t c0, int64_t c1, int) {
      const int64_t b0 = c0 * kChunk, b1 = std::min(bytes, c1 * kChunk);
      std::memcpy(dst + b0, src + b0, size_t(b1 - b0));
    };
    if (pool_ && n > 1) pool_->parallel_for(n, 1, part);
    else part(0, n, 0);
  }

  PackFile* pack_;
  PackHook* inner_;
  HugeArena* arena_;
  ThreadPool* pool_;
  PackInfo* info_;
  bool from_plan_ = false;      // the last find() answered from the pack
  bool borrowed_plan_ = false;  // some matrix points into the pack's mapping
};

// An upper bound of the packed bytes of the file's matrices: every tensor of a packed type
// as if it were packed (64-byte aligned each).
size_t packed_bytes_bound(const gguf::File& f) {
  size_t total = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (t.n_dims < 2 || !kernels::is_packed_type(t.type)) continue;
    const int64_t b = kernels::packed_bytes(t.type, t.n_rows(), t.ne[0]);
    if (b > 0) total += (size_t(b) + 63) / 64 * 64;
  }
  return total;
}

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
  if (opts.use_pack && opts.pack_weights) {
    const bool explicit_pack = !opts.pack_path.empty();
    const std::string pack_path = explicit_pack ? opts.pack_path : default_pack_path(path);
    if (!explicit_pack && !file_exists(pack_path)) {
      // No pack built: the usual in-memory packing, silently.
    } else if (explicit_pack && !file_exists(pack_path)) {
      return not_found("pack file " + pack_path + " does not exist (build it with `tierserve build -m " + path +
                       " -o " + pack_path + "`, or load without a pack file)");
    } else if (Result<std::unique_ptr<PackFile>> pack = PackFile::open(pack_path, *file); pack.is_ok()) {
      mi.pack = std::move(*pack);
      mi.pack->advise_hugepage();
      mi.pack->advise_willneed();
      info.pack_path = pack_path;
    } else {
      info.pack_warning = pack.status().to_string();
      TS_LOG_WARN("pack %s not used, packing the weights in memory instead (rebuild it with `tierserve build -m %s`): %s",
                  pack_path.c_str(), path.c_str(), info.pack_warning.c_str());
    }
  }
  const int n_threads = opts.n_threads > 0 ? opts.n_threads : int(std::max(1u, std::thread::hardware_concurrency()));
  mi.file = std::move(file);
  mi.arch = std::move(a);
  mi.pool = std::make_unique<ThreadPool>(n_threads);
  // Without a pack, every matrix is packed into one arena on 2 MiB pages: decode streams
  // each of them once per token, and through 4 KiB pages that costs a TLB miss every 4 KiB
  // (0.5b Q8_0 decode at 2 threads: 51.5 -> 58.7 tok/s, docs/BENCHMARKS.md).
  // A pack is copied there too unless told otherwise (ModelOptions::copy_pack).
  if (opts.pack_weights && !hook && (!mi.pack || opts.copy_pack)) {
    mi.arena = std::make_unique<HugeArena>(packed_bytes_bound(*mi.file));
    info.arena_huge = mi.arena->huge();
  }
  bool borrowed_pack = false;
  {
    LoadHook load_hook(mi.pack.get(), hook, mi.arena.get(), mi.pool.get(), &info);
    ScopedPackHook scope(&load_hook);
    mi.arch->prepare(*mi.pool, opts);
    borrowed_pack = load_hook.borrowed_pack();
  }
  // Every panel was copied: the mapping is no longer read.
  if (mi.pack && !borrowed_pack) mi.pack.reset();
  // The matrices now read packed panels (a copy, or the pack's pages); the mapped GGUF is
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
// One sequence of an Engine: the same KV, step and forward code as serving.

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
  ci.n_ctx = n_ctx;
  ci.n_batch = n_batch;
  ci.n_vocab = cfg.n_vocab;
  EngineOptions eo;
  eo.block_size = kContextBlockSize;
  eo.max_seq_len = n_ctx;
  eo.n_blocks = (n_ctx + kContextBlockSize - 1) / kContextBlockSize;
  eo.max_step_tokens = n_batch;
  eo.prefix_cache = false;
  TS_ASSIGN_OR_RETURN(ci.engine, Engine::create(model, eo));
  TS_RETURN_IF_ERROR(ci.engine->add(ContextImpl::kSeq, {}));
  return c;
}

int64_t Context::n_ctx() const { return impl_->n_ctx; }
int64_t Context::n_batch() const { return impl_->n_batch; }
int64_t Context::n_past() const { return impl_->n_past; }
uint64_t Context::kv_bytes() const { return impl_->engine->kv_stats().bytes; }

void Context::reset() {
  ContextImpl& ci = *impl_;
  TS_CHECK(ci.engine->remove(ContextImpl::kSeq).is_ok());
  TS_CHECK(ci.engine->add(ContextImpl::kSeq, {}).is_ok());
  ci.n_past = 0;
  ci.n_logit_rows = 0;
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
  StepPlan plan;
  plan.seqs.push_back({.seq = ContextImpl::kSeq,
                       .tokens = std::vector<int32_t>(tokens.begin(), tokens.end()),
                       .n_outputs = int32_t(all_logits ? n : 1)});
  StepResult r = ci.engine->step(plan);
  SeqResult& sr = r.seqs[0];
  if (sr.outcome != SeqOutcome::kOk)
    return internal_error(std::string("eval: ") + seq_outcome_name(sr.outcome) + " " + sr.error);
  ci.n_logit_rows = all_logits ? n : 1;
  ci.n_past += n;
  return Status::ok();
}

std::span<const float> Context::logits(int64_t i) const {
  const ContextImpl& ci = *impl_;
  TS_CHECK(i >= 0 && i < ci.n_logit_rows);
  return ci.engine->last_logits(0).subspan(size_t(i * ci.n_vocab), size_t(ci.n_vocab));
}

}  // namespace ts::engine
