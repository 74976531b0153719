// Numbers in words, and the seeded data set of (digits, words) pairs.
#include "loom/data/numbers.hpp"

#include <array>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "loom/core/errors.hpp"
#include "loom/core/random.hpp"

namespace loom {

namespace {

constexpr std::array<std::string_view, 20> below_twenty = {
    "zero", "one",    "two",    "three",    "four",     "five",    "six",     "seven",     "eight",    "nine",
    "ten",  "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
constexpr std::array<std::string_view, 10> tens = {"",      "",      "twenty",  "thirty", "forty",
                                                   "fifty", "sixty", "seventy", "eighty", "ninety"};

// Appends 1 <= n <= 999 in words, space-separated from what `out` already holds.
void append_below_thousand(std::string& out, long n) {
  auto append = [&out](std::string_view word) {
    if (!out.empty()) out += ' ';
    out += word;
  };
  if (n >= 100) {
    append(below_twenty[static_cast<std::size_t>(n / 100)]);
    append("hundred");
    n %= 100;
  }
  if (n >= 20) {
    append(tens[static_cast<std::size_t>(n / 10)]);
    n %= 10;
  }
  if (n > 0) append(below_twenty[static_cast<std::size_t>(n)]);
}

int digit_count(long n) {
  int d = 1;
  while (n >= 10) n /= 10, ++d;
  return d;
}

}  // namespace

std::string number_to_words(long n) {
  if (n < 0 || n > max_number_in_words)
    throw value_error("number_to_words: n must be in [0, 999999999], got " + std::to_string(n));
  if (n == 0) return "zero";
  std::string words;
  constexpr std::array<std::pair<long, std::string_view>, 3> scales = {
      {{1'000'000, "million"}, {1'000, "thousand"}, {1, ""}}};
  for (auto [scale, name] : scales) {
    const long group = n / scale;
    n %= scale;
    if (group == 0) continue;
    append_below_thousand(words, group);
    if (!name.empty()) words += ' ', words += name;
  }
  return words;
}

number_splits make_number_dataset(long max_number, std::size_t train, std::size_t valid, std::size_t test,
                                  std::uint64_t seed) {
  if (max_number < 0 || max_number > max_number_in_words)
    throw value_error("make_number_dataset: max_number must be in [0, 999999999], got " + std::to_string(max_number));
  const std::size_t wanted = train + valid + test;
  const auto available = static_cast<std::size_t>(max_number) + 1;
  if (wanted > available)
    throw value_error("make_number_dataset: " + std::to_string(wanted) + " distinct numbers asked for (train " +
                      std::to_string(train) + " + valid " + std::to_string(valid) + " + test " + std::to_string(test) +
                      ") but [0, " + std::to_string(max_number) + "] holds only " + std::to_string(available));

  // One range per digit count: [0, 9], [10, 99], ..., the last one cut at max_number. A range
  // is dropped once all its numbers are taken, so the loop always ends.
  struct length_range {
    long lo, hi, taken;
  };
  std::vector<length_range> ranges;
  for (int d = 1, top = digit_count(max_number); d <= top; ++d) {
    long lo = 1;
    for (int i = 1; i < d; ++i) lo *= 10;
    if (d == 1) lo = 0;
    ranges.push_back({lo, std::min(lo == 0 ? 9 : lo * 10 - 1, max_number), 0});
  }

  rng gen(seed);
  std::vector<long> numbers;
  numbers.reserve(wanted);
  std::unordered_set<long> seen;
  while (numbers.size() < wanted) {
    const auto r = static_cast<std::size_t>(gen.below(ranges.size()));
    auto& range = ranges[r];
    const long n = range.lo + static_cast<long>(gen.below(static_cast<std::uint64_t>(range.hi - range.lo + 1)));
    if (!seen.insert(n).second) continue;
    numbers.push_back(n);
    if (++range.taken == range.hi - range.lo + 1) ranges.erase(ranges.begin() + static_cast<std::ptrdiff_t>(r));
  }
  // Shuffle, so that the splits share one distribution even when a short length ran out early.
  for (std::size_t i = numbers.size(); i > 1; --i) std::swap(numbers[i - 1], numbers[gen.below(i)]);

  number_splits splits;
  auto take = [&, next = std::size_t{0}](std::vector<translation_pair>& out, std::size_t count) mutable {
    out.reserve(count);
    for (std::size_t i = 0; i < count; ++i, ++next)
      out.push_back({std::to_string(numbers[next]), number_to_words(numbers[next])});
  };
  take(splits.train, train);
  take(splits.valid, valid);
  take(splits.test, test);
  return splits;
}

}  // namespace loom
