// PyTorch weights in and out of loom: the state_dict of a torch.nn.MultiheadAttention or a
// torch.nn.Transformer, saved as safetensors (docs/pytorch.md shows how, without the
// `safetensors` package), loaded into a param_store under loom's names and written back under
// PyTorch's.
//
//   nn.MultiheadAttention (loom: nn::self_attention / cross_attention<Prefix, H>)
//     in_proj_weight [3D, D], in_proj_bias [3D], out_proj.weight [D, D], out_proj.bias [D]:
//     the same names under Prefix. The separate-projection variant q_proj_weight,
//     k_proj_weight, v_proj_weight (PyTorch's layout when kdim or vdim differ from embed_dim)
//     is accepted when all three are [D, D]: its rows are concatenated (q, k, v) into
//     in_proj_weight. Loom projects keys and values from the model dim, so kdim ≠ D or
//     vdim ≠ D cannot load. bias_k / bias_v (add_bias_kv=True) are not supported.
//   nn.Transformer (loom: nn::transformer_body, nn::seq2seq)
//     encoder.layers.{i}.*, encoder.norm.*, decoder.layers.{i}.*, decoder.norm.*: the same
//     names, optionally under a prefix on either side ("transformer." when the Transformer
//     is the submodule model.transformer).
//
// Biases: a module built with bias=False saves no bias tensors. Loom's layers always have
// biases, so when the file holds no bias at all for the module, the biases load as zeros —
// the same function. If some biases are present and others absent, the absent ones are
// differences (a damaged file, not a bias-free module). Training in loom then updates those
// zero biases like any parameter; export with export_options::biases = false checks that
// they are still zero.
//
// batch_first does not change any weight: it only orders the axes of the inputs. Loom is
// always batch-first ([B, T, D]); feed a batch_first=False module's [T, B, D] tensors
// transposed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/core/params.hpp"
#include "loom/io/safetensors.hpp"

namespace loom::pytorch {

/// Where a module's tensors live: `loom` is its prefix in the param_store (the Prefix of
/// nn::self_attention<Prefix, H>, say "dec.0.self_attn"), `torch` its prefix in the state_dict
/// ("transformer." when the module is model.transformer). With or without the trailing dot;
/// empty means the top level.
struct prefixes {
  std::string_view loom = {};
  std::string_view torch = {};
};

/// How nn.MultiheadAttention stores its input projections.
enum class attention_layout {
  packed,    // in_proj_weight [3D, D] (rows q, k, v): kdim == vdim == embed_dim
  separate,  // q_proj_weight, k_proj_weight, v_proj_weight [D, D] each
};

/// How a state_dict file is matched to a store.
struct import_options {
  /// Tensors of the module in the file that no loom parameter takes are differences (else
  /// ignored). For a MultiheadAttention every tensor under the torch prefix is the module's;
  /// for a Transformer, those named encoder.* and decoder.* under it.
  bool strict = true;
  /// A module whose file holds no bias tensor at all (bias=False) loads with zero biases;
  /// if false, every absent bias is a difference.
  bool zero_absent_biases = true;
  /// Float tensors holding NaN or infinity load (else each is a difference).
  bool allow_non_finite = false;
};

/// How loom parameters are written under PyTorch's names.
struct export_options {
  /// Layout of every attention module's input projection (nn.Transformer always loads packed).
  attention_layout layout = attention_layout::packed;
  /// false: write no biases, for a module built with bias=False; every bias must be zero,
  /// else value_error names those that are not.
  bool biases = true;
};

/// The differences between a MultiheadAttention state_dict in `file` (under names.torch) and
/// the store's parameters under names.loom, one line each; empty if it would load.
template <class T>
std::vector<std::string> multihead_attention_differences(const tensor_file& file, const param_store<T>& params,
                                                         prefixes names, import_options options = {});

/// Loads a torch.nn.MultiheadAttention's state_dict into the store's parameters
/// names.loom.{in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias}, which must exist
/// (create the store from the graph with make_params). F32 and F64 load into either scalar
/// type. Throws load_mismatch_error listing every difference (missing, unexpected, shape,
/// dtype, unusable separate projections); on any error the store is unchanged.
template <class T>
void load_multihead_attention(const tensor_file& file, param_store<T>& params, prefixes names,
                              import_options options = {});
/// The same from a safetensors file; also throws io_error for an unreadable or malformed file.
template <class T>
void load_multihead_attention(const std::string& path, param_store<T>& params, prefixes names,
                              import_options options = {});

/// The differences between a Transformer state_dict in `file` and the store (see load_transformer).
template <class T>
std::vector<std::string> transformer_differences(const tensor_file& file, const param_store<T>& params,
                                                 prefixes names = {}, import_options options = {});

/// Loads a torch.nn.Transformer's state_dict (encoder.*, decoder.* under names.torch) into the
/// store's parameters encoder.*, decoder.* under names.loom — every one of them, as built by
/// nn::transformer_body or nn::seq2seq; embeddings and generator are left alone. Throws
/// load_mismatch_error listing every difference; on any error the store is unchanged.
template <class T>
void load_transformer(const tensor_file& file, param_store<T>& params, prefixes names = {},
                      import_options options = {});
template <class T>
void load_transformer(const std::string& path, param_store<T>& params, prefixes names = {},
                      import_options options = {});

/// The store's attention parameters under names.loom as a MultiheadAttention state_dict under
/// names.torch, in T's dtype (write it with write_safetensors). Throws missing_error if a
/// parameter is absent, value_error for a non-zero bias with options.biases = false.
template <class T>
tensor_file export_multihead_attention(const param_store<T>& params, prefixes names, export_options options = {});

/// The store's encoder.* and decoder.* parameters under names.loom as a torch.nn.Transformer
/// state_dict under names.torch, in T's dtype. Throws missing_error if there are none.
template <class T>
tensor_file export_transformer(const param_store<T>& params, prefixes names = {}, export_options options = {});

}  // namespace loom::pytorch
