// cross_entropy: the mean negative log-likelihood of integer targets under softmax(logits),
// with PyTorch's ignore_index and label_smoothing (F.cross_entropy, reduction "mean").
//
//   logits [.., V], target [..] (int, logits' leading dims) -> loss, a scalar (shape<>)
//   per row n with t = target[n] ≠ IgnoreIndex, log p = logits − logsumexp(logits):
//     ℓ_n  = (1 − ε) · (−log p_t) + ε · (1/V) Σ_c (−log p_c)
//     loss = Σ_n ℓ_n / N,   N = the number of rows not ignored
//   If every row is ignored the loss is 0 and so is its gradient (PyTorch gives NaN).
//   backward: dlogits[n] = (softmax(logits[n]) − q_n) · dloss / N,
//             q_n = (1 − ε) · onehot(t) + ε / V;   0 for ignored rows; target: no gradient.
//   A target outside [0, V) that is not IgnoreIndex throws value_error.
#pragma once

#include <tuple>

#include "loom/core/node.hpp"

namespace loom {

/// True when targets [..] are the leading dims of logits [.., V].
template <class Logits, class Target>
inline constexpr bool targets_fit = is_leading_shape<Logits, Target>;

/// cross_entropy's attributes (stored in its node's descriptor, read by its kernels).
struct cross_entropy_attrs {
  long ignore_index = -100;
  double label_smoothing = 0;
};

/// cross_entropy's declaration: name, traits and kernels (compiled once, whatever the attributes).
struct cross_entropy_def
    : op_def<cross_entropy_def, "cross_entropy", op_traits{.writes_fresh = true, .backward_reads = reads({0, 1})}>,
      compiled_kernels<cross_entropy_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
};
extern template struct compiled_kernels<cross_entropy_def>;  // ops/cross_entropy.cpp

template <long IgnoreIndex, double LabelSmoothing>
struct cross_entropy_op : cross_entropy_def {
  static_assert(LabelSmoothing >= 0 && LabelSmoothing <= 1, "cross_entropy: label smoothing must be in [0, 1]");
  static constexpr cross_entropy_attrs attrs{IgnoreIndex, LabelSmoothing};
  template <class L, class Tg>
  struct rule {
    static_assert(L::rank >= 1, "cross_entropy: logits must be [.., V]");
    static_assert(targets_fit<L, Tg>, "cross_entropy: targets must have the logits' dims without the last [..]");
    using type = shape<>;
  };
};

/// Mean cross-entropy of logits [.., V] against int targets [..] -> a scalar. Targets equal to
/// IgnoreIndex (default −100, as PyTorch) are skipped; LabelSmoothing ε mixes the one-hot
/// target with the uniform distribution as PyTorch does. Throws value_error (at forward) for
/// a target outside [0, V) that is not IgnoreIndex.
template <long IgnoreIndex = -100, double LabelSmoothing = 0.0, class L, class Tg>
constexpr node<cross_entropy_op<IgnoreIndex, LabelSmoothing>, L, Tg> cross_entropy(L, Tg) {
  static_assert(desc_of<resolve_t<Tg>>.elem == dtype::i32, "cross_entropy: targets must be an int input");
  return {};
}

}  // namespace loom

// Reflection of the attributes (descriptor slots, structural hash, DOT label).
BOOST_HANA_ADAPT_STRUCT(loom::cross_entropy_attrs, ignore_index, label_smoothing);
