// The tree-order all-reduce of one buffer over point-to-point messages (allreduce.hpp).
#include "allreduce.hpp"

#include <algorithm>
#include <climits>

namespace loom::distributed::detail {

namespace {

template <class E>
MPI_Datatype mpi_type() {
  return std::is_same_v<E, float> ? MPI_FLOAT : MPI_DOUBLE;
}

}  // namespace

template <class E>
allreduce_job<E>::allreduce_job(const communicator::state& c, std::int64_t length, int id)
    : c_(&c), id_(id), local_(static_cast<std::size_t>(length)), result_(static_cast<std::size_t>(length)) {
  if ((static_cast<long>(id) * 2 + 2) * c.size > c.tag_ub)
    throw value_error("data_parallel: " + std::to_string(id + 1) + " buffers over " + std::to_string(c.size) +
                      " ranks need more message tags than this MPI allows (" + std::to_string(c.tag_ub) +
                      "); use larger buckets");
  for (int k = 0; k < c.size; ++k) {
    chunk ch;
    ch.span = bounds_of(length, c.size, k);
    if (ch.span.count > INT_MAX)
      throw value_error("data_parallel: a bucket of " + std::to_string(length) + " elements gives chunks of more " +
                        "than 2^31 elements, which MPI cannot send at once; use smaller buckets");
    if (ch.span.count > 0) {
      ++chunks_with_data_;
      ch.role = role_of(c.rank, c.size, k);
      ch.received.resize(ch.role.receive_from.size() * static_cast<std::size_t>(ch.span.count));
      ch.arrived.resize(ch.role.receive_from.size());
    }
    chunks_.push_back(std::move(ch));
  }
}

template <class E>
void allreduce_job<E>::post_receives() {
  requests_.clear();
  pending_.clear();
  finals_ = sends_posted_ = sends_done_ = 0;
  ready_ = false;
  started_ = true;
  for (int k = 0; k < static_cast<int>(chunks_.size()); ++k) {
    chunk& ch = chunks_[static_cast<std::size_t>(k)];
    ch.added = 0;
    ch.sent = ch.final = false;
    std::fill(ch.arrived.begin(), ch.arrived.end(), 0);
    if (ch.span.count == 0) continue;
    const int count = static_cast<int>(ch.span.count);
    for (std::size_t r = 0; r < ch.role.receive_from.size(); ++r) {
      const int peer = ch.role.receive_from[r];
      requests_.push_back(MPI_REQUEST_NULL);
      check(*c_,
            MPI_Irecv(ch.received.data() + r * static_cast<std::size_t>(count), count, mpi_type<E>(), peer,
                      tag(kind::reduce, k), c_->comm, &requests_.back()),
            "posting a receive of partial sums", peer);
      pending_.push_back({kind::reduce, k, static_cast<int>(r), peer});
    }
    if (k != c_->rank) {  // chunk k's total comes from rank k
      requests_.push_back(MPI_REQUEST_NULL);
      check(*c_,
            MPI_Irecv(result_.data() + ch.span.first, count, mpi_type<E>(), k, tag(kind::gather, k), c_->comm,
                      &requests_.back()),
            "posting a receive of totals", k);
      pending_.push_back({kind::gather, k, 0, k});
    }
  }
}

template <class E>
void allreduce_job<E>::set_ready() {
  ready_ = true;
  for (int k = 0; k < static_cast<int>(chunks_.size()); ++k) advance(k);
}

template <class E>
void allreduce_job<E>::post_send(const E* data, int c, int peer, kind k) {
  requests_.push_back(MPI_REQUEST_NULL);
  const int count = static_cast<int>(chunks_[static_cast<std::size_t>(c)].span.count);
  check(*c_, MPI_Isend(data, count, mpi_type<E>(), peer, tag(k, c), c_->comm, &requests_.back()), "sending a sum",
        peer);
  pending_.push_back({kind::send, c, 0, peer});
  ++sends_posted_;
}

template <class E>
void allreduce_job<E>::advance(int c) {
  chunk& ch = chunks_[static_cast<std::size_t>(c)];
  if (!ready_ || ch.span.count == 0 || ch.sent) return;
  const std::size_t count = static_cast<std::size_t>(ch.span.count), receives = ch.role.receive_from.size();
  const bool owner = ch.role.send_to < 0;
  while (ch.added < receives && ch.arrived[ch.added]) {
    // partial = left + right, in place of the received operand (or in the result, at the end)
    E* peer = ch.received.data() + ch.added * count;
    const E* mine = ch.added == 0 ? local_.data() + ch.span.first : peer - count;
    E* out = owner && ch.added + 1 == receives ? result_.data() + ch.span.first : peer;
    if (ch.role.peer_is_left[ch.added])
      for (std::size_t i = 0; i < count; ++i) out[i] = peer[i] + mine[i];
    else
      for (std::size_t i = 0; i < count; ++i) out[i] = mine[i] + peer[i];
    ++ch.added;
  }
  if (ch.added < receives) return;
  ch.sent = true;
  if (owner) {
    if (receives == 0) std::copy_n(local_.data() + ch.span.first, count, result_.data() + ch.span.first);
    ch.final = true;
    ++finals_;
    for (int q = 0; q < c_->size; ++q)
      if (q != c_->rank) post_send(result_.data() + ch.span.first, c, q, kind::gather);
  } else {
    const E* partial = receives == 0 ? local_.data() + ch.span.first : ch.received.data() + (receives - 1) * count;
    post_send(partial, c, ch.role.send_to, kind::reduce);
  }
}

template <class E>
bool allreduce_job<E>::poll() {
  if (requests_.empty()) return false;
  completed_.resize(requests_.size());
  statuses_.resize(requests_.size());
  int count = 0;
  const int code =
      MPI_Testsome(static_cast<int>(requests_.size()), requests_.data(), &count, completed_.data(), statuses_.data());
  if (code != MPI_SUCCESS) {
    int peer = -1, detail_code = code;
    for (int i = 0; code == MPI_ERR_IN_STATUS && i < count; ++i)
      if (statuses_[static_cast<std::size_t>(i)].MPI_ERROR != MPI_SUCCESS) {
        peer = pending_[static_cast<std::size_t>(completed_[static_cast<std::size_t>(i)])].peer;
        detail_code = statuses_[static_cast<std::size_t>(i)].MPI_ERROR;
        break;
      }
    check(*c_, detail_code, "exchanging gradients", peer);
  }
  if (count == MPI_UNDEFINED || count == 0) return false;
  for (int i = 0; i < count; ++i) {
    const pending p = pending_[static_cast<std::size_t>(completed_[static_cast<std::size_t>(i)])];
    chunk& ch = chunks_[static_cast<std::size_t>(p.chunk)];
    switch (p.what) {
      case kind::reduce:
        ch.arrived[static_cast<std::size_t>(p.index)] = 1;
        advance(p.chunk);
        break;
      case kind::gather:
        ch.final = true;
        ++finals_;
        break;
      case kind::send:
        ++sends_done_;
        break;
    }
  }
  return true;
}

template <class E>
int allreduce_job<E>::waiting_for() const {
  for (std::size_t i = 0; i < requests_.size(); ++i)
    if (requests_[i] != MPI_REQUEST_NULL && pending_[i].what != kind::send) return pending_[i].peer;
  return -1;
}

template class allreduce_job<float>;
template class allreduce_job<double>;

}  // namespace loom::distributed::detail
