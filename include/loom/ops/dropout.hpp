// dropout: zeroes each element with probability P in training and scales the rest by
// 1 / (1 − P); the identity when not training (exec_options::training).
//
//   x [..], seed [2] (int: a seed and, say, the step number) -> y [..]
//   y[i] = x[i] · m[i] / (1 − P),   m[i] = [u(key, i) ≥ P]
//   backward: dx = dy · m / (1 − P)   (the mask is recomputed, not stored); seed: no gradient.
//
//   u(key, i) is a counter-based hash of the element index (splitmix64's i-th output for the
//   key, top 53 bits as a number in [0, 1)), so the mask depends on nothing but the key and
//   the element: not on threads, chunking or earlier calls. The key mixes both seed words
//   with the node's structural hash, so two dropout nodes fed the same seed input still draw
//   different masks; a graph fed the same seed draws the same masks. Like every node, the same
//   dropout<P>(x, seed) written twice is one node with one mask. P = 1 drops everything.
#pragma once

#include <tuple>

#include "loom/core/node.hpp"

namespace loom {

/// True when a dropout seed is a vector of two ints [2].
template <class S>
inline constexpr bool is_dropout_seed = std::is_same_v<S, shape<fix<2>>>;

/// dropout's attributes (stored in its node's descriptor, read by its kernels).
struct dropout_attrs {
  double p = 0;  // probability of dropping an element
};

/// dropout's declaration: name, traits and kernels (compiled once, whatever the attributes).
struct dropout_def : op_def<dropout_def, "dropout", op_traits{.can_run_in_place = true, .backward_reads = reads({1})}>,
                     compiled_kernels<dropout_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
};
extern template struct compiled_kernels<dropout_def>;  // ops/dropout.cpp

template <double P>
struct dropout_op : dropout_def {
  static_assert(P >= 0 && P <= 1, "dropout: the drop probability P must be in [0, 1]");
  static constexpr dropout_attrs attrs{P};
  template <class X, class Seed>
  struct rule {
    static_assert(is_dropout_seed<Seed>, "dropout: the seed must be an int input of shape [2] (seed, step)");
    using type = X;
  };
};

/// Dropout with drop probability P, its randomness drawn from `seed`, an int node [2].
/// Active only when the executor is training; shape unchanged.
template <double P, class X, class Seed>
constexpr node<dropout_op<P>, X, Seed> dropout(X, Seed) {
  static_assert(desc_of<resolve_t<Seed>>.elem == dtype::i32, "dropout: the seed must be an int input");
  return {};
}

}  // namespace loom

// Reflection of the attributes (descriptor slots, structural hash, DOT label).
BOOST_HANA_ADAPT_STRUCT(loom::dropout_attrs, p);
