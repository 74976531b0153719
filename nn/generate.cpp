#include "loom/nn/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "loom/core/errors.hpp"
#include "loom/core/random.hpp"
#include "../ops/vector_isa.hpp"
#include "../ops/vmath.hpp"

namespace loom::nn {

namespace {
// Sampling settings out of their domain are errors: NaN is not "greedy", −1 is not "all".
void check_sampling(double temperature, int top_k, const char* who) {
  if (!(temperature >= 0) || !std::isfinite(temperature))
    throw value_error(std::string(who) + ": temperature must be a finite number >= 0 (0: greedy), got " +
                      std::to_string(temperature));
  if (top_k < 0) throw value_error(std::string(who) + ": top_k must be >= 0 (0: all tokens), got " + std::to_string(top_k));
}

// The index std::max_element returns: the first of the largest values (the logits passed
// check_logits: no NaN, no +inf). std::max_element keeps a pointer to the best so
// far and reloads through it at every element (a chain of load and conditional move, ~7 cycles
// per logit: 2% of a decoding step with 1000 tokens [AMD EPYC]). Here the largest value comes
// first (ops::lane_max, in vector lanes), then the first index holding it; compiled
// for the CPU's vector width (ops/vector_isa.hpp).
template <class T>
LOOM_VECTOR_CLONES std::size_t first_max(std::span<const T> x) {
  // one of the values (−0 == +0, as max_element sees them)
  const T m = ops::lane_max(x.data(), static_cast<std::int64_t>(x.size()));
  using lanes_t = ops::gcc_vector<T, 32>;
  using words = ops::gcc_vector<long long, 32>;
  constexpr std::size_t w = 32 / sizeof(T);
  std::size_t i = 0;
  for (; i + w <= x.size(); i += w) {  // to the first block of lanes holding m
    lanes_t u;
    std::memcpy(&u, x.data() + i, sizeof u);
    const auto hit = u == m;  // lanes of all ones where equal
    words h;
    std::memcpy(&h, &hit, sizeof h);
    if (h[0] | h[1] | h[2] | h[3]) break;
  }
  for (; i < x.size(); ++i)
    if (x[i] == m) return i;
  return 0;  // not reached: m is one of x
}
}  // namespace

template <class T>
void check_logits(std::span<const T> logits, const char* who) {
  // one pass without branches (it vectorises): NaN and +inf fail `<= max`, −inf passes it
  bool unusable = false, any_finite = false;
  for (const T x : logits) {
    unusable |= !(x <= std::numeric_limits<T>::max());
    any_finite |= x > -std::numeric_limits<T>::infinity();
  }
  if (unusable)
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (!(logits[i] <= std::numeric_limits<T>::max()))
        throw value_error(std::string(who) + ": logit " + std::to_string(i) + " is " +
                          (std::isnan(logits[i]) ? "NaN" : "+inf") +
                          ": logits must be finite (−inf gives a token probability 0)");
  if (!any_finite && !logits.empty())
    throw value_error(std::string(who) + ": every logit is −inf: no token can be chosen");
}

template <class T>
int pick_token(std::span<const T> logits, double temperature, int top_k, double draw) {
  check_sampling(temperature, top_k, "pick_token");
  if (!(draw >= 0 && draw < 1)) throw value_error("pick_token: draw must be in [0, 1), got " + std::to_string(draw));
  const int v = static_cast<int>(logits.size());
  if (v == 0) throw value_error("generate: empty logits");
  check_logits(logits, "pick_token");
  if (temperature <= 0) return static_cast<int>(first_max(logits));
  std::vector<int> order(static_cast<std::size_t>(v));
  std::iota(order.begin(), order.end(), 0);
  const int k = top_k > 0 && top_k < v ? top_k : v;
  // the k most likely, ties broken by token id so that the choice is reproducible
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
    return logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)] ||
           (logits[static_cast<std::size_t>(a)] == logits[static_cast<std::size_t>(b)] && a < b);
  });
  const double top = static_cast<double>(logits[static_cast<std::size_t>(order[0])]);
  std::vector<double> p(static_cast<std::size_t>(k));
  double total = 0;
  for (int i = 0; i < k; ++i) {
    p[static_cast<std::size_t>(i)] =
        std::exp((static_cast<double>(logits[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])]) - top) /
                 temperature);
    total += p[static_cast<std::size_t>(i)];
  }
  double u = draw * total;
  for (int i = 0; i < k; ++i) {
    u -= p[static_cast<std::size_t>(i)];
    if (u < 0) return order[static_cast<std::size_t>(i)];
  }
  return order[static_cast<std::size_t>(k - 1)];
}

template <class T>
generate_result generate(executor<T>& step, kv_cache<T>& cache, const std::vector<std::vector<int>>& prompts,
                         const generate_options& o, std::span<const feed> extra,
                         const std::function<void(std::size_t, int)>& on_token) {
  check_sampling(o.temperature, o.top_k, "generate");
  if (o.max_new_tokens < 0)
    throw value_error("generate: max_new_tokens must be >= 0, got " + std::to_string(o.max_new_tokens));
  const std::int64_t batch = static_cast<std::int64_t>(prompts.size());
  if (batch != cache.batch())
    throw shape_error("generate: " + std::to_string(batch) + " prompts for a cache of batch " +
                      std::to_string(cache.batch()));
  std::int64_t longest = 0;
  std::size_t shortest = SIZE_MAX;
  for (const auto& p : prompts) {
    longest = std::max<std::int64_t>(longest, static_cast<std::int64_t>(p.size()));
    shortest = std::min(shortest, p.size());
  }
  if (shortest == 0) throw value_error("generate: every prompt needs at least one token");
  if (o.first_input.empty() && static_cast<std::int64_t>(shortest) != longest)
    throw value_error("generate: prompts of different lengths need a graph with a left-padding input (first_input)");
  cache.reset();
  if (longest + o.max_new_tokens > cache.capacity())
    throw capacity_error("generate: a prompt of " + std::to_string(longest) + " tokens and " +
                         std::to_string(o.max_new_tokens) + " new ones exceed the cache's capacity of " +
                         std::to_string(cache.capacity()));

  rng gen(o.seed);
  generate_result result;
  result.tokens.resize(static_cast<std::size_t>(batch));
  tensor<std::int32_t> first(dims_t{batch});
  std::vector<std::int64_t> length(static_cast<std::size_t>(batch));  // tokens of each sequence so far
  for (std::int64_t b = 0; b < batch; ++b) {
    length[static_cast<std::size_t>(b)] = static_cast<std::int64_t>(prompts[static_cast<std::size_t>(b)].size());
    first[b] = static_cast<std::int32_t>(longest - length[static_cast<std::size_t>(b)]);
  }
  std::vector<int> next(static_cast<std::size_t>(batch), o.pad);
  std::vector<bool> done(static_cast<std::size_t>(batch), false);

  std::vector<feed> feeds;
  auto run = [&](const tensor<std::int32_t>& tokens, const tensor<std::int32_t>& positions) {
    const std::int64_t n = tokens.dim(1);
    feeds.clear();
    feeds.emplace_back(o.tokens_input, tokens);
    feeds.emplace_back(o.positions_input, positions);
    if (!o.first_input.empty()) feeds.emplace_back(o.first_input, first);
    feeds.insert(feeds.end(), extra.begin(), extra.end());
    decode_step(step, cache, feeds);
    // choose from the logits of each sequence's last position
    auto logits = step.output();
    const std::int64_t vocab = logits.dims[-1];
    for (std::int64_t b = 0; b < batch; ++b) {
      if (done[static_cast<std::size_t>(b)]) continue;
      std::span<const T> row(logits.data + (b * n + n - 1) * vocab, static_cast<std::size_t>(vocab));
      const double draw = o.temperature > 0 ? gen.uniform() : 0.0;
      int token = pick_token<T>(row, o.temperature, o.top_k, draw);
      next[static_cast<std::size_t>(b)] = token;
      result.tokens[static_cast<std::size_t>(b)].push_back(token);
      if (on_token) on_token(static_cast<std::size_t>(b), token);
      if (token == o.eos) done[static_cast<std::size_t>(b)] = true;
    }
  };

  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  {  // prefill: every prompt in one pass, aligned right
    tensor<std::int32_t> tokens(dims_t{batch, longest}), positions(dims_t{batch, longest});
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t j = 0; j < longest; ++j) {
        const std::int64_t p = j - first[b];
        tokens[b * longest + j] = p < 0 ? o.pad : prompts[static_cast<std::size_t>(b)][static_cast<std::size_t>(p)];
        positions[b * longest + j] = static_cast<std::int32_t>(std::max<std::int64_t>(p, 0));
      }
    if (o.max_new_tokens > 0) run(tokens, positions);
  }
  auto t1 = clock::now();
  for (int s = 1; s < o.max_new_tokens; ++s) {
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    tensor<std::int32_t> tokens(dims_t{batch, 1}), positions(dims_t{batch, 1});
    for (std::int64_t b = 0; b < batch; ++b) {
      tokens[b] = done[static_cast<std::size_t>(b)] ? o.pad : next[static_cast<std::size_t>(b)];
      positions[b] = static_cast<std::int32_t>(length[static_cast<std::size_t>(b)]++);
    }
    run(tokens, positions);
    ++result.steps;
  }
  auto t2 = clock::now();
  result.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  result.decode_seconds = std::chrono::duration<double>(t2 - t1).count();
  return result;
}

template void check_logits<float>(std::span<const float>, const char*);
template void check_logits<double>(std::span<const double>, const char*);
template int pick_token<float>(std::span<const float>, double, int, double);
template int pick_token<double>(std::span<const double>, double, int, double);
template generate_result generate<float>(executor<float>&, kv_cache<float>&, const std::vector<std::vector<int>>&,
                                         const generate_options&, std::span<const feed>,
                                         const std::function<void(std::size_t, int)>&);
template generate_result generate<double>(executor<double>&, kv_cache<double>&, const std::vector<std::vector<int>>&,
                                          const generate_options&, std::span<const feed>,
                                          const std::function<void(std::size_t, int)>&);

}  // namespace loom::nn
