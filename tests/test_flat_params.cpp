// Where parameters live: tensors in a shared block (tensor::move_into) that keep their place
// and shape, flat_block's layout, param_store::pack and the layout changes that alone move a
// parameter, and the optimizers' updates over the layout they find (against the update written
// out per element, for any thread count and layout, with parameters added between steps).
#include <catch2/catch.hpp>

#include <oneapi/tbb/global_control.h>

#include <cmath>
#include <cstdint>

#include "loom/loom.hpp"
#include "loom/nn/linear.hpp"
#include "test_support.hpp"

using namespace loom;
using test::message_of;
using test::same_bits;
using test::same_values;

namespace {

bool aligned64(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; }

// Sizes that leave gaps (1, 17, 3·5), one above the optimizers' piece of 16384 elements, and an
// empty tensor.
template <class T>
param_store<T> odd_store() {
  param_store<T> p;
  int k = 0;
  for (const auto& [name, dims] : std::vector<std::pair<std::string, dims_t>>{
           {"a", {1}}, {"b", {17}}, {"c", {3, 5}}, {"d", {2, 16390}}, {"e", {0, 4}}, {"f", {31}}}) {
    tensor<T> v(dims);
    for (std::int64_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(std::sin(0.37 * static_cast<double>(i + 11 * k)));
    p.set(name, std::move(v));
    ++k;
  }
  return p;
}

// A gradient for step s, different for every element and step.
template <class T>
void set_grads(param_store<T>& p, int s) {
  int k = 0;
  for (auto& [name, e] : p) {
    for (std::int64_t i = 0; i < e.grad.size(); ++i)
      e.grad[i] = static_cast<T>(std::cos(0.11 * static_cast<double>(i) + 1.3 * s + 0.7 * k));
    ++k;
  }
}

}  // namespace

TEST_CASE("a tensor in a block: copies are its own, same-shape assignment writes the slot, another shape is refused") {
  param_store<float> p;
  p.set("w", tensor<float>({2, 2}, {1, 2, 3, 4}));
  p.set("x", tensor<float>({3}, {5, 6, 7}));
  CHECK(p.value("w").in_block());  // set() gives a parameter a block of its own
  CHECK(p.grad("x").in_block());
  CHECK(aligned64(p.value("x").data()));
  REQUIRE(p.pack());
  tensor<float>& w = p.value("w");
  REQUIRE(w.in_block());
  float* slot = w.data();

  tensor<float> copy = w;  // deep: a change of one is not seen in the other
  CHECK_FALSE(copy.in_block());
  copy[0] = 9;
  CHECK(w[0] == 1.0f);

  w = tensor<float>({2, 2}, {10, 20, 30, 40});  // same shape: written in place
  CHECK(w.data() == slot);
  CHECK(w[3] == 40.0f);
  const tensor<float> other({2, 2}, {-1, -2, -3, -4});
  w = other;  // copy assignment too
  CHECK(w.data() == slot);
  CHECK(w[1] == -2.0f);
  w = w;  // NOLINT: self-assignment changes nothing
  CHECK(w[1] == -2.0f);
  CHECK(p.packed());

  // moving a parameter out takes its slot, which stays valid after the store is gone
  tensor<float> taken;
  {
    param_store<float> q = std::move(p);
    CHECK(q.packed());
    taken = std::move(q.value("x"));
    CHECK(q.value("x").size() == 1);  // moved-from: empty, rank 0
    CHECK(q.value("x").values().empty());
    CHECK_FALSE(q.packed());
  }
  CHECK(taken.in_block());
  CHECK(taken[2] == 7.0f);

  // another shape is refused, through the value or the gradient, and changes nothing: only
  // param_store::set reshapes a parameter (a layout change the executors see)
  param_store<float> r;
  r.set("w", tensor<float>({2, 2}, {1, 2, 3, 4}));
  r.pack();
  const auto version = r.layout_version();
  float* const w_slot = r.value("w").data();
  CHECK_THAT(message_of([&] { r.value("w") = tensor<float>({5}, {1, 2, 3, 4, 5}); }),
             Catch::Contains("keeps its shape [2, 2]") && Catch::Contains("shape [5] was assigned"));
  const tensor<float> six({6});
  CHECK_THROWS_AS(r.grad("w") = six, shape_error);
  CHECK(r.value("w").data() == w_slot);
  CHECK(r.value("w")[3] == 4.0f);
  CHECK(r.grad("w").dims() == dims_t{2, 2});
  CHECK(r.packed());
  CHECK(r.layout_version() == version);
  r.set("w", tensor<float>({5}, {1, 2, 3, 4, 5}));  // the one way to reshape: a layout change
  CHECK(r.value("w").dims() == dims_t{5});
  CHECK(r.grad("w").dims() == dims_t{5});
  CHECK(r.value("w").in_block());
  CHECK(r.layout_version() != version);
  CHECK_FALSE(r.packed());
}

TEMPLATE_TEST_CASE("pack lays values and gradients out 64-byte aligned, in name order, with the same offsets", "",
                   float, double) {
  auto p = odd_store<TestType>();
  set_grads(p, 0);
  const auto before = p;  // a copy: its own tensors
  CHECK_FALSE(p.packed());
  REQUIRE(p.pack());
  CHECK(p.packed());
  CHECK_FALSE(p.pack());  // already packed: nothing moves
  CHECK(same_values(p, before));
  const auto& vb = p.value_block();
  const auto& gb = p.grad_block();
  REQUIRE(vb.segments().size() == p.size());
  REQUIRE(gb.segments().size() == p.size());
  std::size_t k = 0;
  std::int64_t end = 0;
  for (auto& [name, e] : p) {
    INFO(name);
    const auto s = vb.segments()[k];
    CHECK(s.offset == gb.segments()[k].offset);
    CHECK(s.offset >= end);  // in name order, not overlapping
    CHECK(s.offset - end < flat_block<TestType>::align);
    CHECK(s.size == e.value.size());
    CHECK(e.value.data() == vb.elements().data() + s.offset);
    CHECK(e.grad.data() == gb.elements().data() + s.offset);
    CHECK(aligned64(e.value.data()));
    CHECK(aligned64(e.grad.data()));
    CHECK(same_bits(e.grad, before.grad(name)));
    end = s.offset + s.size;
    ++k;
  }
  // the gaps are zero, so whole-block sums and scalings see only the parameters
  double block_sum = 0, tensor_sum = 0;
  for (TestType g : gb.elements()) block_sum += std::abs(static_cast<double>(g));
  for (auto& [name, e] : p)
    for (TestType g : e.grad.values()) tensor_sum += std::abs(static_cast<double>(g));
  CHECK(block_sum == tensor_sum);

  p.zero_grad();
  for (TestType g : gb.elements()) CHECK(g == TestType(0));

  // a copy is packed, with blocks of its own; a new name unpacks the store without moving the
  // others (only pack() moves them)
  auto copy = p;
  CHECK(copy.packed());
  CHECK(same_values(copy, p));
  copy.value("b")[0] = TestType(42);
  CHECK(p.value("b")[0] != TestType(42));
  const TestType* const d_at = p.value("d").data();
  p.set("aa", tensor<TestType>({3}));
  CHECK_FALSE(p.packed());
  CHECK(p.value("d").data() == d_at);
  CHECK(p.pack());
  CHECK(p.packed());
  CHECK(same_bits(p.value("d"), before.value("d")));
}

TEST_CASE("a moved-from packed store is empty and usable") {
  param_store<float> p;
  p.set("w", tensor<float>({100}));
  REQUIRE(p.pack());
  param_store<float> q(std::move(p));
  CHECK(q.packed());
  CHECK(p.size() == 0);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  CHECK(p.grad_block().elements().empty());
  p.zero_grad();  // was once a write through a null block of the old size
  param_store<float> r;
  r = std::move(q);
  CHECK(r.packed());
  CHECK(q.grad_block().elements().empty());  // NOLINT(bugprone-use-after-move)
  q.zero_grad();
  CHECK(clip_grad_norm(q, 1.0) == 0.0);
  p.set("v", tensor<float>({3}, {1, 2, 3}));  // and it takes new parameters
  CHECK(p.pack());
  CHECK(p.value("v")[2] == 3.0f);
}

TEST_CASE("the layout changes only through the store, each change is counted, and nothing else moves a parameter") {
  param_store<float> p;
  p.set("w", tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6}));
  auto v = p.layout_version();
  const auto changed = [&] {
    const bool c = p.layout_version() != v;
    v = p.layout_version();
    return c;
  };
  const float* w_at = p.value("w").data();
  p.set("w", tensor<float>({2, 3}, {6, 5, 4, 3, 2, 1}));  // the same shape: written in place
  CHECK_FALSE(changed());
  CHECK(p.value("w").data() == w_at);
  CHECK(p.value("w")[0] == 6.0f);
  p.grad("w").fill(1);
  p.zero_grad();
  p.value("w") = tensor<float>({2, 3});
  CHECK_FALSE(changed());
  CHECK(p.value("w").data() == w_at);
  p.set("b", tensor<float>({2}));  // a new name
  CHECK(changed());
  CHECK(p.value("w").data() == w_at);  // the others stay where they are
  CHECK(p.pack());                     // packing moves them
  CHECK(changed());
  CHECK_FALSE(p.pack());
  CHECK_FALSE(changed());
  const std::vector<std::pair<std::string, dims_t>> more{{"c", dims_t{4}}};
  p.add_zeros(more);
  CHECK(changed());
  p = param_store<float>(p);  // assigned a copy
  CHECK(changed());
  w_at = p.value("w").data();
  sgd<float> opt(p, 0.1, {.momentum = 0.9});  // an optimizer adopts the layout it finds
  p.grad("w").fill(1);
  opt.step();
  opt.zero_grad();
  clip_grad_norm(p, 1.0);
  CHECK_FALSE(changed());
  CHECK(p.value("w").data() == w_at);
}

namespace {

// AdamW's update of one element, written out in double from torch.optim.AdamW's formulas.
struct adam_reference {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0.01;
  void step(double& p, double g, double& m, double& v, int t) const {
    p *= 1 - lr * wd;
    m = beta1 * m + (1 - beta1) * g;
    v = beta2 * v + (1 - beta2) * g * g;
    const double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
    p -= lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + eps);
  }
};

}  // namespace

TEST_CASE("adamw over a packed or an unpacked store is the per-element update, for every element and no gap") {
  auto p = odd_store<double>();
  const bool packed = GENERATE(true, false);
  INFO((packed ? "packed" : "each parameter in a block of its own (set())"));
  if (packed) p.pack();
  const auto version = p.layout_version();
  const adam_reference ref{.lr = 0.01, .wd = 0.1};
  adamw<double> opt(p, {.lr = ref.lr, .weight_decay = ref.wd});
  auto expect = p;  // per-element reference state
  std::map<std::string, std::vector<double>> m, v;
  for (auto& [name, e] : expect) {
    m[name].assign(static_cast<std::size_t>(e.value.size()), 0.0);
    v[name].assign(static_cast<std::size_t>(e.value.size()), 0.0);
  }
  for (int t = 1; t <= 3; ++t) {
    set_grads(p, t);
    set_grads(expect, t);
    opt.step();
    for (auto& [name, e] : expect)
      for (std::int64_t i = 0; i < e.value.size(); ++i)
        ref.step(e.value[i], e.grad[i], m[name][static_cast<std::size_t>(i)], v[name][static_cast<std::size_t>(i)], t);
  }
  for (auto& [name, e] : p) {
    INFO(name);
    for (std::int64_t i = 0; i < e.value.size(); ++i) {
      CHECK(e.value[i] == Approx(expect.value(name)[i]).epsilon(1e-12).margin(1e-15));
      CHECK(opt.state().buffers.at("exp_avg").at(name)[i] ==
            Approx(m[name][static_cast<std::size_t>(i)]).epsilon(1e-12).margin(1e-15));
    }
  }
  CHECK(p.layout_version() == version);  // the optimizer moved nothing
  CHECK(p.packed() == packed);
  if (packed)
    for (double x : p.value_block().elements()) CHECK(std::isfinite(x));  // gaps untouched (eps = 0 would give 0/0)
}

TEMPLATE_TEST_CASE("optimizer steps give the same bits for 1, 2 and 4 threads and either layout", "", float, double) {
  auto run = [](int threads, const std::string& which, bool packed = true) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
    auto p = odd_store<TestType>();
    if (packed) p.pack();
    std::unique_ptr<optimizer<TestType>> opt;
    if (which == "adam") opt = std::make_unique<adam<TestType>>(p, adam_options{.lr = 0.01, .weight_decay = 0.01});
    if (which == "adamw") opt = std::make_unique<adamw<TestType>>(p, adamw_options{.lr = 0.01});
    if (which == "sgd") opt = std::make_unique<sgd<TestType>>(p, 0.1, sgd_options{.momentum = 0.9, .nesterov = true});
    for (int s = 0; s < 3; ++s) {
      set_grads(p, s);
      clip_grad_norm(p, 1.0);
      opt->step();
    }
    return p;
  };
  for (const std::string which : {"adam", "adamw", "sgd"}) {
    INFO(which);
    const auto one = run(1, which);
    CHECK(same_values(one, run(2, which)));
    CHECK(same_values(one, run(4, which)));
    CHECK(same_values(one, run(2, which, false)));
  }
}

TEST_CASE("a parameter added between steps gets new buffers, the others keep theirs, and nothing moves") {
  // SGD with momentum 0.5 and dampening 0.5: a new buffer starts as the gradient (PyTorch
  // clones d_p), an old one is 0.5 · buf + 0.5 · g. With g = 1 and lr = 1: the first step
  // gives buf = 1, the second 0.5 + 0.5 = 1 (a new buffer would again be 1 by cloning, and
  // 0.5 if it were treated as old).
  param_store<double> p;
  p.set("a", tensor<double>({3}, {0, 0, 0}));
  sgd<double> opt(p, 1.0, {.momentum = 0.5, .dampening = 0.5});
  p.grad("a").fill(1);
  opt.step();
  CHECK(p.value("a")[0] == -1.0);
  p.set("b", tensor<double>({2}, {10, 10}));  // new name: the store is no longer packed
  CHECK_FALSE(p.packed());
  const double* const a_at = p.value("a").data();
  const double* const b_at = p.value("b").data();
  p.grad("a").fill(1);
  p.grad("b").fill(1);
  opt.step();
  CHECK_FALSE(p.packed());  // the optimizer works on the layout it finds
  CHECK(p.value("a").data() == a_at);
  CHECK(p.value("b").data() == b_at);
  CHECK(p.value("a")[2] == -2.0);  // buf 0.5 · 1 + 0.5 · 1
  CHECK(p.value("b")[1] == 9.0);   // buf 1 (new: the gradient)
  CHECK(opt.state().buffers.at("momentum_buffer").at("b")[0] == 1.0);
  CHECK(opt.state().buffers.at("momentum_buffer").at("a")[0] == 1.0);

  // a state loaded into the optimizer is packed at the next step and used as it was
  auto state = opt.state();
  state.buffers["momentum_buffer"]["a"].fill(4);
  opt.load_state(state);
  p.grad("a").fill(1);
  p.grad("b").fill(0);
  opt.step();
  CHECK(p.value("a")[0] == -2.0 - 2.5);  // buf = 0.5 · 4 + 0.5 · 1
  CHECK(p.value("b")[0] == 9.0 - 0.5);   // buf = 0.5 · 1 + 0.5 · 0
}

TEST_CASE("an optimizer made after forward() moves nothing: it and the executor share the store's one layout") {
  auto x = input<"x", shape<dyn<"T">, fix<3>>>();
  auto w = param<"w", shape<fix<2>, fix<3>>>();
  auto g = make_graph(sum(matmul(x, transpose<1, 0>(w))));
  param_store<float> params;
  params.set("w", tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6}));
  const float* const w_at = params.value("w").data();
  const float* const g_at = params.grad("w").data();
  auto run = g.executor<float>(params);
  tensor<float> xs({2, 3}, {1, 2, 3, 4, 5, 6});
  run.forward({{"x", xs}});
  sgd<float> opt(params, 0.1);  // after forward(): the parameters stay where the executor bound them
  run.backward();
  CHECK(params.grad("w")[0] == 5.0f);  // Σ_t x[t, 0]
  CHECK(params.grad("w")[5] == 9.0f);
  CHECK(params.grad("w").data() == g_at);
  CHECK(run.grad(w).data == g_at);  // the executor reads and writes the store's own memory
  CHECK(run.value(w).data == w_at);
  opt.step();
  CHECK(params.value("w").data() == w_at);
  CHECK(params.value("w")[0] == Approx(1.0f - 0.1f * 5.0f));
  CHECK(run.value(w)[0] == params.value("w")[0]);  // the update is what the executor sees

  // A layout change the user makes between forward() and backward() (here a packed store
  // made from this one) is refused with a clear error, and the next forward() binds anew.
  run.forward({{"x", xs}});
  params = param_store<float>(params);
  CHECK_THAT(message_of([&] { run.backward(); }), Catch::Contains("the parameter store's layout changed after forward()"));
  CHECK_THAT(message_of([&] { (void)run.value(w); }), Catch::Contains("layout changed"));
  params.zero_grad();
  run.forward({{"x", xs}});
  run.backward();
  CHECK(params.grad("w")[0] == 5.0f);
  CHECK(run.grad(w).data == params.grad("w").data());
}

TEST_CASE("make_params makes a packed store with the values the unpacked path makes") {
  auto x = input<"x", shape<dyn<"T">, fix<3>>>();
  auto g = make_graph(sum(nn::linear<"b", 4>(nn::linear<"a", 3>(x))));
  auto params = g.make_params<double>(7);
  CHECK(params.packed());
  // a store given a parameter by set() first is packed with the others by init_params; the
  // same seed gives the same bits (values drawn in plan order either way), and the parameter
  // set() gave keeps its value
  param_store<double> started;
  started.set("zz", tensor<double>({2}, {3, 4}));
  init_params(g.plan(), started, 7);
  CHECK(started.packed());
  CHECK(started.value("zz")[1] == 4.0);
  for (auto& [name, e] : params) {
    INFO(name);
    CHECK(same_bits(e.value, started.value(name)));
  }
  CHECK(params.size() == 4);
  for (auto& [name, e] : params) {
    INFO(name);
    CHECK(e.value.in_block());
    CHECK(aligned64(e.value.data()));
    for (double gv : e.grad.values()) CHECK(gv == 0.0);
  }
  // PyTorch's nn.Linear init: weights and biases uniform in ±1/sqrt(fan_in), nonzero here
  for (double v : params.value("a.weight").values()) CHECK(std::abs(v) <= 1 / std::sqrt(3.0));
  CHECK(params.value("b.bias")[0] != 0.0);

  // add_zeros refuses a name it has, or one given twice, and changes nothing
  const std::vector<std::pair<std::string, dims_t>> again{{"a.bias", dims_t{3}}};
  CHECK_THAT(message_of([&] { params.add_zeros(again); }), Catch::Contains("\"a.bias\" is already there"));
  const std::vector<std::pair<std::string, dims_t>> twice{{"c", dims_t{2}}, {"c", dims_t{2}}};
  CHECK_THROWS_AS(params.add_zeros(twice), value_error);
  CHECK(params.size() == 4);
  CHECK(params.packed());
  const auto before = params;
  const std::vector<std::pair<std::string, dims_t>> more{{"z", dims_t{5}}, {"c", dims_t{2, 2}}};
  params.add_zeros(more);
  CHECK(params.packed());
  CHECK(params.size() == 6);
  CHECK(params.value("c").dims() == dims_t{2, 2});
  CHECK(params.value("z")[4] == 0.0);
  for (const auto& name : before.names()) CHECK(same_bits(params.value(name), before.value(name)));
}
