// exec_options::profile: the executor's per-node kernel times (executor.cpp takes them), the
// report and its table by op.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "executor_impl.hpp"

namespace loom {

template <class T>
void executor<T>::impl::start_clocks() {
  if (clocks.size() != static_cast<std::size_t>(n)) clocks.assign(static_cast<std::size_t>(n), node_clock{});
}

template <class T>
void executor<T>::impl::clear_profile() {
  clocks.clear();
  forward_wall = backward_wall = 0;
  forward_passes = backward_passes = 0;
}

template <class T>
profile_report executor<T>::profile() const {
  busy_guard busy(p_->in_use, "profile()");
  if (!p_->opts.profile) throw error("profile(): this executor was made without exec_options::profile");
  profile_report r;
  r.forward_wall_s = p_->forward_wall;
  r.backward_wall_s = p_->backward_wall;
  r.forwards = p_->forward_passes;
  r.backwards = p_->backward_passes;
  r.threads = p_->arena ? p_->arena->max_concurrency() : 1;
  const plan_view& plan = p_->plan;
  for (std::size_t i = 0; i < p_->clocks.size(); ++i) {
    const auto& c = p_->clocks[i];
    if (c.forwards + c.backwards + c.recomputes == 0) continue;
    const int node = static_cast<int>(i);
    r.nodes.push_back({node, std::string(plan.order[i]->op->name), plan.describe(node), plan.shape_text(node),
                       c.forward, c.backward, c.recompute, c.forwards, c.backwards, c.recomputes});
  }
  return r;
}

template <class T>
void executor<T>::reset_profile() {
  busy_guard busy(p_->in_use, "reset_profile()");
  if (!p_->opts.profile) throw error("reset_profile(): this executor was made without exec_options::profile");
  p_->clear_profile();
}

std::string profile_report::table(int top) const {
  struct row {
    int nodes = 0;
    double forward = 0, backward = 0, recompute = 0;  // seconds per pass
    double total() const { return forward + backward + recompute; }
  };
  auto per = [](double s, std::int64_t passes) { return passes > 0 ? s / static_cast<double>(passes) : 0.0; };
  std::map<std::string, row> by_op;
  for (const node_time& t : nodes) {
    row& o = by_op[t.op];
    ++o.nodes;
    o.forward += per(t.forward_s, forwards);
    o.backward += per(t.backward_s, backwards);
    o.recompute += per(t.recompute_s, backwards);
  }
  std::vector<std::pair<std::string, row>> rows(by_op.begin(), by_op.end());
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.total() > b.second.total(); });
  if (top > 0 && rows.size() > static_cast<std::size_t>(top) + 1) {  // the rest in one row
    row rest;
    for (std::size_t i = static_cast<std::size_t>(top); i < rows.size(); ++i) {
      rest.nodes += rows[i].second.nodes;
      rest.forward += rows[i].second.forward;
      rest.backward += rows[i].second.backward;
      rest.recompute += rows[i].second.recompute;
    }
    rows.resize(static_cast<std::size_t>(top));
    rows.emplace_back("(" + std::to_string(by_op.size() - static_cast<std::size_t>(top)) + " other ops)", rest);
  }
  double all = 0;
  for (const auto& [op, o] : rows) all += o.total();
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %6s %12s %12s %12s %7s\n", "op", "nodes", "forward ms", "backward ms",
                "recompute ms", "share");
  out += line;
  for (const auto& [op, o] : rows) {
    std::snprintf(line, sizeof line, "%-28s %6d %12.4f %12.4f %12.4f %6.1f%%\n", op.c_str(), o.nodes, 1e3 * o.forward,
                  1e3 * o.backward, 1e3 * o.recompute, all > 0 ? 100 * o.total() / all : 0.0);
    out += line;
  }
  const double fwd_wall = per(forward_wall_s, forwards), bwd_wall = per(backward_wall_s, backwards);
  double kf = 0, kb = 0;
  for (const auto& [op, o] : rows) {
    kf += o.forward;
    kb += o.backward + o.recompute;
  }
  std::snprintf(line, sizeof line, "%-28s %6s %12.4f %12.4f   (per pass: %lld forward, %lld backward)\n",
                "kernels", "", 1e3 * kf, 1e3 * kb, static_cast<long long>(forwards), static_cast<long long>(backwards));
  out += line;
  std::snprintf(line, sizeof line, "%-28s %6s %12.4f %12.4f   (%d thread%s)\n", "passes (wall)", "", 1e3 * fwd_wall,
                1e3 * bwd_wall, threads, threads == 1 ? "" : "s");
  out += line;
  if (threads == 1) {
    std::snprintf(line, sizeof line, "%-28s %6s %12.4f %12.4f\n", "between kernels", "", 1e3 * (fwd_wall - kf),
                  1e3 * (bwd_wall - kb));
    out += line;
  }
  return out;
}

template void executor<float>::impl::start_clocks();
template void executor<double>::impl::start_clocks();
template void executor<float>::impl::clear_profile();
template void executor<double>::impl::clear_profile();
template profile_report executor<float>::profile() const;
template profile_report executor<double>::profile() const;
template void executor<float>::reset_profile();
template void executor<double>::reset_profile();

}  // namespace loom
