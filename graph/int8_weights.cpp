// exec_options::weights = int8: the weights of the plan's products x · Wᵀ quantized once per
// output channel (core/int8_matrix.hpp), for the kernels to read through op_args::int8.
#include <string>

#include "executor_impl.hpp"

namespace loom {

template <class T>
std::string_view executor<T>::impl::weight_of(int i) const {
  const node_desc& d = *plan.order[i];
  if (leaf[i] || !d.op->reads_int8_weight || !d.op->reads_int8_weight(d)) return {};
  const node_desc& w = *plan.order[plan.inputs(i)[1]];
  return w.op->role == node_role::param ? w.name : std::string_view{};
}

// Every node whose op reads an int8 weight (op_traits::reads_int8_weight) and whose weight is a
// parameter of rank 2, not named in exec_options::float_weights, gets that parameter's quantized
// form; a parameter read by several such nodes (a tied lm head is one) is quantized once. Throws
// value_error for a weight that is not finite, having changed nothing.
template <class T>
void executor<T>::impl::quantize_weights() {
  if constexpr (std::is_same_v<T, float>) {
    std::vector<loom::int8_matrix> matrix(static_cast<std::size_t>(n));
    std::vector<int8_weights> view(static_cast<std::size_t>(n));
    std::vector<const int8_weights*> of(static_cast<std::size_t>(n), nullptr);
    std::vector<std::uint8_t> made(static_cast<std::size_t>(n), 0);  // per parameter node
    for (int i = 0; i < n; ++i) {
      if (weight_of(i).empty() || float_product[static_cast<std::size_t>(i)]) continue;
      const auto w = static_cast<std::size_t>(plan.inputs(i)[1]);
      const auto* e = param_at(static_cast<int>(w));
      if (!e || e->value.rank() != 2) continue;
      if (!made[w]) {
        const std::string who = "forward: weight_precision::int8: parameter " + in_quotes(plan.order[w]->name);
        matrix[w] = quantize_rows(e->value.data(), e->value.dim(0), e->value.dim(1), who.c_str());
        view[w] = matrix[w].view();
        made[w] = 1;
      }
      of[static_cast<std::size_t>(i)] = &view[w];
    }
    int8_matrices.swap(matrix);
    int8_view.swap(view);  // the pointers in `of` stay valid: a swap moves no element
    int8_of.swap(of);
    int8_layout = params->layout_version();
  }
}

template void executor<float>::impl::quantize_weights();
template void executor<double>::impl::quantize_weights();
template std::string_view executor<float>::impl::weight_of(int) const;
template std::string_view executor<double>::impl::weight_of(int) const;

}  // namespace loom
