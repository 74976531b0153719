// Links loom::onnx from the installed package, as a user's exporting program would: a small
// graph written as an ONNX model (argv[1]) and read back by ONNX's checker.
#include <cstdio>

#include "loom/loom.hpp"
#include "loom/onnx/export.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: loom_onnx_consumer OUT.onnx\n");
    return 2;
  }
  using namespace loom;
  auto x = input<"x", shape<dyn<"B">, fix<4>>>();
  auto w = param<"w", shape<fix<4>, fix<3>>>();
  auto g = make_graph(softmax(matmul(x, w)));
  auto params = g.make_params<float>(1);
  onnx::save(g, params, argv[1]);
  onnx::check_file(argv[1]);
  std::printf("onnx consumer: %s written and checked\n", argv[1]);
  return 0;
}
