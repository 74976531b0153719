// One buffer summed over every rank in the tree order (tree.hpp) with nonblocking point-to-point
// messages: the engine under data_parallel's buckets. Private to the component.
//
//   job.post_receives();            // when the step starts: receives into separate buffers
//   fill job.local(); job.set_ready();  // this rank's values (adds and sends begin)
//   while (!job.done()) job.poll();  // progress (from one thread)
//   read job.result()                // the sum, the same bits on every rank
#pragma once

#include <cstdint>
#include <vector>

#include "mpi.hpp"
#include "tree.hpp"

namespace loom::distributed::detail {

template <class E>
class allreduce_job {
 public:
  /// A job summing `length` elements over the ranks of `c`; `id` tells its messages apart from
  /// other jobs' (every rank gives the same). Throws value_error if the tags would exceed MPI's
  /// bound or a chunk exceeds an int's count.
  allreduce_job(const communicator::state& c, std::int64_t length, int id);
  allreduce_job(const allreduce_job&) = delete;
  allreduce_job& operator=(const allreduce_job&) = delete;
  allreduce_job(allreduce_job&&) noexcept = default;

  E* local() { return local_.data(); }
  const E* result() const { return result_.data(); }
  std::int64_t length() const { return static_cast<std::int64_t>(local_.size()); }

  /// Starts a round: posts every receive. The previous round must be done().
  void post_receives();
  /// local() holds this rank's values: adds and sends may begin.
  void set_ready();
  /// Tests the pending messages and does what they allow; true if anything happened. Throws
  /// rank_lost_error when MPI reports a failure.
  bool poll();
  /// The result is complete and every send has completed.
  bool done() const { return finals_ == chunks_with_data_ && sends_done_ == sends_posted_ && started_; }
  /// A rank this one still waits for a message from (-1: none), for messages.
  int waiting_for() const;

 private:
  struct chunk {
    chunk_bounds span;
    chunk_role role;
    std::vector<E> received;            // one buffer per receive, back to back
    std::vector<std::uint8_t> arrived;  // per receive
    std::size_t added = 0;              // receives added so far
    bool sent = false, final = false;
  };
  enum class kind : std::uint8_t { reduce, gather, send };
  struct pending {
    kind what;
    int chunk, index, peer;
  };
  int tag(kind k, int c) const { return (id_ * 2 + (k == kind::gather ? 1 : 0)) * c_->size + c; }
  void advance(int c);
  void post_send(const E* data, int c, int peer, kind k);

  const communicator::state* c_;
  int id_;
  std::vector<E> local_, result_;
  std::vector<chunk> chunks_;
  std::vector<MPI_Request> requests_;
  std::vector<pending> pending_;  // per request
  std::vector<int> completed_;
  std::vector<MPI_Status> statuses_;
  int chunks_with_data_ = 0, finals_ = 0, sends_posted_ = 0, sends_done_ = 0;
  bool ready_ = false, started_ = false;
};

extern template class allreduce_job<float>;
extern template class allreduce_job<double>;

}  // namespace loom::distributed::detail
