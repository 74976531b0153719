// expect: the op needs more axes than its input has.*has_axes<loom::mask_causal_op, 2, 1>
// max-bytes: 4096
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto scores = input<"scores", shape<dyn<"S">>>();
  return mask_causal(scores);  // scores are [.., T, S]: a vector has no query axis
}
