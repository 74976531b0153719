// Evaluating generated sentences against references: corpus BLEU-4 and exact match.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace loom {

/// A corpus BLEU-4 score and its parts.
struct bleu_score {
  double bleu = 0;                     // in [0, 1]
  std::array<double, 4> precisions{};  // p_1..p_4: clipped n-gram precisions over the corpus
  double brevity_penalty = 0;          // min(1, exp(1 - r/c))
  std::int64_t candidate_length = 0;   // c: candidate tokens over the corpus
  std::int64_t reference_length = 0;   // r: reference tokens over the corpus
};

/// Corpus BLEU-4 of tokenized candidates against one tokenized reference each (Papineni et al.):
/// BP * exp(sum_n 1/4 log p_n), with clipped n-gram matches and candidate n-gram counts summed
/// over the corpus before dividing. A zero precision gives 0, as does c = 0 (then BP = 0 too).
/// Throws value_error if the two lists differ in length.
bleu_score corpus_bleu(const std::vector<std::vector<std::string>>& candidates,
                       const std::vector<std::vector<std::string>>& references);

/// corpus_bleu of sentences split at whitespace.
bleu_score corpus_bleu_text(const std::vector<std::string>& candidates, const std::vector<std::string>& references);

/// The fraction of predictions equal, byte for byte, to their reference (0 for empty lists).
/// Throws value_error if the two lists differ in length.
double exact_match(const std::vector<std::string>& predictions, const std::vector<std::string>& references);

}  // namespace loom
