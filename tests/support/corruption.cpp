#include "corruption.hpp"

#include <algorithm>

#include "loom/core/kernel.hpp"
#include "../../core/registry.hpp"
#include "loom/core/node_desc.hpp"

namespace loom::testing {
namespace {

// The op's own backward (from its entry), twice: the second run accumulates.
void run_twice(const ops::op_args<double>& a) {
  const kernel_fn<double> backward = a.node->op->f64.backward;
  backward(a);
  ops::op_args<double> again = a;
  again.din_fresh = {};
  backward(again);
}

// No gradient: buffers this backward was to write first are left at zero.
void skip(const ops::op_args<double>& a) {
  for (std::size_t i = 0; i < a.din.size(); ++i)
    if (a.din[i] && a.fresh(static_cast<int>(i))) std::fill(a.din[i], a.din[i] + a.in_dims[i].size(), 0.0);
}

}  // namespace

scoped_corruption::scoped_corruption(const op_entry& op, corruption how) : op_(op) {
  detail::set_backward_override(op, how == corruption::run_twice ? &run_twice : &skip);
}
scoped_corruption::~scoped_corruption() { detail::set_backward_override(op_, nullptr); }

}  // namespace loom::testing
