#include "loom/nn/beam_search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "loom/core/errors.hpp"
#include "loom/nn/generate.hpp"

namespace loom::nn {

namespace {

/// A hypothesis in a beam slot, and the cache row that holds its keys and values.
struct hyp {
  std::vector<int> tokens;
  double log_prob = 0;
  bool finished = false;  // ended with eos
  bool ended = false;     // finished, or reached max_new_tokens
  std::int64_t row = -1;
};

double score_of(double log_prob, std::size_t length, double alpha) {
  return alpha == 0 || length == 0 ? log_prob : log_prob / std::pow(static_cast<double>(length), alpha);
}

/// A candidate for a prompt's next beam: a hypothesis kept as it is (token −1) or extended.
struct candidate {
  double score;
  int slot;   // the hypothesis it comes from
  int token;  // −1: kept as it is (ended)
  double log_prob;
};

template <class T>
tensor<T> repeated(const T* data, const dims_t& dims, std::int64_t k) {
  dims_t out = dims;
  out.d[0] *= k;
  tensor<T> r(out);
  const std::int64_t row = dims[0] ? dims.size() / dims[0] : 0;
  for (std::int64_t b = 0; b < dims[0]; ++b)
    for (std::int64_t j = 0; j < k; ++j)
      std::copy(data + b * row, data + (b + 1) * row, r.data() + (b * k + j) * row);
  return r;
}

}  // namespace

feed repeat_rows(const feed& f, std::int64_t k) {
  const dims_t& d = f.dims();
  if (d.rank < 1) throw value_error("repeat_rows: feed \"" + f.name() + "\" is a scalar; it has no rows to repeat");
  if (f.mat_stride() != 0 && d.rank >= 2 && f.mat_stride() != d[-2] * d[-1])
    throw value_error("repeat_rows: feed \"" + f.name() + "\" is strided; feed it contiguously");
  switch (f.type()) {
    case storage::f32: return feed(f.name(), repeated(static_cast<const float*>(f.data()), d, k));
    case storage::f64: return feed(f.name(), repeated(static_cast<const double*>(f.data()), d, k));
    case storage::i32: return feed(f.name(), repeated(static_cast<const std::int32_t*>(f.data()), d, k));
    case storage::u8: return feed(f.name(), repeated(static_cast<const std::uint8_t*>(f.data()), d, k));
  }
  throw value_error("repeat_rows: unknown storage");
}

template <class T>
beam_result beam_search(executor<T>& step, kv_cache<T>& cache, const std::vector<std::vector<int>>& prompts,
                        const beam_options& o, std::span<const feed> extra) {
  const auto clock_start = std::chrono::steady_clock::now();
  const std::int64_t k = o.beam, n_prompts = static_cast<std::int64_t>(prompts.size());
  if (k < 1) throw value_error("beam_search: the beam width must be at least 1, got " + std::to_string(k));
  if (o.max_new_tokens < 0)
    throw value_error("beam_search: max_new_tokens must be >= 0, got " + std::to_string(o.max_new_tokens));
  if (!std::isfinite(o.length_penalty))
    throw value_error("beam_search: length_penalty must be a finite number, got " + std::to_string(o.length_penalty));
  const std::int64_t rows = n_prompts * k;
  if (rows != cache.batch())
    throw shape_error("beam_search: " + std::to_string(n_prompts) + " prompts × beam " + std::to_string(k) +
                      " need a cache of batch " + std::to_string(rows) + ", not " + std::to_string(cache.batch()));
  std::int64_t longest = 0;
  std::size_t shortest = SIZE_MAX;
  for (const auto& p : prompts) {
    longest = std::max<std::int64_t>(longest, static_cast<std::int64_t>(p.size()));
    shortest = std::min(shortest, p.size());
  }
  if (shortest == 0) throw value_error("beam_search: every prompt needs at least one token");
  if (o.first_input.empty() && static_cast<std::int64_t>(shortest) != longest)
    throw value_error("beam_search: prompts of different lengths need a graph with a left-padding input (first_input)");
  if (longest + o.max_new_tokens > cache.capacity())
    throw capacity_error("beam_search: a prompt of " + std::to_string(longest) + " tokens and " +
                         std::to_string(o.max_new_tokens) + " new ones exceed the cache's capacity of " +
                         std::to_string(cache.capacity()));
  std::vector<feed> fixed_feeds;  // the extra feeds, k rows per prompt
  for (const feed& f : extra) {
    if (f.dims().rank < 1 || f.dims()[0] != n_prompts)
      throw value_error("beam_search: extra feed \"" + f.name() + "\" has shape " + f.dims().str() + "; it needs " +
                        std::to_string(n_prompts) + " rows (one per prompt) along its first axis");
    fixed_feeds.push_back(repeat_rows(f, k));
  }
  tensor<std::int32_t> first(dims_t{rows});
  for (std::int64_t r = 0; r < rows; ++r)
    first[r] = static_cast<std::int32_t>(longest - static_cast<std::int64_t>(prompts[static_cast<std::size_t>(r / k)].size()));
  if (!o.first_input.empty()) fixed_feeds.emplace_back(o.first_input, first);

  cache.reset();
  beam_result result;
  std::vector<std::vector<hyp>> beams(static_cast<std::size_t>(n_prompts));
  for (std::int64_t p = 0; p < n_prompts; ++p) {  // one live, empty hypothesis per prompt, in its first row
    hyp start;
    start.row = p * k;
    beams[static_cast<std::size_t>(p)] = {start};
  }
  std::vector<bool> done(static_cast<std::size_t>(n_prompts), o.max_new_tokens <= 0);

  std::vector<feed> feeds;
  auto run = [&](const tensor<std::int32_t>& tokens, const tensor<std::int32_t>& positions) {
    feeds.clear();
    feeds.emplace_back(o.tokens_input, tokens);
    feeds.emplace_back(o.positions_input, positions);
    feeds.insert(feeds.end(), fixed_feeds.begin(), fixed_feeds.end());
    decode_step(step, cache, feeds);
  };
  {  // prefill: every row its prompt, aligned right
    tensor<std::int32_t> tokens(dims_t{rows, longest}), positions(dims_t{rows, longest});
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < longest; ++j) {
        const std::int64_t at = j - first[r];
        tokens[r * longest + j] = at < 0 ? o.pad : prompts[static_cast<std::size_t>(r / k)][static_cast<std::size_t>(at)];
        positions[r * longest + j] = static_cast<std::int32_t>(std::max<std::int64_t>(at, 0));
      }
    if (o.max_new_tokens > 0) run(tokens, positions);
  }

  std::vector<double> logp;
  std::vector<candidate> cands;
  std::vector<std::int64_t> from(static_cast<std::size_t>(rows));
  for (int t = 0; t < o.max_new_tokens; ++t) {
    auto logits = step.output();
    const std::int64_t vocab = logits.dims[-1], n = logits.dims[1];
    for (std::int64_t r = 0; r < rows; ++r) from[static_cast<std::size_t>(r)] = r;
    for (std::int64_t p = 0; p < n_prompts; ++p) {
      if (done[static_cast<std::size_t>(p)]) continue;
      auto& beam = beams[static_cast<std::size_t>(p)];
      cands.clear();
      for (std::size_t s = 0; s < beam.size(); ++s) {
        const hyp& h = beam[s];
        if (h.ended) {
          cands.push_back({score_of(h.log_prob, h.tokens.size(), o.length_penalty), static_cast<int>(s), -1, h.log_prob});
          continue;
        }
        // log softmax of this hypothesis' logits, in double
        const T* row = logits.data + (h.row * n + n - 1) * vocab;
        check_logits(std::span<const T>(row, static_cast<std::size_t>(vocab)), "beam_search");
        double mx = -std::numeric_limits<double>::infinity(), total = 0;
        for (std::int64_t v = 0; v < vocab; ++v) mx = std::max(mx, static_cast<double>(row[v]));
        for (std::int64_t v = 0; v < vocab; ++v) total += std::exp(static_cast<double>(row[v]) - mx);
        const double lse = mx + std::log(total);
        for (std::int64_t v = 0; v < vocab; ++v) {
          const double lp = h.log_prob + static_cast<double>(row[v]) - lse;
          cands.push_back({score_of(lp, h.tokens.size() + 1, o.length_penalty), static_cast<int>(s), static_cast<int>(v), lp});
        }
      }
      // the k best; ties go to the earlier slot, then the smaller token (kept ones first)
      const std::size_t keep = std::min<std::size_t>(static_cast<std::size_t>(k), cands.size());
      std::partial_sort(cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(keep), cands.end(),
                        [](const candidate& a, const candidate& b) {
                          if (a.score != b.score) return a.score > b.score;
                          if (a.slot != b.slot) return a.slot < b.slot;
                          return a.token < b.token;
                        });
      std::vector<hyp> next;
      bool live = false;
      for (std::size_t j = 0; j < keep; ++j) {
        const candidate& c = cands[j];
        hyp h = beam[static_cast<std::size_t>(c.slot)];
        from[static_cast<std::size_t>(p * k + static_cast<std::int64_t>(j))] = h.row;
        h.row = p * k + static_cast<std::int64_t>(j);
        if (c.token >= 0) {
          h.tokens.push_back(c.token);
          h.log_prob = c.log_prob;
          h.finished = c.token == o.eos;
          h.ended = h.finished || static_cast<int>(h.tokens.size()) >= o.max_new_tokens;
        }
        live = live || !h.ended;
        next.push_back(std::move(h));
      }
      beam = std::move(next);
      done[static_cast<std::size_t>(p)] = !live;
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    cache.reorder(from);  // each row now holds the keys and values of its hypothesis' prefix
    tensor<std::int32_t> tokens(dims_t{rows, 1}), positions(dims_t{rows, 1});
    for (std::int64_t r = 0; r < rows; ++r) {
      tokens[r] = o.pad;
      positions[r] = static_cast<std::int32_t>(static_cast<std::int64_t>(prompts[static_cast<std::size_t>(r / k)].size()) + t);
    }
    for (const auto& beam : beams)
      for (const hyp& h : beam)
        if (!h.ended) tokens[h.row] = h.tokens.back();
    run(tokens, positions);
    ++result.steps;
  }

  result.hypotheses.resize(static_cast<std::size_t>(n_prompts));
  for (std::int64_t p = 0; p < n_prompts; ++p)
    for (const hyp& h : beams[static_cast<std::size_t>(p)])
      result.hypotheses[static_cast<std::size_t>(p)].push_back(
          {h.tokens, h.log_prob, score_of(h.log_prob, h.tokens.size(), o.length_penalty), h.finished});
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_start).count();
  return result;
}

template beam_result beam_search<float>(executor<float>&, kv_cache<float>&, const std::vector<std::vector<int>>&,
                                        const beam_options&, std::span<const feed>);
template beam_result beam_search<double>(executor<double>&, kv_cache<double>&, const std::vector<std::vector<int>>&,
                                         const beam_options&, std::span<const feed>);

}  // namespace loom::nn
