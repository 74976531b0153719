// reshape and transpose kernels.
//   reshape:   y = x (same row-major order);  dx += dy.
//   transpose: y[i_0, .., i_r] = x[j] with j_{P_k} = i_k;  dx += dy permuted back.
#include <cstring>

#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/reshape.hpp"
#include "loom/core/parallel.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers

template <class T>
void forward_kernel(reshape_def, const op_args<T>& a) {
  const std::int64_t n = a.out_dims.size();
  const T* x = a.input(0);
  if (a.out == x) return;  // the executor made this reshape a view of its input
  for_chunks(n, 1 << 16, [&](std::int64_t b, std::int64_t e) {
    std::memcpy(a.out + b, x + b, static_cast<std::size_t>(e - b) * sizeof(T));
  });
}

template <class T>
void backward_kernel(reshape_def, const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const T* dy = a.dout;
  if (dx == dy) return;  // a view that shares its input's gradient: dx = dy already
  with_fresh(a.fresh(0), [&](auto fresh) {
    for_chunks(a.out_dims.size(), 1 << 15, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) put<fresh()>(dx[i], dy[i]);
    });
  });
}

namespace {

// Visits the output of a transpose row by row (last output axis innermost) and calls
// fn(out_offset, in_offset, in_stride_of_last_axis, length) for each row.
template <class Fn>
void for_each_row(const op_args<auto>& a, Fn&& fn) {
  const dims_t& xd = a.in_dims[0];
  const dims_t& yd = a.out_dims;
  const int r = yd.rank;
  std::array<std::int64_t, max_rank> xstride{};  // x's stride for each y axis
  std::int64_t st = 1;
  std::array<std::int64_t, max_rank> xs{};
  for (int i = xd.rank - 1; i >= 0; --i) {
    xs[i] = st;
    st *= xd.d[i];
  }
  const auto perm = load_attrs<transpose_attrs>(*a.node).perm;
  for (int i = 0; i < r; ++i) xstride[i] = xs[perm[static_cast<std::size_t>(i)]];
  if (r == 0) {
    fn(0, 0, 1, 1);
    return;
  }
  const std::int64_t len = yd.d[r - 1];
  const std::int64_t rows = len ? yd.size() / len : 0;
  for_chunks(rows, grain_for(len), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t row = r0; row < r1; ++row) {
      std::int64_t in_off = 0, rest = row;
      for (int i = r - 2; i >= 0; --i) {
        in_off += (rest % yd.d[i]) * xstride[i];
        rest /= yd.d[i];
      }
      fn(row * len, in_off, xstride[r - 1], len);
    }
  });
}

}  // namespace

template <class T>
void forward_kernel(transpose_def, const op_args<T>& a) {
  const T* x = a.input(0);
  T* y = a.out;
  for_each_row(a, [&](std::int64_t yo, std::int64_t xo, std::int64_t xs, std::int64_t len) {
    for (std::int64_t j = 0; j < len; ++j) y[yo + j] = x[xo + j * xs];
  });
}

template <class T>
void backward_kernel(transpose_def, const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const T* dy = a.dout;
  // each element of dx is written by exactly one row, so rows can run in parallel
  with_fresh(a.fresh(0), [&](auto fresh) {
    for_each_row(a, [&](std::int64_t yo, std::int64_t xo, std::int64_t xs, std::int64_t len) {
      for (std::int64_t j = 0; j < len; ++j) put<fresh()>(dx[xo + j * xs], dy[yo + j]);
    });
  });
}

template struct compiled_kernels<reshape_def>;
template struct compiled_kernels<transpose_def>;

}  // namespace loom
