// The library's pointwise kernels (include/loom/ops/unary.hpp states the math), compiled here
// once for float and double; pointwise.hpp holds the loops.
#include "loom/ops/unary.hpp"

namespace loom {

template struct pointwise<neg_op, pointwise_reads::none>;
template struct pointwise<exp_op, pointwise_reads::output>;
template struct pointwise<log_op, pointwise_reads::input>;
template struct pointwise<sqrt_op, pointwise_reads::output>;
template struct pointwise<rsqrt_op, pointwise_reads::output>;
template struct pointwise<tanh_op, pointwise_reads::output>;
template struct pointwise<sigmoid_op, pointwise_reads::output>;
template struct pointwise<abs_op, pointwise_reads::input>;
template struct pointwise<square_op, pointwise_reads::input>;

}  // namespace loom
