// reduce_sum, mean and amax kernels, over one axis. See include/loom/ops/reduction.hpp.
// x is seen as [outer, n, inner] (n: the reduced axis), y as [outer, inner].
//   forward:  y[o, i] = Σ_k x[o, k, i] (/ n for mean), or max_k, adding k = 0, 1, .. in order;
//             work in units of (o, a tile of inner), so the order never depends on the threads
//   backward: dx[o, k, i] (+)= dy[o, i] (/ n), or dy[o, i] · [x = y] / #ties for amax
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "loom/core/errors.hpp"
#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/core/parallel.hpp"
#include "loom/ops/reduction.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers
namespace {

// inner elements per unit of work: a whole unit's partial results stay in cache
constexpr std::int64_t inner_tile = 256;

// x [outer, n, inner] around the reduced axis
struct reduced_layout {
  int axis = 0;
  std::int64_t outer = 1, n = 1, inner = 1;
  template <class T>
  explicit reduced_layout(const op_args<T>& a) {
    const dims_t& x = a.in_dims[0];
    const long written = a.template attrs<reduce_attrs>().axis;
    axis = static_cast<int>(written < 0 ? written + x.rank : written);
    outer = x.prod(0, axis);
    n = x.d[axis];
    inner = x.prod(axis + 1, x.rank);
  }
  std::int64_t tiles() const { return (inner + inner_tile - 1) / inner_tile; }
};

// Calls fn(o, i0, i1) for every unit (o, inner tile [i0, i1)), in parallel chunks of units
// whose bounds depend on the sizes only.
template <class Fn>
void for_units(const reduced_layout& l, std::int64_t work_per_element, Fn&& fn) {
  const std::int64_t tiles = l.tiles();
  const std::int64_t width = std::min(l.inner, inner_tile);
  for_chunks(l.outer * tiles, grain_for(work_per_element * std::max<std::int64_t>(l.n, 1) * width),
             [&](std::int64_t u0, std::int64_t u1) {
               for (std::int64_t u = u0; u < u1; ++u) {
                 const std::int64_t o = u / tiles, i0 = (u % tiles) * inner_tile;
                 fn(o, i0, std::min(l.inner, i0 + inner_tile));
               }
             });
}

// y = Σ_k x_k over the axis, k in order; divided by n for mean (0 / 0: NaN, as PyTorch)
template <class T>
void sum_forward(const op_args<T>& a, bool divide) {
  const reduced_layout l(a);
  const T* x = a.input(0);
  T* y = a.out;
  const T count = static_cast<T>(l.n);
  for_units(l, 1, [&](std::int64_t o, std::int64_t i0, std::int64_t i1) {
    T* yo = y + o * l.inner;
    const T* xo = x + o * l.n * l.inner;
    if (l.inner == 1) {  // along the last axis: one running sum
      T acc = 0;
      for (std::int64_t k = 0; k < l.n; ++k) acc += xo[k];
      yo[0] = divide ? acc / count : acc;
      return;
    }
    for (std::int64_t i = i0; i < i1; ++i) yo[i] = T(0);
    for (std::int64_t k = 0; k < l.n; ++k) {
      const T* xk = xo + k * l.inner;
      for (std::int64_t i = i0; i < i1; ++i) yo[i] += xk[i];
    }
    if (divide)
      for (std::int64_t i = i0; i < i1; ++i) yo[i] /= count;
  });
}

// dx_k (+)= dy · scale for every k
template <class T>
void sum_backward(const op_args<T>& a, bool divide) {
  T* dx = a.grad(0);
  if (!dx) return;
  const reduced_layout l(a);
  const T* dy = a.dout;
  const T scale = divide ? T(1) / static_cast<T>(l.n) : T(1);  // n > 0 when dx has elements
  with_fresh(a.fresh(0), [&](auto fresh) {
    // rows (o, k) of inner elements, each reading row o of dy
    for_chunks(l.outer * l.n, grain_for(l.inner), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        const T* dyo = dy + (r / l.n) * l.inner;
        T* dxr = dx + r * l.inner;
        for (std::int64_t i = 0; i < l.inner; ++i) put<fresh()>(dxr[i], dyo[i] * scale);
      }
    });
  });
}

// whether v replaces the running max m: larger, or NaN (which then stays)
template <class T>
bool replaces(T v, T m) {
  return v > m || v != v;
}

}  // namespace

template <class T>
void forward_kernel(reduce_sum_def, const op_args<T>& a) {
  sum_forward(a, false);
}
template <class T>
void backward_kernel(reduce_sum_def, const op_args<T>& a) {
  sum_backward(a, false);
}
template <class T>
void forward_kernel(mean_def, const op_args<T>& a) {
  sum_forward(a, true);
}
template <class T>
void backward_kernel(mean_def, const op_args<T>& a) {
  sum_backward(a, true);
}

template <class T>
void amax_def::check(const op_args<T>& a) {
  const reduced_layout l(a);
  if (l.n == 0)
    throw shape_error("amax: axis " + std::to_string(l.axis) + " of x " + a.in_dims[0].str() +
                      " has size 0: the max of nothing is undefined");
}

template <class T>
void forward_kernel(amax_def, const op_args<T>& a) {
  const reduced_layout l(a);
  const T* x = a.input(0);
  T* y = a.out;
  for_units(l, 1, [&](std::int64_t o, std::int64_t i0, std::int64_t i1) {
    T* yo = y + o * l.inner;
    const T* xo = x + o * l.n * l.inner;
    for (std::int64_t i = i0; i < i1; ++i) yo[i] = xo[i];
    for (std::int64_t k = 1; k < l.n; ++k) {
      const T* xk = xo + k * l.inner;
      for (std::int64_t i = i0; i < i1; ++i) yo[i] = replaces(xk[i], yo[i]) ? xk[i] : yo[i];
    }
  });
}

template <class T>
void backward_kernel(amax_def, const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const reduced_layout l(a);
  const T* x = a.input(0);
  const T* y = a.out;
  const T* dy = a.dout;
  with_fresh(a.fresh(0), [&](auto fresh) {
    for_units(l, 2, [&](std::int64_t o, std::int64_t i0, std::int64_t i1) {
      const T* yo = y + o * l.inner;
      const T* dyo = dy + o * l.inner;
      const T* xo = x + o * l.n * l.inner;
      T* dxo = dx + o * l.n * l.inner;
      std::array<T, inner_tile> share{};  // dy / #ties of each output element in the tile
      for (std::int64_t k = 0; k < l.n; ++k) {
        const T* xk = xo + k * l.inner;
        for (std::int64_t i = i0; i < i1; ++i) share[static_cast<std::size_t>(i - i0)] += xk[i] == yo[i] ? T(1) : T(0);
      }
      for (std::int64_t i = i0; i < i1; ++i) {
        T& s = share[static_cast<std::size_t>(i - i0)];
        s = s > T(0) ? dyo[i] / s : T(0);  // no tie at all: y is NaN
      }
      for (std::int64_t k = 0; k < l.n; ++k) {
        const T* xk = xo + k * l.inner;
        T* dxk = dxo + k * l.inner;
        for (std::int64_t i = i0; i < i1; ++i)
          put<fresh()>(dxk[i], xk[i] == yo[i] ? share[static_cast<std::size_t>(i - i0)] : T(0));
      }
    });
  });
}

template struct compiled_kernels<reduce_sum_def>;
template struct compiled_kernels<mean_def>;
template void amax_def::check(const op_args<float>&);
template void amax_def::check(const op_args<double>&);
template struct compiled_kernels<amax_def>;

}  // namespace loom
