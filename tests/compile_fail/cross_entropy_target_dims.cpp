// expect: cross_entropy: targets must have the logits' dims without the last
// max-bytes: 4096
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto logits = input<"logits", shape<dyn<"B">, dyn<"T">, fix<10>>>();
  auto target = input<"target", shape<dyn<"B">, dyn<"S">>, int>();
  return cross_entropy(logits, target);
}
