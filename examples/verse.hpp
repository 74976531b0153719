// The text the language-model examples learn (charlm, llama): verses of four lines from a small
// grammar, written by the program itself from a seed (no download), e.g.
//   the old fox went down by the river,
//   and the little hen kept the silver key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/random.hpp"

namespace examples {

struct grammar {
  std::vector<std::string> adjectives{"old", "little", "grey", "brave", "quiet", "silver", "happy", "red", "small"};
  std::vector<std::string> nouns{"fox", "hen", "cat", "crow", "miller", "baker", "king", "sailor", "mouse", "owl"};
  std::vector<std::string> things{"key", "bell", "boat", "lamp", "song", "coat", "ring", "loaf"};
  std::vector<std::string> places{"river", "mill", "hill", "moon", "garden", "sea", "wood", "gate"};
  std::vector<std::string> went{"slept", "sang", "danced", "waited", "went down", "ran home", "laughed"};
  std::vector<std::string> did{"kept", "found", "lost", "carried", "mended", "sold"};
  std::vector<std::string> preps{"by", "under", "over", "near", "beyond"};

  std::string line(loom::rng& g, bool first) const {
    auto pick = [&](const std::vector<std::string>& v) { return v[g.below(v.size())]; };
    std::string s = first ? "the " : "and the ";
    if (g.below(2)) s += pick(adjectives) + " ";
    s += pick(nouns) + " ";
    if (g.below(2)) s += pick(went) + " " + pick(preps) + " the " + pick(places);
    else s += pick(did) + " the " + (g.below(2) ? pick(adjectives) + " " : "") + pick(things);
    return s;
  }
  /// `verses` verses of four lines, a blank line after each.
  std::string text(std::size_t verses, std::uint64_t seed) const {
    loom::rng g(seed);
    std::string t;
    for (std::size_t v = 0; v < verses; ++v)
      for (int l = 0; l < 4; ++l) t += line(g, l % 2 == 0) + (l % 2 == 0 ? ",\n" : l == 3 ? ".\n\n" : ".\n");
    return t;
  }
};

}  // namespace examples
