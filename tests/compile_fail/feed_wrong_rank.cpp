// expect: input_rank_is<.*"tokens".*2.*3>
// max-bytes: 4096
#include <cstdint>
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto tokens = input<"tokens", shape<dyn<"B">, dyn<"T">>, int>();
  auto w = param<"w", shape<fix<5>, fix<3>>>();
  auto g = make_graph(sum(embedding(tokens, w)));
  static const std::int32_t ids[6] = {0, 1, 2, 3, 4, 0};
  return g.feed<"tokens">(ids, {1, 2, 3});  // three dims for an input of two
}
