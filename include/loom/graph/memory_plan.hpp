// memory_report: what a graph's memory plan needs for given dims, known before running.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace loom {

/// The arena a memory plan needs for one set of bound dims, and what is in it
/// (executor::memory_plan, graph::memory_plan).
struct memory_report {
  /// One value or gradient buffer of the arena.
  struct buffer {
    std::string what;   // the node it belongs to: "softmax (node 41)", with "+ k more" when shared in place
    std::string shape;  // its dims in terms of the symbols: "[B, 8, T, T]"
    bool grad = false;  // a gradient (else a value)
    std::size_t bytes = 0, offset = 0;
    int first = 0, last = 0;  // steps of its first write and last access (see graph/planner.hpp)
    bool kept = false;        // lives to the end of the step (an output, a kept node, an input's gradient)
  };
  std::size_t peak_bytes = 0;      // the arena: what executor::planned_bytes() reports after such a forward
  std::size_t unshared_bytes = 0;  // the same buffers without any sharing
  int in_place = 0;                // nodes that overwrite their input
  std::vector<buffer> buffers;     // largest first

  /// A table: the peak, what sharing saved, and the `top` largest buffers.
  std::string str(int top = 15) const;
};

}  // namespace loom
