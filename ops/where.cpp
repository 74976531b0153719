// where kernels: y = cond ? a : b, the three broadcast onto y.
//   forward:  row by row (the last axis), each operand read through its strides (0 where it
//             broadcasts)
//   backward: da (+)= dy · [cond], db (+)= dy · [¬cond], each summed over the axes its operand
//             broadcasts along (broadcast.hpp, with cond as the other operand: row-major order,
//             the same sums for any thread count)
#include <array>
#include <cstdint>

#include "broadcast.hpp"
#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/core/parallel.hpp"
#include "loom/ops/where.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers
namespace {

// the stride of an operand of dims d along each axis of the output (rank r), 0 where it
// broadcasts
std::array<std::int64_t, max_rank> strides_over(const dims_t& d, int r) {
  std::array<std::int64_t, max_rank> stride{};
  std::int64_t st = 1;
  for (int k = d.rank - 1; k >= 0; --k) {
    stride[static_cast<std::size_t>(r - d.rank + k)] = d.d[k] == 1 ? 0 : st;
    st *= d.d[k];
  }
  return stride;
}

}  // namespace

template <class T>
void forward_kernel(where_op, const op_args<T>& a) {
  const dims_t& out = a.out_dims;
  const std::uint8_t* cond = a.template input<std::uint8_t>(0);
  const T* x = a.input(1);
  const T* z = a.input(2);
  T* y = a.out;
  const std::array<std::array<std::int64_t, max_rank>, 3> stride{
      strides_over(a.in_dims[0], out.rank), strides_over(a.in_dims[1], out.rank), strides_over(a.in_dims[2], out.rank)};
  const std::int64_t len = out.rank ? out[-1] : 1;
  const std::int64_t rows = len ? out.size() / len : 0;
  const int last = out.rank - 1;
  const std::int64_t sc = out.rank ? stride[0][last] : 0, sx = out.rank ? stride[1][last] : 0,
                     sz = out.rank ? stride[2][last] : 0;
  for_chunks(rows, grain_for(2 * len), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      std::array<std::int64_t, 3> off{};  // of row r in each operand
      std::int64_t rest = r;
      for (int k = last - 1; k >= 0; --k) {
        const std::int64_t i = rest % out.d[k];
        rest /= out.d[k];
        for (std::size_t o = 0; o < 3; ++o) off[o] += i * stride[o][static_cast<std::size_t>(k)];
      }
      const std::uint8_t* c = cond + off[0];
      const T* xr = x + off[1];
      const T* zr = z + off[2];
      T* yr = y + r * len;
      for (std::int64_t j = 0; j < len; ++j) yr[j] = c[j * sc] ? xr[j * sx] : zr[j * sz];
    }
  });
}

template <class T>
void backward_kernel(where_op, const op_args<T>& a) {
  const std::uint8_t* cond = a.template input<std::uint8_t>(0);
  const T* dy = a.dout;
  // a and b (inputs 1 and 2) in turn, with cond as the other operand of the layout; where(c,
  // x, x) passes one buffer twice: the two sums run one after the other
  for (int i = 1; i <= 2; ++i) {
    T* d = a.grad(i);
    if (!d) continue;
    const bool taken = i == 1;  // the operand's elements are read where cond is this
    broadcast_layout(a.out_dims, a.in_dims[static_cast<std::size_t>(i)], a.in_dims[0])
        .reduce_into(0, d, a.fresh(i),
                     [&](std::int64_t o, std::int64_t ic) { return (cond[ic] != 0) == taken ? dy[o] : T(0); });
  }
}

template struct compiled_kernels<where_op>;

}  // namespace loom
