// positional encoding kernels: x [.., T, D] (+ positions [.., T]) -> y = x + PE[pos].
//   forward:  y[.., t, j] = x[.., t, j] + PE[pos, j],  pos = positions[.., t] or t;
//             PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(...), in double.
//   backward: dx += dy.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "index_text.hpp"
#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/positional_encoding.hpp"
#include "loom/core/errors.hpp"
#include "loom/core/parallel.hpp"
#include "pass_gradient.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers
namespace positional_rows {  // named, not anonymous: the kernel's lambda captures this type

/// PE for one width D, kept per thread (one per D): the timescales 10000^(2i/D) of its columns
/// (D calls of pow cost more than a decoding step's row), and the rows PE[p] for p < 4096, made
/// on first use in blocks of 64 rows (decoding asks for the same positions token after token,
/// training for 0..T−1 step after step: D calls of sin or cos per row were ~2% of a decoding
/// step). Nothing is moved or changed once made — the blocks sit in a fixed array — so rows
/// made before a parallel loop can be read by other threads while this one runs another
/// kernel (TBB may start one here while it waits) that makes further blocks.
template <class T>
struct pe_rows {
  static constexpr std::int64_t block = 64, blocks = 64, cached = block * blocks;  // positions in the table
  std::int64_t d;
  std::vector<double> timescale;
  std::array<std::unique_ptr<T[]>, blocks> made{};

  explicit pe_rows(std::int64_t width) : d(width), timescale(static_cast<std::size_t>(width)) {
    for (std::int64_t j = 0; j < d; ++j)
      timescale[static_cast<std::size_t>(j)] =
          j % 2 ? timescale[static_cast<std::size_t>(j - 1)] : std::pow(10000.0, static_cast<double>(j) / static_cast<double>(d));
  }
  /// PE[p, j] = sin(p / 10000^(2i/D)) for j = 2i, cos for j = 2i + 1, computed in double.
  T value(std::int64_t p, std::int64_t j) const {
    const double angle = static_cast<double>(p) / timescale[static_cast<std::size_t>(j)];
    return static_cast<T>(j % 2 == 0 ? std::sin(angle) : std::cos(angle));
  }
  /// Makes the block of row p if it is in the table and not made yet (the calling thread only).
  void make(std::int64_t p) {
    if (p >= cached) return;
    auto& blk = made[static_cast<std::size_t>(p / block)];
    if (blk) return;
    auto rows = std::make_unique<T[]>(static_cast<std::size_t>(block * d));
    const std::int64_t first = p / block * block;
    for (std::int64_t i = 0; i < block; ++i)
      for (std::int64_t j = 0; j < d; ++j) rows[static_cast<std::size_t>(i * d + j)] = value(first + i, j);
    blk = std::move(rows);
  }
  /// Row p, made by make(p) before; null beyond the table.
  const T* row(std::int64_t p) const {
    return p < cached ? made[static_cast<std::size_t>(p / block)].get() + (p % block) * d : nullptr;
  }
};

}  // namespace positional_rows

using positional_rows::pe_rows;

template <class T>
void forward_kernel(positional_encoding_def, const op_args<T>& a) {
  const std::int64_t d = a.out_dims[-1], t = a.out_dims[-2];
  const std::int64_t rows = d ? a.out_dims.size() / d : 0;
  const bool given = a.template attrs<positional_encoding_attrs>().with_positions;
  const std::int32_t* pos = given ? a.template input<std::int32_t>(1) : nullptr;
  if (given)
    for (std::int64_t r = 0; r < rows; ++r)
      if (pos[r] < 0)
        throw value_error("add_positional_encoding: positions" + index_text(r, a.in_dims[1]) + " = " +
                          std::to_string(pos[r]) + " is negative (positions count from 0)");
  if (rows == 0) return;
  // row r's position: the given one (decoding: a few rows at high positions), or its step t
  auto position = [&](std::int64_t r) -> std::int64_t { return given ? pos[r] : r % t; };
  thread_local std::map<std::int64_t, pe_rows<T>> widths;
  pe_rows<T>& pe = widths.try_emplace(d, d).first->second;
  if (given)
    for (std::int64_t r = 0; r < rows; ++r) pe.make(pos[r]);
  else
    for (std::int64_t p = 0; p < t; p += pe_rows<T>::block) pe.make(p);
  const T* x = a.input(0);
  T* y = a.out;
  for_chunks(rows, grain_for(d), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t p = position(r);
      if (const T* row = pe.row(p))
        for (std::int64_t j = 0; j < d; ++j) y[r * d + j] = x[r * d + j] + row[j];
      else  // beyond the table (positions from 4096: computed per row, for each sequence)
        for (std::int64_t j = 0; j < d; ++j) y[r * d + j] = x[r * d + j] + pe.value(p, j);
    }
  });
}

template <class T>
void backward_kernel(positional_encoding_def, const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const T* dy = a.dout;
  pass_gradient(dy, dx, a.out_dims.size(), a.fresh(0));
}

template struct compiled_kernels<positional_encoding_def>;

}  // namespace loom
