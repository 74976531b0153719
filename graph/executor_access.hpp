// Reading an executor's nodes by their index in its plan: what the op-table test needs to fill
// every intermediate value with NaN and read every gradient, and no user does (users read a
// node with value(node) / grad(node), an output by name). Private to the library and its tests.
#pragma once

#include "loom/graph/executor.hpp"

namespace loom::detail {

struct executor_access {
  template <class T>
  static tensor_view<const T> value_at(const executor<T>& e, int node) {
    return e.node_value(node);
  }
  template <class T>
  static tensor_view<const T> grad_at(const executor<T>& e, int node) {
    return e.node_grad(node);
  }
};

}  // namespace loom::detail
