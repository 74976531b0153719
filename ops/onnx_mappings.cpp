// The library's ops written as ONNX (opset 17): each op's to_onnx (core/onnx_mapping.hpp).
//
// The exported graph is the inference graph: dropout is the identity, checkpoint and named are
// identities, and the training loss is refused. Masks hide a score by writing −∞, as loom's
// kernels do; a row hidden whole then gives NaN in ONNX's Softmax where loom gives 0 (never the
// case for a causal mask, nor for a padding mask with at least one key per sequence).
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "loom/core/node_desc.hpp"
#include "loom/core/onnx_mapping.hpp"
#include "loom/ops.hpp"

namespace loom {

namespace {

using strings = std::vector<std::string>;

const node_desc& input_desc(onnx_emitter& e, int i) {
  return *e.node().inputs[static_cast<std::size_t>(i)];
}

// x with its last two axes swapped (a matmul operand marked transposed).
std::string swap_last_two(onnx_emitter& e, const std::string& x, int rank) {
  std::vector<long> perm;
  for (int k = 0; k < rank; ++k) perm.push_back(k);
  std::swap(perm[static_cast<std::size_t>(rank - 2)], perm[static_cast<std::size_t>(rank - 1)]);
  return e.add("Transpose", {x}, {onnx_attr::integers("perm", perm)});
}

// Where(hidden, −∞, scores): the masks' common step.
std::string hide(onnx_emitter& e, const std::string& hidden, const std::string& scores) {
  return e.add("Where", {hidden, e.real(-INFINITY), scores});
}

// A 0..n−1 int64 range of the run-time dim d.
std::string range_of(onnx_emitter& e, const dim_expr& d) {
  return e.add("Range", {e.int64({0}, {}), e.dim_scalar(d), e.int64({1}, {})});
}

// The angles of rope and positional_encoding: positions [..] (int64) to [.., n] = positions ·
// freq (freq a constant of n values), in the real type (loom computes them in double: see
// docs/onnx.md, "Not supported, and differences").
std::string angles(onnx_emitter& e, const std::string& positions, const std::vector<double>& freq) {
  const std::string p = e.add("Cast", {positions}, {onnx_attr::integer("to", e.real_type())});
  const std::string col = e.add("Unsqueeze", {p, e.int64s({-1})});
  return e.add("Mul", {col, e.real(freq, {static_cast<long>(freq.size())})});
}

std::string reduce(onnx_emitter& e, std::string_view op, bool axes_as_input) {
  const node_desc& x = input_desc(e, 0);
  const long axis = load_attrs<reduce_attrs>(e.node()).axis;
  const long keep = e.node().rank == x.rank ? 1 : 0;
  if (axes_as_input) return e.add(op, {e.input(0), e.int64s({axis})}, {onnx_attr::integer("keepdims", keep)});
  return e.add(op, {e.input(0)}, {onnx_attr::integers("axes", {axis}), onnx_attr::integer("keepdims", keep)});
}

std::string identity(onnx_emitter& e) {
  return e.add("Identity", {e.input(0)});
}

}  // namespace

// ---- element-wise ----

std::string add_op::to_onnx(onnx_emitter& e) { return e.add("Add", {e.input(0), e.input(1)}); }
std::string sub_op::to_onnx(onnx_emitter& e) { return e.add("Sub", {e.input(0), e.input(1)}); }
std::string mul_op::to_onnx(onnx_emitter& e) { return e.add("Mul", {e.input(0), e.input(1)}); }
std::string div_op::to_onnx(onnx_emitter& e) { return e.add("Div", {e.input(0), e.input(1)}); }
std::string maximum_op::to_onnx(onnx_emitter& e) { return e.add("Max", {e.input(0), e.input(1)}); }
std::string minimum_op::to_onnx(onnx_emitter& e) { return e.add("Min", {e.input(0), e.input(1)}); }
std::string where_op::to_onnx(onnx_emitter& e) { return e.add("Where", {e.input(0), e.input(1), e.input(2)}); }
std::string scale_def::to_onnx(onnx_emitter& e) {
  return e.add("Mul", {e.input(0), e.real(load_attrs<scale_attrs>(e.node()).factor)});
}

std::string neg_op::to_onnx(onnx_emitter& e) { return e.add("Neg", {e.input(0)}); }
std::string exp_op::to_onnx(onnx_emitter& e) { return e.add("Exp", {e.input(0)}); }
std::string log_op::to_onnx(onnx_emitter& e) { return e.add("Log", {e.input(0)}); }
std::string sqrt_op::to_onnx(onnx_emitter& e) { return e.add("Sqrt", {e.input(0)}); }
std::string rsqrt_op::to_onnx(onnx_emitter& e) { return e.add("Reciprocal", {e.add("Sqrt", {e.input(0)})}); }
std::string tanh_op::to_onnx(onnx_emitter& e) { return e.add("Tanh", {e.input(0)}); }
std::string sigmoid_op::to_onnx(onnx_emitter& e) { return e.add("Sigmoid", {e.input(0)}); }
std::string abs_op::to_onnx(onnx_emitter& e) { return e.add("Abs", {e.input(0)}); }
std::string square_op::to_onnx(onnx_emitter& e) {
  const std::string x = e.input(0);
  return e.add("Mul", {x, x});
}
std::string relu_op::to_onnx(onnx_emitter& e) { return e.add("Relu", {e.input(0)}); }
std::string silu_op::to_onnx(onnx_emitter& e) {
  const std::string x = e.input(0);
  return e.add("Mul", {x, e.add("Sigmoid", {x})});
}
// x/2 · (1 + erf(x/√2)): opset 17 has no Gelu (it came in 20).
std::string gelu_op::to_onnx(onnx_emitter& e) {
  const std::string x = e.input(0);
  const std::string erf = e.add("Erf", {e.add("Mul", {x, e.real(std::numbers::sqrt2 / 2)})});
  return e.add("Mul", {e.add("Mul", {x, e.real(0.5)}), e.add("Add", {erf, e.real(1)})});
}
// x/2 · (1 + tanh(k (x + c x³))).
std::string gelu_tanh_op::to_onnx(onnx_emitter& e) {
  const std::string x = e.input(0);
  const std::string cube = e.add("Mul", {e.add("Mul", {x, x}), x});
  const std::string inner = e.add("Add", {x, e.add("Mul", {cube, e.real(0.044715)})});
  const std::string t = e.add("Tanh", {e.add("Mul", {inner, e.real(sqrt_2_over_pi)})});
  return e.add("Mul", {e.add("Mul", {x, e.real(0.5)}), e.add("Add", {t, e.real(1)})});
}

// ---- reductions ----

std::string sum_op::to_onnx(onnx_emitter& e) {
  return e.add("ReduceSum", {e.input(0)}, {onnx_attr::integer("keepdims", 0)});
}
std::string reduce_sum_def::to_onnx(onnx_emitter& e) { return reduce(e, "ReduceSum", true); }
std::string mean_def::to_onnx(onnx_emitter& e) { return reduce(e, "ReduceMean", false); }
std::string amax_def::to_onnx(onnx_emitter& e) { return reduce(e, "ReduceMax", false); }

// ---- products, normalisation, attention's parts ----

std::string matmul_def::to_onnx(onnx_emitter& e) {
  const auto a = load_attrs<matmul_attrs>(e.node());
  std::string x = e.input(0), y = e.input(1);
  if (a.trans_a) x = swap_last_two(e, x, input_desc(e, 0).rank);
  if (a.trans_b) y = swap_last_two(e, y, input_desc(e, 1).rank);
  return e.add("MatMul", {x, y});
}

std::string softmax_op::to_onnx(onnx_emitter& e) {
  return e.add("Softmax", {e.input(0)}, {onnx_attr::integer("axis", -1)});
}

std::string layer_norm_def::to_onnx(onnx_emitter& e) {
  return e.add("LayerNormalization", {e.input(0), e.input(1), e.input(2)},
               {onnx_attr::integer("axis", -1), onnx_attr::real("epsilon", load_attrs<layer_norm_attrs>(e.node()).eps)});
}

// x · 1/√(mean(x²) + ε) · w
std::string rms_norm_def::to_onnx(onnx_emitter& e) {
  const std::string x = e.input(0);
  const std::string ms = e.add("ReduceMean", {e.add("Mul", {x, x})},
                               {onnx_attr::integers("axes", {-1}), onnx_attr::integer("keepdims", 1)});
  const std::string r =
      e.add("Reciprocal", {e.add("Sqrt", {e.add("Add", {ms, e.real(load_attrs<rms_norm_attrs>(e.node()).eps)})})});
  return e.add("Mul", {e.add("Mul", {x, r}), e.input(1)});
}

// scores [.., T, S]: key j hidden from query i when j > i + (S − T).
std::string mask_causal_op::to_onnx(onnx_emitter& e) {
  const node_desc& n = e.node();
  const dim_expr t = n.dims[static_cast<std::size_t>(n.rank - 2)], s = n.dims[static_cast<std::size_t>(n.rank - 1)];
  const std::string rows = e.add("Unsqueeze", {range_of(e, t), e.int64s({1})});  // [T, 1]
  const std::string shift = e.add("Sub", {e.dim_scalar(s), e.dim_scalar(t)});
  const std::string hidden = e.add("Greater", {range_of(e, s), e.add("Add", {rows, shift})});  // [T, S]
  return hide(e, hidden, e.input(0));
}

// scores [B, .., S], lengths [B]: keys j ≥ len[b] (or j < first[b]) hidden.
std::string mask_padding_def::to_onnx(onnx_emitter& e) {
  const node_desc& n = e.node();
  std::vector<long> to{-1};
  for (int k = 1; k < n.rank; ++k) to.push_back(1);
  const std::string len = e.add("Reshape", {e.input(1), e.int64s(to)});  // [B, 1, .., 1]
  const std::string keys = range_of(e, n.dims[static_cast<std::size_t>(n.rank - 1)]);
  const bool left = load_attrs<mask_padding_attrs>(n).left;
  return hide(e, e.add(left ? "Less" : "GreaterOrEqual", {keys, len}), e.input(0));
}

// allowed's first `lead` axes at the scores' first axes, the rest at their end.
std::string mask_bool_def::to_onnx(onnx_emitter& e) {
  const node_desc& n = e.node();
  const long lead = load_attrs<mask_bool_attrs>(n).lead;
  const int missing = n.rank - input_desc(e, 1).rank;
  std::string allowed = e.input(1);
  if (lead > 0 && missing > 0) {
    std::vector<long> axes;
    for (int k = 0; k < missing; ++k) axes.push_back(lead + k);
    allowed = e.add("Unsqueeze", {allowed, e.int64s(axes)});
  }
  return e.add("Where", {allowed, e.input(0), e.real(-INFINITY)});
}

// ---- shapes ----

std::string concat_def::to_onnx(onnx_emitter& e) {
  strings in;
  for (int i = 0; i < static_cast<int>(e.node().inputs.size()); ++i) in.push_back(e.input(i));
  return e.add("Concat", in, {onnx_attr::integer("axis", load_attrs<concat_attrs>(e.node()).axis)});
}

std::string slice_def::to_onnx(onnx_emitter& e) {
  const auto a = load_attrs<slice_attrs>(e.node());
  const std::string begin = e.dims(std::span(&a.begin, 1));
  const std::string end = e.add("Add", {begin, e.dims(std::span(&a.size, 1))});
  return e.add("Slice", {e.input(0), begin, end, e.int64s({a.axis})});
}

std::string reshape_def::to_onnx(onnx_emitter& e) {
  const node_desc& n = e.node();
  return e.add("Reshape", {e.input(0), e.dims(std::span(n.dims.data(), static_cast<std::size_t>(n.rank)))},
               {onnx_attr::integer("allowzero", 1)});
}

std::string transpose_def::to_onnx(onnx_emitter& e) {
  const auto a = load_attrs<transpose_attrs>(e.node());
  return e.add("Transpose", {e.input(0)},
               {onnx_attr::integers("perm", std::vector<long>(a.perm.begin(), a.perm.begin() + e.node().rank))});
}

std::string embedding_op::to_onnx(onnx_emitter& e) {
  return e.add("Gather", {e.input(1), e.input(0)}, {onnx_attr::integer("axis", 0)});
}

// ---- positions ----

// x [.., T, D] + PE[positions]: PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(...).
// The angle of column j is p · f_j with f_{2i} = f_{2i+1} = 10000^(−2i/D); cos(a) = sin(a + π/2),
// so the table is one Sin over angles plus a phase per column.
std::string positional_encoding_def::to_onnx(onnx_emitter& e) {
  const node_desc& n = e.node();
  const dim_expr d = n.dims[static_cast<std::size_t>(n.rank - 1)];
  if (!d.is_fixed()) e.unsupported("the model width D must be fixed");
  std::vector<double> freq, phase;
  for (long j = 0; j < d.constant; ++j) {
    freq.push_back(1 / std::pow(10000.0, static_cast<double>(j - j % 2) / static_cast<double>(d.constant)));
    phase.push_back(j % 2 ? std::numbers::pi / 2 : 0);
  }
  std::string positions;
  if (load_attrs<positional_encoding_attrs>(n).with_positions) positions = e.input(1);
  else positions = range_of(e, n.dims[static_cast<std::size_t>(n.rank - 2)]);
  const std::string a = e.add("Add", {angles(e, positions, freq), e.real(phase, {d.constant})});
  return e.add("Add", {e.input(0), e.add("Sin", {a})});
}

// x [.., T, Dh] rotated pairwise by pos · θ^(−2i/Dh). With the pairs' first and second
// elements gathered apart (a, b), out_a = a cos − b sin, out_b = b cos + a sin, and the halves
// put back in place.
std::string rope_def::to_onnx(onnx_emitter& e) {
  const node_desc& n = e.node();
  const auto a = load_attrs<rope_attrs>(n);
  const dim_expr dh = n.dims[static_cast<std::size_t>(n.rank - 1)];
  if (!dh.is_fixed()) e.unsupported("the head size Dh must be fixed");
  const long half = dh.constant / 2;
  std::vector<double> freq;
  for (long i = 0; i < half; ++i)
    freq.push_back(std::pow(a.theta, -2.0 * static_cast<double>(i) / static_cast<double>(dh.constant)));
  std::string ang;
  if (a.with_positions) {
    // positions [L.., T]: x's first L axes, then the heads between (shared), then T.
    const int lead = input_desc(e, 1).rank - 1, between = n.rank - 2 - lead;
    std::string p = e.input(1);
    if (between > 0) {
      std::vector<long> axes;
      for (int k = 0; k < between; ++k) axes.push_back(lead + k);
      p = e.add("Unsqueeze", {p, e.int64s(axes)});
    }
    ang = angles(e, p, freq);
  } else {
    ang = angles(e, range_of(e, n.dims[static_cast<std::size_t>(n.rank - 2)]), freq);
  }
  const std::string cos = e.add("Cos", {ang}), sin = e.add("Sin", {ang});
  const std::string x = e.input(0);
  std::string first, second;
  if (a.interleaved) {
    // [.., T, Dh] → [.., T, Dh/2, 2]: element 0 and 1 of each pair
    std::vector<dim_expr> pairs(n.dims.begin(), n.dims.begin() + n.rank - 1);
    pairs.push_back(dim_expr{half});
    pairs.push_back(dim_expr{2});
    const std::string xp = e.add("Reshape", {x, e.dims(pairs)}, {onnx_attr::integer("allowzero", 1)});
    const std::vector<std::string> parts = {e.add("Gather", {xp, e.int64({0}, {})}, {onnx_attr::integer("axis", -1)}),
                                            e.add("Gather", {xp, e.int64({1}, {})}, {onnx_attr::integer("axis", -1)})};
    first = parts[0];
    second = parts[1];
  } else {
    first = e.add("Slice", {x, e.int64s({0}), e.int64s({half}), e.int64s({-1})});
    second = e.add("Slice", {x, e.int64s({half}), e.int64s({dh.constant}), e.int64s({-1})});
  }
  const std::string out_a = e.add("Sub", {e.add("Mul", {first, cos}), e.add("Mul", {second, sin})});
  const std::string out_b = e.add("Add", {e.add("Mul", {second, cos}), e.add("Mul", {first, sin})});
  if (!a.interleaved) return e.add("Concat", {out_a, out_b}, {onnx_attr::integer("axis", -1)});
  const std::string stacked = e.add("Concat", {e.add("Unsqueeze", {out_a, e.int64s({-1})}),
                                               e.add("Unsqueeze", {out_b, e.int64s({-1})})},
                                    {onnx_attr::integer("axis", -1)});
  return e.add("Reshape", {stacked, e.dims(std::span(n.dims.data(), static_cast<std::size_t>(n.rank)))},
               {onnx_attr::integer("allowzero", 1)});
}

// ---- identities of inference, and what is not exported ----

std::string dropout_def::to_onnx(onnx_emitter& e) { return identity(e); }
std::string checkpoint_op::to_onnx(onnx_emitter& e) { return identity(e); }
std::string named_def::to_onnx(onnx_emitter& e) { return identity(e); }
std::string cross_entropy_def::to_onnx(onnx_emitter& e) {
  e.unsupported("a training loss is not exported: export the graph of the logits");
  return {};
}

}  // namespace loom
