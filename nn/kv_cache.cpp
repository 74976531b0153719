#include "loom/nn/kv_cache.hpp"

#include <algorithm>
#include <cstring>

#include "loom/core/errors.hpp"
#include "../core/text.hpp"

namespace loom::nn {

namespace {
}  // namespace

template <class T>
kv_cache<T>::kv_cache(const plan_view& step, std::int64_t batch, std::int64_t capacity)
    : batch_(batch), capacity_(capacity) {
  if (batch < 1 || capacity < 1) throw value_error("kv_cache: batch and capacity must be positive");
  // every state: input [B, H, P, d_k] (H, d_k fixed; one symbol P for all) -> output [B, H, P + T, d_k]
  int p_sym = -1;
  for (int out : step.named) {
    if (!step.is_state(out)) continue;
    const std::string_view name = step.order[static_cast<std::size_t>(out)]->name;
    const int in = step.input_index(name);
    const plan_dims& d = step.dims[static_cast<std::size_t>(in)];
    const bool form = step.order[static_cast<std::size_t>(in)]->rank == 4 &&
                      step.order[static_cast<std::size_t>(out)]->rank == 4 && d[1].n_syms == 0 && d[3].n_syms == 0 &&
                      d[2].n_syms == 1 && d[2].constant == 0 && (p_sym < 0 || d[2].sym[0] == p_sym);
    if (!form)
      throw value_error("kv_cache: the state " + in_quotes(name) + " is " + step.shape_text(in) +
                        "; a cache holds states [B, H, P, d_k] with H and d_k fixed and one dim P for all");
    p_sym = d[2].sym[0];
    p_name_ = std::string(step.syms[static_cast<std::size_t>(p_sym)]);
    block b;
    b.name = std::string(name);
    b.heads = d[1].constant;
    b.head_dim = d[3].constant;
    b.storage = tensor<T>(dims_t{batch, b.heads, capacity, b.head_dim});
    blocks_.push_back(std::move(b));
  }
  if (blocks_.empty())
    throw value_error("kv_cache: the graph has no state (an input and a named output of the same name, as "
                      "self_attention_cached makes)");
}

template <class T>
std::vector<std::string> kv_cache<T>::names() const {
  std::vector<std::string> r;
  for (const block& b : blocks_) r.push_back(b.name);
  return r;
}

template <class T>
std::size_t kv_cache<T>::bytes() const {
  std::size_t total = 0;
  for (const block& b : blocks_) total += static_cast<std::size_t>(b.storage.size()) * sizeof(T);
  return total;
}

template <class T>
std::vector<feed> kv_cache<T>::feeds() {
  std::vector<feed> f;
  f.reserve(blocks_.size());
  for (block& b : blocks_)
    f.push_back(feed::with_room(b.name, b.storage.data(), dims_t{batch_, b.heads, length_, b.head_dim}, capacity_));
  return f;
}

template <class T>
std::int64_t kv_cache<T>::append(const executor<T>& run) {
  // read and check every output first, so that nothing changes unless all of them fit
  const std::int64_t fed = run.bound(p_name_);
  if (fed != length_)
    throw shape_error("kv_cache: the last step ran over " + std::to_string(fed) + " cached positions (dim " +
                      in_quotes(p_name_) + "), this cache holds " + std::to_string(length_) +
                      " (was the step run with this cache's feeds?)");
  std::vector<strided_view<const T>> sources;
  std::int64_t added = -1;
  for (const block& b : blocks_) {
    auto v = run.output_storage(b.name);
    const std::int64_t rows = v.dims.rank == 4 ? v.dims[2] : -1;
    if (rows < length_ || v.dims[0] != batch_ || v.dims[1] != b.heads || v.dims[3] != b.head_dim ||
        (added >= 0 && rows - length_ != added))
      throw shape_error("kv_cache: after the step, the state " + in_quotes(b.name) + " is " + v.dims.str() +
                        ", expected [" + std::to_string(batch_) + ", " + std::to_string(b.heads) + ", " +
                        std::to_string(length_) + " + new positions, " + std::to_string(b.head_dim) +
                        "] (was the step run with this cache's feeds?)");
    added = rows - length_;
    // outputs not written in place hold a copy of the cached rows: they must be this cache's
    if (v.data != b.storage.data())
      for (std::int64_t m = 0; m < batch_ * b.heads; ++m)
        if (std::memcmp(v.data + m * v.mat_stride, b.storage.data() + m * capacity_ * b.head_dim,
                        static_cast<std::size_t>(length_ * b.head_dim) * sizeof(T)) != 0)
          throw shape_error("kv_cache: the last step's " + in_quotes(b.name) +
                            " does not begin with this cache's positions (was the step run with this cache's feeds?)");
    sources.push_back(v);
  }
  if (length_ + added > capacity_)
    throw capacity_error("kv_cache: " + std::to_string(length_) + " cached + " + std::to_string(added) +
                         " new positions exceed the capacity of " + std::to_string(capacity_));
  for (std::size_t s = 0; s < blocks_.size(); ++s) {
    block& b = blocks_[s];
    const strided_view<const T>& src = sources[s];
    if (src.data == b.storage.data()) continue;  // the graph wrote the new rows in place
    const std::int64_t blocks = batch_ * b.heads, row = b.head_dim;
    for (std::int64_t m = 0; m < blocks; ++m)
      std::memcpy(b.storage.data() + (m * capacity_ + length_) * row, src.data + m * src.mat_stride + length_ * row,
                  static_cast<std::size_t>(added * row) * sizeof(T));
  }
  length_ += added;
  return added;
}

template <class T>
void kv_cache<T>::reorder(std::span<const std::int64_t> from) {
  if (static_cast<std::int64_t>(from.size()) != batch_)
    throw value_error("kv_cache::reorder: " + std::to_string(from.size()) + " origins for a cache of batch " +
                      std::to_string(batch_));
  for (std::size_t b = 0; b < from.size(); ++b)
    if (from[b] < 0 || from[b] >= batch_)
      throw value_error("kv_cache::reorder: origin " + std::to_string(from[b]) + " of sequence " + std::to_string(b) +
                        " is outside [0, " + std::to_string(batch_) + ")");
  if (length_ == 0) return;  // nothing cached yet
  for (block& blk : blocks_) {
    // per sequence, its heads' first length() rows: gather them, then write them back
    const std::int64_t per_head = length_ * blk.head_dim, per_seq = blk.heads * per_head;
    scratch_.resize(static_cast<std::size_t>(batch_ * per_seq));
    T* data = blk.storage.data();
    for (std::int64_t b = 0; b < batch_; ++b)
      for (std::int64_t h = 0; h < blk.heads; ++h)
        std::memcpy(scratch_.data() + b * per_seq + h * per_head,
                    data + ((from[static_cast<std::size_t>(b)] * blk.heads + h) * capacity_) * blk.head_dim,
                    static_cast<std::size_t>(per_head) * sizeof(T));
    for (std::int64_t b = 0; b < batch_; ++b)
      for (std::int64_t h = 0; h < blk.heads; ++h)
        std::memcpy(data + ((b * blk.heads + h) * capacity_) * blk.head_dim, scratch_.data() + b * per_seq + h * per_head,
                    static_cast<std::size_t>(per_head) * sizeof(T));
  }
}

template <class T>
void kv_cache<T>::truncate(std::int64_t length) {
  if (length < 0 || length > length_)
    throw value_error("kv_cache: cannot truncate " + std::to_string(length_) + " positions to " +
                      std::to_string(length));
  length_ = length;
}

template <class T>
const typename kv_cache<T>::block& kv_cache<T>::find(std::string_view name) const {
  for (const block& b : blocks_)
    if (b.name == name) return b;
  std::string names;
  for (const block& b : blocks_) names += (names.empty() ? "" : ", ") + in_quotes(b.name);
  throw missing_error("kv_cache: no state " + in_quotes(name) + " (it holds " + names + ")");
}

template <class T>
tensor<T> kv_cache<T>::state(std::string_view name) const {
  const block& b = find(name);
  tensor<T> r(dims_t{batch_, b.heads, length_, b.head_dim});
  if (length_ == 0) return r;  // no rows: r.data() may be null, which memcpy may not take
  const std::int64_t row = b.head_dim;
  for (std::int64_t m = 0; m < batch_ * b.heads; ++m)
    std::memcpy(r.data() + m * length_ * row, b.storage.data() + m * capacity_ * row,
                static_cast<std::size_t>(length_ * row) * sizeof(T));
  return r;
}

template <class T>
std::int64_t decode_step(executor<T>& run, kv_cache<T>& cache, std::span<const feed> feeds) {
  std::vector<feed> all = cache.feeds();
  all.insert(all.end(), feeds.begin(), feeds.end());
  run.forward(all);
  return cache.append(run);
}

template class kv_cache<float>;
template class kv_cache<double>;
template std::int64_t decode_step<float>(executor<float>&, kv_cache<float>&, std::span<const feed>);
template std::int64_t decode_step<double>(executor<double>&, kv_cache<double>&, std::span<const feed>);

}  // namespace loom::nn
