// The linear fusion rule: finds  add(matmul(x, wᵀ), b)  with b a vector, and a relu or gelu
// right after it, and makes it one linear node (ops/fused_linear.hpp).
#include <memory>

#include "fused_linear.hpp"
#include "fusion.hpp"
#include "loom/ops/activation.hpp"
#include "loom/ops/add.hpp"
#include "loom/ops/matmul.hpp"

namespace loom::ops {
namespace {

bool only_for(const plan_view& p, std::span<const std::uint8_t> absorbable, int x, int by) {
  auto cons = p.consumers(x);
  return absorbable[x] && cons.size() == 1 && cons[0] == by;
}

std::optional<fusion> linear_rule(const plan_view& p, int root, std::span<const std::uint8_t> absorbable) {
  auto f = std::make_shared<linear_params>();
  fusion r;
  r.root = root;
  int sum = root;
  const op_entry* op = p.order[root]->op;
  if (op == &relu_entry || op == &gelu_entry) {
    f->act = op == &relu_entry ? linear_params::relu : linear_params::gelu;
    sum = p.inputs(root)[0];
    if (!only_for(p, absorbable, sum, root)) return std::nullopt;
    r.absorbed.push_back(sum);
  }
  if (p.order[sum]->op != &add_entry) return std::nullopt;
  const int prod = p.inputs(sum)[0], b = p.inputs(sum)[1];
  if (p.order[prod]->op != &matmul_entry || !only_for(p, absorbable, prod, sum)) return std::nullopt;
  const auto t = load_attrs<matmul_attrs>(*p.order[prod]);
  const int x = p.inputs(prod)[0], w = p.inputs(prod)[1];
  if (t.trans_a || !t.trans_b || p.order[w]->rank != 2 || p.order[b]->rank != 1 || p.order[x]->rank < 2) return std::nullopt;
  if (p.order[x]->elem != dtype::real || p.order[w]->elem != dtype::real || p.order[b]->elem != dtype::real)
    return std::nullopt;
  r.absorbed.push_back(prod);
  r.inputs = {x, w, b};
  r.op = f->act == linear_params::none ? &linear_entry : f->act == linear_params::relu ? &linear_relu_entry : &linear_gelu_entry;
  r.params = std::move(f);
  return r;
}

}  // namespace

fusion_rule linear_fusion_rule() { return &linear_rule; }

}  // namespace loom::ops
