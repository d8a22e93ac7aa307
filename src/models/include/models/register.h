// The architectures of src/models. Call register_all() once before engine::Model::load
// (explicit, because static registration objects in a static library get dropped by the
// linker).
#pragma once

namespace ts::models {

// Registers every architecture below with the engine's registry. Idempotent.
void register_all();

// One per file.
void register_llama();  // "llama", "mistral"
void register_qwen2();  // "qwen2"
void register_qwen3();  // "qwen3"
void register_gemma3();  // "gemma3"

}  // namespace ts::models
