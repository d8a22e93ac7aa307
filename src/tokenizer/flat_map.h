// Open-addressing hash tables built once at load and then only read: text -> token id
// (keys are views into one owned byte pool) and uint64 -> uint64 (BPE merges keyed on the
// pair of token ids, trie edges). Linear probing at load factor <= 1/2; a 262,144-token
// vocabulary indexes in a few milliseconds, without one allocation per token.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ts::tok::detail {

inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

inline size_t table_capacity(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap <<= 1;
  return cap;
}

// All token texts back to back; text i is bytes[offsets[i], offsets[i + 1]).
struct TextPool {
  std::string bytes;
  std::vector<uint32_t> offsets{0};

  size_t size() const { return offsets.size() - 1; }
  std::string_view at(size_t i) const {
    return std::string_view(bytes).substr(offsets[i], offsets[i + 1] - offsets[i]);
  }
  void push(std::string_view s) {
    bytes.append(s);
    offsets.push_back(uint32_t(bytes.size()));
  }
};

// Text -> index into a TextPool. With duplicate texts the last index wins.
class TextIndex {
 public:
  void build(const TextPool& pool) {
    const size_t n = pool.size();
    slots_.assign(table_capacity(n), 0);
    mask_ = slots_.size() - 1;
    for (size_t i = 0; i < n; ++i) {
      const std::string_view s = pool.at(i);
      const uint64_t h = hash(s);
      const uint64_t tag = h >> 32;
      for (size_t j = h & mask_;; j = (j + 1) & mask_) {
        const uint64_t slot = slots_[j];
        if (slot == 0) {
          slots_[j] = (tag << 32) | (i + 1);
          break;
        }
        if ((slot >> 32) == tag && pool.at((slot & 0xffffffffu) - 1) == s) {
          slots_[j] = (tag << 32) | (i + 1);  // duplicate text: the later id wins
          break;
        }
      }
    }
  }

  // -1 when absent.
  int64_t find(const TextPool& pool, std::string_view s) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash(s);
    const uint64_t tag = h >> 32;
    for (size_t j = h & mask_;; j = (j + 1) & mask_) {
      const uint64_t slot = slots_[j];
      if (slot == 0) return -1;
      if ((slot >> 32) == tag) {
        const size_t i = (slot & 0xffffffffu) - 1;
        if (pool.at(i) == s) return int64_t(i);
      }
    }
  }

 private:
  static uint64_t hash(std::string_view s) { return mix64(std::hash<std::string_view>{}(s)); }

  std::vector<uint64_t> slots_;  // (hash >> 32) << 32 | (index + 1); 0 = empty
  size_t mask_ = 0;
};

// uint64 -> uint64; the key ~0 is reserved. Insert keeps the first value for a key.
class U64Map {
 public:
  static constexpr uint64_t kEmpty = ~0ull;

  void reserve(size_t n) {
    keys_.assign(table_capacity(n), kEmpty);
    values_.assign(keys_.size(), 0);
    mask_ = keys_.size() - 1;
    size_ = 0;
  }
  // Returns false (and keeps the old value) when the key exists.
  bool insert(uint64_t key, uint64_t value) {
    if (2 * (size_ + 1) > keys_.size()) grow();
    for (size_t j = mix64(key) & mask_;; j = (j + 1) & mask_) {
      if (keys_[j] == kEmpty) {
        keys_[j] = key;
        values_[j] = value;
        ++size_;
        return true;
      }
      if (keys_[j] == key) return false;
    }
  }
  const uint64_t* find(uint64_t key) const {
    if (keys_.empty()) return nullptr;
    for (size_t j = mix64(key) & mask_;; j = (j + 1) & mask_) {
      if (keys_[j] == key) return &values_[j];
      if (keys_[j] == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  void grow() {
    std::vector<uint64_t> keys = std::move(keys_), values = std::move(values_);
    reserve(keys.empty() ? 8 : keys.size());
    for (size_t j = 0; j < keys.size(); ++j)
      if (keys[j] != kEmpty) insert(keys[j], values[j]);
  }

  std::vector<uint64_t> keys_;
  std::vector<uint64_t> values_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace ts::tok::detail
