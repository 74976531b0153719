#include "loom/nn/kv_cache.hpp"

#include <cstring>

#include "loom/core/errors.hpp"
#include "loom/ops/concat.hpp"

namespace loom::nn {

template <class T>
kv_cache<T>::kv_cache(std::vector<std::string> layers, std::int64_t batch, std::int64_t heads, std::int64_t head_dim,
                      std::int64_t capacity)
    : layers_(std::move(layers)), batch_(batch), heads_(heads), head_dim_(head_dim), capacity_(capacity) {
  if (batch < 1 || heads < 1 || head_dim < 1 || capacity < 1)
    throw value_error("kv_cache: batch, heads, head_dim and capacity must be positive");
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    input_names_.push_back(layers_[l] + ".cache_k");
    input_names_.push_back(layers_[l] + ".cache_v");
    keys_.emplace_back(dims_t{batch, heads, capacity, head_dim});
    values_.emplace_back(dims_t{batch, heads, capacity, head_dim});
  }
}

template <class T>
std::size_t kv_cache<T>::bytes() const {
  return 2 * layers_.size() * static_cast<std::size_t>(batch_ * heads_ * capacity_ * head_dim_) * sizeof(T);
}

template <class T>
std::vector<feed> kv_cache<T>::feeds(std::int64_t new_positions) const {
  if (new_positions < 0 || length_ + new_positions > capacity_)
    throw capacity_error("kv_cache: " + std::to_string(length_) + " cached + " + std::to_string(new_positions) +
                         " new positions exceed the capacity of " + std::to_string(capacity_));
  std::vector<feed> f;
  const dims_t dims{batch_, heads_, length_, head_dim_};
  const std::int64_t stride = capacity_ * head_dim_;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    f.push_back(feed::strided(input_names_[2 * l], keys_[l].data(), dims, stride));
    f.push_back(feed::strided(input_names_[2 * l + 1], values_[l].data(), dims, stride));
  }
  return f;
}

template <class T>
void kv_cache<T>::append(const executor<T>& run, std::int64_t new_positions) {
  if (length_ + new_positions > capacity_)
    throw capacity_error("kv_cache: " + std::to_string(length_) + " cached + " + std::to_string(new_positions) +
                         " new positions exceed the capacity of " + std::to_string(capacity_));
  // find every source first, so that nothing is stored unless all of them fit
  std::vector<tensor_view<const T>> sources;
  for (const std::string& name : input_names_) {
    const int in = run.input_index(name);
    int concat_node = -1;
    for (int c : run.plan().consumers(in))
      if (run.plan().order[static_cast<std::size_t>(c)]->op == &concat_entry) concat_node = c;
    if (concat_node < 0) throw shape_error("kv_cache: input \"" + name + "\" does not feed a concat<time> node");
    auto v = run.value_at(concat_node);
    const dims_t want{batch_, heads_, length_ + new_positions, head_dim_};
    if (!(v.dims == want))
      throw shape_error("kv_cache: after the step, \"" + name + "\" joined with the new keys is " + v.dims.str() +
                        ", expected " + want.str() + " (was the step run with this cache's feeds?)");
    sources.push_back(v);
  }
  const std::int64_t rows = length_ + new_positions, blocks = batch_ * heads_;
  for (std::size_t l = 0; l < layers_.size(); ++l)
    for (int kv = 0; kv < 2; ++kv) {
      const T* src = sources[2 * l + static_cast<std::size_t>(kv)].data;
      T* dst = (kv == 0 ? keys_ : values_)[l].data();
      for (std::int64_t b = 0; b < blocks; ++b)
        std::memcpy(dst + (b * capacity_ + length_) * head_dim_, src + (b * rows + length_) * head_dim_,
                    static_cast<std::size_t>(new_positions * head_dim_) * sizeof(T));
    }
  length_ += new_positions;
}

template <class T>
void kv_cache<T>::truncate(std::int64_t length) {
  if (length < 0 || length > length_)
    throw value_error("kv_cache: cannot truncate " + std::to_string(length_) + " positions to " +
                      std::to_string(length));
  length_ = length;
}

template <class T>
tensor<T> kv_cache<T>::copy_out(const tensor<T>& block) const {
  tensor<T> r(dims_t{batch_, heads_, length_, head_dim_});
  for (std::int64_t b = 0; b < batch_ * heads_; ++b)
    std::memcpy(r.data() + b * length_ * head_dim_, block.data() + b * capacity_ * head_dim_,
                static_cast<std::size_t>(length_ * head_dim_) * sizeof(T));
  return r;
}

template class kv_cache<float>;
template class kv_cache<double>;

}  // namespace loom::nn
