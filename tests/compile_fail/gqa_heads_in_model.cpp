// expect: attention: with enable_gqa, q's heads Hq must be a multiple of k's and v's Hkv.*heads_divide<loom::fix<6>, loom::fix<4> >.+evaluates to false
// max-bytes: 4096
// A four-layer model of grouped-query attention layers (6 query heads of width 8 over x
// [B, T, 48]) whose third layer has 4 key/value heads: one error, however deep the layer.
// (This used to print 23 KB: the check, then two matmul errors from the path without groups.)
#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
using namespace loom;

// x [B, T, 48] -> x + out(attention(q [B, 6, T, 8], k, v [B, Hkv, T, 8])) [B, T, 48]
template <fixed_string P, long Hkv>
struct gqa_layer {
  template <class X>
  constexpr auto operator()(X x) const {
    using S = typename X::shape;
    auto heads = []<long H>(auto t, fix<H>) {  // [B, T, H·8] -> [B, H, T, 8]
      return transpose<0, 2, 1, 3>(reshape<shape<dim_at<S, 0>, dim_at<S, 1>, fix<H>, fix<8>>>(t));
    };
    auto q = heads(matmul<false, true>(x, param<P + ".wq", shape<fix<48>, fix<48>>>()), fix<6>{});
    auto k = heads(matmul<false, true>(x, param<P + ".wk", shape<fix<Hkv * 8>, fix<48>>>()), fix<Hkv>{});
    auto v = heads(matmul<false, true>(x, param<P + ".wv", shape<fix<Hkv * 8>, fix<48>>>()), fix<Hkv>{});
    auto o = nn::attention<{.is_causal = true, .enable_gqa = true}>(q, k, v);  // [B, 6, T, 8]
    auto merged = reshape<shape<dim_at<S, 0>, dim_at<S, 1>, fix<48>>>(transpose<0, 2, 1, 3>(o));
    return add(x, matmul<false, true>(merged, param<P + ".wo", shape<fix<48>, fix<48>>>()));
  }
};

auto bad() {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<48>>>();
  auto h1 = make_block(gqa_layer<"l1", 2>{}, x);
  auto h2 = make_block(gqa_layer<"l2", 3>{}, h1);
  auto h3 = make_block(gqa_layer<"l3", 4>{}, h2);  // 4 does not divide 6
  auto h4 = make_block(gqa_layer<"l4", 2>{}, h3);
  return make_graph(sum(h4));
}
