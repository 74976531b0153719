// The worked self-attention example: prints Q, K, V, the scaled scores, the attention weights
// as a heat map and the output; runs gradcheck on the same graph; writes it as Graphviz DOT.
//
//   attention_example [--dot graph.dot]
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "cli.hpp"
#include "worked_attention.hpp"

namespace {

void print_matrix(const char* name, loom::tensor_view<const float> m) {
  std::printf("%s [%lld x %lld]\n", name, static_cast<long long>(m.dims[0]), static_cast<long long>(m.dims[1]));
  for (std::int64_t i = 0; i < m.dims[0]; ++i) {
    std::printf("  ");
    for (std::int64_t j = 0; j < m.dims[1]; ++j) std::printf("%8.4f", m.data[i * m.dims[1] + j]);
    std::printf("\n");
  }
}

// A weight in [0, 1] as a shade, darker for more attention.
const char* shade(float w) {
  static const char* levels[] = {" ", "\u2591", "\u2592", "\u2593", "\u2588"};
  int l = static_cast<int>(std::lround(w * 4));
  return levels[l < 0 ? 0 : (l > 4 ? 4 : l)];
}

void print_heat_map(loom::tensor_view<const float> w) {
  std::printf("attention weights (row: query, column: key; darker is more)\n      ");
  for (std::int64_t j = 0; j < w.dims[1]; ++j) std::printf("  key %lld ", static_cast<long long>(j));
  std::printf("\n");
  for (std::int64_t i = 0; i < w.dims[0]; ++i) {
    std::printf("  q%lld ", static_cast<long long>(i));
    for (std::int64_t j = 0; j < w.dims[1]; ++j) {
      float v = w.data[i * w.dims[1] + j];
      std::printf(" %s%s%s%s %.4f", shade(v), shade(v), shade(v), shade(v), v);
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string dot_path;
  cli::command_line app("The worked self-attention example of the tutorials, checked and drawn.", "attention_example");
  app.text("--dot", dot_path, "also write the graph as Graphviz DOT to this file");
  app.parse(argc, argv);
  std::ofstream dot_file;
  if (!dot_path.empty()) {  // opened first: an unwritable path fails before any work
    dot_file.open(dot_path);
    if (!dot_file) app.fail("--dot: cannot write \"" + dot_path + "\"");
  }

  auto g = worked::graph();
  auto params = worked::weights_values<float>();
  auto run = g.executor<float>(params, {.keep_all = true});  // every intermediate stays readable
  auto x = worked::x_values<float>();
  run.forward({{"x", x}});

  std::printf("Self-attention, one head, d_k = 2 (%d graph nodes)\n\n", g.size());
  print_matrix("Q = X W_Q^T", run.value(worked::q()));
  print_matrix("K = X W_K^T", run.value(worked::k()));
  print_matrix("V = X W_V^T", run.value(worked::v()));
  print_matrix("scores = Q K^T / sqrt(d_k)", run.value(worked::scores()));
  print_heat_map(run.value(worked::weights()));
  print_matrix("output = weights V", run.output());

  const float expected[3][2] = {{0.4743f, 0.5875f}, {0.4736f, 0.5875f}, {0.4739f, 0.5877f}};
  float worst = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) worst = std::fmax(worst, std::fabs(run.output()[i * 2 + j] - expected[i][j]));
  std::printf("largest difference from the tutorial's output: %.2e (%s 1e-4)\n\n", worst,
              worst <= 1e-4f ? "within" : "NOT within");

  auto params64 = worked::weights_values<double>();
  auto x64 = worked::x_values<double>();
  auto check = loom::gradcheck(g, params64, {{"x", x64}});
  std::printf("%s\n", check.str().c_str());

  if (!dot_path.empty()) {
    dot_file << g.dot() << std::flush;
    if (!dot_file) app.fail("--dot: cannot write \"" + dot_path + "\"");
    std::printf("graph written to %s (render: dot -Tsvg %s -o graph.svg)\n", dot_path.c_str(), dot_path.c_str());
  }
  return worst <= 1e-4f && check.ok ? 0 : 1;
}
