// Corpus BLEU-4 (clipped n-gram precisions pooled over the corpus, brevity penalty) and exact match.
#include "loom/eval/bleu.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string_view>

#include "loom/core/errors.hpp"

namespace loom {

namespace {

using ngram_counts = std::map<std::vector<std::string_view>, std::int64_t>;

ngram_counts count_ngrams(const std::vector<std::string>& tokens, std::size_t n) {
  ngram_counts counts;
  for (std::size_t i = 0; i + n <= tokens.size(); ++i)
    ++counts[std::vector<std::string_view>(tokens.begin() + static_cast<std::ptrdiff_t>(i),
                                           tokens.begin() + static_cast<std::ptrdiff_t>(i + n))];
  return counts;
}

void check_lengths(const char* fn, std::size_t candidates, std::size_t references) {
  if (candidates != references)
    throw value_error(std::string(fn) + ": " + std::to_string(candidates) + " candidates but " +
                      std::to_string(references) + " references (one reference per candidate expected)");
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> words;
  constexpr std::string_view whitespace = " \t\n\r\f\v";
  std::size_t start = s.find_first_not_of(whitespace);
  while (start != std::string::npos) {
    const std::size_t end = s.find_first_of(whitespace, start);
    words.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    start = s.find_first_not_of(whitespace, end);
  }
  return words;
}

}  // namespace

bleu_score corpus_bleu(const std::vector<std::vector<std::string>>& candidates,
                       const std::vector<std::vector<std::string>>& references) {
  check_lengths("corpus_bleu", candidates.size(), references.size());
  std::array<std::int64_t, 4> matches{}, totals{};
  bleu_score score;
  for (std::size_t s = 0; s < candidates.size(); ++s) {
    const auto& cand = candidates[s];
    const auto& ref = references[s];
    score.candidate_length += static_cast<std::int64_t>(cand.size());
    score.reference_length += static_cast<std::int64_t>(ref.size());
    for (std::size_t n = 1; n <= 4; ++n) {
      const ngram_counts ref_counts = count_ngrams(ref, n);
      for (const auto& [gram, count] : count_ngrams(cand, n)) {
        auto it = ref_counts.find(gram);
        matches[n - 1] += it == ref_counts.end() ? 0 : std::min(count, it->second);  // clipped
        totals[n - 1] += count;
      }
    }
  }
  const auto c = static_cast<double>(score.candidate_length), r = static_cast<double>(score.reference_length);
  score.brevity_penalty = c == 0 ? 0.0 : std::min(1.0, std::exp(1.0 - r / c));
  double log_sum = 0;
  bool zero = false;
  for (std::size_t n = 0; n < 4; ++n) {
    score.precisions[n] = totals[n] == 0 ? 0.0 : static_cast<double>(matches[n]) / static_cast<double>(totals[n]);
    if (score.precisions[n] == 0)
      zero = true;
    else
      log_sum += 0.25 * std::log(score.precisions[n]);
  }
  score.bleu = zero ? 0.0 : score.brevity_penalty * std::exp(log_sum);
  return score;
}

bleu_score corpus_bleu_text(const std::vector<std::string>& candidates, const std::vector<std::string>& references) {
  check_lengths("corpus_bleu_text", candidates.size(), references.size());
  std::vector<std::vector<std::string>> cand, ref;
  for (const auto& s : candidates) cand.push_back(split_words(s));
  for (const auto& s : references) ref.push_back(split_words(s));
  return corpus_bleu(cand, ref);
}

double exact_match(const std::vector<std::string>& predictions, const std::vector<std::string>& references) {
  check_lengths("exact_match", predictions.size(), references.size());
  if (predictions.empty()) return 0.0;
  std::size_t equal = 0;
  for (std::size_t i = 0; i < predictions.size(); ++i) equal += predictions[i] == references[i];
  return static_cast<double>(equal) / static_cast<double>(predictions.size());
}

}  // namespace loom
