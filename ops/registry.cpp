// The dispatch table: op_kind -> kernels. Adding an op: an enum entry (node_desc.hpp), a
// header in include/loom/ops/, a kernel file here, a declaration in kernels.hpp, a line below.
#include <algorithm>
#include <array>
#include <string>

#include "kernels.hpp"
#include "loom/core/errors.hpp"

namespace loom::ops {
namespace {

template <class T>
void not_implemented(const op_args<T>& a) {
  throw error(std::string("loom: no kernel for op ") + op_name(a.node->kind));
}

template <class T>
struct table {
  std::array<op_entry<T>, static_cast<std::size_t>(op_kind::count_)> entries{};

  template <template <class> class K>
  void add(op_kind kind) {
    auto& e = entries[static_cast<std::size_t>(kind)];
    e.name = op_name(kind);
    e.forward = &K<T>::forward;
    e.backward = &K<T>::backward;
    if constexpr (requires(const op_args<T>& a) { K<T>::check(a); }) e.check = &K<T>::check;
    if constexpr (requires(const node_desc* d) { K<T>::reads_strided(d, 0); }) e.reads_strided = &K<T>::reads_strided;
    if constexpr (requires { K<T>::writes_fresh; }) e.writes_fresh = K<T>::writes_fresh;
  }

  table() {
    for (std::size_t i = 0; i < entries.size(); ++i) {
      entries[i].name = op_name(static_cast<op_kind>(i));
      entries[i].forward = &not_implemented<T>;
      entries[i].backward = &not_implemented<T>;
    }
    add<matmul_kernel>(op_kind::matmul);
    add<scale_kernel>(op_kind::scale);
    add<mask_causal_kernel>(op_kind::mask_causal);
    add<mask_padding_kernel>(op_kind::mask_padding);
    add<mask_bool_kernel>(op_kind::mask_bool);
    add<softmax_kernel>(op_kind::softmax);
    add<concat_kernel>(op_kind::concat);
    add<slice_kernel>(op_kind::slice);
    add<reshape_kernel>(op_kind::reshape);
    add<transpose_kernel>(op_kind::transpose);
    add<add_kernel>(op_kind::add);
    add<sum_kernel>(op_kind::sum);
    add<mul_kernel>(op_kind::mul);
    add<embedding_kernel>(op_kind::embedding);
    add<positional_encoding_kernel>(op_kind::positional_encoding);
    add<layer_norm_kernel>(op_kind::layer_norm);
    add<relu_kernel>(op_kind::relu);
    add<gelu_kernel>(op_kind::gelu);
    add<dropout_kernel>(op_kind::dropout);
    add<cross_entropy_kernel>(op_kind::cross_entropy);
  }
};

}  // namespace

template <class T>
table<T>& the_table() {
  static table<T> t;
  return t;
}

template <class T>
const op_entry<T>& kernel(op_kind kind) {
  return the_table<T>().entries[static_cast<std::size_t>(kind)];
}
template const op_entry<float>& kernel<float>(op_kind);
template const op_entry<double>& kernel<double>(op_kind);

const char* op_name(op_kind kind) {
  switch (kind) {
    case op_kind::input: return "input";
    case op_kind::param: return "param";
    case op_kind::matmul: return "matmul";
    case op_kind::scale: return "scale";
    case op_kind::mask_causal: return "mask_causal";
    case op_kind::mask_padding: return "mask_padding";
    case op_kind::mask_bool: return "mask_bool";
    case op_kind::softmax: return "softmax";
    case op_kind::concat: return "concat";
    case op_kind::slice: return "slice";
    case op_kind::reshape: return "reshape";
    case op_kind::transpose: return "transpose";
    case op_kind::add: return "add";
    case op_kind::mul: return "mul";
    case op_kind::embedding: return "embedding";
    case op_kind::positional_encoding: return "positional_encoding";
    case op_kind::layer_norm: return "layer_norm";
    case op_kind::relu: return "relu";
    case op_kind::gelu: return "gelu";
    case op_kind::dropout: return "dropout";
    case op_kind::cross_entropy: return "cross_entropy";
    case op_kind::sum: return "sum";
    case op_kind::count_: break;
  }
  return "?";
}

}  // namespace loom::ops

// ---- test hook: break a backward on purpose (see loom::testing::scoped_corruption) ----
#include "loom/graph/gradcheck.hpp"

namespace loom::testing {
namespace {
std::array<void (*)(const ops::op_args<double>&), static_cast<std::size_t>(op_kind::count_)> original{};
// The gradient added twice: the second run accumulates even where the first stored.
void run_twice(const ops::op_args<double>& a) {
  auto f = original[static_cast<std::size_t>(a.node->kind)];
  f(a);
  ops::op_args<double> again = a;
  again.din_fresh = {};
  f(again);
}
// No gradient at all: buffers this backward was to write first are left at zero.
void skip(const ops::op_args<double>& a) {
  for (std::size_t i = 0; i < a.din.size(); ++i)
    if (a.din[i] && a.fresh(static_cast<int>(i))) std::fill(a.din[i], a.din[i] + a.in_dims[i].size(), 0.0);
}
}  // namespace

scoped_corruption::scoped_corruption(op_kind kind, corruption how) : kind_(kind) {
  auto& e = ops::the_table<double>().entries[static_cast<std::size_t>(kind)];
  original[static_cast<std::size_t>(kind)] = e.backward;
  e.backward = how == corruption::run_twice ? &run_twice : &skip;
}
scoped_corruption::~scoped_corruption() {
  ops::the_table<double>().entries[static_cast<std::size_t>(kind_)].backward =
      original[static_cast<std::size_t>(kind_)];
}

}  // namespace loom::testing
