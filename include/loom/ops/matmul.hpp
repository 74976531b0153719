// matmul: batched matrix product with optional transposes.
//
//   a: [..., M, K]  (or [..., K, M] with TransA)    b: [..., K, N]  (or [..., N, K] with TransB)
//   c = op(a) · op(b): [..., M, N]
//   The batch dims (all but the last two) broadcast (NumPy's rule, core/broadcast.hpp): absent
//   from one operand (a weight matrix shared across the batch), or of size 1 in one of them
//   (keys [B, Hkv, 1, S, d] shared by the G query heads of q [B, Hkv, G, T, d]: grouped-query
//   attention without a copy of the keys).
//
//   backward:  d op(a) = dc · op(b)ᵀ,   d op(b) = op(a)ᵀ · dc   (summed over the batch entries
//              that share that operand's matrix, in order), transposed back for an operand
//              given transposed.
#pragma once

#include <tuple>

#include "loom/core/broadcast.hpp"
#include "loom/core/node.hpp"

namespace loom {

/// True when the contracted dims of a matmul agree (see the static_assert in matmul_op).
template <class KofA, class KofB>
inline constexpr bool inner_dims_match = std::is_same_v<KofA, KofB>;

/// True when matmul batch dims broadcast: equal, absent from one operand, or 1 in one of them.
template <class BatchA, class BatchB>
inline constexpr bool batch_dims_match = shapes_broadcast<BatchA, BatchB>;

/// matmul's attributes (stored in its node's descriptor, read by its kernels).
struct matmul_attrs {
  bool trans_a = false, trans_b = false;
};

/// matmul reads operands whose matrices lie further apart than their size in place (each
/// matrix is one GEMM operand: a KV cache's keys grown in place, say).
constexpr bool matmul_reads_strided(const node_desc&, int) { return true; }
/// x · Wᵀ (matmul<false, true>) reads an int8 weight (op_traits::reads_int8_weight; ops/matmul.cpp).
bool matmul_reads_int8_weight(const node_desc& node);

/// matmul's declaration: name, traits and kernels (compiled once, whatever the attributes).
struct matmul_def : op_def<matmul_def, "matmul">, compiled_kernels<matmul_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  static constexpr op_traits traits{
      .reads_strided = &matmul_reads_strided,
      .writes_fresh = true,
      .backward_reads = reads({0, 1}),
      .reads_int8_weight = &matmul_reads_int8_weight,
  };
};
extern template struct compiled_kernels<matmul_def>;  // ops/matmul.cpp

template <bool TransA, bool TransB>
struct matmul_op : matmul_def {
  static constexpr matmul_attrs attrs{TransA, TransB};
  template <class SA, class SB>
  struct rule {
    static_assert(SA::rank >= 2 && SB::rank >= 2, "matmul: both operands need at least two axes [.., rows, cols]");
    static constexpr bool ranks_ok = SA::rank >= 2 && SB::rank >= 2;
    using A = std::conditional_t<ranks_ok, SA, shape<fix<1>, fix<1>>>;
    using B = std::conditional_t<ranks_ok, SB, shape<fix<1>, fix<1>>>;
    using K_of_a = dim_at<A, TransA ? -2 : -1>;
    using K_of_b = dim_at<B, TransB ? -1 : -2>;
    static_assert(inner_dims_match<K_of_a, K_of_b>,
                  "matmul: inner dims differ: a is [.., M, K] and b is [.., K, N] (after transposes)");
    using batch_a = shape_head<A, A::rank - 2>;
    using batch_b = shape_head<B, B::rank - 2>;
    static_assert(batch_dims_match<batch_a, batch_b>,
                  "matmul: the batch dims of a and b do not broadcast (aligned at the last batch axis, each pair "
                  "must be equal or one of them 1)");
    using batch = broadcast_shape<batch_a, batch_b>;
    using type = shape_cat<batch, shape<dim_at<A, TransA ? -1 : -2>, dim_at<B, TransB ? -2 : -1>>>;
  };
};

/// c = op(a) · op(b), batched over leading dims (see matmul_op). A shape mismatch the types
/// can see does not compile; `matmul<false, true>(x, w)` is x · wᵀ (nn.Linear's layout).
template <bool TransA = false, bool TransB = false, class A, class B>
constexpr node<matmul_op<TransA, TransB>, A, B> matmul(A, B) {
  return {};
}

}  // namespace loom

// Reflection of the attributes (descriptor slots, structural hash, DOT label).
BOOST_HANA_ADAPT_STRUCT(loom::matmul_attrs, trans_a, trans_b);
