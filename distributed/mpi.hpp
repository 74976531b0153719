// What loom::distributed's sources share about MPI: the communicator's state, error checks, and
// waiting for requests with a deadline. Private to the component.
#pragma once

#include <mpi.h>

#include <chrono>
#include <span>
#include <string>
#include <string_view>

#include "loom/distributed/communicator.hpp"

namespace loom::distributed {

struct communicator::state {
  MPI_Comm comm = MPI_COMM_NULL;  // owned: freed by the destructor
  int rank = 0, size = 1;
  double timeout = 30;
  long tag_ub = 32767;  // the largest tag MPI accepts on it

  explicit state(MPI_Comm owned);
  ~state();
  state(const state&) = delete;
  state& operator=(const state&) = delete;

  /// "rank 2", for messages.
  std::string me() const { return "rank " + std::to_string(rank); }
};

namespace detail {

/// The rank_lost_error to throw for `message` (lost rank `peer`, -1 if unknown), after arming the
/// job's end: from now on this process ends the whole job (abort_job) at the latest
/// `lost_rank_grace_seconds` later, and its session aborts instead of finalising, whatever the
/// caller does with the exception (a rank waiting in MPI_Finalize for a stopped rank would wait
/// for ever).
rank_lost_error lost(const std::string& message, int peer);

/// Whether this process has reported a lost rank (see lost()).
bool job_failed();

/// How long a process that reported a lost rank goes on before it ends the job itself.
inline constexpr double lost_rank_grace_seconds = 3;

/// MPI's text for an error code.
std::string mpi_error_text(int code);

/// Throws rank_lost_error "rank R: <what>: <MPI's text>" unless code is MPI_SUCCESS; `peer` is the
/// rank talked to, if one.
void check(const communicator::state& c, int code, std::string_view what, int peer = -1);

/// Paces a polling loop (MPI makes progress only when called, so waiting is polling): right
/// after progress it polls again at once, else it sleeps 50 µs, so that a waiting rank leaves
/// the cores to the computing threads. Tracks the time since the last progress.
class poller {
 public:
  explicit poller(double timeout_seconds);
  /// Call after each poll: true if the poll progressed (resets the clock).
  void polled(bool progressed);
  /// Seconds since the last progress.
  double idle_seconds() const;
  bool timed_out() const { return idle_seconds() > timeout_; }

 private:
  double timeout_;
  std::chrono::steady_clock::time_point last_;
};

/// Waits for every request; throws rank_lost_error naming `what` (and `peer`, if known) when the
/// communicator's timeout passes without them completing, or when MPI reports a failure.
void wait_all(const communicator::state& c, std::span<MPI_Request> requests, std::string_view what, int peer = -1);

}  // namespace detail
}  // namespace loom::distributed
