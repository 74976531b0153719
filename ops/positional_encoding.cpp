// positional encoding kernels: x [.., T, D] (+ positions [.., T]) -> y = x + PE[pos].
//   forward:  y[.., t, j] = x[.., t, j] + PE[pos, j],  pos = positions[.., t] or t;
//             PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(...), in double.
//   backward: dx += dy.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "index_text.hpp"
#include "kernel.hpp"
#include "loom/ops/positional_encoding.hpp"
#include "loom/core/errors.hpp"
#include "parallel.hpp"

namespace loom::ops {
namespace {

/// Rows PE[p] for p < pe_cached_positions, made on first use in blocks of 64 rows that are never
/// moved or changed once made: a pointer to a row stays valid while this thread runs other
/// kernels (TBB may start one here while it waits), even if they add blocks.
constexpr std::int64_t pe_block = 64, pe_cached_positions = 4096;
template <class T>
struct pe_table {
  std::vector<std::unique_ptr<T[]>> blocks;
  /// PE[p] (d values), or null for p beyond the table.
  template <class Value>
  const T* row(std::int64_t p, std::int64_t d, const Value& pe_value) {
    if (p >= pe_cached_positions || d == 0) return nullptr;
    const auto b = static_cast<std::size_t>(p / pe_block);
    if (blocks.size() <= b) blocks.resize(b + 1);
    if (!blocks[b]) {
      auto block = std::make_unique<T[]>(static_cast<std::size_t>(pe_block * d));
      for (std::int64_t i = 0; i < pe_block; ++i)
        for (std::int64_t j = 0; j < d; ++j) block[static_cast<std::size_t>(i * d + j)] = pe_value(static_cast<std::int64_t>(b) * pe_block + i, j);
      blocks[b] = std::move(block);
    }
    return blocks[b].get() + (p % pe_block) * d;
  }
};

}  // namespace

template <class T>
void positional_encoding_kernel<T>::forward(const op_args<T>& a) {
  const std::int64_t d = a.out_dims[-1], t = a.out_dims[-2];
  const std::int64_t rows = d ? a.out_dims.size() / d : 0;
  const bool given = a.template attrs<positional_encoding_attrs>().with_positions;
  const std::int32_t* pos = given ? a.template input<std::int32_t>(1) : nullptr;
  if (given)
    for (std::int64_t r = 0; r < rows; ++r)
      if (pos[r] < 0)
        throw value_error("add_positional_encoding: positions" + index_text(r, a.in_dims[1]) + " = " +
                          std::to_string(pos[r]) + " is negative (positions count from 0)");
  // 10000^(2i/D) for column j = 2i or 2i + 1, one table per D kept per thread (decoding runs
  // this for one row per token, where D calls of pow cost more than the row itself). Tables
  // are never changed once made: a kernel this thread runs while it waits (TBB may start
  // another node here) cannot move the one in use.
  thread_local std::map<std::int64_t, std::vector<double>> timescales;
  std::vector<double>& timescale = timescales[d];
  if (static_cast<std::int64_t>(timescale.size()) != d) {
    timescale.resize(static_cast<std::size_t>(d));
    for (std::int64_t j = 0; j < d; ++j)
      timescale[static_cast<std::size_t>(j)] =
          j % 2 ? timescale[static_cast<std::size_t>(j - 1)]
                : std::pow(10000.0, static_cast<double>(j) / static_cast<double>(d));
  }
  const double* scale_of = timescale.data();  // this thread's table: the lambda runs on others
  auto pe_value = [&](std::int64_t p, std::int64_t j) {
    const double angle = static_cast<double>(p) / scale_of[j];
    return static_cast<T>(j % 2 == 0 ? std::sin(angle) : std::cos(angle));
  };
  const T* x = a.input(0);
  T* y = a.out;
  if (given) {  // one row of PE per row of x (decoding: a few rows at high positions)
    // rows of PE below pe_cached_positions come from this thread's table (decoding asks for the
    // same positions again and again: D calls of sin or cos per token were ~2% of a step);
    // found here, on the calling thread, before the rows run in parallel
    std::vector<const T*> cached(static_cast<std::size_t>(rows));
    thread_local std::map<std::int64_t, pe_table<T>> tables;
    pe_table<T>& table = tables[d];
    for (std::int64_t r = 0; r < rows; ++r) cached[static_cast<std::size_t>(r)] = table.row(pos[r], d, pe_value);
    for_chunks(rows, grain_for(16 * d), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        if (const T* pe = cached[static_cast<std::size_t>(r)])
          for (std::int64_t j = 0; j < d; ++j) y[r * d + j] = x[r * d + j] + pe[j];
        else
          for (std::int64_t j = 0; j < d; ++j) y[r * d + j] = x[r * d + j] + pe_value(pos[r], j);
      }
    });
    return;
  }
  // positions 0..T−1 in every sequence: the table PE[0 .. T−1] once, shared by the batch
  std::vector<T> table(static_cast<std::size_t>(t * d));
  for_chunks(t, grain_for(16 * d), [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p)
      for (std::int64_t j = 0; j < d; ++j) table[static_cast<std::size_t>(p * d + j)] = pe_value(p, j);
  });
  for_chunks(rows, grain_for(d), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* pe = table.data() + (r % t) * d;
      for (std::int64_t j = 0; j < d; ++j) y[r * d + j] = x[r * d + j] + pe[j];
    }
  });
}

template <class T>
void positional_encoding_kernel<T>::backward(const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const T* dy = a.dout;
  with_fresh(a.fresh(0), [&](auto fresh) {
    for_chunks(a.out_dims.size(), 1 << 15, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) put<fresh()>(dx[i], dy[i]);
    });
  });
}

template struct positional_encoding_kernel<float>;
template struct positional_encoding_kernel<double>;

}  // namespace loom::ops
