// Numbers written in digits and in English words: the toy translation task of
// examples/translate ("4071" -> "four thousand seventy one").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace loom {

/// The largest number number_to_words writes out.
inline constexpr long max_number_in_words = 999'999'999;

/// n in American English words, lower case, without "and" and without hyphens:
/// 4071 -> "four thousand seventy one", 110 -> "one hundred ten", 0 -> "zero".
/// Throws value_error unless 0 <= n <= 999'999'999.
std::string number_to_words(long n);

/// One example of a translation task: source sentence and target sentence.
struct translation_pair {
  std::string source, target;
};

/// Train, validation and test examples; no number appears in two of them.
struct number_splits {
  std::vector<translation_pair> train, valid, test;
};

/// train + valid + test distinct numbers from [0, max_number], drawn with loom::rng(seed): the
/// digit count is uniform over the lengths that occur, then the number is uniform among those of
/// that length, so short and long numbers are equally common. source = the digits ("4071"),
/// target = number_to_words. The same arguments give the same splits on every machine.
/// Throws value_error if max_number is outside [0, 999'999'999] or if more numbers are asked
/// for than [0, max_number] holds.
number_splits make_number_dataset(long max_number, std::size_t train, std::size_t valid, std::size_t test,
                                  std::uint64_t seed);

}  // namespace loom
