// The worked self-attention example from the tutorials (REFERENCES.md), as a graph:
// X [T, 4], single head, d_k = 2, weights as nn.Linear (out, in) matrices, Q = X W_Qᵀ.
#pragma once

#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"

namespace worked {

using namespace loom;

inline auto x() { return input<"x", shape<dyn<"T">, fix<4>>>(); }
inline auto q() { return matmul<false, true>(x(), param<"W_Q", shape<fix<2>, fix<4>>>()); }  // [T, 2]
inline auto k() { return matmul<false, true>(x(), param<"W_K", shape<fix<2>, fix<4>>>()); }  // [T, 2]
inline auto v() { return matmul<false, true>(x(), param<"W_V", shape<fix<2>, fix<4>>>()); }  // [T, 2]
inline auto scores() { return scale<inv_sqrt<2>>(matmul<false, true>(q(), k())); }         // [T, T]
inline auto weights() { return nn::attention_weights(q(), k()); }                          // [T, T]
inline auto output() { return nn::attention(q(), k(), v()); }                               // [T, 2]

inline auto graph() { return make_graph(output()); }

template <class T>
tensor<T> x_values() {
  return tensor<T>({3, 4}, {0.8, 0.2, 0.4, 0.1, 0.1, 0.9, 0.3, 0.7, 0.3, 0.1, 0.9, 0.2});
}

template <class T>
param_store<T> weights_values() {
  param_store<T> p;
  p.set("W_Q", tensor<T>({2, 4}, {0.5, 0.1, 0.4, 0.2, 0.2, 0.3, 0.6, 0.1}));
  p.set("W_K", tensor<T>({2, 4}, {0.1, 0.3, 0.6, 0.2, 0.5, 0.2, 0.4, 0.3}));
  p.set("W_V", tensor<T>({2, 4}, {0.2, 0.5, 0.3, 0.1, 0.4, 0.1, 0.6, 0.2}));
  return p;
}

}  // namespace worked
