// An op is one declaration: a struct that derives from op_def<Self, "name", traits> and states
// the kernels, and the shape rule when the output does not simply have input 0's shape.
// Everything else follows from it: its entry (entry_of<Op>, what the executor, planners, DOT
// writer and gradcheck read), its stable id (a hash of the name), its registration
// (registered_ops()), and its builder (op_fn, node.hpp).
//
//   struct silu_op : op_def<silu_op, "silu", in_place_traits_reading(reads({0}))> {
//     template <class T> static void forward(const op_args<T>& a);   // a.out = f(a.input(0))
//     template <class T> static void backward(const op_args<T>& a);  // a.grad(0) (+)= ...
//   };
//   inline constexpr op_fn<silu_op> silu{};                          // silu(x) builds the node
//
// The name and traits may instead be members of the struct (`static constexpr std::string_view
// name = "silu";`, `static constexpr op_traits traits{...};`); traits that hold a function's
// address (reads_strided, saved_elements, ...) must be the member, as GCC does not take such a
// value as a template argument. A `template <class... S> struct rule { using type = ...; };`
// member replaces the default rule (same_shape). An op with compile-time attributes is a template
// deriving from a plain definition (which holds the name, traits and kernels, so its kernels are
// compiled once, not per attribute value) and adds `static constexpr Attrs attrs{...}` and its
// rule (see concat.hpp), or, when the rule does not depend on the attributes, an alias of
// attributed<Def, Attrs{...}> (see norm.hpp). The library's ops compile their kernels in their
// .cpp through compiled_kernels<D> (below). The kernel interface (op_args, the parallel loops) is
// core/kernel.hpp; a pointwise op is a scalar function and its derivative (ops/pointwise.hpp).
// docs/extending.md walks through an example.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "loom/core/fixed_string.hpp"
#include "loom/core/fnv.hpp"

namespace loom {

struct node_desc;
struct dims_t;
class onnx_emitter;  // how an op is written as ONNX (core/onnx_mapping.hpp)
template <class T>
struct op_args;  // what a kernel sees (core/kernel.hpp)

/// A kernel: reads its op_args (input values, dims, attributes) and writes the node's value
/// (forward) or the gradients of its inputs (backward).
template <class T>
using kernel_fn = void (*)(const op_args<T>&);

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

/// The facts about an op that the executor and the planners read instead of testing which op a
/// node is. The optimisations default to off (no view, no in place, backward accumulates into
/// zeroed gradients). backward_reads defaults to *nothing*: declare every value your backward
/// reads, or the memory planner may give its buffer to another value before backward runs
/// (the library's op table test overwrites undeclared values with NaN to catch exactly this).
struct op_traits {
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
  /// The saved buffer is for backward only: forward runs with op_args::saved null when the
  /// node's backward will not run (op_args::will_backward false: an inference executor), and the
  /// planner then gives it none (the fused head and loss, whose buffer holds its gradients).
  bool saved_only_for_backward = false;
  /// Elements of a workspace the node's backward needs (alive during that backward only), from
  /// the same facts; null: none. Kernels see it as op_args::scratch.
  std::int64_t (*scratch_elements)(const void* fused, const dims_t& out, std::span<const dims_t> in) = nullptr;
  /// The op is made by a plan rewrite (fusion.hpp) from a pattern of other ops, never by
  /// user code; its kernels read the rewrite's parameters from op_args::fused.
  bool fused = false;
  /// Whether the node's forward multiplies by its input 1 as a weight W [N, K] read transposed
  /// (x · Wᵀ, K the last axis of input 0) and reads op_args::int8 instead of input 1 when that is
  /// set. With exec_options::weights = int8, the executor quantizes W for such a node when W is
  /// a parameter of rank 2. Null: never (matmul says yes when it is x · Wᵀ; the fused linear always).
  bool (*reads_int8_weight)(const node_desc& node) = nullptr;
};

/// Traits shared by many ops (op_def<D, "name", in_place_traits>). in_place_traits: forward
/// may run in place, backward may write input 0's gradient over dy and stores its first
/// contribution, and backward reads no value (add, scale, mask_causal).
inline constexpr op_traits in_place_traits{.writes_fresh = true, .can_run_in_place = true, .backward_in_place = true};

/// in_place_traits for a backward that reads the values of `inputs` and, when `output`, the
/// op's own value (silu: in_place_traits_reading(reads({0}))).
constexpr op_traits in_place_traits_reading(input_set inputs, bool output = false) {
  op_traits t = in_place_traits;
  t.backward_reads = inputs;
  t.backward_reads_output = output;
  return t;
}

/// in_place_traits for a backward that reads the op's own value only (relu, softmax).
inline constexpr op_traits in_place_traits_reading_output = in_place_traits_reading(0, true);

/// An op as the rest of loom sees it: its traits, name, id, role and kernels. Made from an
/// op's declaration by entry_of<Op>; never written by hand.
struct op_entry : op_traits {
  std::string_view name;  // as shown in messages and DOT output ("matmul")
  /// A hash of the name (op_id): unique per op (registration checks it), part of every node's
  /// structural hash, so of dropout's random streams, which are keyed by it.
  std::uint64_t id = 0;
  node_role role = node_role::op;
  op_kernels<float> f32{};
  op_kernels<double> f64{};
  /// How the op is written as ONNX (its declaration's `static std::string
  /// to_onnx(onnx_emitter&)`, see core/onnx_mapping.hpp); null: it cannot be exported.
  std::string (*to_onnx)(onnx_emitter&) = nullptr;
  /// to_onnx is set: readable in constant expressions, where GCC does not compare a function's
  /// address with null under -fsanitize=address (loom::onnx::save checks a graph with it).
  bool exports_onnx = false;

  template <class T>
  constexpr const op_kernels<T>& kernels() const {
    if constexpr (std::is_same_v<T, float>) return f32;
    else return f64;
  }
  constexpr bool backward_reads_input(int i) const { return (backward_reads >> i) & 1u; }
};

/// An op's id: the 64-bit FNV-1a hash of its name. Stable as long as the name is.
constexpr std::uint64_t op_id(std::string_view name) {
  return fnv::add(fnv::start, name);
}

namespace detail {
// A kernel is a static member template (forward<T>) or one overload per scalar type.
template <class D, class T>
constexpr kernel_fn<T> forward_of() {
  if constexpr (requires { &D::template forward<T>; }) return &D::template forward<T>;
  else return static_cast<kernel_fn<T>>(&D::forward);
}
template <class D, class T>
constexpr kernel_fn<T> backward_of() {
  if constexpr (requires { &D::template backward<T>; }) return &D::template backward<T>;
  else return static_cast<kernel_fn<T>>(&D::backward);
}
template <class D, class T>
constexpr op_kernels<T> kernels_from() {
  op_kernels<T> k{forward_of<D, T>(), backward_of<D, T>(), nullptr};
  if constexpr (requires { &D::template check<T>; }) k.check = &D::template check<T>;
  return k;
}

template <class D>
constexpr bool has_name = [] {
  if constexpr (requires { std::string_view(D::name); }) return !std::string_view(D::name).empty();
  else return false;
}();

template <class D>
constexpr op_entry make_entry() {
  static_assert(has_name<D>, "an op declares its name: op_def<Self, \"name\"> or static constexpr std::string_view name");
  static_assert(requires { static_cast<kernel_fn<float>>(&D::forward); static_cast<kernel_fn<double>>(&D::backward); } ||
                    requires { &D::template forward<float>; &D::template backward<double>; },
                "an op declares template <class T> static void forward(const op_args<T>&) and backward(...)");
  op_entry e{};
  if constexpr (requires { D::traits; }) static_cast<op_traits&>(e) = D::traits;
  e.name = std::string_view(D::name);
  e.id = op_id(e.name);
  e.f32 = kernels_from<D, float>();
  e.f64 = kernels_from<D, double>();
  if constexpr (requires { static_cast<std::string (*)(onnx_emitter&)>(&D::to_onnx); }) {
    e.to_onnx = &D::to_onnx;
    e.exports_onnx = true;
  }
  return e;
}
}  // namespace detail

/// The entry of the op declared by D (a struct deriving from op_def<D>).
template <class D>
inline constexpr op_entry entry_of = detail::make_entry<D>();

/// Every op entry this program declares (each op_def registers itself at start-up), not the
/// leaves' (input, param). The order is unspecified. Two ops of one id (one name) throw
/// loom::error here and when an executor is made.
const std::vector<const op_entry*>& registered_ops();

namespace detail {
using entry_getter = const op_entry* (*)();
struct op_registration {
  explicit op_registration(entry_getter entry);
};
template <class D>
const op_entry* entry_address() {
  return &entry_of<D>;
}
// Dynamic initialisation in every program that declares D; the entry is read later, through
// a function, because D is still incomplete where op_def<D> is instantiated.
template <class D>
inline const op_registration registration_of{&entry_address<D>};
/// Throws loom::error naming both ops if two registered entries share an id.
void check_op_ids();
}  // namespace detail

/// The shape rule of an op whose output has its first input's shape (op_def's default rule).
template <class S, class...>
struct same_shape {
  using type = S;
};

/// True when an input of rank R has at least N axes, as op Op needs. A failed check names all
/// three: "has_axes<loom::softmax_op, 1, 0>" (softmax needs 1 axis, the input has 0).
template <class Op, int N, int R>
inline constexpr bool has_axes = R >= N;

/// The rule of an op Op whose output has input 0's shape S and which needs N axes or more:
/// `template <class S> using rule = axes_at_least<my_op, 2, S>;`.
template <class Op, int N, class S>
struct axes_at_least {
  static_assert(has_axes<Op, N, S::rank>,
                "the op needs more axes than its input has (the failed check names the op, the axes it needs and "
                "the input's rank)");
  using type = S;
};

/// The base of an op's declaration (see the top of this file): registers the op, names its
/// definition (`def`, which node types use to find the entry) and holds what D leaves out:
///   name    Name ("silu"); empty when D declares `static constexpr std::string_view name`.
///   traits  Traits; all off when not given. D's own `static constexpr op_traits traits`
///           takes their place.
///   rule    same_shape: the output has input 0's shape. A `rule` member template of D (or of
///           the attributed op deriving from D) takes its place.
template <class D, fixed_string Name = "", op_traits Traits = op_traits{}>
struct op_def {
  using def = D;
  static constexpr std::string_view name = Name.view();
  static constexpr op_traits traits = Traits;
  template <class... S>
  using rule = same_shape<S...>;
  static_assert(&detail::registration_of<D> == &detail::registration_of<D>);  // odr-use: registers D
};

/// The kernels of an op compiled once, in the .cpp that defines them, rather than in every
/// translation unit that uses the op. The op's header declares
///   struct my_op : op_def<my_op, "my_op">, compiled_kernels<my_op> {};
///   extern template struct compiled_kernels<my_op>;  // my_op.cpp
/// and my_op.cpp, after including loom/core/compiled_kernels.hpp, defines in my_op's namespace
///   template <class T> void forward_kernel(my_op, const op_args<T>& a) { ... }
///   template <class T> void backward_kernel(my_op, const op_args<T>& a) { ... }
/// and instantiates them, for float and double, with `template struct compiled_kernels<my_op>;`.
/// An op whose kernels are small defines forward and backward in its struct instead
/// (docs/extending.md).
template <class D>
struct compiled_kernels {
  static void forward(const op_args<float>& a);
  static void forward(const op_args<double>& a);
  static void backward(const op_args<float>& a);
  static void backward(const op_args<double>& a);
};

/// An op with compile-time attributes whose rule does not depend on them: Def (its name, traits,
/// kernels and rule, compiled once) with the attribute values A, which the node's descriptor
/// stores and its kernels read (`a.attrs<decltype(A)>()`). A's type is a struct adapted for
/// reflection (core/reflect.hpp): `template <bool Left> using mask_padding_op =
/// attributed<mask_padding_def, mask_padding_attrs{Left}>;`.
template <class Def, auto A>
struct attributed : Def {
  static constexpr decltype(A) attrs = A;
};

/// The entry of an op type: an op_def's (or that of the definition an attributed op derives from).
template <class Op>
constexpr const op_entry& entry_for() {
  return entry_of<typename Op::def>;
}

}  // namespace loom
