// rope kernels: x [.., T, Dh], positions [L.., T] -> y [.., T, Dh] (include/loom/ops/rope.hpp).
//   forward:  for each given position p, cos and sin of p · θ^(−2i/Dh) (i < Dh/2), in double,
//             cast to T, into the saved table (the Dh/2 cosines, then the Dh/2 sines); then each
//             row of x rotated pair by pair with its position's entry
//   backward: dx (+)= each row of dy rotated back (sin negated), from the same table
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "index_text.hpp"
#include "loom/core/errors.hpp"
#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/core/parallel.hpp"
#include "loom/ops/rope.hpp"
#include "vector_isa.hpp"

namespace loom {
using namespace ops;   // the kernels' helpers
namespace rope_rows {  // named, not anonymous: the kernels' lambdas capture these types

// Where a row of x (Dh values) finds its position: rows run over x's axes but the last, and
// positions [L.., T] skip the axes of x between L.. and T (the heads), whose product is `shared`.
struct position_map {
  std::int64_t t = 1;       // x's T
  std::int64_t shared = 1;  // rows of one sequence step that share a position
  std::int64_t index(std::int64_t row) const { return row / t / shared * t + row % t; }
};

inline position_map map_of(const dims_t& x, const dims_t& positions) {
  position_map m;
  m.t = x[-2];
  // x's axes [positions.rank − 1, x.rank − 2) are the ones positions skip
  for (int ax = positions.rank - 1; ax < x.rank - 2; ++ax) m.shared *= x.d[ax];
  return m;
}

// The positions' dims: the positions input's, or [T] when rows take positions 0..T−1.
template <class T>
dims_t positions_dims(const op_args<T>& a) {
  return a.template attrs<rope_attrs>().with_positions ? a.in_dims[1] : dims_t{a.out_dims[-2]};
}

// Rows [r0, r1) of src rotated into dst: dst[a] (= when Fresh, += otherwise) src[a] cos − src[b] sin,
// dst[b] src[b] cos + src[a] sin, for the pairs (a, b) of the layout, sin negated when Inverse.
// dst may be src (in place): each pair is read before it is written.
template <class T, bool Interleaved, bool Inverse, bool Fresh>
LOOM_VECTOR_CLONES void rotate_rows(const T* src, T* dst, const T* __restrict table, position_map map, std::int64_t r0,
                                    std::int64_t r1, std::int64_t dh) {
  const std::int64_t h = dh / 2;
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* cos_p = table + map.index(r) * dh;
    const T* sin_p = cos_p + h;
    const T* s = src + r * dh;
    T* d = dst + r * dh;
    for (std::int64_t i = 0; i < h; ++i) {
      const std::int64_t a = Interleaved ? 2 * i : i, b = Interleaved ? 2 * i + 1 : i + h;
      const T xa = s[a], xb = s[b];
      const T c = cos_p[i], sn = Inverse ? -sin_p[i] : sin_p[i];
      put<Fresh>(d[a], xa * c - xb * sn);
      put<Fresh>(d[b], xb * c + xa * sn);
    }
  }
}

// The rows of x or dy through rotate_rows, in parallel chunks of rows (each row alone: any
// chunk bounds give the same bits).
template <bool Inverse, class T> void rotate_all(const op_args<T>& a, const T* src, T* dst, bool fresh) {
  const std::int64_t dh = a.out_dims[-1];
  const std::int64_t rows = a.out_dims.size() / dh;
  const position_map map = map_of(a.out_dims, positions_dims(a));
  const bool interleaved = a.template attrs<rope_attrs>().interleaved;
  with_fresh(fresh, [&](auto f) {
    for_chunks(rows, grain_for(3 * dh), [&](std::int64_t r0, std::int64_t r1) {
      if (interleaved)
        rotate_rows<T, true, Inverse, f()>(src, dst, a.saved, map, r0, r1, dh);
      else
        rotate_rows<T, false, Inverse, f()>(src, dst, a.saved, map, r0, r1, dh);
    });
  });
}

}  // namespace rope_rows
using namespace rope_rows;

std::int64_t ops::rope_saved(const void*, const dims_t& out, std::span<const dims_t> in) {
  return (in.size() > 1 ? in[1].size() : out[-2]) * out[-1];
}

template <class T> void rope_def::check(const op_args<T>& a) {
  const std::int64_t dh = a.in_dims[0][-1];
  if (dh % 2 != 0)
    throw shape_error("rope: the head dim Dh (x's last axis) of x " + a.in_dims[0].str() + " is " + std::to_string(dh) +
                      ": it must be even (dims are rotated in pairs)");
}

template <class T> void forward_kernel(rope_def, const op_args<T>& a) {
  const std::int64_t dh = a.out_dims[-1];
  const bool given = a.template attrs<rope_attrs>().with_positions;
  const std::int64_t n_pos = positions_dims(a).size();
  const std::int32_t* pos = given ? a.template input<std::int32_t>(1) : nullptr;
  for (std::int64_t k = 0; given && k < n_pos; ++k)
    if (pos[k] < 0)
      throw value_error("rope: positions" + index_text(k, a.in_dims[1]) + " = " + std::to_string(pos[k]) +
                        " is negative (positions count from 0)");
  if (a.out_dims.size() == 0) return;
  if (!a.saved) throw std::logic_error("rope: the executor gave no buffer for the saved cos and sin");
  const rope_attrs at = a.template attrs<rope_attrs>();
  const std::int64_t h = dh / 2;
  std::vector<double> inv_freq(static_cast<std::size_t>(h));
  for (std::int64_t i = 0; i < h; ++i)
    inv_freq[static_cast<std::size_t>(i)] = std::pow(at.theta, -2.0 * static_cast<double>(i) / static_cast<double>(dh));
  // the table: for position k, cos_i at [k · Dh + i] and sin_i at [k · Dh + h + i]
  for_chunks(n_pos, grain_for(40 * h), [&](std::int64_t k0, std::int64_t k1) {
    for (std::int64_t k = k0; k < k1; ++k)
      for (std::int64_t i = 0; i < h; ++i) {
        const double angle = static_cast<double>(given ? pos[k] : k) * inv_freq[static_cast<std::size_t>(i)];
        a.saved[k * dh + i] = static_cast<T>(std::cos(angle));
        a.saved[k * dh + h + i] = static_cast<T>(std::sin(angle));
      }
  });
  rotate_all<false>(a, a.input(0), a.out, true);  // a.out may be x (in place)
}

template <class T> void backward_kernel(rope_def, const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx || a.out_dims.size() == 0) return;  // (an empty gradient has nothing to store)
  if (!a.saved) throw std::logic_error("rope: the executor gave no saved cos and sin to its backward");
  rotate_all<true>(a, a.dout, dx, a.fresh(0));  // dx may be dy (in place)
}

template void rope_def::check(const op_args<float>&);
template void rope_def::check(const op_args<double>&);
template struct compiled_kernels<rope_def>;

}  // namespace loom
