// data_parallel<T> (include/loom/distributed/data_parallel.hpp): buckets of gradients summed over
// the ranks by a communication thread while backward goes on.
//
// Threads: the main thread calls start() and finish(); TBB's workers call on_final() during
// backward; the communication thread (serve) makes every MPI call of a step. The main thread
// makes MPI calls only outside steps (construction), when the communication thread is idle:
// MPI_THREAD_SERIALIZED is enough.
#include "loom/distributed/data_parallel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include <time.h>

#include "allreduce.hpp"
#include "shares.hpp"
#include "loom/distributed/state.hpp"

namespace loom::distributed {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace

template <class T>
struct data_parallel<T>::impl {
  communicator comm;  // a duplicate: its messages never mix with the caller's
  executor<T>* run;
  param_store<T>* params;
  data_parallel_options options;

  // ---- the layout, fixed at construction: slots are parameters in the store's name order ----
  std::vector<std::string> slot_names;
  std::vector<std::int64_t> slot_size;
  std::vector<int> slot_of_node;  // per node of the plan: its slot, or -1
  std::vector<int> bucket_of_slot;
  std::vector<std::int64_t> offset_of_slot;    // within its bucket
  std::vector<std::vector<int>> bucket_slots;  // in the order backward finishes them
  std::vector<std::uint8_t> reported;          // per slot: backward reports it final (on_final)
  std::vector<detail::allreduce_job<T>> jobs;  // one per bucket
  detail::allreduce_job<double> totals;        // loss sum, tokens, micro-batches

  // ---- one step ----
  gradient_accumulator<T>* local = nullptr;
  std::vector<T*> grad_of_slot;
  std::unique_ptr<std::atomic<int>[]> pending;          // per bucket: gradients not final yet
  std::unique_ptr<std::atomic<std::uint8_t>[]> final_;  // per slot
  std::unique_ptr<std::atomic<int>[]> final_order;      // per slot: when it became final (-1: at start)
  std::atomic<int> finals_seen{0};
  bool observed = false;  // the step was overlapped: final_order holds backward's order
  int steps = 0;
  std::atomic<bool> armed{false};
  std::atomic<bool> stop{false};
  std::atomic<int> ready_count{0};
  step_totals mine, all;
  reduction_times times;

  // ---- between the threads (mutex) ----
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<int> ready;  // buckets all of whose gradients are final, for the communication thread
  enum class phase { idle, running, done } state = phase::idle;
  std::exception_ptr failure;
  double active_seconds = 0, cpu_seconds = 0;
  std::thread worker;

  // ---- optimizer sharding (shard_optimizer) ----
  optimizer<T>* sharded = nullptr;
  std::uint64_t sharded_layout = 0;  // the store's layout_version() when sharded
  std::vector<std::size_t> bounds;  // rank r updates parameters [bounds[r], bounds[r + 1])

  impl(const communicator& c, executor<T>& r, param_store<T>& p, data_parallel_options o);
  void lay_out();
  void make_buckets(const std::vector<int>& order);
  void rebucket();
  std::vector<long> map_nodes();
  void on_final(int node);
  void mark_final(int slot);
  void serve();
  double reduce_step();  // returns the seconds from the first bucket ready to the last reduced
  void pack(std::size_t b);
  void unpack(std::size_t b, std::int64_t divisor);
};

template <class T>
data_parallel<T>::impl::impl(const communicator& c, executor<T>& r, param_store<T>& p, data_parallel_options o)
    : comm(c.duplicate()), run(&r), params(&p), options(std::move(o)), totals(comm.mpi(), 3, 0) {
  if (options.bucket_bytes == 0) throw value_error("data_parallel: bucket_bytes must be positive");
  // what must agree: the model, its parameters, the bucket layout and the caller's settings
  auto config = parameter_config(p);
  const plan_view plan = r.plan();
  std::uint64_t model = 0;
  for (int root : plan.roots) model = model * 0x100000001b3ull ^ plan.order[root]->hash;
  config["loom model"] = std::to_string(plan.size()) + " nodes, structure " + std::to_string(model);
  config["loom bucket_bytes"] = std::to_string(options.bucket_bytes);
  for (const auto& [k, v] : options.config) config["setting " + k] = v;
  check_same_config(comm, config);
  broadcast_parameters(comm, p);
  lay_out();
  run->on_gradient_final([this](int node) { on_final(node); });
  worker = std::thread([this] { serve(); });
}

// Which slot each parameter node of the executor's plan is, and after which node backward
// finishes it (its consumer of smallest index); slots backward does not report get the plan's
// size. Again at every step, as executor::keep() may rewrite the plan.
template <class T>
std::vector<long> data_parallel<T>::impl::map_nodes() {
  const plan_view plan = run->plan();
  slot_of_node.assign(static_cast<std::size_t>(plan.size()), -1);
  std::vector<long> finished_after(slot_names.size(), plan.size());
  for (int i = 0; i < plan.size(); ++i) {
    if (plan.order[i]->op->role != node_role::param || plan.consumers(i).empty()) continue;
    auto it = std::lower_bound(slot_names.begin(), slot_names.end(), plan.order[i]->name);
    if (it == slot_names.end() || *it != plan.order[i]->name) continue;  // forward() will say it is missing
    const auto s = static_cast<std::size_t>(it - slot_names.begin());
    slot_of_node[static_cast<std::size_t>(i)] = static_cast<int>(s);
    finished_after[s] = plan.consumers(i).front();
  }
  reported.assign(slot_names.size(), 0);
  for (int s : slot_of_node)
    if (s >= 0) reported[static_cast<std::size_t>(s)] = 1;
  return finished_after;
}

// The first layout: slots in the order backward should finish them — it goes down the node
// indices, roughly —, those it does not report first. The same on every rank.
template <class T>
void data_parallel<T>::impl::lay_out() {
  for (const auto& [name, e] : *params) {
    slot_names.push_back(name);
    slot_size.push_back(e.value.size());
  }
  const std::vector<long> finished_after = map_nodes();
  std::vector<int> order(slot_names.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return finished_after[static_cast<std::size_t>(a)] > finished_after[static_cast<std::size_t>(b)];
  });
  make_buckets(order);
  final_.reset(new std::atomic<std::uint8_t>[slot_names.size()]);
  final_order.reset(new std::atomic<int>[slot_names.size()]);
  for (std::size_t k = 0; k < slot_names.size(); ++k) final_order[k].store(-1, std::memory_order_relaxed);
}

// Buckets of at most bucket_bytes over the slots in `order` (every rank passes the same).
template <class T>
void data_parallel<T>::impl::make_buckets(const std::vector<int>& order) {
  bucket_slots.clear();
  jobs.clear();
  bucket_of_slot.assign(slot_names.size(), -1);
  offset_of_slot.assign(slot_names.size(), 0);
  std::int64_t filled = 0;
  for (int s : order) {
    const std::int64_t bytes = slot_size[static_cast<std::size_t>(s)] * static_cast<std::int64_t>(sizeof(T));
    if (bucket_slots.empty() || (filled > 0 && filled + bytes > static_cast<std::int64_t>(options.bucket_bytes))) {
      bucket_slots.emplace_back();
      filled = 0;
    }
    offset_of_slot[static_cast<std::size_t>(s)] = filled / static_cast<std::int64_t>(sizeof(T));
    bucket_of_slot[static_cast<std::size_t>(s)] = static_cast<int>(bucket_slots.size() - 1);
    bucket_slots.back().push_back(s);
    filled += bytes;
  }
  for (std::size_t b = 0; b < bucket_slots.size(); ++b) {
    std::int64_t length = 0;
    for (int s : bucket_slots[b]) length += slot_size[static_cast<std::size_t>(s)];
    jobs.emplace_back(comm.mpi(), length, static_cast<int>(b + 1));  // id 0 is the totals'
  }
  pending.reset(new std::atomic<int>[bucket_slots.size()]);
}

// After the first step, the buckets are laid out again in the order rank 0's backward really
// finished the gradients (TBB need not follow the node indices), as PyTorch DDP does; rank 0's
// order is broadcast so that every rank has the same buckets. Called by every rank's first
// finish(), on the main thread while the communication thread is idle.
template <class T>
void data_parallel<T>::impl::rebucket() {
  std::vector<int> order;
  for (const auto& slots : bucket_slots) order.insert(order.end(), slots.begin(), slots.end());
  if (comm.rank() == 0 && observed)  // by when they became final, those final from the start (-1) first
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return final_order[static_cast<std::size_t>(a)].load(std::memory_order_relaxed) <
             final_order[static_cast<std::size_t>(b)].load(std::memory_order_relaxed);
    });
  comm.broadcast(std::span(order.data(), order.size()));
  make_buckets(order);
}

template <class T>
void data_parallel<T>::impl::on_final(int node) {
  if (!armed.load(std::memory_order_acquire)) return;
  const int s = slot_of_node[static_cast<std::size_t>(node)];
  if (s < 0) return;
  local->finish(static_cast<std::size_t>(s));
  final_order[static_cast<std::size_t>(s)].store(finals_seen.fetch_add(1, std::memory_order_relaxed),
                                                 std::memory_order_relaxed);
  mark_final(s);
}

template <class T>
void data_parallel<T>::impl::mark_final(int s) {
  final_[static_cast<std::size_t>(s)].store(1, std::memory_order_relaxed);
  const int b = bucket_of_slot[static_cast<std::size_t>(s)];
  if (pending[static_cast<std::size_t>(b)].fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  std::lock_guard lock(mutex);
  ready.push_back(b);
  ready_count.fetch_add(1, std::memory_order_release);
}

template <class T>
void data_parallel<T>::impl::serve() {
  std::unique_lock lock(mutex);
  for (;;) {
    cv.wait(lock, [&] { return stop.load() || state == phase::running; });
    if (stop.load()) return;
    lock.unlock();
    std::exception_ptr error;
    double active = 0;
    const double cpu0 = thread_cpu_seconds();
    try {
      active = reduce_step();
    } catch (...) {
      error = std::current_exception();
    }
    const double cpu = thread_cpu_seconds() - cpu0;
    lock.lock();
    failure = error;
    active_seconds = active;
    cpu_seconds = cpu;
    state = phase::done;
    cv.notify_all();
  }
}

template <class T>
void data_parallel<T>::impl::pack(std::size_t b) {
  T* out = jobs[b].local();
  for (int s : bucket_slots[b])
    std::copy_n(grad_of_slot[static_cast<std::size_t>(s)], slot_size[static_cast<std::size_t>(s)],
                out + offset_of_slot[static_cast<std::size_t>(s)]);
}

template <class T>
void data_parallel<T>::impl::unpack(std::size_t b, std::int64_t divisor) {
  const T* sum = jobs[b].result();
  const T d = static_cast<T>(divisor);
  for (int s : bucket_slots[b]) {
    const T* in = sum + offset_of_slot[static_cast<std::size_t>(s)];
    T* g = grad_of_slot[static_cast<std::size_t>(s)];
    const std::int64_t n = slot_size[static_cast<std::size_t>(s)];
    if (divisor == 1)
      std::copy_n(in, n, g);
    else
      for (std::int64_t i = 0; i < n; ++i) g[i] = in[i] / d;
  }
}

// One step's reductions, on the communication thread: the totals at once, each bucket as soon
// as its gradients are final; a bucket's mean goes back to the store when it and the totals
// (which give the divisor) are complete.
template <class T>
double data_parallel<T>::impl::reduce_step() {
  totals.post_receives();
  for (auto& j : jobs) j.post_receives();
  totals.local()[0] = mine.loss_sum;
  totals.local()[1] = static_cast<double>(mine.tokens);
  totals.local()[2] = static_cast<double>(mine.micro_batches);
  totals.set_ready();
  std::vector<std::uint8_t> done(jobs.size(), 0);
  std::size_t packed = 0, left = jobs.size();
  std::vector<int> taken;
  double first_ready = -1;
  detail::poller poller(comm.timeout());
  while (left > 0 || !totals.done()) {
    if (stop.load()) return 0;
    bool progressed = false;
    if (ready_count.load(std::memory_order_acquire) > 0) {
      {
        std::lock_guard lock(mutex);
        taken.swap(ready);
        ready_count.fetch_sub(static_cast<int>(taken.size()), std::memory_order_relaxed);
      }
      if (first_ready < 0) first_ready = now_seconds();
      for (int b : taken) {
        pack(static_cast<std::size_t>(b));
        jobs[static_cast<std::size_t>(b)].set_ready();
      }
      packed += taken.size();
      taken.clear();
      progressed = true;
    }
    if (!totals.done()) progressed = totals.poll() || progressed;
    for (std::size_t b = 0; b < jobs.size(); ++b) {
      if (done[b]) continue;
      progressed = jobs[b].poll() || progressed;
      if (jobs[b].done() && totals.done()) {
        unpack(b, static_cast<std::int64_t>(totals.result()[2]));
        done[b] = 1;
        --left;
        progressed = true;
      }
    }
    // only waiting for other ranks counts towards the timeout, not this rank's own backward
    if (!progressed && packed == jobs.size() && poller.timed_out()) {
      int peer = totals.done() ? -1 : totals.waiting_for();
      for (std::size_t b = 0; b < jobs.size() && peer < 0; ++b)
        if (!done[b]) peer = jobs[b].waiting_for();
      if (peer < 0 && comm.size() == 2) peer = 1 - comm.rank();  // of two ranks, the other one
      const std::string who = peer >= 0 ? "rank " + std::to_string(peer) : "the other ranks";
      throw detail::lost(comm.mpi().me() + ": no gradients from " + who + " for " +
                             std::to_string(static_cast<int>(comm.timeout())) + " s: " + who +
                             " stopped, died or hangs; ending the job",
                         peer);
    }
    poller.polled(progressed);
  }
  all.loss_sum = totals.result()[0];
  all.tokens = static_cast<std::int64_t>(totals.result()[1]);
  all.micro_batches = static_cast<std::int64_t>(totals.result()[2]);
  return first_ready < 0 ? 0 : now_seconds() - first_ready;
}

// ---- the public class ----

template <class T>
data_parallel<T>::data_parallel(const communicator& comm, executor<T>& run, param_store<T>& params,
                                data_parallel_options options)
    : p_(std::make_unique<impl>(comm, run, params, std::move(options))) {}

template <class T>
data_parallel<T>::~data_parallel() {
  p_->run->on_gradient_final({});
  {
    std::lock_guard lock(p_->mutex);
    p_->stop.store(true);
  }
  p_->cv.notify_all();
  p_->worker.join();
}

template <class T>
void data_parallel<T>::start(gradient_accumulator<T>& local, step_totals mine) {
  impl& p = *p_;
  {
    std::lock_guard lock(p.mutex);
    if (p.failure) std::rethrow_exception(p.failure);  // the job cannot go on
    if (p.state != impl::phase::idle) throw error("data_parallel: start() twice without finish()");
  }
  // this step's gradient buffers (the store's tensors may have been replaced, say by a load)
  p.grad_of_slot.clear();
  std::size_t s = 0;
  for (auto& [name, e] : *p.params) {
    if (s >= p.slot_names.size() || name != p.slot_names[s] || e.grad.size() != p.slot_size[s])
      throw error("data_parallel: the parameter store changed since construction (parameter " + name + ")");
    p.grad_of_slot.push_back(e.grad.data());
    ++s;
  }
  if (s != p.slot_names.size() || local.slots() != s)
    throw error("data_parallel: the parameter store changed since construction");
  p.map_nodes();  // the executor's plan may have changed (keep() rewrites it): cheap, so every step
  p.local = &local;
  p.mine = mine;
  for (std::size_t b = 0; b < p.bucket_slots.size(); ++b)
    p.pending[b].store(static_cast<int>(p.bucket_slots[b].size()), std::memory_order_relaxed);
  for (std::size_t k = 0; k < s; ++k) {
    p.final_[k].store(0, std::memory_order_relaxed);
    p.final_order[k].store(-1, std::memory_order_relaxed);
  }
  p.finals_seen.store(0, std::memory_order_relaxed);
  p.observed = p.options.overlap;
  {
    std::lock_guard lock(p.mutex);
    p.ready.clear();
    p.ready_count.store(0);
    p.state = impl::phase::running;
  }
  p.cv.notify_all();
  if (!p.options.overlap) return;  // finish() does everything
  for (std::size_t k = 0; k < s; ++k)
    if (!p.reported[k]) {  // final already: backward does not touch it
      local.finish(k);
      p.mark_final(static_cast<int>(k));
    }
  p.armed.store(true, std::memory_order_release);
}

template <class T>
step_totals data_parallel<T>::finish() {
  impl& p = *p_;
  const double backward_end = now_seconds();
  {
    std::lock_guard lock(p.mutex);
    if (p.state == impl::phase::idle) throw error("data_parallel: finish() without start()");
  }
  p.armed.store(false, std::memory_order_release);
  // whatever backward did not report (everything without overlap)
  for (std::size_t s = 0; s < p.slot_names.size(); ++s)
    if (!p.final_[s].load(std::memory_order_relaxed)) {
      p.local->finish(s);
      p.mark_final(static_cast<int>(s));
    }
  std::unique_lock lock(p.mutex);
  p.cv.wait(lock, [&] { return p.state == impl::phase::done; });
  p.state = impl::phase::idle;
  if (p.failure) std::rethrow_exception(p.failure);
  p.times.exposed = now_seconds() - backward_end;
  lock.unlock();
  if (++p.steps == 1) p.rebucket();
  p.times.active = p.active_seconds;
  p.times.cpu = p.cpu_seconds;
  return p.all;
}

template <class T>
std::vector<std::size_t> data_parallel<T>::shard_bounds() const {
  std::vector<std::int64_t> sizes;
  for (const auto& [name, e] : *p_->params) sizes.push_back(e.value.size());
  return detail::balanced_shares(sizes, p_->comm.size());
}

template <class T>
void data_parallel<T>::shard_optimizer(optimizer<T>& opt) {
  impl& p = *p_;
  if (&opt.params() != p.params)
    throw value_error("data_parallel::shard_optimizer: the optimizer updates another parameter store");
  if (!p.params->packed())  // the same answer on every rank whose store is made the same way
    throw value_error("data_parallel::shard_optimizer: the parameter store is not packed (make_params makes it "
                      "packed; a store built with set() needs params.pack() before any executor runs on it)");
  p.bounds = shard_bounds();
  const auto r = static_cast<std::size_t>(p.comm.rank());
  p.comm.barrier();  // collective: every rank shards, or the job ends here
  opt.shard(p.bounds[r], p.bounds[r + 1]);
  p.sharded = &opt;
  p.sharded_layout = p.params->layout_version();
}

template <class T>
void data_parallel<T>::after_update() {
  impl& p = *p_;
  if (!p.sharded) return;
  // the communication thread is idle between steps: this thread may call MPI (see the top)
  if (p.params->layout_version() != p.sharded_layout)
    throw error("data_parallel: the parameter store's layout changed after shard_optimizer (call it again)");
  detail::gather_shares<T>(p.comm.mpi(), p.params->value_block().elements().data(),
                           p.params->value_block().segments(), p.bounds);
}

template <class T>
void data_parallel<T>::set_overlap(bool overlap) {
  p_->options.overlap = overlap;  // read by start() only: between steps, nothing else reads it
}

template <class T>
const communicator& data_parallel<T>::comm() const {
  return p_->comm;
}
template <class T>
std::size_t data_parallel<T>::buckets() const {
  return p_->bucket_slots.size();
}
template <class T>
std::size_t data_parallel<T>::bucket_parameters(std::size_t bucket) const {
  return p_->bucket_slots.at(bucket).size();
}
template <class T>
const reduction_times& data_parallel<T>::last_times() const {
  return p_->times;
}

template class data_parallel<float>;
template class data_parallel<double>;

}  // namespace loom::distributed
