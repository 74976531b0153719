// executor<T>: runs a graph's plan forward and backward on oneTBB.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/core/node.hpp"
#include "loom/core/params.hpp"
#include "loom/core/tensor.hpp"
#include "loom/graph/feed.hpp"
#include "loom/graph/memory_plan.hpp"
#include "loom/graph/plan.hpp"
#include "loom/graph/profile.hpp"

namespace loom {

namespace detail {
struct executor_access;
}

/// A value as it lies in memory: its matrices (last two axes, rows contiguous) are
/// `mat_stride` elements apart — rows · cols when contiguous, more when the value is a feed's
/// storage grown in place (feed::with_room).
template <class T>
struct strided_view {
  T* data = nullptr;
  dims_t dims;
  std::int64_t mat_stride = 0;
};

/// The largest thread count an executor accepts (exec_options::threads, set_threads).
inline constexpr int max_threads = 1024;

/// The precision of an executor's GEMM-like work (exec_options::precision).
enum class compute_precision : unsigned char {
  f32,   // the executor's scalar type throughout
  bf16,  // matmul, the fused linear, fused attention: operands rounded to bf16, float accumulation
};

/// How an executor reads the weights of its products (exec_options::weights).
enum class weight_precision : unsigned char {
  f32,   // as the store holds them
  int8,  // quantized to int8 per output channel once, dequantised on the fly (inference only)
};

/// What an executor's kernels do with subnormal numbers (exec_options::subnormals).
enum class subnormal_mode : unsigned char {
  automatic,  // flush in executor<float>, keep in executor<double>
  keep,       // IEEE arithmetic: subnormal inputs and results as they are
  flush,      // subnormal inputs read as zero, subnormal results stored as zero
};

/// Settings of an executor.
struct exec_options {
  int threads = 0;           // worker threads; 0 means all cores (at most max_threads)
  bool input_grads = false;  // also compute gradients of real-valued inputs (input_grad())
  bool training = true;      // dropout is active only in training
  bool inference = false;    // forward only: no gradient buffers, no dropout; backward() throws
  bool keep_all = false;     // debugging: every value and gradient stays readable (no memory sharing)
  bool recompute = true;     // recompute blocks closed by checkpoint() in backward instead of keeping them
  /// Run patterns as fused nodes (attention: matmul → scale → masks → softmax → matmul as one
  /// node that keeps no [T, S] scores). Off: every node as written (the reference). The
  /// default is on, unless the environment sets LOOM_FUSE=0 (to run a whole program unfused).
  bool fuse = fuse_by_default();
  /// compute_precision::bf16: matmul, the fused linear and the fused attention's products over
  /// more than 32 keys (forward and backward) round their operands to bf16 and accumulate in
  /// float, fast on CPUs with AVX512_BF16 (the same bits, slowly, elsewhere). Parameters,
  /// gradients, optimizer state, softmax and every other op stay float. For executor<float> only
  /// (docs/precision.md).
  compute_precision precision = compute_precision::f32;
  /// weight_precision::int8 (executor<float> with `inference` only): the weight W [N, K] of
  /// every product x · Wᵀ whose W is a parameter — the fused linear layers, matmul<false,
  /// true>(x, w), a tied lm head — is quantized to int8 per output channel (symmetric, float32
  /// scales) when forward() first binds the parameters, and the products read it, dequantised
  /// on the fly: a decoding step reads a quarter of the weight bytes. Every other op, the KV
  /// cache and the embedding's rows stay float. Quantized again when the store's layout changes
  /// (a parameter added or replaced) and after requantize(); values written into the
  /// parameters in place are not seen until then. forward() throws value_error, naming the
  /// parameter, for a weight with a NaN or an infinity. docs/precision.md.
  weight_precision weights = weight_precision::f32;
  /// With `inference`: every weight W [N, K] of a product x · Wᵀ whose W is a parameter (the
  /// products `weights` = int8 would quantize) is copied once into the layout loom's GEMM reads
  /// (its column panels) at the first forward() that multiplies it by two rows or more, and every
  /// later such product reads the copy instead of transposing W again: the same bits, one more
  /// copy of those weights in memory. Pays where the same weights multiply a few rows at every
  /// call: decoding 8 sequences at once spent half its step transposing weights. One-row products
  /// (GEMVs) read W as it is. Float executors on CPUs with loom's GEMM, float32 products only
  /// (with precision = bf16 the bf16 products round and pack W per call, as without it; int8
  /// weights are quantized once anyway); elsewhere nothing is copied. Like int8, the copies are
  /// made again after a change of the store's layout and after requantize(); values written into
  /// the parameters in place are not seen until then.
  bool pack_weights = false;
  /// Names of parameters whose products x · Wᵀ stay float32 whatever `precision` and `weights`
  /// say (the per-node override): an lm head or a first layer kept exact, say. Each must be a
  /// parameter of the graph that some such product reads as its weight (value_error otherwise).
  /// Products without a parameter weight (attention's) follow `precision`.
  std::vector<std::string> float_weights = {};
  /// Time every node's kernels and the passes (executor::profile(): where a step's time goes,
  /// by op). Two clock reads per kernel call; off by default.
  bool profile = false;
  /// Subnormal numbers (magnitudes below 2^-126 in float, 2^-1022 in double) while this
  /// executor's kernels run: flushed (read as zero and stored as zero: x86-64's MXCSR bits DAZ
  /// and FTZ, set on the calling thread for each forward() and backward() and captured by the
  /// executor's worker threads), or kept. On Intel CPUs every vector multiply-add that meets a
  /// subnormal takes a slow path: the gradients that reach a small Transformer's first attention
  /// layers are partly subnormal, and its training step ran 1.4× slower with them kept
  /// (docs/precision.md). automatic (the default) flushes in executor<float> and keeps them in
  /// executor<double>, the reference for gradient checks. The same bits for any thread count
  /// either way. The calling thread's own setting is restored after each pass. No effect on
  /// CPUs other than x86-64.
  subnormal_mode subnormals = subnormal_mode::automatic;

  static bool fuse_by_default();
};

/// Runs one graph in scalar type T (float or double). Buffers are planned from the graph
/// (graph/planner.hpp): a value lives only while a forward or backward kernel still reads it,
/// a gradient while backward needs it, and buffers with disjoint lifetimes share the arena's
/// bytes. Outputs, parameters' gradients and kept nodes (keep()) stay readable. The arena is
/// allocated on the first forward() and reused while the bound dims fit. Independent nodes run
/// concurrently; results do not depend on the thread count (bit-identical for 1, 2 or N).
/// Not thread-safe: one executor is used by one thread at a time. A call made while another
/// is running on the same executor (forward, backward, keep, set_threads, set_training; reads
/// of values and gradients) throws error instead of racing.
template <class T>
class executor {
 public:
  /// An executor of `plan` reading and writing the parameters in `params`, which must
  /// outlive it. Parameters are looked up by name at each forward().
  executor(plan_view plan, param_store<T>& params, exec_options options = {});
  ~executor();
  executor(executor&&) noexcept;
  executor& operator=(executor&&) noexcept;

  /// Binds the inputs (by name), checks every shape, and computes every node.
  /// Throws missing_error (an input or parameter absent), shape_error (rank, fixed dim or a
  /// symbol's two bindings disagree, or the bound dims would make a buffer of more than 2^57
  /// elements), value_error (e.g. a token id out of range). Nothing is computed, and the last
  /// forward's values stay readable, when binding fails; when a kernel throws (a value only
  /// the data shows, such as a token id), the values are partial: output() and backward()
  /// refuse until the next forward() completes.
  void forward(std::span<const feed> feeds);
  void forward(std::initializer_list<feed> feeds) { forward(std::span<const feed>(feeds.begin(), feeds.size())); }

  /// Reverse pass from output 0, which must hold one element (a loss). Gradients of all
  /// parameters the graph uses are overwritten in the store (not accumulated). Throws error
  /// without running after a forward() that failed, and when a parameter was replaced in the
  /// store since forward() (its memory moved: call forward() again).
  void backward();
  /// Reverse pass from the given cotangents, one per output, shaped like the outputs.
  void backward(std::span<const tensor<T>> cotangents);

  /// Value of the k-th output of make_graph(outputs...) after forward().
  tensor_view<const T> output(int k = 0) const;
  /// Value of the node named `name` with named<"...">(x), after forward(). Throws
  /// missing_error (listing the graph's names) when there is none, and error when the value
  /// lies inside a feed's storage (read it with output_storage()).
  tensor_view<const T> output(std::string_view name) const;
  /// The named node's value where it lies: contiguous, or inside the storage of the feed it
  /// grew in place (a KV cache's keys: then data is that storage and mat_stride its stride).
  strided_view<const T> output_storage(std::string_view name) const;
  /// Every named output as a feed of the same name, borrowing this executor's values (valid
  /// until its next forward()): the outputs of one graph feed the inputs of another by name —
  /// the encoder memory projected once per source into each decoding step, say.
  std::vector<feed> named_feeds() const;
  /// Keeps `node`'s value (and gradient) readable after forward() (and backward()): call it
  /// before forward(). Outputs and parameters are always kept.
  template <class Node>
  void keep(Node) {
    keep_original_node(original_node_index(desc_ptr<Node>()));
  }
  /// Value of a real-valued node of the graph after forward(): an output, an input, or a node
  /// kept with keep(). Throws error for other nodes (their memory is reused) and for nodes of
  /// other graphs.
  template <class Node>
  tensor_view<const T> value(Node) const {
    return node_value(node_index(desc_ptr<Node>()));
  }
  /// Gradient of the named real input after backward() (needs exec_options::input_grads).
  tensor_view<const T> input_grad(std::string_view name) const;
  /// Gradient of a node that gradients flow through, after backward(): a parameter, an input
  /// (with exec_options::input_grads) or a kept node.
  template <class Node>
  tensor_view<const T> grad(Node) const {
    return node_grad(node_index(desc_ptr<Node>()));
  }
  /// During every later backward(), calls `callback(node)` once for each parameter (and input,
  /// with exec_options::input_grads) as soon as its gradient is final — every contribution
  /// added — while backward goes on: a data-parallel trainer starts sending it. `node` is the
  /// leaf's index in plan(). Runs on a worker thread, concurrently with kernels and with other
  /// calls; it must not throw or write gradients. An empty function removes the callback.
  void on_gradient_final(std::function<void(int node)> callback);
  /// The value the last forward() bound to a dynamic dim.
  std::int64_t bound(std::string_view symbol) const;
  /// The dims the last forward() bound to node `node` of plan() (its value's shape).
  dims_t dims(int node) const;

  /// With exec_options::weights = int8 or pack_weights: quantizes (or copies) the weights again,
  /// from the store's values, at the next forward() — after new values were written into the
  /// parameters in place (a checkpoint loaded into the store, say), which the executor does not
  /// see by itself. Does nothing otherwise.
  void requantize();
  /// With exec_options::profile: every node's kernel time and the passes' wall time, summed
  /// since the executor was made or reset_profile() (or keep(), which makes the plan anew) —
  /// profile_report::table() prints them by op. Throws error when the executor was made without
  /// exec_options::profile.
  profile_report profile() const;
  /// Starts the sums of profile() again from zero. Throws error without exec_options::profile.
  void reset_profile();
  /// Throws value_error unless 0 ≤ threads ≤ max_threads (the old count is kept then).
  void set_threads(int threads);
  int threads() const;
  void set_training(bool training);
  /// The memory plan for the dims given by name (every symbol of the graph), without running:
  /// the arena's size and its buffers. Assumes contiguous feeds, except that an input some node
  /// appends to in place (a KV cache's keys) is fed with room, as nn::kv_cache does (that
  /// node's value then needs no arena bytes). Throws shape_error for a
  /// missing or negative dim, or one whose sizes overflow.
  memory_report memory_plan(std::span<const std::pair<std::string_view, std::int64_t>> dims) const;
  memory_report memory_plan(std::initializer_list<std::pair<std::string_view, std::int64_t>> dims) const {
    return memory_plan(std::span<const std::pair<std::string_view, std::int64_t>>(dims.begin(), dims.size()));
  }
  /// Bytes held by value and gradient buffers (allocated).
  std::size_t arena_bytes() const;
  /// Bytes the last forward()'s memory plan needs (equal to arena_bytes() unless the arena
  /// grew for larger dims before).
  std::size_t planned_bytes() const;
  /// The plan this executor runs: the graph's, with fused patterns as single nodes
  /// (exec_options::fuse) — node indices of value_at() and friends refer to it.
  const plan_view& plan() const;
  /// That plan as Graphviz DOT (fused nodes show as one box: "attention").
  std::string dot() const;

  // ---- node indices: deprecated, private in the next release. A node is read with value(node)
  // and grad(node), an output or input by name with output(name) and input_grad(name); the
  // indices of plan() are plan().input_index(name) and those on_gradient_final() passes.
  [[deprecated("use plan().input_index(name)")]] int input_index(std::string_view name) const {
    return input_node_index(name);
  }
  [[deprecated("use value(node) or output(name)")]] tensor_view<const T> value_at(int node) const {
    return node_value(node);
  }
  [[deprecated("use grad(node) or input_grad(name)")]] tensor_view<const T> grad_at(int node) const {
    return node_grad(node);
  }
  [[deprecated("use value(node) and grad(node)")]] int index_of(const node_desc* d) const { return node_index(d); }
  [[deprecated("use keep(node)")]] int original_index_of(const node_desc* d) const { return original_node_index(d); }
  [[deprecated("use keep(node)")]] void keep_original_at(int node) { keep_original_node(node); }
  [[deprecated("use keep(node)")]] void keep_at(int node);
  [[deprecated("use output(name)")]] int named_index(std::string_view name) const { return named_node_index(name); }

 private:
  friend struct detail::executor_access;  // tests read nodes by index (graph/executor_access.hpp)
  int input_node_index(std::string_view name) const;  // throws missing_error if there is none
  int named_node_index(std::string_view name) const;  // the node named `name`; the same
  tensor_view<const T> node_value(int node) const;
  tensor_view<const T> node_grad(int node) const;
  // Index in plan() of the node `d` describes. Throws error when it is not in the graph, or
  // when a fusion absorbed it (keep() it before forward() to read it).
  int node_index(const node_desc* d) const;
  // Index of the node in the graph as written (before fusions), and keep() by that index.
  int original_node_index(const node_desc* d) const;
  void keep_original_node(int node);

  struct impl;
  std::unique_ptr<impl> p_;
};

extern template class executor<float>;
extern template class executor<double>;

}  // namespace loom
