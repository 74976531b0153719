// The cross-entropy fusion rule: finds  cross_entropy(add(matmul(x, wᵀ), b), target)  or
// cross_entropy(matmul(x, wᵀ), target)  — a head and its loss, the logits read by the loss
// only — and makes it one linear_cross_entropy node (ops/fused_cross_entropy.hpp).
#include <memory>

#include "fused_cross_entropy.hpp"
#include "loom/graph/fusion.hpp"
#include "loom/ops/add.hpp"
#include "loom/ops/cross_entropy.hpp"
#include "loom/ops/matmul.hpp"

namespace loom::ops {
namespace {

// x wᵀ at node `prod`, read by node `by` only: x [.., K] real, w [V, K] a real matrix (not x).
bool head_product(const plan_view& p, int prod, int by, std::span<const std::uint8_t> absorbable) {
  if (p.order[prod]->op != &entry_of<matmul_def> || !only_for(p, absorbable, prod, by)) return false;
  const auto t = load_attrs<matmul_attrs>(*p.order[prod]);
  const int x = p.inputs(prod)[0], w = p.inputs(prod)[1];
  return !t.trans_a && t.trans_b && x != w && p.order[w]->rank == 2 && p.order[x]->rank >= 2 &&
         p.order[x]->elem == dtype::real && p.order[w]->elem == dtype::real;
}

std::optional<fusion> cross_entropy_rule(const plan_view& p, int root, std::span<const std::uint8_t> absorbable) {
  if (p.order[root]->op != &entry_of<cross_entropy_def>) return std::nullopt;
  const int logits = p.inputs(root)[0], target = p.inputs(root)[1];
  auto f = std::make_shared<linear_cross_entropy_params>();
  f->attrs = load_attrs<cross_entropy_attrs>(*p.order[root]);
  f->forced_rows = linear_cross_entropy_forced_rows();
  fusion r;
  r.root = root;
  r.op = &entry_of<linear_cross_entropy_op>;
  int prod = logits;
  if (p.order[logits]->op == &entry_of<add_op>) {  // a bias vector [V] added to the product
    if (!only_for(p, absorbable, logits, root)) return std::nullopt;
    prod = p.inputs(logits)[0];
    const int b = p.inputs(logits)[1];
    if (p.order[b]->rank != 1 || p.order[b]->elem != dtype::real || !same_dims(p, prod, logits) ||
        p.order[prod]->op != &entry_of<matmul_def> || !same_dim(p.dims[b][0], p.dims[p.inputs(prod)[1]][0]))
      return std::nullopt;
    f->bias = true;
    r.absorbed.push_back(logits);
  }
  if (!head_product(p, prod, f->bias ? logits : root, absorbable)) return std::nullopt;
  r.absorbed.push_back(prod);
  r.inputs = {p.inputs(prod)[0], p.inputs(prod)[1]};
  if (f->bias) r.inputs.push_back(p.inputs(logits)[1]);
  r.inputs.push_back(target);
  r.params = std::move(f);
  return r;
}

}  // namespace

fusion_match cross_entropy_fusion_rule() { return &cross_entropy_rule; }

}  // namespace loom::ops
