// The attention fusion rule: finds  matmul([dropout](softmax(mask..(scale(matmul(q, kᵀ))))), v)  —
// with the heads' split below q, k, v and their merge above the output when those are plain
// views, masks of every kind (causal, padding, left padding, boolean, a float mask added to the
// scores), dropout on the weights, and grouped-query attention's split of the query heads into
// groups (the scores merged back into heads for the masks, the weights split again) — and makes
// it one attention node (ops/fused_attention.hpp).
#include <algorithm>
#include <memory>

#include "fused_attention.hpp"
#include "loom/graph/fusion.hpp"
#include "loom/ops/add.hpp"
#include "loom/ops/concat.hpp"
#include "loom/ops/dropout.hpp"
#include "loom/ops/mask.hpp"
#include "loom/ops/matmul.hpp"
#include "loom/ops/reshape.hpp"
#include "loom/ops/scale.hpp"
#include "loom/ops/softmax.hpp"

namespace loom::ops {
namespace {

// Reshape node x as a split of one axis of its input into two (the second fixed): the axis, or −1.
int split_axis(const plan_view& p, int x) {
  const int in = p.inputs(x)[0];
  const int ri = p.order[in]->rank, ro = p.order[x]->rank;
  if (ro != ri + 1) return -1;
  for (int a = 0; a < ri; ++a) {
    bool fits = p.dims[x][a + 1].n_syms == 0;
    for (int k = 0; k < a && fits; ++k) fits = same_dim(p.dims[x][k], p.dims[in][k]);
    for (int k = a + 1; k < ri && fits; ++k) fits = same_dim(p.dims[x][k + 1], p.dims[in][k]);
    if (fits) return a;
  }
  return -1;
}

// Reshape node x as a merge of two adjacent axes of its input (the second fixed): the axis, or −1.
int merge_axis(const plan_view& p, int x) {
  const int in = p.inputs(x)[0];
  const int ri = p.order[in]->rank, ro = p.order[x]->rank;
  if (ro != ri - 1) return -1;
  for (int a = 0; a < ro; ++a) {
    bool fits = p.dims[in][a + 1].n_syms == 0;
    for (int k = 0; k < a && fits; ++k) fits = same_dim(p.dims[x][k], p.dims[in][k]);
    for (int k = a + 1; k < ro && fits; ++k) fits = same_dim(p.dims[x][k], p.dims[in][k + 1]);
    if (fits) return a;
  }
  return -1;
}

// From operand x (read by node `by`) down through absorbable views — transpose, reshape
// splitting an axis, slice of a fixed range — to the node whose buffer holds it. Returns that
// node; `chain` gets the steps from its dims to x's, `absorbed` the nodes passed.
int view_below(const plan_view& p, std::span<const std::uint8_t> absorbable, int x, int by, view_chain& chain,
               std::vector<int>& absorbed) {
  std::vector<view_step> down;
  while (only_for(p, absorbable, x, by)) {
    const node_desc& d = *p.order[x];
    view_step st;
    if (d.op == &entry_of<transpose_def>) {
      const auto perm = load_attrs<transpose_attrs>(d).perm;
      st.kind = view_step::permute;
      for (int a = 0; a < d.rank && a < max_rank; ++a) st.perm[a] = static_cast<std::int8_t>(perm[a]);
    } else if (d.op == &entry_of<reshape_def> && split_axis(p, x) >= 0) {
      st.kind = view_step::split;
      st.axis = split_axis(p, x);
      st.size = p.dims[x][st.axis + 1].constant;
    } else if (d.op == &entry_of<slice_def> && p.dims[x][max_rank].n_syms == 0 && p.dims[x][max_rank + 1].n_syms == 0) {
      st.kind = view_step::slice;
      st.axis = static_cast<int>(load_attrs<slice_attrs>(d).axis);
      st.begin = p.dims[x][max_rank].constant;
      st.size = p.dims[x][max_rank + 1].constant;
    } else {
      break;
    }
    down.push_back(st);
    absorbed.push_back(x);
    by = x;
    x = p.inputs(x)[0];
  }
  chain.assign(down.rbegin(), down.rend());
  return x;
}

bool is_matmul(const node_desc& d, bool trans_a, bool trans_b) {
  if (d.op != &entry_of<matmul_def>) return false;
  const auto t = load_attrs<matmul_attrs>(d);
  return t.trans_a == trans_a && t.trans_b == trans_b;
}

std::optional<fusion> attention_rule(const plan_view& p, int root, std::span<const std::uint8_t> absorbable) {
  auto f = std::make_shared<attention_params>();
  fusion r;
  r.op = &entry_of<attention_op>;
  r.root = root;
  // the output side: o under merges of two axes and transposes (the heads merged back, the
  // query groups of grouped-query attention merged into heads) — where o lies in the root
  int o = root;
  for (;;) {
    const node_desc& d = *p.order[o];
    view_step back;
    if (d.op == &entry_of<reshape_def> && merge_axis(p, o) >= 0) {
      const int a = merge_axis(p, o);
      back = {.kind = view_step::split, .axis = a, .size = p.dims[p.inputs(o)[0]][a + 1].constant};
    } else if (d.op == &entry_of<transpose_def>) {
      const auto perm = load_attrs<transpose_attrs>(d).perm;
      back.kind = view_step::permute;
      for (int a = 0; a < d.rank; ++a) back.perm[perm[a]] = static_cast<std::int8_t>(a);
    } else {
      break;
    }
    const int below = p.inputs(o)[0];
    if (!only_for(p, absorbable, below, o)) return std::nullopt;
    f->out.push_back(back);
    r.absorbed.push_back(below);
    o = below;
  }
  // o = matmul(weights, v), weights = softmax(masks(scale(matmul(q, kᵀ)))); with grouped
  // queries, weights = split(softmax(..)) and the scores merge(matmul(q, kᵀ)), the masks seeing
  // the query groups merged into heads
  if (!is_matmul(*p.order[o], false, false)) return std::nullopt;
  int weights = p.inputs(o)[0];
  const int v = p.inputs(o)[1];
  int above = o;
  int group_axis = -1;
  long group_size = 0;
  if (p.order[weights]->op == &entry_of<reshape_def> && split_axis(p, weights) >= 0) {
    if (!only_for(p, absorbable, weights, o)) return std::nullopt;
    group_axis = split_axis(p, weights);
    group_size = p.dims[weights][group_axis + 1].constant;
    r.absorbed.push_back(weights);
    above = weights;
    weights = p.inputs(weights)[0];
  }
  int drop_seed = -1;
  if (p.order[weights]->op == &entry_of<dropout_def>) {  // dropout on the weights: its mask is applied inside
    if (!only_for(p, absorbable, weights, above)) return std::nullopt;
    f->dropout = load_attrs<dropout_attrs>(*p.order[weights]).p;
    f->dropout_hash = p.order[weights]->hash;
    drop_seed = p.inputs(weights)[1];
    r.absorbed.push_back(weights);
    above = weights;
    weights = p.inputs(weights)[0];
  }
  if (p.order[weights]->op != &entry_of<softmax_op> || !only_for(p, absorbable, weights, above)) return std::nullopt;
  r.absorbed.push_back(weights);
  int x = p.inputs(weights)[0];
  above = weights;
  std::vector<attention_params::mask> masks;
  std::vector<int> mask_inputs;
  for (;;) {
    const node_desc& d = *p.order[x];
    attention_params::mask m;
    if (d.op == &entry_of<mask_causal_op>) {
      m.kind = attention_params::mask::causal;
    } else if (d.op == &entry_of<mask_padding_def>) {
      m.kind = load_attrs<mask_padding_attrs>(d).left ? attention_params::mask::left_padding
                                                      : attention_params::mask::padding;
    } else if (d.op == &entry_of<mask_bool_def>) {
      m.kind = attention_params::mask::boolean;
      m.lead = static_cast<int>(load_attrs<mask_bool_attrs>(d).lead);
    } else if (d.op == &entry_of<add_op> && same_dims(p, x, p.inputs(x)[0]) && p.inputs(x)[0] != p.inputs(x)[1] &&
               p.order[p.inputs(x)[1]]->elem == dtype::real) {
      m.kind = attention_params::mask::additive;  // a float mask added to the scores
    } else {
      break;
    }
    if (!only_for(p, absorbable, x, above)) return std::nullopt;
    if (m.kind != attention_params::mask::causal) {
      mask_inputs.push_back(p.inputs(x)[1]);
      m.input = 2 + static_cast<int>(mask_inputs.size());
    }
    masks.push_back(m);
    r.absorbed.push_back(x);
    above = x;
    x = p.inputs(x)[0];
  }
  if (p.order[x]->op == &entry_of<scale_def>) {
    if (!only_for(p, absorbable, x, above)) return std::nullopt;
    f->scale = load_attrs<scale_attrs>(*p.order[x]).factor;
    r.absorbed.push_back(x);
    above = x;
    x = p.inputs(x)[0];
  }
  if (group_axis >= 0) {  // the scores' merge must undo the weights' split
    if (p.order[x]->op != &entry_of<reshape_def> || merge_axis(p, x) != group_axis ||
        p.dims[p.inputs(x)[0]][group_axis + 1].constant != group_size || !only_for(p, absorbable, x, above))
      return std::nullopt;
    r.absorbed.push_back(x);
    above = x;
    x = p.inputs(x)[0];
    f->merge_axis = group_axis;
  }
  if (!is_matmul(*p.order[x], false, true) || !only_for(p, absorbable, x, above)) return std::nullopt;
  r.absorbed.push_back(x);
  const int q = p.inputs(x)[0], k = p.inputs(x)[1];
  const int rank = p.order[o]->rank;
  if (p.order[q]->rank != rank || p.order[k]->rank != rank || p.order[v]->rank != rank) return std::nullopt;
  for (int id : {q, k, v})
    if (p.order[id]->elem != dtype::real) return std::nullopt;
  // q, k, v read where they lie (below their head split), unless someone else needs the copies
  const int q_base = view_below(p, absorbable, q, x, f->q, r.absorbed);
  const int k_base = k == q ? q_base : view_below(p, absorbable, k, x, f->k, r.absorbed);
  if (k == q) f->k = f->q;
  const int v_base = view_below(p, absorbable, v, o, f->v, r.absorbed);
  r.inputs = {q_base, k_base, v_base};
  r.inputs.insert(r.inputs.end(), mask_inputs.begin(), mask_inputs.end());
  if (drop_seed >= 0) {
    f->dropout_seed = static_cast<int>(r.inputs.size());
    r.inputs.push_back(drop_seed);
  }
  if (r.inputs.size() > 8) return std::nullopt;  // backward_reads covers eight inputs
  f->masks = std::move(masks);
  std::sort(r.absorbed.begin(), r.absorbed.end());
  r.absorbed.erase(std::unique(r.absorbed.begin(), r.absorbed.end()), r.absorbed.end());
  r.absorbed.erase(std::remove(r.absorbed.begin(), r.absorbed.end(), root), r.absorbed.end());
  r.params = std::move(f);
  return r;
}

}  // namespace

fusion_match attention_fusion_rule() { return &attention_rule; }

}  // namespace loom::ops
