// Binding: feeds to inputs, run-time dims to symbols, checked in numbered steps that change
// nothing, then committed at once — a failed forward() loses nothing. A forward with the same
// names, types and shapes as the last one only updates input addresses (same_binding).
#include <limits>
#include <string>

#include "executor_impl.hpp"

namespace loom {
namespace {

bool is_input(const plan_view& plan, int i) { return plan.order[i]->op->role == node_role::input; }
bool is_param(const plan_view& plan, int i) { return plan.order[i]->op->role == node_role::param; }

storage storage_for(dtype t, bool is_double) {
  switch (t) {
    case dtype::real: return is_double ? storage::f64 : storage::f32;
    case dtype::i32: return storage::i32;
    case dtype::u8: return storage::u8;
  }
  return storage::f32;
}

// constant + Σ symbols, or `overflowed` if the sum does not fit in int64.
constexpr std::int64_t overflowed = std::numeric_limits<std::int64_t>::min();
std::int64_t eval(const plan_dim& d, const std::vector<std::int64_t>& s) { return d.value(s).value_or(overflowed); }

// Elements a node or the whole arena may hold: sizes in bytes stay far below 2^63 (as in
// executor::memory_plan), so no size product or offset sum can overflow.
constexpr std::int64_t max_node_elems = std::int64_t{1} << 57;
constexpr std::int64_t max_total_elems = std::int64_t{1} << 59;

// 1. Every feed names an input, every input is fed once, element types agree.
// Fills, per node, its feed (or null).
void match_feeds(const plan_view& plan, std::span<const feed> given, bool is_double, std::vector<const feed*>& fed) {
  const int n = plan.size();
  fed.assign(static_cast<std::size_t>(n), nullptr);
  for (const feed& f : given) {
    const int found = plan.input_index(f.name());
    if (found < 0) {
      std::string names;
      for (int i = 0; i < n; ++i)
        if (is_input(plan, i)) names += (names.empty() ? "" : ", ") + in_quotes(plan.order[i]->name);
      throw missing_error("forward: " + in_quotes(f.name()) + " is not an input of this graph (its inputs: " + names +
                          ")");
    }
    if (fed[found]) throw missing_error("forward: input " + in_quotes(f.name()) + " was given twice");
    fed[found] = &f;
  }
  std::string missing;
  for (int i = 0; i < n; ++i)
    if (is_input(plan, i) && !fed[i]) missing += (missing.empty() ? "" : ", ") + in_quotes(plan.order[i]->name);
  if (!missing.empty()) throw missing_error("forward: missing input(s) " + missing);
  for (int i = 0; i < n; ++i) {
    if (!fed[i]) continue;
    storage want = storage_for(plan.order[i]->elem, is_double);
    if (fed[i]->type() != want)
      throw shape_error("forward: input " + in_quotes(plan.order[i]->name) + " must be a tensor of " +
                        storage_name(want) + ", got " + storage_name(fed[i]->type()));
  }
}

// 2. Ranks and fixed dims of the inputs, and the value of every symbol (each of its
// bindings must agree): from the inputs, then from the parameters whose dims are named
// (param_dims: the store's tensor of each parameter node, or null).
void bind_symbols(const plan_view& plan, const std::vector<const feed*>& fed, const std::vector<const dims_t*>& param_dims,
                  std::vector<std::int64_t>& s, std::vector<bind_source>& source) {
  s.assign(plan.syms.size(), -1);
  source.assign(plan.syms.size(), {});
  using where = bind_source;
  auto who = [&](int i, bool from_feed) { return (from_feed ? "input " : "parameter ") + in_quotes(plan.order[i]->name); };
  auto text = [&](const where& w) { return who(w.node, w.feed) + " axis " + std::to_string(w.axis); };
  for (int j = 0; j < 2 * plan.size(); ++j) {
    const int i = j % plan.size();
    const bool from_feed = j < plan.size();
    if (from_feed ? !fed[i] : !param_dims[i]) continue;
    const node_desc* d = plan.order[i];
    const dims_t& got = from_feed ? fed[i]->dims() : *param_dims[i];
    if (!from_feed && got.rank != d->rank) continue;  // step 3 says what is wrong
    if (got.rank != d->rank)
      throw shape_error("forward: " + who(i, from_feed) + " must have rank " + std::to_string(d->rank) + " (" +
                        plan.shape_text(i) + "), got shape " + got.str());
    for (int a = 0; a < d->rank; ++a) {
      if (got.d[a] < 0)
        throw shape_error("forward: " + who(i, from_feed) + " axis " + std::to_string(a) + " has size " +
                          std::to_string(got.d[a]) + " (shape " + got.str() + "): a size cannot be negative");
      const plan_dim& pd = plan.dims[i][a];
      if (pd.n_syms == 0) {
        if (from_feed && got.d[a] != pd.constant)  // a parameter's fixed dims: step 3 checks them
          throw shape_error("forward: " + who(i, from_feed) + " axis " + std::to_string(a) + " must be " +
                            std::to_string(pd.constant) + ", got " + std::to_string(got.d[a]) + " (shape " +
                            got.str() + ")");
        continue;
      }
      auto k = static_cast<std::size_t>(pd.sym[0]);
      const where here{i, a, from_feed};
      if (s[k] < 0) {
        s[k] = got.d[a];
        source[k] = here;
      } else if (s[k] != got.d[a]) {
        throw shape_error("forward: dim " + in_quotes(plan.syms[k]) + " is " + std::to_string(s[k]) + " from " +
                          text(source[k]) + " but " + std::to_string(got.d[a]) + " from " + text(here));
      }
    }
  }
  for (std::size_t k = 0; k < s.size(); ++k)
    if (s[k] < 0)
      throw shape_error("forward: dim " + in_quotes(plan.syms[k]) +
                        " is not bound by any input or parameter (is a parameter missing from the store?)");
}

// 3. The dims of every node (and its bound dim attributes), and every parameter present in
// the store (its entry per node, null when absent) with those dims.
template <class T>
void node_dims(const plan_view& plan, const std::vector<typename param_store<T>::entry*>& entries,
               const std::vector<std::int64_t>& s, std::vector<dims_t>& nd,
               std::vector<std::array<std::int64_t, 2>>& na) {
  const int n = plan.size();
  nd.assign(n, {});
  na.assign(n, {});
  for (int i = 0; i < n; ++i) {
    const node_desc* d = plan.order[i];
    nd[i].rank = d->rank;
    for (int a = 0; a < d->rank; ++a) nd[i].d[a] = eval(plan.dims[i][a], s);
    na[i] = {eval(plan.dims[i][max_rank], s), eval(plan.dims[i][max_rank + 1], s)};
  }
  // Sizes before anything is allocated: a huge bound dim is an error, never an overflow.
  std::int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    std::int64_t elems = 1;
    bool too_big = false;
    for (int a = 0; a < nd[i].rank; ++a)
      too_big = too_big || nd[i].d[a] < 0 || __builtin_mul_overflow(elems, nd[i].d[a], &elems) || elems > max_node_elems;
    too_big = too_big || na[i][0] == overflowed || na[i][1] == overflowed;
    if (too_big || __builtin_add_overflow(total, 2 * elems, &total) || total > max_total_elems) {
      std::string dims;
      for (int a = 0; a < plan.order[i]->rank; ++a) dims += (a ? ", " : "") + std::to_string(nd[i].d[a]);
      throw shape_error("forward: " + plan.describe(i) + " " + plan.shape_text(i) + " would be [" + dims +
                        "] with the bound dims: " +
                        (too_big ? "more than 2^57 elements (or a dim beyond 2^63)" : "the graph's buffers would exceed 2^59 elements"));
    }
  }
  std::string absent;
  for (int i = 0; i < n; ++i) {
    if (!is_param(plan, i)) continue;
    const node_desc* d = plan.order[i];
    const typename param_store<T>::entry* e = entries[static_cast<std::size_t>(i)];
    if (!e) {
      absent += (absent.empty() ? "" : ", ") + in_quotes(d->name) + " " + nd[i].str();
      continue;
    }
    const tensor<T>& v = e->value;
    if (!(v.dims() == nd[i]))
      throw shape_error("forward: parameter " + in_quotes(d->name) + " must have shape " + nd[i].str() +
                        ", the store holds " + v.dims().str());
  }
  if (!absent.empty()) throw missing_error("forward: parameter(s) missing from the store: " + absent);
}

// 4. The ops' own run-time checks (op_kernels::check; shapes only, no data yet).
template <class T>
void run_op_checks(const plan_view& plan, std::span<const op_kernels<T>> kernels, const std::vector<dims_t>& nd,
                   const std::vector<std::array<std::int64_t, 2>>& na, std::vector<dims_t>& edims,
                   std::vector<const void*>& no_data) {
  edims.resize(static_cast<std::size_t>(plan.edges()));
  for (std::size_t e = 0; e < edims.size(); ++e) edims[e] = nd[plan.in_idx[e]];
  no_data.assign(edims.size(), nullptr);
  for (int i = 0; i < plan.size(); ++i) {
    if (!kernels[i].check) continue;
    const auto first = static_cast<std::size_t>(plan.in_off[i]), count = plan.inputs(i).size();
    ops::op_args<T> a;
    a.node = plan.order[i];
    a.in = std::span(no_data).subspan(first, count);
    a.in_dims = std::span(edims).subspan(first, count);
    a.out_dims = nd[i];
    a.dattr = na[i];
    kernels[i].check(a);
  }
}

// 5. Strided feeds: read in place where every consumer can (op_entry::reads_strided), else
// copied into the arena by forward(). Fills the feeds' matrix strides and which to copy.
void strided_feeds(const plan_view& plan, const std::vector<const feed*>& fed, const std::vector<dims_t>& nd,
                   std::vector<std::int64_t>& stride, std::vector<std::uint8_t>& copy) {
  const int n = plan.size();
  stride.assign(n, 0);
  copy.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    if (!fed[i] || fed[i]->mat_stride() == 0) continue;
    const dims_t& d = nd[i];
    if (fed[i]->mat_stride() == d[-2] * d[-1]) continue;  // back to back after all
    stride[i] = fed[i]->mat_stride();
    for (int c : plan.consumers(i)) {
      const node_desc& consumer = *plan.order[c];
      auto ins = plan.inputs(c);
      for (std::size_t pos = 0; pos < ins.size(); ++pos)
        if (ins[pos] == i &&
            !(consumer.op->reads_strided && consumer.op->reads_strided(consumer, static_cast<int>(pos))))
          copy[i] = 1;
    }
  }
}

// 6. Appends in place: a node that may grow its input 0's storage (executor's may_append) does
// so when that input is fed with room (feed::with_room); the rows it needs must fit the room.
void appends_in_place(const plan_view& plan, std::span<const int> may_append, const std::vector<const feed*>& fed,
                      const std::vector<dims_t>& nd, std::vector<std::uint8_t>& appended) {
  appended.assign(static_cast<std::size_t>(plan.size()), 0);
  for (int c = 0; c < plan.size(); ++c) {
    const int x = may_append[c];
    if (x < 0 || !fed[x] || fed[x]->room_rows() == 0) continue;
    if (nd[c][-2] > fed[x]->room_rows())
      throw capacity_error("forward: input " + in_quotes(plan.order[x]->name) + " has room for " +
                           std::to_string(fed[x]->room_rows()) + " rows per matrix, but " + plan.describe(c) +
                           " appends to " + std::to_string(nd[c][-2]) + " (shape " + nd[c].str() + ")");
    appended[c] = 1;
  }
}

}  // namespace

template <class T>
void executor<T>::impl::bind(std::span<const feed> given) {
  const bool quantize = opts.weights == weight_precision::int8 && int8_layout != params->layout_version();
  const bool repack = opts.pack_weights && packed_layout != params->layout_version();
  if (same_binding(given) && !quantize && !repack) {  // new data, same shapes: only input addresses change
    feeds.assign(given.begin(), given.end());
    place_buffers();
    return;
  }
  // The steps fill the scratch vectors (kept between calls, so a decoding step, which binds
  // anew at every token, allocates nothing here); the commit swaps them with the members.
  bind_scratch& w = scratch;
  match_feeds(plan, given, std::is_same_v<T, double>, w.fed);                        // 1
  const std::vector<const feed*>& fed = w.fed;
  w.param_dims.assign(static_cast<std::size_t>(n), nullptr);
  for (int i = 0; i < n; ++i)
    if (const auto* e = param_at(i)) w.param_dims[static_cast<std::size_t>(i)] = &e->value.dims();
  bind_symbols(plan, fed, w.param_dims, w.sym, w.source);                             // 2
  node_dims<T>(plan, param_entries(), w.sym, w.dims, w.dattr);                        // 3
  run_op_checks<T>(plan, kernels, w.dims, w.dattr, w.edge_dims, w.no_data);           // 4
  strided_feeds(plan, fed, w.dims, w.stride, w.copy);                                 // 5
  appends_in_place(plan, may_append, fed, w.dims, w.grows);                           // 6
  if (quantize) quantize_weights();  // the int8 weights, for this plan and these parameters (all or nothing)
  // 7. commit: nothing above changed any state
  w.feed_at.assign(static_cast<std::size_t>(n), -1);
  for (int i = 0; i < n; ++i)
    if (fed[i]) w.feed_at[i] = static_cast<int>(fed[i] - given.data());
  for (int i = 0; i < n; ++i) {  // matrix strides: feeds read in place, appends, views of either
    if (w.copy[i]) w.stride[i] = 0;
    if (w.grows[i]) w.stride[i] = w.stride[plan.inputs(i)[0]];
    if (view_of[i] >= 0) w.stride[i] = w.stride[view_of[i]];
  }
  val_stride.swap(w.stride);
  materialize.swap(w.copy);
  appended.swap(w.grows);
  sym.swap(w.sym);
  dims.swap(w.dims);
  dattr.swap(w.dattr);
  feeds.assign(given.begin(), given.end());
  node_feed.swap(w.feed_at);
  allocate();
  val.assign(n, nullptr);
  grad.assign(n, nullptr);
  place_buffers();
  bound = true;
  bound_layout = params->layout_version();
  if (repack) {  // the kernels copy their weights again from the store's values
    kept.clear();
    for (int i = 0; i < n; ++i) kept.push_back(weight_of(i).empty() ? nullptr : std::make_unique<kept_weight>());
    packed_layout = bound_layout;
  }
}

// True when `given` binds exactly as the last successful bind (same names, types, shapes and
// strides, and the store's layout unchanged): then only input addresses need updating.
template <class T>
bool executor<T>::impl::same_binding(std::span<const feed> given) const {
  if (!bound || given.size() != feeds.size()) return false;
  for (std::size_t k = 0; k < given.size(); ++k) {
    const feed& a = given[k];
    const feed& b = feeds[k];
    if (a.name() != b.name() || a.type() != b.type() || !(a.dims() == b.dims()) || a.mat_stride() != b.mat_stride() ||
        a.room_rows() != b.room_rows())
      return false;
  }
  return params->layout_version() == bound_layout;
}

template void executor<float>::impl::bind(std::span<const feed>);
template void executor<double>::impl::bind(std::span<const feed>);
template bool executor<float>::impl::same_binding(std::span<const feed>) const;
template bool executor<double>::impl::same_binding(std::span<const feed>) const;

}  // namespace loom
