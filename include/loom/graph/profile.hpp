// What an executor made with exec_options::profile measured: each node's kernel time and the
// passes' wall time (executor::profile()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

/// One node of the executor's plan: the time its kernels took in the passes measured — wall
/// time from a kernel's start to its end. At one thread that is the node's own work. At more,
/// kernels of independent nodes run at once, and a kernel waiting for its chunks on other
/// threads may run other nodes' tasks meanwhile, which then count in its time too: compare
/// nodes at one thread, and use the passes' wall time for the whole.
struct node_time {
  int node = -1;           // its index in executor::plan() (fused nodes are one node)
  std::string op;          // the op's name: "linear", "attention", "layer_norm", ...
  std::string what;        // plan().describe(node): `linear (node 12)`, `input "x"`
  std::string shape;       // plan().shape_text(node): "[B, T, 64]"
  double forward_s = 0;    // its forward kernel, summed over the forwards
  double backward_s = 0;   // its backward kernel (with the zeroing of the gradients it starts)
  double recompute_s = 0;  // its forward run again in backward (a block closed by checkpoint())
  std::int64_t forward_calls = 0, backward_calls = 0, recompute_calls = 0;
};

/// Every node's kernel time and the passes' wall time, summed since the executor was made or
/// reset_profile() was last called.
struct profile_report {
  std::vector<node_time> nodes;  // the nodes whose kernels ran, in plan order
  double forward_wall_s = 0;     // forward() from its first kernel to its last, summed
  double backward_wall_s = 0;    // backward() likewise
  std::int64_t forwards = 0, backwards = 0;
  int threads = 1;  // the executor's thread count (kernels of independent nodes overlap when > 1)

  /// The kernels' time by op, per pass (forward times divided by `forwards`, backward and
  /// recompute times by `backwards`), largest total first: op, nodes, forward ms, backward ms,
  /// recompute ms, share of all kernel time; then the kernels' total, the passes' wall time
  /// and, at one thread, the difference (the executor's own work between kernels). `top` > 0
  /// keeps that many ops (the rest summed in one row). Empty of rows before any pass.
  std::string table(int top = 0) const;
};

}  // namespace loom
