// The op entries under their former names, for one release: each is now entry_of<the op's
// declaration> (see core/op_entry.hpp and CHANGELOG.md).
#pragma once

#include "loom/ops/activation.hpp"
#include "loom/ops/add.hpp"
#include "loom/ops/checkpoint.hpp"
#include "loom/ops/concat.hpp"
#include "loom/ops/cross_entropy.hpp"
#include "loom/ops/dropout.hpp"
#include "loom/ops/embedding.hpp"
#include "loom/ops/norm.hpp"
#include "loom/ops/mask.hpp"
#include "loom/ops/matmul.hpp"
#include "loom/ops/mul.hpp"
#include "loom/ops/named.hpp"
#include "loom/ops/positional_encoding.hpp"
#include "loom/ops/reshape.hpp"
#include "loom/ops/scale.hpp"
#include "loom/ops/silu.hpp"
#include "loom/ops/softmax.hpp"

namespace loom {

[[deprecated("use entry_of<add_op>")]] inline constexpr const op_entry& add_entry = entry_of<add_op>;
[[deprecated("use entry_of<checkpoint_op>")]] inline constexpr const op_entry& checkpoint_entry = entry_of<checkpoint_op>;
[[deprecated("use entry_of<concat_def>")]] inline constexpr const op_entry& concat_entry = entry_of<concat_def>;
[[deprecated("use entry_of<cross_entropy_def>")]] inline constexpr const op_entry& cross_entropy_entry = entry_of<cross_entropy_def>;
[[deprecated("use entry_of<dropout_def>")]] inline constexpr const op_entry& dropout_entry = entry_of<dropout_def>;
[[deprecated("use entry_of<embedding_op>")]] inline constexpr const op_entry& embedding_entry = entry_of<embedding_op>;
[[deprecated("use entry_of<gelu_op>")]] inline constexpr const op_entry& gelu_entry = entry_of<gelu_op>;
[[deprecated("use entry_of<layer_norm_def>")]] inline constexpr const op_entry& layer_norm_entry = entry_of<layer_norm_def>;
[[deprecated("use entry_of<mask_bool_def>")]] inline constexpr const op_entry& mask_bool_entry = entry_of<mask_bool_def>;
[[deprecated("use entry_of<mask_causal_op>")]] inline constexpr const op_entry& mask_causal_entry = entry_of<mask_causal_op>;
[[deprecated("use entry_of<mask_padding_def>")]] inline constexpr const op_entry& mask_padding_entry = entry_of<mask_padding_def>;
[[deprecated("use entry_of<matmul_def>")]] inline constexpr const op_entry& matmul_entry = entry_of<matmul_def>;
[[deprecated("use entry_of<mul_op>")]] inline constexpr const op_entry& mul_entry = entry_of<mul_op>;
[[deprecated("use entry_of<named_def>")]] inline constexpr const op_entry& named_entry = entry_of<named_def>;
[[deprecated("use entry_of<positional_encoding_def>")]] inline constexpr const op_entry& positional_encoding_entry = entry_of<positional_encoding_def>;
[[deprecated("use entry_of<relu_op>")]] inline constexpr const op_entry& relu_entry = entry_of<relu_op>;
[[deprecated("use entry_of<reshape_def>")]] inline constexpr const op_entry& reshape_entry = entry_of<reshape_def>;
[[deprecated("use entry_of<scale_def>")]] inline constexpr const op_entry& scale_entry = entry_of<scale_def>;
[[deprecated("use entry_of<silu_op>")]] inline constexpr const op_entry& silu_entry = entry_of<silu_op>;
[[deprecated("use entry_of<slice_def>")]] inline constexpr const op_entry& slice_entry = entry_of<slice_def>;
[[deprecated("use entry_of<softmax_op>")]] inline constexpr const op_entry& softmax_entry = entry_of<softmax_op>;
[[deprecated("use entry_of<sum_op>")]] inline constexpr const op_entry& sum_entry = entry_of<sum_op>;
[[deprecated("use entry_of<transpose_def>")]] inline constexpr const op_entry& transpose_entry = entry_of<transpose_def>;

}  // namespace loom
