// Optimizers against torch.optim, gradient clipping and schedules by hand, and checkpoints:
// round trip, resume equivalence, bad files, and a save that fails half-way.
#include <catch2/catch.hpp>

#include <limits>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <utility>

#include "io_test_support.hpp"
#include "loom/loom.hpp"
#include "test_support.hpp"

using namespace loom;
using test::message_of;
using test::same_bits;
using test::same_values;
using test::scratch_dir;

namespace {

// The setting of scripts/optim_reference.py: a [2, 3] and b [4] with these initial values; at
// step k (from 0) the gradient of element i of parameter j (a: 0, b: 1) is
// ((7i + 3k + 5j) mod 11 − 5) / 4, exact in binary.
template <class T>
param_store<T> reference_store() {
  param_store<T> p;
  p.set("a", tensor<T>({2, 3}, {T(0.5), T(-1.2), T(0.3), T(2.0), T(-0.7), T(0.1)}));
  p.set("b", tensor<T>({4}, {T(1.0), T(-0.5), T(0.25), T(-2.0)}));
  return p;
}

template <class T>
void set_reference_grads(param_store<T>& p, int k) {
  int j = 0;
  for (const char* name : {"a", "b"}) {
    tensor<T>& g = p.grad(name);
    for (std::int64_t i = 0; i < g.size(); ++i) g[i] = static_cast<T>(((7 * i + 3 * k + 5 * j) % 11 - 5) / 4.0);
    ++j;
  }
}

template <class T>
using optimizer_factory = std::function<std::unique_ptr<optimizer<T>>(param_store<T>&)>;

template <class T>
std::map<std::string, optimizer_factory<T>> reference_settings() {
  return {
      {"sgd_plain", [](param_store<T>& p) { return std::make_unique<sgd<T>>(p, 0.1); }},
      {"sgd_momentum_wd",
       [](param_store<T>& p) {
         return std::make_unique<sgd<T>>(p, 0.1, sgd_options{.momentum = 0.9, .weight_decay = 0.01});
       }},
      {"sgd_nesterov",
       [](param_store<T>& p) {
         return std::make_unique<sgd<T>>(p, 0.05, sgd_options{.momentum = 0.9, .nesterov = true});
       }},
      {"sgd_dampening",
       [](param_store<T>& p) {
         return std::make_unique<sgd<T>>(p, 0.1, sgd_options{.momentum = 0.5, .dampening = 0.3});
       }},
      {"adam_default", [](param_store<T>& p) { return std::make_unique<adam<T>>(p, adam_options{.lr = 0.01}); }},
      {"adam_wd",
       [](param_store<T>& p) {
         return std::make_unique<adam<T>>(
             p, adam_options{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1});
       }},
      {"adamw_wd",
       [](param_store<T>& p) { return std::make_unique<adamw<T>>(p, adamw_options{.lr = 0.01, .weight_decay = 0.1}); }},
      {"adamw_default", [](param_store<T>& p) { return std::make_unique<adamw<T>>(p); }},
  };
}

struct reference_point {
  const char* setting;
  int after_steps;
  std::vector<double> a, b;
};

// Printed by `/usr/bin/python3 scripts/optim_reference.py` (torch 1.13, torch.optim.SGD / Adam /
// AdamW in float64, same initial values and gradients as above).
const std::vector<reference_point> torch_reference = {
    // sgd_plain
    {"sgd_plain", 1, {0.625, -1.25, 0.35, 1.875, -0.725, 0.17500000000000002}, {1.0, -0.4, 0.175, -1.975}},
    {"sgd_plain",
     4,
     {0.55, -1.3, 0.32499999999999996, 1.875, -0.7, 0.225},
     {1.1, -0.55, 0.32499999999999996, -2.0749999999999997}},
    // sgd_momentum_wd
    {"sgd_momentum_wd",
     1,
     {0.6245, -1.2488, 0.3497, 1.873, -0.7242999999999999, 0.1749},
     {0.999, -0.3995, 0.17475, -1.973}},
    {"sgd_momentum_wd",
     4,
     {0.9120644240255, -1.5565066979111999, 0.31123320694030004, 1.681147759227, -0.8351448687856999, 0.3389196597551},
     {1.0753747483009999, -0.30477981675050003, 0.39871815340024996, -2.193865304127}},
    // sgd_nesterov
    {"sgd_nesterov", 1, {0.61875, -1.2475, 0.3475, 1.88125, -0.72375, 0.17125}, {1.0, -0.405, 0.17875, -1.97625}},
    {"sgd_nesterov",
     4,
     {0.7130437500000001, -1.4156900000000001, 0.31889, 1.8017687500000001, -0.76388875, 0.27069125000000005},
     {1.0879125, -0.4387575000000001, 0.35537125, -2.1329112500000003}},
    // sgd_dampening (the first step copies the gradient into the buffer: no dampening yet)
    {"sgd_dampening", 1, {0.625, -1.25, 0.35, 1.875, -0.725, 0.17500000000000002}, {1.0, -0.4, 0.175, -1.975}},
    {"sgd_dampening",
     4,
     {0.6993750000000001, -1.368125, 0.328125, 1.8050000000000002, -0.746875, 0.249375},
     {1.074375, -0.421875, 0.2975, -2.093125}},
    // adam_default
    {"adam_default",
     1,
     {0.50999999992, -1.2099999998, 0.3099999998, 1.99000000008, -0.7099999995999999, 0.10999999986666667},
     {1.0, -0.4900000001, 0.24000000013333334, -1.9900000004}},
    {"adam_default",
     4,
     {0.5249604721182, -1.2252813292426323, 0.30909168512004814, 1.9828653066616457, -0.7186704781954678,
      0.11982000469017065},
     {0.998917765862773, -0.48134393965612854, 0.2496363410951074, -2.0028738960901418}},
    // adam_wd
    {"adam_wd",
     1,
     {0.5099999916666736, -1.2099999736842797, 0.30999997872344953, 1.9900000068965469, -0.709999944444753,
      0.10999998648650475},
     {0.990000099999, -0.49000000952380046, 0.24000001290320916, -1.9900000222221728}},
    {"adam_wd",
     4,
     {0.5215471716060173, -1.2211966276289252, 0.3064889484898823, 1.9782210259699173, -0.7155553474373625,
      0.11834311729066532},
     {0.9868085245419296, -0.4823679863168973, 0.24991208219170102, -1.9944988223202273}},
    // adamw_wd
    {"adamw_wd",
     1,
     {0.50949999992, -1.2087999997999999, 0.30969999979999996, 1.98800000008, -0.7092999995999999, 0.10989999986666667},
     {0.999, -0.4895000001, 0.23975000013333334, -1.9880000004}},
    {"adamw_wd",
     4,
     {0.5229098758980719, -1.2204365350457826, 0.30786276315149036, 1.974912577004438, -0.7158265706441652,
      0.11937809849355314},
     {0.9949361170456045, -0.4793964968281983, 0.24865772171824363, -1.9949015528038225}},
    // adamw_default
    {"adamw_default",
     1,
     {0.500994999992, -1.2009879999800002, 0.30099699998, 1.998980000008, -0.70099299996, 0.10099899998666667},
     {0.99999, -0.49899500001, 0.24899750001333334, -1.99898000004}},
    {"adamw_default",
     4,
     {0.5024759938790117, -1.2024800816158676, 0.3008971379389081, 1.9982065671760836, -0.7018390000963468,
      0.1019779579868964},
     {0.9998517895488224, -0.4981144438626954, 0.24995365416791643, -2.0002074064997837}},
};

template <class T>
bool same_state(const optimizer_state<T>& a, const optimizer_state<T>& b) {
  if (a.step != b.step || a.buffers.size() != b.buffers.size()) return false;
  for (const auto& [kind, by_param] : a.buffers) {
    auto k = b.buffers.find(kind);
    if (k == b.buffers.end() || k->second.size() != by_param.size()) return false;
    for (const auto& [param, buf] : by_param)
      if (!k->second.contains(param) || !same_bits(buf, k->second.at(param))) return false;
  }
  return true;
}

// Gradients for the resume tests: a fixed pseudo-random sequence, one per step.
template <class T>
void set_step_grads(param_store<T>& p, int step) {
  std::uint64_t seed = 1000 + static_cast<std::uint64_t>(step);
  for (auto& [name, e] : p) e.grad = test::random_tensor<T>(e.value.dims(), seed++);
}

template <class T>
param_store<T> model_store() {
  param_store<T> p;
  p.set("enc.0.weight", test::random_tensor<T>({4, 3}, 1));
  p.set("enc.0.bias", test::random_tensor<T>({4}, 2));
  p.set("out.weight", test::random_tensor<T>({2, 4}, 3));
  return p;
}

}  // namespace

// ---- optimizers ----

TEMPLATE_TEST_CASE("sgd, adam and adamw match torch.optim step by step", "", float, double) {
  const double tol = std::is_same_v<TestType, float> ? 2e-6 : 1e-13;
  for (const auto& [setting, make] : reference_settings<TestType>()) {
    INFO(setting);
    auto params = reference_store<TestType>();
    auto opt = make(params);
    for (int k = 0; k < 4; ++k) {
      set_reference_grads(params, k);
      opt->step();
      for (const auto& ref : torch_reference) {
        if (ref.setting != setting || ref.after_steps != k + 1) continue;
        INFO("after step " << k + 1);
        for (std::size_t i = 0; i < ref.a.size(); ++i)
          CHECK(params.value("a")[i] == Approx(ref.a[i]).margin(tol).epsilon(tol));
        for (std::size_t i = 0; i < ref.b.size(); ++i)
          CHECK(params.value("b")[i] == Approx(ref.b[i]).margin(tol).epsilon(tol));
      }
    }
    CHECK(opt->steps() == 4);
  }
}

TEST_CASE("adamw with zero gradients only decays the parameters by (1 - lr * weight_decay)") {
  param_store<double> p;
  p.set("w", tensor<double>({3}, {1.0, -2.0, 0.5}));
  adamw<double> opt(p, {.lr = 0.1, .weight_decay = 0.5});
  opt.step();  // m = v = 0, so the Adam part is 0 / (0 + eps) = 0
  opt.step();
  CHECK(p.value("w")[0] == Approx(1.0 * 0.95 * 0.95).epsilon(1e-15));
  CHECK(p.value("w")[1] == Approx(-2.0 * 0.95 * 0.95).epsilon(1e-15));
  CHECK(p.value("w")[2] == Approx(0.5 * 0.95 * 0.95).epsilon(1e-15));
}

TEST_CASE("the first adam step moves every parameter by lr against the gradient's sign") {
  // With m̂ = g and v̂ = g², the step is lr · g / (|g| + eps).
  param_store<double> p;
  p.set("w", tensor<double>({3}, {0.0, 0.0, 0.0}));
  p.grad("w") = tensor<double>({3}, {4.0, -0.001, 0.0});
  adam<double> opt(p, {.lr = 0.5});
  opt.step();
  CHECK(p.value("w")[0] == Approx(-0.5 * 4.0 / (4.0 + 1e-8)));
  CHECK(p.value("w")[1] == Approx(0.5 * 0.001 / (0.001 + 1e-8)));
  CHECK(p.value("w")[2] == 0.0);
}

TEST_CASE("optimizers keep the documented buffers: none for plain sgd, momentum_buffer, exp_avg and exp_avg_sq") {
  auto p = reference_store<float>();
  sgd<float> plain(p, 0.1);
  sgd<float> momentum(p, 0.1, {.momentum = 0.9});
  adam<float> a(p);
  CHECK(plain.buffer_kinds().empty());
  CHECK(momentum.buffer_kinds() == std::vector<std::string>{"momentum_buffer"});
  CHECK(a.buffer_kinds() == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
  CHECK(a.state().buffers.empty());
  a.step();
  CHECK(a.state().step == 1);
  CHECK(a.state().buffers.at("exp_avg").at("a").dims() == dims_t{2, 3});
  CHECK(a.state().buffers.at("exp_avg_sq").size() == 2);
  CHECK(a.name() == "adam");
  CHECK(adamw<float>(p).name() == "adamw");
  CHECK(a.hyperparameters().at("beta2") == "0.999");
}

TEST_CASE("bad hyperparameters throw value_error naming the optimizer and the setting") {
  auto p = reference_store<float>();
  CHECK_THROWS_WITH((sgd<float>(p, -0.1)), Catch::Contains("sgd: lr must be >= 0"));
  CHECK_THROWS_WITH((sgd<float>(p, 0.1, {.nesterov = true})), Catch::Contains("nesterov"));
  CHECK_THROWS_WITH((sgd<float>(p, 0.1, {.momentum = 0.9, .dampening = 0.1, .nesterov = true})),
                    Catch::Contains("nesterov"));
  CHECK_THROWS_AS((sgd<float>(p, 0.1, {.momentum = -1})), value_error);
  CHECK_THROWS_WITH((adam<float>(p, {.beta1 = 1.0})), Catch::Contains("adam: beta1 must be in [0, 1)"));
  CHECK_THROWS_WITH((adamw<float>(p, {.beta2 = -0.1})), Catch::Contains("adamw: beta2"));
  CHECK_THROWS_AS((adam<float>(p, {.eps = -1})), value_error);
  sgd<float> ok(p, 0.1);
  CHECK_THROWS_AS(ok.set_lr(-1), value_error);
}

TEST_CASE("a gradient of the wrong shape is refused, and a reshaped parameter makes step() throw, changing nothing") {
  auto p = reference_store<float>();
  adam<float> opt(p);
  set_reference_grads(p, 0);
  opt.step();
  const auto before = p;
  const auto state_before = opt.state();
  CHECK_THROWS_WITH(p.grad("b") = tensor<float>({5}), Catch::Contains("keeps its shape [4]"));
  CHECK(same_values(p, before));
  p.set("b", tensor<float>({5}));  // the parameter itself reshaped: its buffers no longer fit
  const auto reshaped = p;
  CHECK_THROWS_WITH(opt.step(), Catch::Contains("the exp_avg of \"b\" has shape [4], the parameter [5]"));
  CHECK(same_values(p, reshaped));
  CHECK(same_state(opt.state(), state_before));
}

TEST_CASE("zero_grad zeroes every gradient of the store") {
  auto p = reference_store<float>();
  set_reference_grads(p, 1);
  sgd<float> opt(p, 0.1);
  opt.zero_grad();
  for (auto& [name, e] : p)
    for (float g : e.grad.values()) CHECK(g == 0.0f);
}

TEST_CASE("load_state rejects a state that does not fit the store and keeps its own") {
  auto p = reference_store<double>();
  adam<double> opt(p);
  set_reference_grads(p, 0);
  opt.step();
  const auto good = opt.state();

  auto wrong_shape = good;
  wrong_shape.buffers["exp_avg"]["a"] = tensor<double>({3, 2});
  auto missing = good;
  missing.buffers["exp_avg_sq"].erase("b");
  auto unknown = good;
  unknown.buffers["momentum_buffer"]["a"] = tensor<double>({2, 3});
  unknown.buffers["exp_avg"]["nope"] = tensor<double>({1});

  CHECK_THROWS_WITH(opt.load_state(wrong_shape),
                    Catch::Contains("exp_avg of \"a\": shape [3, 2], the parameter's [2, 3]"));
  CHECK_THROWS_WITH(opt.load_state(missing), Catch::Contains("missing exp_avg_sq of \"b\""));
  CHECK_THROWS_WITH(opt.load_state(unknown),
                    Catch::Contains("keeps no \"momentum_buffer\"") && Catch::Contains("\"nope\": no such parameter"));
  CHECK(same_state(opt.state(), good));
  CHECK(opt.state_differences(good).empty());
}

TEST_CASE("load_state refuses a negative second moment, naming the tensor and the element") {
  auto p = reference_store<double>();
  adam<double> opt(p);
  set_reference_grads(p, 0);
  opt.step();
  const auto good = opt.state();
  auto negative = good;  // the next step would take its square root: NaN parameters
  negative.buffers["exp_avg_sq"]["b"][0] = -0.25;
  CHECK_THROWS_WITH(opt.load_state(negative), Catch::Contains("exp_avg_sq of \"b\": element 0 is -0.25") &&
                                                  Catch::Contains("a second moment is never negative"));
  CHECK(same_state(opt.state(), good));
  auto negative_first = good;  // a first moment may be negative
  negative_first.buffers["exp_avg"]["b"][0] = -0.25;
  CHECK(opt.state_differences(negative_first).empty());
}

// ---- sharding (ZeRO stage 1; the ranks' side is tested in tests/distributed/) ----

TEST_CASE("a sharded optimizer updates its share with the bits of the whole one and leaves the rest") {
  auto whole = reference_store<double>(), shards = reference_store<double>();  // parameters "a", "b"
  adam<double> opt_whole(whole), opt_a(shards), opt_b(shards);
  opt_a.shard(0, 1);  // "a"
  opt_b.shard(1, 2);  // "b"
  CHECK(opt_a.sharded());
  CHECK(opt_a.shard() == std::pair<std::size_t, std::size_t>{0, 1});
  for (int k = 0; k < 3; ++k) {
    set_reference_grads(whole, k);
    set_reference_grads(shards, k);
    opt_whole.step();
    const tensor<double> b_before = shards.value("b");
    opt_a.step();
    CHECK(test::same_bits(shards.value("b"), b_before));  // not its share
    opt_b.step();  // the two shards together: one whole step
    CHECK(test::same_values(shards, whole));
  }
  CHECK(opt_a.state().buffers.at("exp_avg").size() == 1);
  CHECK(opt_a.state().buffers.at("exp_avg").count("a") == 1);
  // the shards' states together are the whole one's
  CHECK(test::same_bits(opt_b.state().buffers.at("exp_avg_sq").at("b"), opt_whole.state().buffers.at("exp_avg_sq").at("b")));
}

TEST_CASE("a sharded optimizer refuses a range outside the store, a buffer outside its shard, and a plain save") {
  auto p = reference_store<double>();
  adam<double> opt(p);
  CHECK_THROWS_WITH(opt.shard(1, 3), Catch::Contains("shard [1, 3) is not a range of the store's 2 parameters"));
  CHECK_THROWS_AS(opt.shard(2, 1), value_error);
  set_reference_grads(p, 0);
  opt.step();
  const auto whole = opt.state();
  opt.shard(1, 2);
  CHECK(opt.state().buffers.at("exp_avg").count("a") == 0);  // dropped
  CHECK_THAT(opt.state_differences(whole).front(), Catch::Contains("of \"a\": outside this optimizer's shard"));
  CHECK(opt.state_differences(whole, true).empty());  // as a whole state it is fine
  test::scratch_dir dir("optim");
  CHECK_THROWS_WITH(save_checkpoint(dir.file("c.safetensors"), p, opt),
                    Catch::Contains("holds only its shard of the state"));
  opt.shard(0, 2);  // whole again: "a"'s buffers are missing until loaded
  CHECK_FALSE(opt.sharded());
  opt.load_state(whole);
  CHECK(same_state(opt.state(), whole));
}

// ---- clipping ----

TEMPLATE_TEST_CASE("clip_grad_norm scales all gradients by max_norm / (norm + 1e-6) and returns the norm", "", float,
                   double) {
  param_store<TestType> p;
  p.set("a", tensor<TestType>({2}));
  p.set("b", tensor<TestType>({1}));
  // norm = sqrt(3² + 0² + 4²) = 5
  auto set_grads = [&] {
    p.grad("a") = tensor<TestType>({2}, {TestType(3), TestType(0)});
    p.grad("b") = tensor<TestType>({1}, {TestType(-4)});
  };
  set_grads();
  CHECK(clip_grad_norm(p, 10.0) == Approx(5.0));
  CHECK(p.grad("a")[0] == TestType(3));  // under the limit: untouched
  CHECK(p.grad("b")[0] == TestType(-4));

  CHECK(clip_grad_norm(p, 1.0) == Approx(5.0));
  const double coef = 1.0 / (5.0 + 1e-6);
  CHECK(p.grad("a")[0] == Approx(3 * coef));
  CHECK(p.grad("a")[1] == TestType(0));
  CHECK(p.grad("b")[0] == Approx(-4 * coef));
  CHECK(clip_grad_norm(p, 1.0) == Approx(1.0).epsilon(1e-5));

  // At exactly max_norm PyTorch still scales, by 5 / (5 + 1e-6).
  set_grads();
  clip_grad_norm(p, 5.0);
  CHECK(p.grad("b")[0] == Approx(-4 * 5.0 / (5.0 + 1e-6)).epsilon(1e-7));
  CHECK(p.grad("b")[0] != TestType(-4));
  CHECK_THROWS_AS(clip_grad_norm(p, -1.0), value_error);
}

// ---- schedules ----

TEST_CASE("noam_schedule follows d^-0.5 * min(step^-0.5, step * warmup^-1.5)") {
  const noam_schedule lr(512, 4000);
  // By hand: 512^-0.5 = 0.0441941738..., 4000^-1.5 = 3.9528470752e-6, 4000^-0.5 = 0.0158113883...
  CHECK(lr(1) == Approx(0.04419417382415922 * 3.952847075210474e-06).epsilon(1e-12));
  CHECK(lr(0) == lr(1));  // step 0 is taken as step 1
  CHECK(lr(100) == Approx(0.04419417382415922 * 100 * 3.952847075210474e-06).epsilon(1e-12));
  CHECK(lr(4000) == Approx(0.04419417382415922 * 0.015811388300841896).epsilon(1e-12));  // the peak, 6.99e-4
  CHECK(lr(16000) == Approx(0.04419417382415922 * 0.007905694150420948).epsilon(1e-12));
  CHECK(noam_schedule(512, 4000, 2.0)(16000) == Approx(2 * lr(16000)));
  CHECK_THROWS_AS(noam_schedule(512, 0), value_error);
}

TEST_CASE("warmup_cosine rises linearly to the peak, then follows half a cosine down to min_lr") {
  const warmup_cosine lr(1.0, 10, 110, 0.1);
  CHECK(lr(0) == 0.0);
  CHECK(lr(5) == Approx(0.5));
  CHECK(lr(10) == Approx(1.0));
  CHECK(lr(35) == Approx(0.1 + 0.45 * (1 + std::sqrt(0.5))));  // a quarter of the way: cos(π/4)
  CHECK(lr(60) == Approx(0.55));                               // half way: cos(π/2) = 0
  CHECK(lr(110) == Approx(0.1));
  CHECK(lr(1000) == 0.1);
  CHECK(warmup_cosine(2.0, 0, 10)(0) == Approx(2.0));  // no warmup
  CHECK_THROWS_AS(warmup_cosine(1.0, 10, 10), value_error);
  CHECK_THROWS_AS(warmup_cosine(1.0, 1, 10, 2.0), value_error);
}

TEST_CASE("an optimizer with a schedule sets lr = schedule(n) before its n-th step") {
  auto p = reference_store<double>();
  sgd<double> opt(p, 123.0);
  opt.set_schedule([](std::int64_t step) { return 0.5 * static_cast<double>(step); });
  p.grad("a").fill(1.0);
  opt.step();
  CHECK(opt.lr() == 0.5);
  CHECK(p.value("a")[0] == Approx(0.5 - 0.5));
  opt.step();
  CHECK(opt.lr() == 1.0);
  CHECK(p.value("a")[0] == Approx(0.5 - 0.5 - 1.0));
  opt.set_lr(0.25);  // a manual setting lasts until the next scheduled step
  CHECK(opt.lr() == 0.25);
}

// ---- checkpoints ----

TEMPLATE_TEST_CASE("a checkpoint restores parameters, optimizer state and metadata bit for bit", "", float, double) {
  scratch_dir dir("optim");
  const std::string path = dir.file("ckpt.safetensors");
  auto params = model_store<TestType>();
  adam<TestType> opt(params, {.lr = 0.01});
  for (int s = 0; s < 3; ++s) {
    set_step_grads(params, s);
    opt.step();
  }
  save_checkpoint(path, params, opt, {{"seed", "42"}, {"epoch", "3"}});

  auto fresh = model_store<TestType>();
  test::randomize(fresh, 99);
  adam<TestType> fresh_opt(fresh, {.lr = 0.01});
  const auto metadata = load_checkpoint(path, fresh, fresh_opt);
  CHECK(metadata == std::map<std::string, std::string>{{"seed", "42"}, {"epoch", "3"}});
  CHECK(same_values(fresh, params));
  CHECK(same_state(fresh_opt.state(), opt.state()));
  CHECK(fresh_opt.steps() == 3);

  // The file is plain safetensors: parameters under their names, buffers under optimizer.*
  const tensor_file f = read_safetensors(path);
  CHECK(f.contains("enc.0.weight"));
  CHECK(f.contains("optimizer.exp_avg.enc.0.weight"));
  CHECK(f.contains("optimizer.exp_avg_sq.out.weight"));
  CHECK(f.metadata.at("optimizer") == "adam");
  CHECK(f.metadata.at("optimizer.step") == "3");
  CHECK(f.metadata.at("optimizer.lr") == "0.01");

  // Parameters alone, for inference.
  auto inference = model_store<TestType>();
  test::randomize(inference, 7);
  CHECK(load_checkpoint(path, inference).at("seed") == "42");
  CHECK(same_values(inference, params));
}

TEMPLATE_TEST_CASE("training N steps straight equals N/2 steps, save, load into a fresh optimizer, N/2 steps", "",
                   float, double) {
  scratch_dir dir("optim");
  using factory = optimizer_factory<TestType>;
  const std::vector<std::pair<std::string, factory>> settings = {
      {"sgd nesterov",
       [](param_store<TestType>& p) {
         return std::make_unique<sgd<TestType>>(p, 0.05,
                                                sgd_options{.momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
       }},
      {"adam", [](param_store<TestType>& p) { return std::make_unique<adam<TestType>>(p, adam_options{.lr = 0.01}); }},
      {"adamw + cosine schedule",
       [](param_store<TestType>& p) {
         auto opt = std::make_unique<adamw<TestType>>(p, adamw_options{.lr = 0.01});
         opt->set_schedule(warmup_cosine(0.01, 3, 10));
         return opt;
       }},
  };
  const int n = 10;
  for (const auto& [name, make] : settings) {
    INFO(name);
    auto straight = model_store<TestType>();
    auto straight_opt = make(straight);
    for (int s = 0; s < n; ++s) {
      set_step_grads(straight, s);
      straight_opt->step();
      straight_opt->zero_grad();
    }

    auto first = model_store<TestType>();
    auto first_opt = make(first);
    for (int s = 0; s < n / 2; ++s) {
      set_step_grads(first, s);
      first_opt->step();
    }
    save_checkpoint(dir.file("half.safetensors"), first, *first_opt, {{"step", std::to_string(n / 2)}});

    auto resumed = model_store<TestType>();
    test::randomize(resumed, 5);
    auto resumed_opt = make(resumed);
    const auto meta = load_checkpoint(dir.file("half.safetensors"), resumed, *resumed_opt);
    for (int s = std::stoi(meta.at("step")); s < n; ++s) {
      set_step_grads(resumed, s);
      resumed_opt->step();
    }
    CHECK(same_values(resumed, straight));
    CHECK(same_state(resumed_opt->state(), straight_opt->state()));
    CHECK(resumed_opt->lr() == straight_opt->lr());
  }
}

namespace {
// A trained adam checkpoint at `path`; returns the store and optimizer that wrote it.
struct saved_run {
  param_store<float> params = model_store<float>();
  adam<float> opt{params, {.lr = 0.01}};
  explicit saved_run(const std::string& path) {
    set_step_grads(params, 0);
    opt.step();
    save_checkpoint(path, params, opt, {{"seed", "1"}});
  }
};
}  // namespace

TEST_CASE("a corrupt, truncated or mismatched checkpoint fails with a clear error and changes nothing") {
  scratch_dir dir("optim");
  const std::string good = dir.file("good.safetensors");
  saved_run run(good);
  const tensor_file contents = read_safetensors(good);

  auto target = model_store<float>();
  adam<float> target_opt(target, {.lr = 0.01});
  set_step_grads(target, 7);
  target_opt.step();
  const auto values_before = target;
  const auto state_before = target_opt.state();
  auto unchanged = [&] { return same_values(target, values_before) && same_state(target_opt.state(), state_before); };

  auto with = [&](const std::string& name, std::function<void(tensor_file&)> edit) {
    tensor_file f = contents;
    edit(f);
    write_safetensors(dir.file(name), f);
    return dir.file(name);
  };
  auto fails_with = [&](const std::string& path, const std::string& expected) {
    INFO(path);
    CHECK_THROWS_AS(load_checkpoint(path, target, target_opt), io_error);
    CHECK_THAT(message_of([&] { load_checkpoint(path, target, target_opt); }),
               Catch::Contains(path) && Catch::Contains(expected));
    CHECK(unchanged());
  };

  // Truncated and garbled files.
  auto bytes = test::read_bytes(good);
  test::write_bytes(dir.file("truncated.safetensors"),
                    {bytes.begin(), bytes.begin() + static_cast<long>(bytes.size() / 2)});
  fails_with(dir.file("truncated.safetensors"), "larger than");
  bytes[8] = 'X';
  test::write_bytes(dir.file("garbled.safetensors"), bytes);
  fails_with(dir.file("garbled.safetensors"), "not valid JSON");
  fails_with(dir.file("absent.safetensors"), "cannot open");

  fails_with(with("missing.safetensors", [](tensor_file& f) { f.tensors.erase("enc.0.bias"); }),
             "missing tensor \"enc.0.bias\"");
  fails_with(with("shape.safetensors",
                  [](tensor_file& f) {
                    f.tensors["out.weight"] = to_stored(tensor<float>({4, 2}));
                  }),
             "\"out.weight\": shape [4, 2] in the file, [2, 4] in the store");
  fails_with(with("dtype.safetensors",
                  [](tensor_file& f) {
                    f.tensors["out.weight"] = to_stored(tensor<std::int64_t>({2, 4}));
                  }),
             "\"out.weight\": dtype I64 in the file, expected F32, F64, F16 or BF16");
  fails_with(with("moment.safetensors", [](tensor_file& f) { f.tensors.erase("optimizer.exp_avg_sq.enc.0.weight"); }),
             "missing exp_avg_sq of \"enc.0.weight\"");
  fails_with(with("kind.safetensors", [](tensor_file& f) { f.metadata["optimizer"] = "sgd"; }),
             "the file holds \"sgd\" state, the optimizer is \"adam\"");
  fails_with(with("step.safetensors", [](tensor_file& f) { f.metadata["optimizer.step"] = "three"; }),
             "\"optimizer.step\" is \"three\"");
  fails_with(
      with("extra.safetensors", [](tensor_file& f) { f.tensors["decoder.weight"] = to_stored(tensor<float>({1})); }),
      "unexpected tensor \"decoder.weight\"");

  // Several faults at once are all listed.
  const std::string many = with("many.safetensors", [](tensor_file& f) {
    f.tensors.erase("enc.0.bias");
    f.tensors["out.weight"] = to_stored(tensor<float>({3}));
    f.metadata.erase("optimizer");
  });
  try {
    load_checkpoint(many, target, target_opt);
    FAIL("no exception");
  } catch (const load_mismatch_error& e) {
    CHECK(e.differences.size() >= 3);
    CHECK_THAT(std::string(e.what()), Catch::Contains("missing tensor \"enc.0.bias\"") &&
                                          Catch::Contains("\"out.weight\": shape [3]") &&
                                          Catch::Contains("no optimizer state"));
  }
  CHECK(unchanged());
}

TEST_CASE("a checkpoint save that fails half-way leaves the previous checkpoint intact") {
  scratch_dir dir("optim");
  const std::string path = dir.file("ckpt.safetensors");
  saved_run run(path);
  const auto before = test::read_bytes(path);
  set_step_grads(run.params, 1);
  run.opt.step();

  // The temporary file cannot be created.
  std::filesystem::create_directory(path + ".tmp");
  CHECK_THROWS_AS(save_checkpoint(path, run.params, run.opt), io_error);
  CHECK(test::read_bytes(path) == before);
  std::filesystem::remove(path + ".tmp");

  // The disk fills up while writing (files may not grow past 256 bytes meanwhile).
  {
    test::file_size_limit full(256);
    CHECK_THROWS_WITH(save_checkpoint(path, run.params, run.opt), Catch::Contains("cannot write"));
  }
  CHECK(test::read_bytes(path) == before);
  CHECK_FALSE(std::filesystem::exists(std::filesystem::symlink_status(path + ".tmp")));

  // The previous checkpoint still loads, at step 1.
  auto params = model_store<float>();
  adam<float> opt(params, {.lr = 0.01});
  CHECK(load_checkpoint(path, params, opt).at("seed") == "1");
  CHECK(opt.steps() == 1);
}

TEST_CASE("save_checkpoint refuses reserved metadata keys and an optimizer of another store") {
  scratch_dir dir("optim");
  auto params = model_store<float>();
  auto other = model_store<float>();
  sgd<float> opt(params, 0.1);
  CHECK_THROWS_WITH(save_checkpoint(dir.file("c.safetensors"), params, opt, {{"optimizer.lr", "1"}}),
                    Catch::Contains("reserved"));
  CHECK_THROWS_WITH(save_checkpoint(dir.file("c.safetensors"), other, opt), Catch::Contains("another parameter store"));
  CHECK_FALSE(std::filesystem::exists(dir.file("c.safetensors")));
}
