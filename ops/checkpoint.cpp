// checkpoint kernels. See include/loom/ops/checkpoint.hpp.
//   forward:  y is input 0's buffer (a view): nothing to do
//   backward: d input0 (+)= dy (nothing when the executor shares the two gradients); the
//             block's inputs get no contribution (zeros when this is their first)
#include <algorithm>

#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/checkpoint.hpp"
#include "loom/core/parallel.hpp"
#include "pass_gradient.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers

template <class T>
void forward_kernel(checkpoint_op, const op_args<T>& a) {
  const T* y = a.input(0);
  if (a.out == y) return;  // a view of its input, as the executor places it
  std::copy(y, y + a.out_dims.size(), a.out);
}

template <class T>
void backward_kernel(checkpoint_op, const op_args<T>& a) {
  const T* dy = a.dout;
  if (T* dx = a.grad(0); dx && dx != dy) pass_gradient(dy, dx, a.out_dims.size(), a.fresh(0));
  for (std::size_t k = 1; k < a.din.size(); ++k)
    if (a.din[k] && a.fresh(static_cast<int>(k))) std::fill(a.din[k], a.din[k] + a.in_dims[k].size(), T(0));
}

template struct compiled_kernels<checkpoint_op>;

}  // namespace loom
