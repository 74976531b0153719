// Configuration checks, broadcasts, checksums and rank-0 checkpoints (state.hpp).
#include "loom/distributed/state.hpp"

#include "loom/core/fnv.hpp"
#include "../core/text.hpp"

#include <cstring>
#include <set>

namespace loom::distributed {

namespace {

std::uint64_t fnv(std::uint64_t h, const void* data, std::size_t n) {
  return ::loom::fnv::add_bytes(h, data, n);
}
std::uint64_t fnv(std::uint64_t h, std::string_view s) {
  return ::loom::fnv::add(::loom::fnv::add(h, s), "\n");
}
constexpr std::uint64_t fnv_start = ::loom::fnv::start;


// "key\0value\0" per entry, in key order: what the ranks compare.
std::string serialize(const std::map<std::string, std::string>& config) {
  std::string out;
  for (const auto& [k, v] : config) {
    out += k;
    out += '\0';
    out += v;
    out += '\0';
  }
  return out;
}

std::map<std::string, std::string> deserialize(const std::string& text) {
  std::map<std::string, std::string> out;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t k = text.find('\0', at), v = text.find('\0', k + 1);
    out.emplace(text.substr(at, k - at), text.substr(k + 1, v - k - 1));
    at = v + 1;
  }
  return out;
}

// What differs between rank r's settings and rank 0's, at most a few lines.
std::string differences(int r, const std::map<std::string, std::string>& mine,
                        const std::map<std::string, std::string>& root) {
  std::vector<std::string> lines;
  for (const auto& [k, v] : mine) {
    auto it = root.find(k);
    if (it == root.end())
      lines.push_back("rank " + std::to_string(r) + " has " + in_quotes(k) + " = " + in_quotes(v) + ", rank 0 has none");
    else if (it->second != v)
      lines.push_back("rank " + std::to_string(r) + ": " + in_quotes(k) + " is " + in_quotes(v) + ", rank 0 has " +
                      in_quotes(it->second));
  }
  for (const auto& [k, v] : root)
    if (!mine.count(k))
      lines.push_back("rank 0 has " + in_quotes(k) + " = " + in_quotes(v) + ", rank " + std::to_string(r) + " has none");
  std::string out;
  for (std::size_t i = 0; i < lines.size() && i < 8; ++i) out += "\n  - " + lines[i];
  if (lines.size() > 8) out += "\n  - ... and " + std::to_string(lines.size() - 8) + " more";
  return out;
}

// Throws on every rank if `ok` is false on root, with root's message.
void share_outcome(const communicator& comm, bool ok, const std::string& message) {
  std::uint8_t flag = ok ? 1 : 0;
  comm.broadcast(std::span(&flag, 1));
  if (flag) return;
  const std::string text = comm.broadcast(message);
  throw error(comm.rank() == 0 ? text : "rank 0 failed: " + text);
}

}  // namespace

void check_same_config(const communicator& comm, const std::map<std::string, std::string>& config) {
  const std::string mine = serialize(config);
  const auto hashes = comm.all_gather(fnv(fnv_start, mine.data(), mine.size()));
  bool same = true;
  for (std::uint64_t h : hashes) same = same && h == hashes[0];
  if (same) return;
  const auto all = comm.all_gather(std::string_view(mine));
  const auto root = deserialize(all[0]);
  std::string what = "the ranks were started with different configurations:";
  for (std::size_t r = 1; r < all.size(); ++r)
    if (hashes[r] != hashes[0]) what += differences(static_cast<int>(r), deserialize(all[r]), root);
  throw mismatch_error(what);
}

template <class T>
std::map<std::string, std::string> parameter_config(const param_store<T>& params) {
  std::map<std::string, std::string> out;
  for (const auto& [name, e] : params) out["parameter " + name] = e.value.dims().str();
  out["parameter scalar"] = sizeof(T) == 4 ? "float" : "double";
  return out;
}

template <class T>
std::uint64_t state_checksum(const param_store<T>& params, const optimizer<T>* opt) {
  std::uint64_t h = fnv_start;
  for (const auto& [name, e] : params) {
    h = fnv(h, name);
    h = fnv(h, e.value.dims().str());
    h = fnv(h, e.value.data(), static_cast<std::size_t>(e.value.size()) * sizeof(T));
  }
  if (opt) {
    const auto& s = opt->state();
    h = fnv(h, std::to_string(s.step));
    for (const auto& [kind, by_param] : s.buffers)
      for (const auto& [name, t] : by_param) {
        h = fnv(h, kind + "." + name);
        h = fnv(h, t.data(), static_cast<std::size_t>(t.size()) * sizeof(T));
      }
  }
  return h;
}

template <class T>
void check_same_state(const communicator& comm, const param_store<T>& params, const optimizer<T>* opt) {
  const auto sums = comm.all_gather(state_checksum(params, opt));
  std::string ranks;
  for (std::size_t r = 1; r < sums.size(); ++r)
    if (sums[r] != sums[0]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  if (!ranks.empty())
    throw mismatch_error(std::string("the ranks hold different ") +
                         (opt ? "parameters or optimizer state" : "parameters") + ": rank(s) " + ranks +
                         " differ from rank 0 (checksums of every value's bits)");
}

template <class T>
void broadcast_parameters(const communicator& comm, param_store<T>& params) {
  check_same_config(comm, parameter_config(params));
  for (auto& [name, e] : params) comm.broadcast(std::span(e.value.data(), static_cast<std::size_t>(e.value.size())));
  check_same_state<T>(comm, params);
}

template <class T>
void broadcast_optimizer(const communicator& comm, optimizer<T>& opt) {
  // rank 0 describes its state (step, buffers and shapes), the others make room and receive it
  std::map<std::string, std::string> description{{"optimizer", std::string(opt.name())}};
  const auto& state = opt.state();
  description["step"] = std::to_string(state.step);
  for (const auto& [kind, by_param] : state.buffers)
    for (const auto& [name, t] : by_param) description[kind + "\n" + name] = t.dims().str();
  auto root = deserialize(comm.broadcast(serialize(description)));
  if (root.at("optimizer") != opt.name())
    throw mismatch_error("broadcast_optimizer: rank 0's optimizer is " + in_quotes(root.at("optimizer")) + ", rank " +
                         std::to_string(comm.rank()) + "'s is " + in_quotes(opt.name()));
  optimizer_state<T> copy;
  if (comm.rank() == 0) copy = state;
  copy.step = std::stoll(root.at("step"));
  for (const auto& [key, shape] : root) {
    const auto cut = key.find('\n');
    if (cut == std::string::npos) continue;
    const std::string kind = key.substr(0, cut), name = key.substr(cut + 1);
    if (comm.rank() != 0) copy.buffers[kind][name] = tensor<T>(opt.params().value(name).dims());
    auto& t = copy.buffers[kind][name];
    comm.broadcast(std::span(t.data(), static_cast<std::size_t>(t.size())));
  }
  if (comm.rank() != 0) opt.load_state(std::move(copy));
  check_same_state(comm, opt.params(), &opt);
}

// Every rank's shard of its optimizer ([first, end) in name order), checked to tile the store
// the same way on every rank; none when no rank is sharded.
template <class T>
std::vector<std::pair<std::size_t, std::size_t>> shards_of(const communicator& comm, const optimizer<T>& opt) {
  const auto [first, end] = opt.shard();
  const auto firsts = comm.all_gather(static_cast<std::uint64_t>(first));
  const auto ends = comm.all_gather(static_cast<std::uint64_t>(end));
  const std::size_t n = opt.params().size();
  std::vector<std::pair<std::size_t, std::size_t>> shards;
  bool any = false, tiled = true;
  std::uint64_t next = 0;
  for (std::size_t r = 0; r < firsts.size(); ++r) {
    shards.emplace_back(firsts[r], ends[r]);
    any = any || firsts[r] != 0 || ends[r] != n;
    tiled = tiled && firsts[r] == next;
    next = ends[r];
  }
  if (!any) return {};
  if (!tiled || next != n)
    throw mismatch_error("the ranks' optimizer shards do not cover the " + std::to_string(n) +
                         " parameters once, in rank order (shard every rank's optimizer with "
                         "data_parallel::shard_optimizer)");
  return shards;
}

// The whole state of a sharded optimizer, on rank 0 (elsewhere: just the step count): each
// buffer sent from the rank that holds it, one at a time, in name order.
template <class T>
optimizer_state<T> gather_state(const communicator& comm, const optimizer<T>& opt,
                                const std::vector<std::pair<std::size_t, std::size_t>>& shards) {
  optimizer_state<T> whole;
  whole.step = opt.steps();
  if (whole.step == 0) return whole;  // no buffers before the first step
  const auto names = opt.params().names();
  for (const std::string& kind : opt.buffer_kinds())
    for (std::size_t k = 0; k < names.size(); ++k) {
      int owner = 0;
      while (!(k >= shards[static_cast<std::size_t>(owner)].first && k < shards[static_cast<std::size_t>(owner)].second))
        ++owner;
      tensor<T> t(opt.params().value(names[k]).dims());
      if (comm.rank() == owner) {
        const auto& kinds = opt.state().buffers;
        auto by_kind = kinds.find(kind);
        if (by_kind == kinds.end() || !by_kind->second.contains(names[k]))
          throw error("save_checkpoint: rank " + std::to_string(owner) + " holds no " + kind + " of \"" + names[k] +
                      "\" although it is in its shard");
        t = by_kind->second.at(names[k]);
      }
      if (owner != 0) comm.broadcast(std::span(t.data(), static_cast<std::size_t>(t.size())), owner);
      if (comm.rank() == 0) whole.buffers[kind][names[k]] = std::move(t);
    }
  return whole;
}

template <class T>
void gather_optimizer(const communicator& comm, optimizer<T>& opt) {
  const auto shards = shards_of(comm, opt);
  if (shards.empty()) return;
  optimizer_state<T> whole = gather_state(comm, opt, shards);
  if (comm.rank() != 0) return;
  opt.shard(0, opt.params().size());
  opt.load_state(std::move(whole));
}

template <class T>
void save_checkpoint(const communicator& comm, const std::string& path, const param_store<T>& params,
                     const optimizer<T>& opt, const std::map<std::string, std::string>& metadata) {
  const auto shards = shards_of(comm, opt);
  optimizer_state<T> whole;
  if (shards.empty()) {
    check_same_state(comm, params, &opt);
  } else {  // the parameters must agree; the optimizer's state is gathered from its shards
    check_same_state<T>(comm, params);
    whole = gather_state(comm, opt, shards);
  }
  bool ok = true;
  std::string message;
  if (comm.rank() == 0) try {
      if (shards.empty())
        loom::save_checkpoint(path, params, opt, metadata);
      else
        loom::save_checkpoint(path, params, opt, whole, metadata);
    } catch (const std::exception& e) {
      ok = false;
      message = e.what();
    }
  share_outcome(comm, ok, message);
}

template <class T>
std::map<std::string, std::string> load_checkpoint(const communicator& comm, const std::string& path,
                                                   param_store<T>& params, optimizer<T>& opt) {
  // A sharded optimizer takes the whole state first (every rank, for a moment), then keeps its
  // shard: a checkpoint of any world size, sharded or not, loads the same way.
  const auto [first, end] = opt.shard();
  const bool sharded = opt.sharded();
  if (sharded) opt.shard(0, params.size());
  bool ok = true;
  std::string message;
  std::map<std::string, std::string> metadata;
  if (comm.rank() == 0) try {
      metadata = loom::load_checkpoint(path, params, opt);
    } catch (const std::exception& e) {
      ok = false;
      message = e.what();
    }
  try {
    share_outcome(comm, ok, message);
    broadcast_parameters(comm, params);
    broadcast_optimizer(comm, opt);
  } catch (...) {
    if (sharded) opt.shard(first, end);
    throw;
  }
  if (sharded) opt.shard(first, end);
  return deserialize(comm.broadcast(serialize(metadata)));
}

#define LOOM_DISTRIBUTED_STATE(T)                                                                                    \
  template std::map<std::string, std::string> parameter_config(const param_store<T>&);                               \
  template std::uint64_t state_checksum(const param_store<T>&, const optimizer<T>*);                                 \
  template void check_same_state(const communicator&, const param_store<T>&, const optimizer<T>*);                   \
  template void broadcast_parameters(const communicator&, param_store<T>&);                                          \
  template void broadcast_optimizer(const communicator&, optimizer<T>&);                                             \
  template void gather_optimizer(const communicator&, optimizer<T>&);                                               \
  template void save_checkpoint(const communicator&, const std::string&, const param_store<T>&, const optimizer<T>&, \
                                const std::map<std::string, std::string>&);                                          \
  template std::map<std::string, std::string> load_checkpoint(const communicator&, const std::string&,               \
                                                              param_store<T>&, optimizer<T>&);
LOOM_DISTRIBUTED_STATE(float)
LOOM_DISTRIBUTED_STATE(double)
#undef LOOM_DISTRIBUTED_STATE

}  // namespace loom::distributed
