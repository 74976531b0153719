// Keeping the ranks' state the same: configuration checks, parameter and optimizer broadcast
// from rank 0, checksums, and checkpoints written by rank 0 and read back on any number of ranks.
// Every function here is collective (all ranks call it) and throws the same error on every rank.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "loom/core/params.hpp"
#include "loom/distributed/communicator.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/train/optim.hpp"

namespace loom::distributed {

/// Checks that every rank passed the same settings. Throws mismatch_error listing, for each rank
/// that differs from rank 0, the keys whose values differ ("rank 1: \"seed\" is \"2\", rank 0
/// has \"1\"") and those that only one of them has.
void check_same_config(const communicator& comm, const std::map<std::string, std::string>& config);

/// The names and shapes of the parameters as config entries ("parameter enc.0.weight" = "[64, 64]").
template <class T>
std::map<std::string, std::string> parameter_config(const param_store<T>& params);

/// A 64-bit checksum (FNV-1a) of the parameters' names, shapes and value bits, in name order;
/// with an optimizer, also of its step and buffers.
template <class T>
std::uint64_t state_checksum(const param_store<T>& params, const optimizer<T>* opt = nullptr);

/// Checks that every rank holds the same parameters (and optimizer state), bit for bit, by
/// their checksums. Throws mismatch_error naming the ranks that differ from rank 0.
template <class T>
void check_same_state(const communicator& comm, const param_store<T>& params, const optimizer<T>* opt = nullptr);

/// Copies rank 0's parameter values to every rank, then check_same_state. The ranks must
/// have the same names and shapes (else mismatch_error, checked first).
template <class T>
void broadcast_parameters(const communicator& comm, param_store<T>& params);

/// Copies rank 0's optimizer state (step count and buffers) to every rank's optimizer, of the
/// same kind and bound to parameters of the same names and shapes.
template <class T>
void broadcast_optimizer(const communicator& comm, optimizer<T>& opt);

/// Saves a checkpoint (loom::save_checkpoint: atomic) from rank 0 only, after checking that every
/// rank holds the same parameters and optimizer state; returns when the file is complete. An
/// error on rank 0 (say, a full disk) is thrown on every rank.
template <class T>
void save_checkpoint(const communicator& comm, const std::string& path, const param_store<T>& params,
                     const optimizer<T>& opt, const std::map<std::string, std::string>& metadata = {});

/// Collective: makes rank 0's optimizer whole again after data_parallel::shard_optimizer — its
/// shard widened to every parameter, the other ranks' buffers gathered into it — so that rank 0
/// alone can go on with it (save with loom::save_checkpoint, say, after the others have
/// finished). The other ranks keep their shards. Does nothing when no rank is sharded.
template <class T>
void gather_optimizer(const communicator& comm, optimizer<T>& opt);

/// Loads a checkpoint on rank 0 (loom::load_checkpoint) and copies its parameters, optimizer
/// state and metadata to every rank — only rank 0 needs the file, and the number of ranks that
/// wrote it does not matter. Returns the metadata. Rank 0's error is thrown on every rank.
template <class T>
std::map<std::string, std::string> load_checkpoint(const communicator& comm, const std::string& path,
                                                   param_store<T>& params, optimizer<T>& opt);

}  // namespace loom::distributed
