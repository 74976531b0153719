// concat and slice kernels (copies along one axis).
//   concat: y = [x_1 | x_2 | ...] along the axis;  dx_i += the part of dy that x_i filled.
//           When y is x_1's storage grown in place, x_1 is already there: only x_2, ... move.
//   slice:  y = x[.., begin : begin + size, ..];  dx[.., begin : begin + size, ..] += dy.
#include <cstring>
#include <string>

#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/concat.hpp"
#include "loom/core/errors.hpp"
#include "loom/core/parallel.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers

template <class T>
void forward_kernel(concat_def, const op_args<T>& a) {
  const int axis = static_cast<int>(a.template attrs<concat_attrs>().axis);
  const dims_t& od = a.out_dims;
  const std::int64_t outer = od.prod(0, axis), inner = od.prod(axis + 1, od.rank);
  // appended in place (op_entry::appends_to_input: axis −2): the output is input 0's storage,
  // whose rows are already there; its matrices (outer units) lie out_mat_stride apart
  const bool in_place = a.out == a.input(0);
  const std::int64_t out_chunk = in_place && a.out_mat_stride ? a.out_mat_stride : od.d[axis] * inner;
  // outer units per matrix: 1 when joining along rows, the row count when along columns
  const std::int64_t per_mat = od.rank >= 2 && axis == od.rank - 1 ? od[-2] : 1;
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < a.in.size(); ++i) {
    const T* x = a.input(static_cast<int>(i));
    const std::int64_t chunk = a.in_dims[i].d[axis] * inner;
    if ((i == 0 && in_place) || chunk == 0) {  // in place already, or empty (an empty cache: no data)
      offset += chunk;
      continue;
    }
    const bool by_matrix = od.rank >= 2 && axis >= od.rank - 2;
    const std::int64_t mat_stride = by_matrix ? a.mat_stride(static_cast<int>(i)) : per_mat * chunk;
    for_chunks(outer, grain_for(chunk), [&](std::int64_t o0, std::int64_t o1) {
      for (std::int64_t o = o0; o < o1; ++o)
        std::memcpy(a.out + o * out_chunk + offset, x + (o / per_mat) * mat_stride + (o % per_mat) * chunk,
                    static_cast<std::size_t>(chunk) * sizeof(T));
    });
    offset += chunk;
  }
}

template <class T>
void backward_kernel(concat_def, const op_args<T>& a) {
  const int axis = static_cast<int>(a.template attrs<concat_attrs>().axis);
  const dims_t& od = a.out_dims;
  const std::int64_t outer = od.prod(0, axis), inner = od.prod(axis + 1, od.rank);
  const std::int64_t out_chunk = od.d[axis] * inner;
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < a.in.size(); ++i) {
    const std::int64_t chunk = a.in_dims[i].d[axis] * inner;
    if (T* dx = a.grad(static_cast<int>(i))) {
      with_fresh(a.fresh(static_cast<int>(i)), [&](auto fresh) {
        for_chunks(outer, grain_for(chunk), [&](std::int64_t o0, std::int64_t o1) {
          for (std::int64_t o = o0; o < o1; ++o) {
            const T* dy = a.dout + o * out_chunk + offset;
            T* d = dx + o * chunk;
            for (std::int64_t e = 0; e < chunk; ++e) put<fresh()>(d[e], dy[e]);
          }
        });
      });
    }
    offset += chunk;
  }
}

template <class T>
void slice_def::check(const op_args<T>& a) {
  const int axis = static_cast<int>(a.template attrs<slice_attrs>().axis);
  const std::int64_t dim = a.in_dims[0].d[axis];
  if (a.dattr[0] < 0 || a.dattr[0] + a.dattr[1] > dim)
    throw shape_error("slice: [" + std::to_string(a.dattr[0]) + ", " + std::to_string(a.dattr[0] + a.dattr[1]) +
                      ") exceeds axis " + std::to_string(axis) + " of size " + std::to_string(dim));
}

template <class T>
void forward_kernel(slice_def, const op_args<T>& a) {
  const int axis = static_cast<int>(a.template attrs<slice_attrs>().axis);
  const dims_t& xd = a.in_dims[0];
  const std::int64_t outer = xd.prod(0, axis), inner = xd.prod(axis + 1, xd.rank);
  const std::int64_t in_chunk = xd.d[axis] * inner, out_chunk = a.dattr[1] * inner;
  if (out_chunk == 0) return;  // an empty slice: nothing to copy (and x may be null)
  const T* x = a.input(0) + a.dattr[0] * inner;
  for_chunks(outer, grain_for(out_chunk), [&](std::int64_t o0, std::int64_t o1) {
    for (std::int64_t o = o0; o < o1; ++o)
      std::memcpy(a.out + o * out_chunk, x + o * in_chunk, static_cast<std::size_t>(out_chunk) * sizeof(T));
  });
}

template <class T>
void backward_kernel(slice_def, const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const int axis = static_cast<int>(a.template attrs<slice_attrs>().axis);
  const dims_t& xd = a.in_dims[0];
  const std::int64_t outer = xd.prod(0, axis), inner = xd.prod(axis + 1, xd.rank);
  const std::int64_t in_chunk = xd.d[axis] * inner, out_chunk = a.dattr[1] * inner;
  dx += a.dattr[0] * inner;
  for_chunks(outer, grain_for(out_chunk), [&](std::int64_t o0, std::int64_t o1) {
    for (std::int64_t o = o0; o < o1; ++o) {
      const T* dy = a.dout + o * out_chunk;
      T* d = dx + o * in_chunk;
      for (std::int64_t e = 0; e < out_chunk; ++e) d[e] += dy[e];
    }
  });
}

template struct compiled_kernels<concat_def>;
template struct compiled_kernels<slice_def>;
template void slice_def::check(const op_args<float>&);
template void slice_def::check(const op_args<double>&);

}  // namespace loom
