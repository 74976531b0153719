// The exceptions loom throws. Every message says which op, input, parameter or dim is wrong,
// what was expected and what came.
#pragma once

#include <stdexcept>
#include <string>

namespace loom {

/// Base of every loom exception.
struct error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// A shape that only the run can check: a symbol bound to two values, a tensor of the wrong
/// rank or size, a slice past the end of an axis.
struct shape_error : error {
  using error::error;
};
/// An input or parameter the graph needs was not given.
struct missing_error : error {
  using error::error;
};
/// A value out of its domain: a token id past the vocabulary, a negative length.
struct value_error : error {
  using error::error;
};
/// A fixed capacity (a KV cache, say) would be exceeded.
struct capacity_error : error {
  using error::error;
};
/// A file could not be read or written, or is not in the expected format.
struct io_error : error {
  using error::error;
};

}  // namespace loom
