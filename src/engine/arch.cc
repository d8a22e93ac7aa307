#include "engine/arch.h"

#include <map>
#include <mutex>

namespace ts::engine {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, ArchFactory, std::less<>> by_name;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_architecture(std::string_view name, ArchFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  r.by_name[std::string(name)] = factory;
}

ArchFactory find_architecture(std::string_view name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  auto it = r.by_name.find(name);
  return it == r.by_name.end() ? nullptr : it->second;
}

std::vector<std::string> registered_architectures() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  std::vector<std::string> out;
  for (const auto& [name, f] : r.by_name) out.push_back(name);
  return out;
}

}  // namespace ts::engine
