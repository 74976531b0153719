// The fusion rules loom applies (see loom/graph/fusion.hpp): the library's own, added through
// add_fusion_rule like a user's, and the registry that orders them.
#include <algorithm>
#include <mutex>
#include <string>

#include "loom/core/errors.hpp"
#include "loom/graph/fusion.hpp"

namespace loom {
namespace ops {
fusion_match attention_fusion_rule();  // attention_fusion.cpp
fusion_match linear_fusion_rule();     // linear_fusion.cpp
fusion_match cross_entropy_fusion_rule();  // cross_entropy_fusion.cpp
}  // namespace ops

namespace {
struct rule_registry {
  std::mutex lock;
  std::vector<fusion_rule> rules;  // sorted: priority, then name
};

void insert(rule_registry& r, const fusion_rule& rule) {
  if (!rule.match) throw error("add_fusion_rule: rule \"" + std::string(rule.name) + "\" has no match function");
  for (const fusion_rule& f : r.rules)
    if (f.name == rule.name) throw error("add_fusion_rule: a rule named \"" + std::string(rule.name) + "\" exists already");
  auto at = std::find_if(r.rules.begin(), r.rules.end(), [&](const fusion_rule& f) {
    return f.priority > rule.priority || (f.priority == rule.priority && f.name > rule.name);
  });
  r.rules.insert(at, rule);
}

// The library's rules are added on first use, so that they are there in any program that runs
// an executor, whichever object files the linker kept.
rule_registry& registry() {
  static rule_registry r;
  static const bool library_rules = [] {
    insert(r, {.name = "attention", .match = ops::attention_fusion_rule(), .priority = 100});
    insert(r, {.name = "linear", .match = ops::linear_fusion_rule(), .priority = 200});
    insert(r, {.name = "linear_cross_entropy", .match = ops::cross_entropy_fusion_rule(), .priority = 300});
    return true;
  }();
  (void)library_rules;
  return r;
}
}  // namespace

void add_fusion_rule(const fusion_rule& rule) {
  rule_registry& r = registry();
  std::lock_guard guard(r.lock);
  insert(r, rule);
}

std::vector<fusion_rule> fusion_rules() {
  rule_registry& r = registry();
  std::lock_guard guard(r.lock);
  return r.rules;
}

}  // namespace loom
