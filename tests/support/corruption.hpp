// Test support: break an op's backward on purpose, to prove that gradcheck notices.
// Not part of the library: tests link the loom_test_support target.
#pragma once

#include "loom/core/op_entry.hpp"

namespace loom::testing {

/// How a test may break a backward kernel.
enum class corruption {
  run_twice,  // the gradient added twice (the second run accumulates even where the first stored)
  skip,       // no gradient at all (buffers the backward was to store first are left at zero)
};

/// While alive, the backward of `op` (in double) is run twice or skipped in executors made
/// meanwhile (gradcheck makes its own). Not thread-safe with executors being constructed.
class scoped_corruption {
 public:
  scoped_corruption(const op_entry& op, corruption how);
  ~scoped_corruption();
  scoped_corruption(const scoped_corruption&) = delete;
  scoped_corruption& operator=(const scoped_corruption&) = delete;

 private:
  const op_entry& op_;
};

}  // namespace loom::testing
