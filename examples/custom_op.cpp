// An op declared outside loom: RMSNorm, in this program's own namespace. The program checks its
// gradients in double, trains a small classifier that uses it between two linear layers, prints
// the memory plan and writes the graph as Graphviz DOT; with --profile, where the training steps'
// time went, by op (the user's op among loom's). docs/extending.md explains each part.
//
//   custom_op [--steps N] [--dot graph.dot] [--profile]
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <type_traits>

#include "cli.hpp"
#include "loom/core/kernel.hpp"    // op_args, with_fresh, put: what kernels see
#include "loom/core/parallel.hpp"  // for_chunks: deterministic parallel loops
#include "loom/loom.hpp"
#include "loom/nn/linear.hpp"

namespace example {

// ---- the declaration ------------------------------------------------------------------------
//
// rms_norm: x [.., D], w [D] -> y [.., D] (PyTorch's nn.RMSNorm); per row of D elements:
//   r = 1 / √(mean(x²) + ε),   x̂ = x · r,   y = x̂ ⊙ w
// backward, with g = dy ⊙ w:
//   dx = r · (g − x̂ · mean(g ⊙ x̂)),   dw = Σ_rows dy ⊙ x̂
// Backward reads x and w (not y); it recomputes r of each row into its workspace.

struct rms_norm_attrs {
  double eps = 1e-6;
};
}  // namespace example
// Attributes are reflected (stored in the node, part of its identity, shown in DOT): at global scope.
BOOST_HANA_ADAPT_STRUCT(example::rms_norm_attrs, eps);
namespace example {

// The backward's workspace: r of every row.
inline std::int64_t rows_of(const void*, const loom::dims_t& out, std::span<const loom::dims_t>) {
  return out[-1] ? out.size() / out[-1] : 0;
}

// Name, traits and kernels, compiled once whatever eps is.
// The name (the op's identity: keep it unique) is op_def's argument; the traits are a member
// because one of them is a function's address.
struct rms_norm_def : loom::op_def<rms_norm_def, "example.rms_norm"> {
  static constexpr loom::op_traits traits{
      .writes_fresh = true,                   // backward stores (=) on a gradient's first contribution
      .can_run_in_place = true,               // forward reads a whole row before writing it
      .backward_reads = loom::reads({0, 1}),  // x and w: y may be freed after its last reader
      .scratch_elements = &rows_of,           // op_args::scratch in backward
  };
  template <class T> static void forward(const loom::op_args<T>& a);
  template <class T> static void backward(const loom::op_args<T>& a);
};

// w is a vector [D] of x's last dim D (a failed static_assert shows both shapes).
template <class X, class W>
inline constexpr bool weight_fits_last_axis = [] {
  if constexpr (X::rank < 1 || W::rank != 1)
    return false;
  else
    return loom::dims_match<loom::dim_at<W, 0>, loom::dim_at<X, -1>>;
}();

template <double Eps>
struct rms_norm_op : rms_norm_def {
  static_assert(Eps > 0, "rms_norm: eps must be positive");
  static constexpr rms_norm_attrs attrs{Eps};
  template <class X, class W>
  struct rule {
    static_assert(weight_fits_last_axis<X, W>, "rms_norm: w must be [D] where x is [.., D]");
    using type = X;
  };
};

/// RMSNorm of x [.., D] over its last axis, scaled by w [D]; shape unchanged.
template <double Eps = 1e-6, class X, class W>
constexpr loom::node<rms_norm_op<Eps>, X, W> rms_norm(X, W) {
  return {};
}

// ---- the kernels ----------------------------------------------------------------------------

template <class T>
T inv_rms(const T* x, std::int64_t d, double eps) {  // 1 / √(mean(x²) + ε) of one row
  double squares = 0;
  for (std::int64_t j = 0; j < d; ++j) squares += static_cast<double>(x[j]) * x[j];
  return static_cast<T>(1 / std::sqrt(squares / static_cast<double>(d) + eps));
}

// forward: y = x · r · w, row by row, in chunks of rows.
template <class T>
void rms_norm_def::forward(const loom::op_args<T>& a) {
  const std::int64_t d = a.out_dims[-1], rows = d ? a.out_dims.size() / d : 0;
  const double eps = a.template attrs<rms_norm_attrs>().eps;
  const T* x = a.input(0);
  const T* w = a.input(1);
  loom::for_chunks(rows, loom::grain_for(3 * d), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t i = r0; i < r1; ++i) {
      const T r = inv_rms(x + i * d, d, eps);
      for (std::int64_t j = 0; j < d; ++j) a.out[i * d + j] = x[i * d + j] * r * w[j];
    }
  });
}

// backward: dx (+)= r (g − x̂ mean(g ⊙ x̂)) per row;  dw (+)= Σ_rows dy ⊙ x̂ per column, each
// column summed by one chunk in row order (the same bits for any thread count).
template <class T>
void rms_norm_def::backward(const loom::op_args<T>& a) {
  const std::int64_t d = a.out_dims[-1], rows = d ? a.out_dims.size() / d : 0;
  const double eps = a.template attrs<rms_norm_attrs>().eps;
  const T* x = a.input(0);
  const T* w = a.input(1);
  const T* dy = a.dout;
  T* r = a.scratch;  // rows_of(...) elements
  loom::for_chunks(rows, loom::grain_for(2 * d), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t i = r0; i < r1; ++i) r[i] = inv_rms(x + i * d, d, eps);
  });
  if (T* dx = a.grad(0))
    loom::with_fresh(a.fresh(0), [&](auto fresh) {
      loom::for_chunks(rows, loom::grain_for(5 * d), [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t i = r0; i < r1; ++i) {
          T gx = 0;  // Σ g ⊙ x over the row; mean(g ⊙ x̂) = r · gx / D
          for (std::int64_t j = 0; j < d; ++j) gx += dy[i * d + j] * w[j] * x[i * d + j];
          const T c = r[i] * r[i] * gx / static_cast<T>(d);  // x̂ · mean(g ⊙ x̂) = x · c
          for (std::int64_t j = 0; j < d; ++j)
            loom::put<fresh()>(dx[i * d + j], r[i] * (dy[i * d + j] * w[j] - x[i * d + j] * c));
        }
      });
    });
  if (T* dw = a.grad(1))
    loom::with_fresh(a.fresh(1), [&](auto fresh) {
      loom::for_chunks(d, loom::grain_for(rows), [&](std::int64_t j0, std::int64_t j1) {
        for (std::int64_t j = j0; j < j1; ++j) {
          T sum = 0;
          for (std::int64_t i = 0; i < rows; ++i) sum += dy[i * d + j] * x[i * d + j] * r[i];
          loom::put<fresh()>(dw[j], sum);
        }
      });
    });
}

// ---- a model that uses it -------------------------------------------------------------------
//
// Points in the plane, labelled by the ring they fall in (three classes):
//   x [N, 2] -> linear + gelu [N, 32] -> rms_norm [N, 32] -> linear [N, 3] = logits
//   loss = cross_entropy(logits, label [N])
constexpr long classes = 3;

inline auto logits() {
  auto x = loom::input<"x", loom::shape<loom::dyn<"N">, loom::fix<2>>>();
  auto hidden = loom::gelu(loom::nn::linear<"hidden", 32>(x));  // fused: one linear_gelu node
  auto gain = loom::param<"norm.weight", loom::shape<loom::fix<32>>, loom::init<loom::init_kind::ones>>();
  return loom::nn::linear<"out", classes>(rms_norm(hidden, gain));  // fused with the loss below
}

inline auto loss() {
  auto label = loom::input<"label", loom::shape<loom::dyn<"N">>, int>();
  return loom::cross_entropy(logits(), label);  // with the out layer: one linear_cross_entropy node
}

// n points uniform in [−1.5, 1.5]², labelled 0 (radius < 0.6), 1 (< 1.1) or 2.
struct points {
  loom::tensor<float> x;
  loom::tensor<int> label;
};
points make_points(std::int64_t n, loom::rng& random) {
  points p{loom::tensor<float>({n, 2}), loom::tensor<int>({n})};
  for (std::int64_t i = 0; i < n; ++i) {
    const double a = random.uniform(-1.5, 1.5), b = random.uniform(-1.5, 1.5), radius = std::hypot(a, b);
    p.x[2 * i] = static_cast<float>(a);
    p.x[2 * i + 1] = static_cast<float>(b);
    p.label[i] = radius < 0.6 ? 0 : radius < 1.1 ? 1 : 2;
  }
  return p;
}

}  // namespace example

int main(int argc, char** argv) {
  long steps = 300;
  std::string dot_path;
  bool profile = false;
  cli::command_line app("A user-defined op (RMSNorm): gradcheck, training, memory plan, DOT.", "custom_op");
  app.whole("--steps", steps, 1, 100000, "training steps (batches of 64 points)");
  app.text("--dot", dot_path, "also write the training graph, as it runs (fused), as Graphviz DOT to this file");
  app.flag("--profile", profile, "time every node's kernels while training and print their time by op");
  app.parse(argc, argv);
  std::ofstream dot_file;
  if (!dot_path.empty()) {  // opened first: an unwritable path fails before any work
    dot_file.open(dot_path);
    if (!dot_file) app.fail("--dot: cannot write \"" + dot_path + "\"");
  }
  loom::rng random(7);

  // 1. The op alone, in double: dL/dx and dL/dw against central differences.
  auto x = loom::input<"x", loom::shape<loom::fix<3>, loom::fix<4>, loom::fix<5>>>();  // [B, T, D]
  auto w = loom::param<"w", loom::shape<loom::fix<5>>>();                              // [D]
  auto op_alone = loom::make_graph(example::rms_norm<1e-5>(x, w));
  loom::param_store<double> w64;
  w64.set("w", loom::tensor<double>({5}, {0.5, -1.2, 2.0, 0.8, 1.1}));
  loom::tensor<double> x64({3, 4, 5});
  for (double& v : x64.values()) v = random.normal();
  const auto op_check = loom::gradcheck(op_alone, w64, {{"x", x64}});
  std::printf("rms_norm alone:     %s\n", op_check.str().c_str());

  // ... and inside the model, where fused linear nodes feed it and read it.
  auto g = loom::make_graph(example::loss(), example::logits());  // output 0: the loss
  auto params64 = g.make_params<double>(1);
  auto few = example::make_points(8, random);
  const auto model_check =
      loom::gradcheck(g, params64, {{"x", loom::tensor_cast<double>(few.x)}, {"label", few.label}});
  std::printf("rms_norm in model:  %s\n\n", model_check.str().c_str());

  // 2. Training: Adam on batches of 64 fresh points.
  auto params = g.make_params<float>(1);
  auto run = g.executor<float>(params, {.profile = profile});
  loom::adam<float> opt(params, {.lr = 1e-2});
  double first = 0, window = 0;
  std::printf("training %ld steps (mean loss over each 50 steps)\n", steps);
  for (long step = 1; step <= steps; ++step) {
    const auto batch = example::make_points(64, random);
    run.forward({{"x", batch.x}, {"label", batch.label}});
    run.backward();  // writes every parameter's gradient into params
    opt.step();
    const double loss = run.output(0)[0];
    if (profile && step == 10 && steps > 10) run.reset_profile();  // the first steps start threads and libraries
    if (step == 1) first = loss;
    window += loss;
    if (step % 50 == 0 || step == steps) {
      std::printf("  step %4ld  loss %.4f\n", step, window / static_cast<double>(step % 50 ? step % 50 : 50));
      window = 0;
    }
  }
  if (profile)  // before the held-out forward below: the training steps only
    std::printf("\nthe training steps' kernel time by op (exec_options::profile, after %ld warm-up steps):\n%s\n",
                steps > 10 ? 10L : 0L, run.profile().table().c_str());
  const auto held_out = example::make_points(1000, random);
  run.forward({{"x", held_out.x}, {"label", held_out.label}});
  const auto scores = run.output(1);  // [1000, 3]
  int right = 0;
  for (std::int64_t i = 0; i < 1000; ++i) {
    int best = 0;
    for (int c = 1; c < example::classes; ++c)
      if (scores[i * example::classes + c] > scores[i * example::classes + best]) best = c;
    right += best == held_out.label[i];
  }
  const double last = run.output(0)[0];
  std::printf("loss %.4f at step 1, %.4f on 1000 held-out points (accuracy %.1f%%)\n\n", first, last, right / 10.0);

  // 3. The memory plan for batches of 64, before running: the workspace rms_norm asked for
  //    (scratch_elements) is one of its buffers.
  std::printf("%s\n", g.memory_plan<float>({{"N", 64}}).str(8).c_str());

  // 4. The graph as it runs: the linear layers (the second with the loss) fused around the user's op.
  std::printf("nodes as run:");
  for (const loom::node_desc* node : run.plan().order)
    if (node->op->role == loom::node_role::op) std::printf(" %s", std::string(node->op->name).c_str());
  std::printf("\n");
  if (!dot_path.empty()) {
    dot_file << run.dot() << std::flush;
    if (!dot_file) app.fail("--dot: cannot write \"" + dot_path + "\"");
    std::printf("graph written to %s (render: dot -Tsvg %s -o graph.svg)\n", dot_path.c_str(), dot_path.c_str());
  }
  return op_check.ok && model_check.ok && last < first ? 0 : 1;
}
