// embedding kernels: tokens [.., T] (int), weight [V, D] -> y [.., T, D].
//   forward:  y[n, :] = weight[tokens[n], :]
//   backward: dweight[tokens[n], :] += dy[n, :]. Columns of D are split into chunks run in
//             parallel; inside a chunk the tokens are visited in order, so a repeated token's
//             rows are summed in the same order for any thread count.
#include <algorithm>
#include <string>

#include "index_text.hpp"
#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/embedding.hpp"
#include "loom/core/errors.hpp"
#include "loom/core/parallel.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers
namespace {

// Checked before the parallel loop: a bad id throws before anything is read or written.
void check_tokens(const std::int32_t* tok, const dims_t& tok_dims, std::int64_t vocab) {
  const std::int64_t n = tok_dims.size();
  for (std::int64_t i = 0; i < n; ++i)
    if (tok[i] < 0 || tok[i] >= vocab)
      throw value_error("embedding: token id " + std::to_string(tok[i]) + " at position " + index_text(i, tok_dims) +
                        " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
}

}  // namespace

template <class T>
void forward_kernel(embedding_op, const op_args<T>& a) {
  const std::int64_t vocab = a.in_dims[1][0], d = a.in_dims[1][1];
  const std::int64_t n = a.in_dims[0].size();
  const std::int32_t* tok = a.template input<std::int32_t>(0);
  const T* w = a.input(1);
  T* y = a.out;
  check_tokens(tok, a.in_dims[0], vocab);
  for_chunks(n, grain_for(d), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* row = w + tok[r] * d;
      for (std::int64_t j = 0; j < d; ++j) y[r * d + j] = row[j];
    }
  });
}

template <class T>
void backward_kernel(embedding_op, const op_args<T>& a) {
  T* dw = a.grad(1);
  if (!dw) return;
  const std::int64_t vocab = a.in_dims[1][0], d = a.in_dims[1][1];
  const std::int64_t n = a.in_dims[0].size();
  const std::int32_t* tok = a.template input<std::int32_t>(0);
  const T* dy = a.dout;
  check_tokens(tok, a.in_dims[0], vocab);
  // at least 16 columns (a cache line of floats) per chunk: each chunk reads every token's row
  for_chunks(d, std::max<std::int64_t>(grain_for(n), 16), [&](std::int64_t j0, std::int64_t j1) {
    for (std::int64_t r = 0; r < n; ++r) {
      T* row = dw + tok[r] * d;
      for (std::int64_t j = j0; j < j1; ++j) row[j] += dy[r * d + j];
    }
  });
}

template struct compiled_kernels<embedding_op>;

}  // namespace loom
