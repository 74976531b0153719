// The MPI session, communicators and their collective operations, each bounded by a timeout.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <thread>

#include "mpi.hpp"

namespace loom::distributed {

// ---- state and helpers ----

communicator::state::state(MPI_Comm owned) : comm(owned) {
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);  // errors come back as codes, turned into exceptions
  int* ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm, MPI_TAG_UB, &ub, &found);
  if (found && ub) tag_ub = *ub;
}

communicator::state::~state() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
}

namespace detail {

namespace {
std::atomic<bool> failed{false};
}  // namespace

rank_lost_error lost(const std::string& message, int peer) {
  if (!failed.exchange(true)) {
    // The backstop: the caller may catch the exception and go on (or wait in MPI_Finalize);
    // the job ends anyway, a few seconds later, from a thread of its own.
    std::thread([message] {
      std::this_thread::sleep_for(std::chrono::duration<double>(lost_rank_grace_seconds));
      abort_job(1, message);
    }).detach();
  }
  return rank_lost_error(message, peer);
}

bool job_failed() {
  return failed.load();
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

void check(const communicator::state& c, int code, std::string_view what, int peer) {
  if (code == MPI_SUCCESS) return;
  std::string message = c.me() + ": " + std::string(what);
  if (peer >= 0) message += " (with rank " + std::to_string(peer) + ")";
  throw lost(message + ": " + mpi_error_text(code), peer);
}

poller::poller(double timeout_seconds) : timeout_(timeout_seconds), last_(std::chrono::steady_clock::now()) {}

void poller::polled(bool progressed) {
  if (progressed) {
    last_ = std::chrono::steady_clock::now();
    return;
  }
  // Measured on 2 shared cores: spinning or yielding between polls here (16 polls, then 48
  // sched_yield) made two-process steps 1.5x slower than sleeping at once.
  std::this_thread::sleep_for(std::chrono::microseconds(50));
}

double poller::idle_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - last_).count();
}

void wait_all(const communicator::state& c, std::span<MPI_Request> requests, std::string_view what, int peer) {
  poller p(c.timeout);
  for (;;) {
    int done = 0;
    check(c, MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE), what, peer);
    if (done) return;
    if (p.timed_out()) {
      if (peer < 0 && c.size == 2) peer = 1 - c.rank;  // of two ranks, the other one
      const std::string who = peer >= 0 ? "rank " + std::to_string(peer) : "the other ranks";
      throw lost(c.me() + ": no answer from " + who + " for " + std::to_string(c.timeout) + " s in " +
                     std::string(what) + ": " + who + " stopped, died or hangs",
                 peer);
    }
    p.polled(false);
  }
}

}  // namespace detail

// ---- communicator ----

int communicator::rank() const {
  return s_->rank;
}
int communicator::size() const {
  return s_->size;
}
double communicator::timeout() const {
  return s_->timeout;
}

void communicator::set_timeout(double seconds) {
  if (!(seconds > 0)) throw value_error("communicator: the timeout must be positive, got " + std::to_string(seconds));
  s_->timeout = seconds;
}

communicator communicator::split(int color) const {
  if (color < 0) throw value_error("communicator::split: color " + std::to_string(color) + " (must be >= 0)");
  MPI_Comm out = MPI_COMM_NULL;
  detail::check(*s_, MPI_Comm_split(s_->comm, color, s_->rank, &out), "split");
  auto s = std::make_shared<state>(out);
  s->timeout = s_->timeout;
  return communicator(std::move(s));
}

communicator communicator::duplicate() const {
  MPI_Comm out = MPI_COMM_NULL;
  detail::check(*s_, MPI_Comm_dup(s_->comm, &out), "duplicate");
  auto s = std::make_shared<state>(out);
  s->timeout = s_->timeout;
  return communicator(std::move(s));
}

void communicator::barrier() const {
  MPI_Request r;
  detail::check(*s_, MPI_Ibarrier(s_->comm, &r), "barrier");
  detail::wait_all(*s_, std::span(&r, 1), "a barrier");
}

void communicator::broadcast_bytes(std::span<std::byte> bytes, int root) const {
  // in pieces of at most 1 GiB: MPI counts are ints (every rank passes the same size)
  constexpr std::size_t piece = std::size_t{1} << 30;
  for (std::size_t at = 0; at < bytes.size(); at += piece) {
    const std::size_t n = std::min(piece, bytes.size() - at);
    MPI_Request r;
    detail::check(*s_, MPI_Ibcast(bytes.data() + at, static_cast<int>(n), MPI_BYTE, root, s_->comm, &r), "broadcast",
                  root);
    detail::wait_all(*s_, std::span(&r, 1), "a broadcast from rank " + std::to_string(root), root);
  }
}

std::string communicator::broadcast(std::string text, int root) const {
  std::uint64_t length = text.size();
  broadcast(std::span(&length, 1), root);
  text.resize(length);
  broadcast(std::span(text.data(), text.size()), root);
  return text;
}

std::vector<std::uint64_t> communicator::all_gather(std::uint64_t value) const {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(s_->size));
  MPI_Request r;
  detail::check(*s_, MPI_Iallgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, s_->comm, &r), "all_gather");
  detail::wait_all(*s_, std::span(&r, 1), "an all-gather");
  return all;
}

std::vector<std::string> communicator::all_gather(std::string_view text) const {
  const auto lengths = all_gather(static_cast<std::uint64_t>(text.size()));
  std::vector<int> counts, displacements;
  int total = 0;
  for (std::uint64_t n : lengths) {
    if (n > static_cast<std::uint64_t>(1 << 30)) throw value_error("all_gather: a string of more than 1 GiB");
    counts.push_back(static_cast<int>(n));
    displacements.push_back(total);
    total += static_cast<int>(n);
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  std::string mine(text);
  MPI_Request r;
  detail::check(*s_,
                MPI_Iallgatherv(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, all.data(), counts.data(),
                                displacements.data(), MPI_CHAR, s_->comm, &r),
                "all_gather");
  detail::wait_all(*s_, std::span(&r, 1), "an all-gather");
  std::vector<std::string> out;
  for (std::size_t k = 0; k < counts.size(); ++k)
    out.push_back(all.substr(static_cast<std::size_t>(displacements[k]), static_cast<std::size_t>(counts[k])));
  return out;
}

// ---- session ----

namespace {

MPI_Comm init_world(int& argc, char**& argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) throw error("loom::distributed::session: MPI is already initialised (one session per process)");
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
    throw error("loom::distributed::session: MPI_Init_thread failed");
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    throw error("loom::distributed::session: this MPI library offers thread level " + std::to_string(provided) +
                "; loom needs MPI_THREAD_SERIALIZED (its communication thread calls MPI while the main thread waits)");
  }
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  return world;
}

}  // namespace

session::session(int& argc, char**& argv)
    : world_(std::make_shared<communicator::state>(init_world(argc, argv))), uncaught_(std::uncaught_exceptions()) {}

session::~session() {
  // others may be waiting for this rank, or this rank for a lost one: MPI_Finalize would wait
  if (std::uncaught_exceptions() > uncaught_ || detail::job_failed()) abort_job(1);
  if (!ended_) end(0, std::numeric_limits<double>::infinity());
  world_ = communicator(nullptr);  // frees the communicator first
  MPI_Finalize();
}

// Every rank ends through here once, with its status (one all-gather over the world: the ranks
// that failed and those that did not meet in the same collective). Waits without spinning —
// MPI_Finalize polls at full speed while it waits for the others.
bool session::end(int status, double seconds) {
  ended_ = true;
  std::vector<int> all(static_cast<std::size_t>(world_.size()));
  MPI_Request r;
  if (MPI_Iallgather(&status, 1, MPI_INT, all.data(), 1, MPI_INT, world_.mpi().comm, &r) != MPI_SUCCESS) return false;
  const auto stop = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (int done = 0;;) {
    if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    if (std::chrono::steady_clock::now() > stop) return false;  // the request stays: the job ends
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void abort_job(int code, std::string_view message) {
  int rank = -1, initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string me = "rank " + std::to_string(rank) + ": ";
  if (message.starts_with(me)) message.remove_prefix(me.size());  // said once is enough
  if (!message.empty()) {
    std::fprintf(stderr, "loom: %s%.*s\n", me.c_str(), static_cast<int>(message.size()), message.data());
    std::fflush(stderr);
  }
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (std::getenv(name)) return true;
  return false;
}

int run(int& argc, char**& argv, const std::function<int(communicator&)>& body) {
  session s(argc, argv);
  int status = 1;
  try {
    status = body(s.world());
  } catch (const std::exception& e) {
    abort_job(1, e.what());
  }
  // A rank that gave up may leave the others waiting for it: unless every rank comes to its end
  // within 2 s (all gave up at the same point, say a bad setting each found, or the others had
  // finished), end them all, whatever the body did with the error it met (printed it, caught
  // it, or only returned non-zero). A rank that succeeded waits for the others as long as they
  // work (rank 0 evaluating, say).
  if (status != 0 && detail::job_failed()) abort_job(status);
  if (!s.end(status, status != 0 ? 2.0 : std::numeric_limits<double>::infinity())) abort_job(status);
  return status;
}

}  // namespace loom::distributed
