// loom::distributed — data-parallel training over MPI. This header: the MPI session of a
// process, communicators (a group of ranks), and the errors a distributed job can end with.
//
//   int main(int argc, char** argv) {
//     return loom::distributed::run(argc, argv, [&](loom::distributed::communicator& world) {
//       ... world.rank(), world.size() ...
//       return 0;
//     });
//   }
//
// Launch with `mpirun -np 2 program ...` (docs/distributed.md). Every operation here is
// collective — every rank of the communicator calls it, in the same order — and waits at most
// the communicator's timeout for the other ranks: a rank that died or hangs makes the others
// throw rank_lost_error instead of waiting for ever. <mpi.h> is not included by loom's headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "loom/core/errors.hpp"

namespace loom::distributed {

/// Another rank did not answer within the timeout, or MPI reported a failure talking to it: the
/// job cannot go on. rank() is the rank that was lost (-1 when MPI does not say which).
/// Once a process has thrown it, the job ends (abort_job) at the latest 3 s later, whatever the
/// caller does with the exception: catch it to print or clean up, not to go on.
class rank_lost_error : public error {
 public:
  rank_lost_error(const std::string& what, int lost_rank) : error(what), lost_(lost_rank) {}
  int lost_rank() const { return lost_; }

 private:
  int lost_;
};

/// The ranks disagree about something that must be the same on all of them (the model, the
/// parameters, the data seed, ...). The message names the ranks and what differs.
struct mismatch_error : value_error {
  using value_error::value_error;
};

/// A group of ranks 0..size()-1 that talk to each other. Copies share one MPI communicator.
class communicator {
 public:
  int rank() const;
  int size() const;
  /// Seconds an operation waits for the other ranks before throwing rank_lost_error (default 30).
  double timeout() const;
  /// Sets the timeout of this communicator and of its copies. Throws value_error unless > 0.
  void set_timeout(double seconds);

  /// A new communicator of the ranks that pass the same `color`, ranked as in this one (its
  /// own MPI communicator: messages on it never mix with this one's). Collective.
  communicator split(int color) const;
  /// A new communicator of the same ranks with its own MPI communicator. Collective.
  communicator duplicate() const;

  /// Returns when every rank has called it.
  void barrier() const;
  /// Copies root's bytes to every rank (each passes a buffer of the same size).
  void broadcast_bytes(std::span<std::byte> bytes, int root = 0) const;
  /// Copies root's values to every rank (each passes the same number of elements).
  template <class U>
  void broadcast(std::span<U> values, int root = 0) const {
    static_assert(std::is_trivially_copyable_v<U>, "broadcast: trivially copyable values only");
    broadcast_bytes(std::as_writable_bytes(values), root);
  }
  /// Root's string on every rank.
  std::string broadcast(std::string text, int root = 0) const;
  /// Every rank's value, indexed by rank.
  std::vector<std::uint64_t> all_gather(std::uint64_t value) const;
  /// Every rank's string, indexed by rank.
  std::vector<std::string> all_gather(std::string_view text) const;

  struct state;  // distributed/mpi.hpp
  explicit communicator(std::shared_ptr<state> s) : s_(std::move(s)) {}
  state& mpi() const { return *s_; }

 private:
  std::shared_ptr<state> s_;
};

/// MPI for this process: initialised (thread level MPI_THREAD_SERIALIZED, which loom's
/// communication thread needs) by the constructor, finalised by the destructor after every rank
/// has come to it (waiting without spinning) — or, when the destructor runs because of an
/// exception or after this process lost a rank (rank_lost_error), the whole job is aborted
/// (MPI_Abort), since the other ranks may be waiting for this one. One session per process.
class session {
 public:
  /// Throws error if MPI is already initialised or lacks MPI_THREAD_SERIALIZED.
  session(int& argc, char**& argv);
  ~session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;
  /// Every rank of the job (a duplicate of MPI_COMM_WORLD).
  communicator& world() { return world_; }

 private:
  friend int run(int& argc, char**& argv, const std::function<int(communicator&)>& body);
  // This rank's end, with its status: waits for every rank's, at most `seconds`; false when
  // they did not all come (the job must then be aborted).
  bool end(int status, double seconds);
  communicator world_;
  int uncaught_ = 0;
  bool ended_ = false;
};

/// Ends every rank of the job now with `code` (MPI_Abort), after printing `message` (if any) on
/// stderr prefixed by this rank.
[[noreturn]] void abort_job(int code, std::string_view message = {});

/// Whether this process was started by an MPI launcher (mpirun, mpiexec, srun): reads the
/// environment variables they set, so that a program can run without MPI when started alone.
bool launched_by_mpi();

/// Runs body(world) in a session and returns its result (0). An exception from body is printed
/// on stderr as "loom: rank R: <what>" and ends the whole job with status 1 (abort_job); a
/// non-zero result ends the whole job with that status, since the other ranks may be waiting for
/// this one.
int run(int& argc, char**& argv, const std::function<int(communicator&)>& body);

}  // namespace loom::distributed
