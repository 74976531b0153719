// Corpus BLEU-4 against worked examples, and exact match.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "loom/core/errors.hpp"
#include "loom/eval/bleu.hpp"

using namespace loom;
using sentences = std::vector<std::vector<std::string>>;

TEST_CASE("BLEU of candidates equal to their references is 1") {
  const sentences refs = {{"four", "thousand", "seventy", "one"}, {"one", "hundred", "ten", "thousand", "two"}};
  const auto s = corpus_bleu(refs, refs);
  CHECK(s.bleu == Approx(1.0));
  for (double p : s.precisions) CHECK(p == Approx(1.0));
  CHECK(s.brevity_penalty == 1.0);
  CHECK(s.candidate_length == 9);
  CHECK(s.reference_length == 9);
}

TEST_CASE("BLEU of a worked example: precisions 5/6, 3/5, 2/4, 1/3 give (1/12)^(1/4)") {
  // the cat sat on the mat / the cat sat on a mat: "the" is clipped to one match; bigrams the-cat,
  // cat-sat, sat-on; trigrams the-cat-sat, cat-sat-on; 4-gram the-cat-sat-on. Same lengths: BP = 1.
  const auto s = corpus_bleu_text({"the cat sat on the mat"}, {"the cat sat on a mat"});
  CHECK(s.precisions[0] == Approx(5.0 / 6));
  CHECK(s.precisions[1] == Approx(3.0 / 5));
  CHECK(s.precisions[2] == Approx(2.0 / 4));
  CHECK(s.precisions[3] == Approx(1.0 / 3));
  CHECK(s.brevity_penalty == 1.0);
  CHECK(s.bleu == Approx(0.537284965911771));  // (1/12)^(1/4)
}

TEST_CASE("a candidate shorter than its reference pays the brevity penalty exp(1 - r/c)") {
  // Every n-gram of the 6-word candidate is in the 8-word reference: BLEU = BP = exp(1 - 8/6).
  const auto s = corpus_bleu_text({"the cat sat on the mat"}, {"the cat sat on the mat all day"});
  for (double p : s.precisions) CHECK(p == Approx(1.0));
  CHECK(s.brevity_penalty == Approx(0.716531310573789));  // exp(-1/3)
  CHECK(s.bleu == Approx(0.716531310573789));
}

TEST_CASE("a candidate longer than its reference has no brevity penalty") {
  // 5 words against 4: p1 = 4/5, p2 = 3/4, p3 = 2/3, p4 = 1/2, product 1/5.
  const auto s = corpus_bleu_text({"one two three four five"}, {"one two three four"});
  CHECK(s.brevity_penalty == 1.0);
  CHECK(s.bleu == Approx(std::pow(0.2, 0.25)));  // 0.668740304976422
}

TEST_CASE("BLEU is 0 when no 4-gram matches") {
  const auto s = corpus_bleu_text({"a b c x d e f"}, {"a b c d e f"});
  CHECK(s.precisions[0] == Approx(6.0 / 7));
  CHECK(s.precisions[1] == Approx(4.0 / 6));  // a-b b-c d-e e-f
  CHECK(s.precisions[2] == Approx(2.0 / 5));  // a-b-c d-e-f
  CHECK(s.precisions[3] == 0.0);
  CHECK(s.bleu == 0.0);
}

TEST_CASE("BLEU pools n-gram counts over the corpus instead of averaging sentence scores") {
  // Sentence 1: the worked example (5/6, 3/5, 2/4, 1/3, lengths 6 and 6). Sentence 2: three words,
  // all matching, no 4-gram (3/3, 2/2, 1/1, 0/0, lengths 3 and 4). Alone it would score 0.
  // Pooled: 8/9, 5/7, 3/5, 1/3; c = 9, r = 10, BP = exp(1 - 10/9).
  const auto s = corpus_bleu_text({"the cat sat on the mat", "one hundred ten"},
                                  {"the cat sat on a mat", "one hundred ten thousand"});
  CHECK(s.precisions[0] == Approx(8.0 / 9));
  CHECK(s.precisions[1] == Approx(5.0 / 7));
  CHECK(s.precisions[2] == Approx(3.0 / 5));
  CHECK(s.precisions[3] == Approx(1.0 / 3));
  CHECK(s.brevity_penalty == Approx(std::exp(-1.0 / 9)));
  // By hand: (8/9 * 5/7 * 3/5 * 1/3)^(1/4) * exp(-1/9) = (8/63)^(1/4) * exp(-1/9)
  CHECK(s.bleu == Approx(0.534173595689985));
}

TEST_CASE("clipping counts a repeated candidate word at most as often as the reference has it") {
  // Papineni et al.'s example: "the the the the the the the" against "the cat is on the mat": p1 = 2/7.
  const auto s = corpus_bleu_text({"the the the the the the the"}, {"the cat is on the mat"});
  CHECK(s.precisions[0] == Approx(2.0 / 7));
  CHECK(s.bleu == 0.0);
}

TEST_CASE("BLEU of empty candidates is 0 and of mismatched lists throws value_error") {
  const auto s = corpus_bleu_text({""}, {"one two"});
  CHECK(s.bleu == 0.0);
  CHECK(s.brevity_penalty == 0.0);
  CHECK(corpus_bleu({}, {}).bleu == 0.0);
  CHECK_THROWS_AS(corpus_bleu_text({"a"}, {"a", "b"}), value_error);
  CHECK_THROWS_WITH(corpus_bleu(sentences{{"a"}}, sentences{}), Catch::Contains("1 candidates but 0 references"));
}

TEST_CASE("exact match is the fraction of predictions equal to their reference") {
  CHECK(exact_match({"one", "two", "three", "four"}, {"one", "two", "three", "four"}) == 1.0);
  CHECK(exact_match({"one", "two ", "thre", "four"}, {"one", "two", "three", "four"}) == 0.5);
  CHECK(exact_match({}, {}) == 0.0);
  CHECK_THROWS_AS(exact_match({"one"}, {}), value_error);
}
