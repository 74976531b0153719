// named: gives a node a name by which the executor reads it after forward — an output of the
// graph wherever it appears (say, the updated keys of a KV cache inside a decoding layer).
//
//   named<"logits">(x) = x          (a view: the same buffer, nothing is copied)
//   backward: dx = dy
//
// A named node's value is kept to the end of the step, like an output of make_graph: read it
// with executor::output("logits"). Names are unique within a graph (two different nodes named
// alike do not compile). A named node whose name is also an input's is that input's next
// value: a *state* of the graph (nn::kv_cache feeds `<layer>.cache_k` and reads it back).
#pragma once

#include "loom/core/node.hpp"

namespace loom {

/// named's declaration: name, traits and kernels (compiled once, whatever the attributes).
struct named_def
    : op_def<named_def, "named", op_traits{.is_view = true, .writes_fresh = true, .is_named_output = true}>,
      compiled_kernels<named_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
};
extern template struct compiled_kernels<named_def>;  // ops/named.cpp

/// The op of named<Name>(x): identity (x's shape), with the name in the node's descriptor.
template <fixed_string Name>
struct named_op : named_def {
  static_assert(Name.length > 0, "named<\"\">: a named output needs a name");
  static constexpr std::string_view output_name = Name.view();
};

/// x under the name `Name`: kept after forward and read with executor::output(Name).
template <fixed_string Name, class X>
constexpr node<named_op<Name>, X> named(X) {
  static_assert(is_node<X>, "named<Name>(x): x must be a graph node");
  return {};
}

}  // namespace loom
