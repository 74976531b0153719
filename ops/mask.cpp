// mask kernels: masked scores become −∞; backward passes dy where the score was kept.
//   causal:  scores [.., T, S], key j masked for query i when j > i + (S − T)
//   padding: scores [B, .., T, S], key j masked in sequence b when j ≥ valid_len[b]
//            (left padding: when j < first[b])
//   bool:    masked where the broadcast boolean mask is 0
#include <algorithm>
#include <limits>
#include <utility>
#include <string>
#include <vector>

#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/mask.hpp"
#include "loom/core/errors.hpp"
#include "mask_strides.hpp"
#include "loom/core/parallel.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers
namespace {

constexpr std::int64_t row_work = 4;

}  // namespace

std::array<std::int64_t, max_rank> ops::mask_strides(const dims_t& mask, int score_rank, int lead) {
  std::array<std::int64_t, max_rank> stride{};
  std::int64_t st = 1;
  for (int i = mask.rank - 1; i >= 0; --i) {
    stride[detail::mask_axis_on_scores(i, mask.rank, score_rank, lead)] = mask.d[i] == 1 ? 0 : st;
    st *= mask.d[i];
  }
  return stride;
}

namespace {

// Row r keeps the keys [lo, hi) given by kept(r) and masks the others: forward writes x or −∞,
// backward adds dy over the kept range. Plain loops over ranges: no branch per element.
template <class T, class Kept>
void apply_range(const op_args<T>& a, bool backward, Kept kept) {
  const std::int64_t s = a.out_dims[-1];
  const std::int64_t rows = s ? a.out_dims.size() / s : 0;
  const T* x = a.input(0);
  T* y = a.out;
  T* dx = backward ? a.grad(0) : nullptr;
  if (backward && !dx) return;
  const T* dy = a.dout;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  auto range = [&](std::int64_t r) {
    auto [lo, hi] = kept(r);
    lo = std::clamp<std::int64_t>(lo, 0, s);
    return std::pair<std::int64_t, std::int64_t>{lo, std::clamp<std::int64_t>(hi, lo, s)};
  };
  if (backward) {
    with_fresh(a.fresh(0), [&](auto fresh) {
      for_chunks(rows, grain_for(row_work * s), [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) {
          const auto [lo, hi] = range(r);
          T* dxr = dx + r * s;
          const T* dyr = dy + r * s;
          if constexpr (fresh()) {  // masked scores get no gradient: zeros
            std::fill(dxr, dxr + lo, T(0));
            std::fill(dxr + hi, dxr + s, T(0));
          }
          for (std::int64_t j = lo; j < hi; ++j) put<fresh()>(dxr[j], dyr[j]);
        }
      });
    });
    return;
  }
  for_chunks(rows, grain_for(row_work * s), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const auto [lo, hi] = range(r);
      const std::int64_t e = r * s;
      for (std::int64_t j = 0; j < lo; ++j) y[e + j] = neg_inf;
      for (std::int64_t j = lo; j < hi; ++j) y[e + j] = x[e + j];
      for (std::int64_t j = hi; j < s; ++j) y[e + j] = neg_inf;
    }
  });
}

template <class T>
void causal(const op_args<T>& a, bool backward) {
  const std::int64_t t = a.out_dims[-2], s = a.out_dims[-1];
  const std::int64_t offset = s - t;
  apply_range(a, backward, [&](std::int64_t r) { return std::pair<std::int64_t, std::int64_t>{0, r % t + offset + 1}; });
}

template <class T>
void padding(const op_args<T>& a, bool backward) {
  const std::int64_t b = a.out_dims[0], s = a.out_dims[-1];
  const std::int64_t rows_per_seq = b && s ? a.out_dims.size() / (b * s) : 0;  // no keys: no rows either
  const std::int32_t* len = a.template input<std::int32_t>(1);
  const bool left = a.template attrs<mask_padding_attrs>().left;
  // a right-padding length beyond S is a mistake; a left-padding start beyond the keys of a
  // prefill chunk just hides them all
  for (std::int64_t i = 0; i < b; ++i)
    if (len[i] < 0 || (!left && len[i] > s))
      throw value_error(left ? "mask_left_padding: first[" + std::to_string(i) + "] = " + std::to_string(len[i]) +
                                   " is negative"
                             : "mask_padding: valid_len[" + std::to_string(i) + "] = " + std::to_string(len[i]) +
                                   " is outside [0, " + std::to_string(s) + "] (the number of keys)");
  if (left)
    apply_range(a, backward, [&](std::int64_t r) { return std::pair<std::int64_t, std::int64_t>{len[r / rows_per_seq], s}; });
  else
    apply_range(a, backward, [&](std::int64_t r) { return std::pair<std::int64_t, std::int64_t>{0, len[r / rows_per_seq]}; });
}

template <class T>
void boolean(const op_args<T>& a, bool backward) {
  const dims_t& sd = a.out_dims;
  const dims_t& md = a.in_dims[1];
  const std::uint8_t* m = a.template input<std::uint8_t>(1);
  // stride of the mask along each axis of the scores (0 where the mask broadcasts)
  const std::array<std::int64_t, max_rank> stride =
      mask_strides(md, sd.rank, static_cast<int>(a.template attrs<mask_bool_attrs>().lead));
  const std::int64_t s = sd[-1];
  const std::int64_t rows = s ? sd.size() / s : 0;
  const std::int64_t last_stride = stride[sd.rank - 1];
  std::vector<std::int64_t> row_off(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t off = 0, rest = r;
    for (int i = sd.rank - 2; i >= 0; --i) {
      off += (rest % sd.d[i]) * stride[i];
      rest /= sd.d[i];
    }
    row_off[static_cast<std::size_t>(r)] = off;
  }
  T* dx = backward ? a.grad(0) : nullptr;
  if (backward && !dx) return;
  const T* x = a.input(0);
  const T* dy = a.dout;
  T* y = a.out;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  if (backward) {
    with_fresh(a.fresh(0), [&](auto fresh) {
      for_chunks(rows, grain_for(row_work * s), [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) {
          const std::uint8_t* mr = m + row_off[static_cast<std::size_t>(r)];
          const std::int64_t e = r * s;
          for (std::int64_t j = 0; j < s; ++j) put<fresh()>(dx[e + j], mr[j * last_stride] ? dy[e + j] : T(0));
        }
      });
    });
    return;
  }
  for_chunks(rows, grain_for(row_work * s), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::uint8_t* mr = m + row_off[static_cast<std::size_t>(r)];
      const std::int64_t e = r * s;
      for (std::int64_t j = 0; j < s; ++j) y[e + j] = mr[j * last_stride] ? x[e + j] : neg_inf;
    }
  });
}

}  // namespace

template <class T>
void forward_kernel(mask_causal_op, const op_args<T>& a) {
  causal(a, false);
}
template <class T>
void backward_kernel(mask_causal_op, const op_args<T>& a) {
  causal(a, true);
}
template <class T>
void forward_kernel(mask_padding_def, const op_args<T>& a) {
  padding(a, false);
}
template <class T>
void backward_kernel(mask_padding_def, const op_args<T>& a) {
  padding(a, true);
}
template <class T>
void forward_kernel(mask_bool_def, const op_args<T>& a) {
  boolean(a, false);
}
template <class T>
void backward_kernel(mask_bool_def, const op_args<T>& a) {
  boolean(a, true);
}

template struct compiled_kernels<mask_causal_op>;
template struct compiled_kernels<mask_padding_def>;
template struct compiled_kernels<mask_bool_def>;

}  // namespace loom
