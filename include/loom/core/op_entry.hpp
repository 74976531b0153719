// op_entry: everything loom knows about one op, declared once, in the op's header.
//
// An op is three files: include/loom/ops/<op>.hpp (its node type, shape rule, typed
// attributes and this entry), ops/<op>.cpp (its forward and backward kernels) and its test.
// The entry names the op, points at its kernels (compiled once per scalar type in ops/), and
// states the facts the rest of loom reads instead of testing which op a node is: the executor
// (views, strided reads, first-contribution stores), the DOT writer (the name), gradcheck, and
// the memory and fusion planners (which values backward reads, what may run in place).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

namespace loom {

struct node_desc;
struct dims_t;
namespace ops {
template <class T>
struct op_args;  // what a kernel sees (ops/kernel.hpp, private to the library)
}

/// A kernel: reads its op_args (input values, dims, attributes) and writes the node's value
/// (forward) or the gradients of its inputs (backward).
template <class T>
using kernel_fn = void (*)(const ops::op_args<T>&);

/// An op's kernels in one scalar type.
template <class T>
struct op_kernels {
  kernel_fn<T> forward = nullptr;
  kernel_fn<T> backward = nullptr;
  kernel_fn<T> check = nullptr;  // run-time shape checks at binding (throws shape_error); optional
};

/// What a node is: a tensor fed by name, a named parameter, or an op computed from its inputs.
enum class node_role : std::uint8_t { input, param, op };

/// Bit i set: input i (see reads()).
using input_set = std::uint8_t;
constexpr input_set reads(std::initializer_list<int> inputs) {
  input_set s = 0;
  for (int i : inputs) s = static_cast<input_set>(s | (1u << i));
  return s;
}

struct op_entry {
  std::string_view name;  // as shown in messages and DOT output ("matmul")
  /// A stable number, unique per op, part of every node's structural hash (so of dropout's
  /// random streams, which are keyed by it): never renumber; a new op takes the next free one.
  std::uint16_t id = 0;
  node_role role = node_role::op;
  op_kernels<float> f32{};
  op_kernels<double> f64{};

  // ---- traits ----
  /// The value is input 0's buffer under another shape: nothing is copied, and the gradient
  /// shares input 0's gradient buffer when the node is input 0's only consumer.
  bool is_view = false;
  /// Whether forward and backward read input `input` in place when its matrices (last two
  /// axes) are spaced further apart than their size (op_args::mat_stride); otherwise the
  /// executor copies it.
  bool (*reads_strided)(const node_desc& node, int input) = nullptr;
  /// Whether forward is correct when its output is input 0's storage grown along the rows
  /// (axis −2): input 0's rows are already in place, so the kernel writes only what follows
  /// them, with op_args::out_mat_stride between matrices. The executor does so when input 0 is
  /// a feed with room to grow (feed::with_room) — a KV cache's append without a copy.
  bool (*appends_to_input)(const node_desc& node) = nullptr;
  /// backward honours op_args::din_fresh: its first contribution to a gradient stores (=)
  /// instead of adding to a zeroed buffer.
  bool writes_fresh = false;
  /// Forward is correct when its output is input 0's buffer (same shape): each element is
  /// read before it is written. The memory planner may then run it in place when no later
  /// kernel reads input 0.
  bool can_run_in_place = false;
  /// Backward is correct when the gradient of input `backward_in_place_input` is its own
  /// output's gradient buffer (dx written over dy, each element read before it is written) on
  /// its first contribution: the memory planner may then merge the two when nothing else needs
  /// dy.
  bool backward_in_place = false;
  /// The input whose gradient backward_in_place may write over dy: 0 for element-wise ops, the
  /// residual (3) for a linear layer with its residual, whose dr = dy is then no copy at all.
  int backward_in_place_input = 0;
  /// The values backward reads (PyTorch's derivatives.yaml as data): input i when bit i of
  /// backward_reads is set, and the node's own value when backward_reads_output is. A value
  /// read by no backward need not outlive its last forward reader.
  input_set backward_reads = 0;
  bool backward_reads_output = false;
  /// The node is the output of a block (input 0) whose inputs are inputs 1..: with
  /// exec_options::recompute, the block's interior values that backward needs are recomputed
  /// just before the block's backward instead of kept (see checkpoint.hpp).
  bool bounds_recompute = false;
  /// The node's value is readable by its name (node_desc::name) after forward, like an output
  /// of the graph, wherever it appears (see named.hpp).
  bool is_named_output = false;
  /// Elements of a buffer the node's forward writes for its own backward besides its value (a
  /// fused attention's row log-sum-exp), given the node's fused parameters (op_args::fused),
  /// its output dims and its inputs' dims; null: none. Kernels see it as op_args::saved.
  std::int64_t (*saved_elements)(const void* fused, const dims_t& out, std::span<const dims_t> in) = nullptr;
  /// Elements of a workspace the node's backward needs (alive during that backward only), from
  /// the same facts; null: none. Kernels see it as op_args::scratch.
  std::int64_t (*scratch_elements)(const void* fused, const dims_t& out, std::span<const dims_t> in) = nullptr;
  /// The op is made by a plan rewrite (ops/fusion.hpp) from a pattern of other ops, never by
  /// user code; its kernels read the rewrite's parameters from op_args::fused.
  bool fused = false;

  template <class T>
  constexpr const op_kernels<T>& kernels() const {
    if constexpr (std::is_same_v<T, float>) return f32;
    else return f64;
  }
  constexpr bool backward_reads_input(int i) const { return (backward_reads >> i) & 1u; }
};

/// The kernels K<float> and K<double> (a struct template with static forward, backward and,
/// optionally, check) as the entry's kernel pointers.
template <template <class> class K, class T>
constexpr op_kernels<T> kernels_of() {
  op_kernels<T> k{&K<T>::forward, &K<T>::backward, nullptr};
  if constexpr (requires { &K<T>::check; }) k.check = &K<T>::check;
  return k;
}

/// Every op entry whose header this program includes (each registers itself at start-up;
/// see LOOM_REGISTER_OP). The order is unspecified.
const std::vector<const op_entry*>& registered_ops();

namespace detail {
struct op_registration {
  explicit op_registration(const op_entry& op);
};
}  // namespace detail

}  // namespace loom

/// Adds `entry` (an inline constexpr op_entry) to registered_ops() in every program that
/// includes the header declaring it; put it right after the entry.
#define LOOM_REGISTER_OP(entry) \
  inline const ::loom::detail::op_registration entry##_registration { entry }
