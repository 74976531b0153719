// embedding: a table lookup, one row of the weight per token.
//
//   tokens [.., T] (int), weight [V, D] -> y [.., T, D],   y[n, :] = weight[tokens[n], :]
//   backward: dweight[tokens[n], :] += dy[n, :]  (rows of a repeated token add up, in token
//             order); tokens get no gradient.
//   A token id outside [0, V) throws value_error naming its position and its value.
#pragma once

#include "loom/core/node.hpp"

namespace loom {

/// True when an embedding weight is a table [V, D].
template <class W>
inline constexpr bool is_embedding_table = W::rank == 2;

struct embedding_op : op_def<embedding_op, "embedding", op_traits{.backward_reads = reads({0})}>,
                      compiled_kernels<embedding_op> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  template <class Tok, class W>
  struct rule {
    static_assert(is_embedding_table<W>, "embedding: the weight must be a table [V, D]");
    static_assert(Tok::rank + 1 <= max_rank, "embedding: tokens have too many axes (the result adds one)");
    using type = shape_cat<Tok, shape<dim_at<W, -1>>>;
  };
};
extern template struct compiled_kernels<embedding_op>;  // ops/embedding.cpp

/// Looks up tokens [.., T] (an int node) in weight [V, D] -> [.., T, D].
/// Throws value_error (at forward) when a token id is outside [0, V).
template <class Tok, class W>
constexpr node<embedding_op, Tok, W> embedding(Tok, W) {
  static_assert(desc_of<resolve_t<Tok>>.elem == dtype::i32, "embedding: tokens must be an int input");
  static_assert(desc_of<resolve_t<W>>.elem == dtype::real, "embedding: the weight must be real-valued");
  return {};
}

}  // namespace loom
