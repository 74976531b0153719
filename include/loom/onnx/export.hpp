// loom::onnx: a loom graph written as an ONNX model (opset 17, IR version 8), which ONNX
// Runtime and ONNX's own checker read. A separate library (CMake target loom::onnx, built when
// Debian's libonnx-dev is found); the ops' mappings are in their declarations (to_onnx, see
// core/onnx_mapping.hpp), so a project's own op exports the same way.
//
//   auto g = make_graph(nn::seq2seq<cfg, nn::decode_mode>::logits());
//   loom::onnx::save(g, params, "decoder_step.onnx");
//
// What is written (docs/onnx.md):
//   - the graph's inputs by name, with their named dims as symbolic dims ("B", "T"): real
//     inputs as float (double for a param_store<double>), int inputs as int64, bool as bool;
//   - every parameter the graph reads as an initializer of the same name (in a separate
//     `<file>.data` beside the model when options.external_data or when they pass 1.5 GiB);
//   - the graph's outputs: output k is "output<k>" (or its name, when it is named<"...">),
//     then every other named node; a decoding state — an input and a named node of the same
//     name, as kv_state makes — is an input under its name (its value before the step) and an
//     output named options.present_prefix + name (its value after the step);
//   - the graph as the plan holds it before fusion: a fused attention is exported as its
//     matmul, scale, masks and softmax;
//   - metadata: loom's version and options.metadata.
// The inference graph is exported: dropout is the identity. The model passes ONNX's checker
// before anything is written, and the file (and its data file) are written atomically.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/params.hpp"
#include "loom/graph/plan.hpp"

namespace loom::onnx {

/// How save() writes a model.
struct export_options {
  /// The ONNX graph's name.
  std::string graph_name = "loom";
  /// Key-value pairs added to the model's metadata (a model's config, say), after "loom.version".
  std::map<std::string, std::string> metadata{};
  /// Output names (in the graph's output order) in place of "output<k>"; empty: the defaults.
  std::vector<std::string> output_names{};
  /// The prefix of a state's output ("present." gives "present.l0.cache_k").
  std::string present_prefix = "present.";
  /// Parameters in a separate file `<path>.data` (ONNX external data) rather than in the
  /// model; switched on by itself when they pass 1.5 GiB (a protobuf holds at most 2 GiB).
  bool external_data = false;
};

/// The ops of `plan` that have no ONNX mapping (no to_onnx in their declaration), by name,
/// each once; empty when the whole graph can be exported.
std::vector<std::string> unsupported_ops(const plan_view& plan);

/// Writes the graph `plan` with the values of `params` as an ONNX model at `path`. Throws
/// loom::error naming the op for an op without a mapping (or one whose mapping refuses this
/// node, such as a training loss), missing_error for a parameter the store lacks,
/// shape_error for a parameter whose shape differs from the graph's, value_error for a named
/// dim that no input's or parameter's axis binds by itself (the model could not compute it),
/// loom::error when ONNX's checker refuses the model, io_error when the file cannot be written
/// (`path` is then left as it was).
template <class T>
void save(const plan_view& plan, const param_store<T>& params, const std::string& path, const export_options& options = {});

/// The same for a graph (make_graph(...)): a graph holding an op without an ONNX mapping does
/// not compile (unsupported_ops(g.plan()) names it).
template <class G, class T>
  requires requires { G::data.order; }
void save(const G& graph, const param_store<T>& params, const std::string& path, const export_options& options = {}) {
  constexpr bool exportable = [] {
    for (const node_desc* d : G::data.order)
      if (d->op->role == node_role::op && !d->op->exports_onnx) return false;
    return true;
  }();
  static_assert(exportable,
                "loom::onnx::save: an op of this graph has no ONNX mapping (no to_onnx in its declaration); "
                "loom::onnx::unsupported_ops(graph.plan()) names it");
  save(graph.plan(), params, path, options);
}

/// Runs ONNX's checker on the model file at `path` (with its external data); throws
/// loom::error with the checker's message when it refuses the model, io_error when the file
/// cannot be read.
void check_file(const std::string& path);

}  // namespace loom::onnx
