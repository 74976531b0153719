// The linear fusion rule: finds  add(matmul(x, wᵀ), b)  with b a vector, and a relu or gelu
// right after it, or a residual added after it — add(r, ·) or add(·, r) with r of the output's
// shape — and makes it one linear node (ops/fused_linear.hpp).
#include <memory>

#include "fused_linear.hpp"
#include "loom/graph/fusion.hpp"
#include "loom/ops/activation.hpp"
#include "loom/ops/add.hpp"
#include "loom/ops/matmul.hpp"

namespace loom::ops {
namespace {

/// add(matmul(x, wᵀ), b) at node `sum` (b a vector, the matmul read by the add only).
struct bias_product {
  int x, w, b, prod;
};
std::optional<bias_product> bias_product_at(const plan_view& p, int sum, std::span<const std::uint8_t> absorbable) {
  if (p.order[sum]->op != &entry_of<add_op>) return std::nullopt;
  const int prod = p.inputs(sum)[0], b = p.inputs(sum)[1];
  if (p.order[prod]->op != &entry_of<matmul_def> || !only_for(p, absorbable, prod, sum)) return std::nullopt;
  const auto t = load_attrs<matmul_attrs>(*p.order[prod]);
  const int x = p.inputs(prod)[0], w = p.inputs(prod)[1];
  if (t.trans_a || !t.trans_b || p.order[w]->rank != 2 || p.order[b]->rank != 1 || p.order[x]->rank < 2) return std::nullopt;
  if (p.order[x]->elem != dtype::real || p.order[w]->elem != dtype::real || p.order[b]->elem != dtype::real)
    return std::nullopt;
  return bias_product{x, w, b, prod};
}

/// A residual at `root`: add(r, z) or add(z, r) with z = x wᵀ + b read by the add only, and r,
/// z and the sum of one shape (no broadcast).
std::optional<fusion> residual_at(const plan_view& p, int root, std::span<const std::uint8_t> absorbable) {
  if (p.order[root]->op != &entry_of<add_op>) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const int z = p.inputs(root)[side], r = p.inputs(root)[1 - side];
    if (z == r || !only_for(p, absorbable, z, root) || !same_dims(p, z, root) || !same_dims(p, r, root) ||
        p.order[r]->elem != dtype::real)
      continue;
    if (const auto m = bias_product_at(p, z, absorbable)) {
      auto f = std::make_shared<linear_params>();
      f->residual = true;
      fusion out;
      out.root = root;
      out.absorbed = {z, m->prod};
      out.inputs = {m->x, m->w, m->b, r};
      out.op = &entry_of<linear_residual_op>;
      out.params = std::move(f);
      return out;
    }
  }
  return std::nullopt;
}

std::optional<fusion> linear_rule(const plan_view& p, int root, std::span<const std::uint8_t> absorbable) {
  if (auto r = residual_at(p, root, absorbable)) return r;
  auto f = std::make_shared<linear_params>();
  fusion r;
  r.root = root;
  int sum = root;
  const op_entry* op = p.order[root]->op;
  if (op == &entry_of<relu_op> || op == &entry_of<gelu_op>) {
    f->act = op == &entry_of<relu_op> ? linear_params::relu : linear_params::gelu;
    sum = p.inputs(root)[0];
    if (!only_for(p, absorbable, sum, root)) return std::nullopt;
    r.absorbed.push_back(sum);
  }
  const auto m = bias_product_at(p, sum, absorbable);
  if (!m) return std::nullopt;
  r.absorbed.push_back(m->prod);
  r.inputs = {m->x, m->w, m->b};
  r.op = f->act == linear_params::none ? &entry_of<linear_op> : f->act == linear_params::relu ? &entry_of<linear_relu_op> : &entry_of<linear_gelu_op>;
  r.params = std::move(f);
  return r;
}

}  // namespace

fusion_match linear_fusion_rule() { return &linear_rule; }

}  // namespace loom::ops
