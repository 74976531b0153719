// Checkpoints: parameters, optimizer state and the caller's metadata in ONE safetensors file.
//
// Layout of the file (readable by any safetensors reader, e.g. PyTorch's):
//   tensors   "<param name>"                    every parameter's value, in T's dtype
//             "optimizer.<kind>.<param name>"   optimizer buffers, e.g. optimizer.exp_avg.out.weight
//   metadata  the caller's entries, plus
//             "loom.checkpoint" = "1", "optimizer" = "adam", "optimizer.step" = "1200",
//             "optimizer.<hyperparameter>" = value (lr, betas, ... — recorded, not restored)
// Hyperparameters come from the code that builds the optimizer; only the step count and the
// buffers are restored.
#pragma once

#include <map>
#include <string>

#include "loom/core/params.hpp"
#include "loom/io/safetensors.hpp"
#include "loom/train/optim.hpp"

namespace loom {

/// Saves the parameters, the optimizer's state (which must be bound to `params`) and the
/// metadata atomically (temporary file, fsync, rename; the previous file survives a failure).
/// Throws value_error for a metadata key starting with "optimizer" or "loom.", a parameter
/// named "optimizer.*", an optimizer bound to another store or holding only its shard of the
/// state (optimizer::shard); io_error if writing fails.
template <class T>
void save_checkpoint(const std::string& path, const param_store<T>& params, const optimizer<T>& opt,
                     const std::map<std::string, std::string>& metadata = {});

/// As above, with `whole_state` — the state of every parameter, checked as such — in place of
/// opt's own: a sharded optimizer's state gathered from the ranks that hold it
/// (distributed::save_checkpoint). The file is the one an unsharded optimizer holding that
/// state writes.
template <class T>
void save_checkpoint(const std::string& path, const param_store<T>& params, const optimizer<T>& opt,
                     const optimizer_state<T>& whole_state, const std::map<std::string, std::string>& metadata = {});

/// Loads a checkpoint into the parameters (already set: names and shapes) and the optimizer
/// (of the same kind, bound to `params`), and returns the caller's metadata. Checks everything
/// first; throws io_error for a malformed file and load_mismatch_error listing every difference
/// (missing or extra tensors, shapes, dtypes, NaN or infinity unless options.allow_non_finite,
/// optimizer kind or state, a step count that leaves no room for another step); on error
/// nothing changes.
template <class T>
std::map<std::string, std::string> load_checkpoint(const std::string& path, param_store<T>& params, optimizer<T>& opt,
                                                   load_options options = {});

/// Loads only the parameters of a checkpoint (say, for inference) and returns the caller's
/// metadata; optimizer tensors are ignored. Errors as above.
template <class T>
std::map<std::string, std::string> load_checkpoint(const std::string& path, param_store<T>& params,
                                                   load_options options = {});

}  // namespace loom
