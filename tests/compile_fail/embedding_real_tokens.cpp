// expect: embedding: tokens must be an int input
// max-bytes: 4096
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto tokens = input<"tok", shape<dyn<"B">, dyn<"T">>>();  // real, not int
  auto weight = param<"emb.weight", shape<fix<10>, fix<4>>>();
  return embedding(tokens, weight);
}
