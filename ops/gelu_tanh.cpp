// gelu_tanh's kernels (include/loom/ops/gelu_tanh.hpp states the math), compiled here once for
// float and double; pointwise.hpp holds the loops.
#include "loom/ops/gelu_tanh.hpp"

namespace loom {

template struct pointwise<gelu_tanh_op, pointwise_reads::input>;

}  // namespace loom
