// Numbers in words, the seeded number data set, vocabularies and padded batches.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "loom/core/errors.hpp"
#include "loom/data/numbers.hpp"
#include "loom/data/vocab.hpp"
#include "loom/data/windows.hpp"

using namespace loom;

TEST_CASE("numbers are written in American English words without 'and' or hyphens") {
  // Written out by hand.
  const std::vector<std::pair<long, std::string>> table = {
      {0, "zero"},
      {1, "one"},
      {9, "nine"},
      {10, "ten"},
      {11, "eleven"},
      {12, "twelve"},
      {13, "thirteen"},
      {15, "fifteen"},
      {19, "nineteen"},
      {20, "twenty"},
      {21, "twenty one"},
      {40, "forty"},
      {99, "ninety nine"},
      {100, "one hundred"},
      {101, "one hundred one"},
      {110, "one hundred ten"},
      {115, "one hundred fifteen"},
      {342, "three hundred forty two"},
      {999, "nine hundred ninety nine"},
      {1000, "one thousand"},
      {1001, "one thousand one"},
      {1010, "one thousand ten"},
      {1100, "one thousand one hundred"},
      {4071, "four thousand seventy one"},
      {12345, "twelve thousand three hundred forty five"},
      {80008, "eighty thousand eight"},
      {100000, "one hundred thousand"},
      {999999, "nine hundred ninety nine thousand nine hundred ninety nine"},
      {1000000, "one million"},
      {1000001, "one million one"},
      {2000300, "two million three hundred"},
      {7050000, "seven million fifty thousand"},
      {10000000, "ten million"},
      {18000018, "eighteen million eighteen"},
      {123456789, "one hundred twenty three million four hundred fifty six thousand seven hundred eighty nine"},
      {999999999, "nine hundred ninety nine million nine hundred ninety nine thousand nine hundred ninety nine"},
  };
  for (const auto& [n, words] : table) {
    INFO(n);
    CHECK(number_to_words(n) == words);
  }
}

TEST_CASE("number_to_words throws value_error outside [0, 999999999]") {
  CHECK_THROWS_AS(number_to_words(-1), value_error);
  CHECK_THROWS_AS(number_to_words(1'000'000'000), value_error);
  CHECK_THROWS_WITH(number_to_words(-5), Catch::Contains("-5") && Catch::Contains("999999999"));
}

namespace {
std::set<std::string> sources(const std::vector<translation_pair>& pairs) {
  std::set<std::string> s;
  for (const auto& p : pairs) s.insert(p.source);
  return s;
}
}  // namespace

TEST_CASE("the number splits have the asked sizes, distinct numbers and never share one") {
  const auto d = make_number_dataset(99'999, 2000, 300, 300, 7);
  REQUIRE(d.train.size() == 2000);
  REQUIRE(d.valid.size() == 300);
  REQUIRE(d.test.size() == 300);
  const auto train = sources(d.train), valid = sources(d.valid), test = sources(d.test);
  CHECK(train.size() == 2000);
  CHECK(valid.size() == 300);
  CHECK(test.size() == 300);
  std::set<std::string> all = train;
  all.insert(valid.begin(), valid.end());
  all.insert(test.begin(), test.end());
  CHECK(all.size() == 2600);  // no number in two splits
}

TEST_CASE("each pair is the digits of a number in range and its words") {
  const auto d = make_number_dataset(99'999, 500, 50, 50, 3);
  for (const auto* split : {&d.train, &d.valid, &d.test})
    for (const auto& p : *split) {
      const long n = std::stol(p.source);
      CHECK(std::to_string(n) == p.source);  // no leading zeros
      CHECK(n >= 0);
      CHECK(n <= 99'999);
      CHECK(p.target == number_to_words(n));
    }
}

TEST_CASE("the same seed gives the same splits and another seed other ones") {
  const auto a = make_number_dataset(999'999, 100, 10, 10, 42), b = make_number_dataset(999'999, 100, 10, 10, 42);
  const auto c = make_number_dataset(999'999, 100, 10, 10, 43);
  auto same = [](const std::vector<translation_pair>& x, const std::vector<translation_pair>& y) {
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (x[i].source != y[i].source || x[i].target != y[i].target) return false;
    return true;
  };
  CHECK(same(a.train, b.train));
  CHECK(same(a.valid, b.valid));
  CHECK(same(a.test, b.test));
  CHECK_FALSE(same(a.train, c.train));
}

TEST_CASE("every length occurs and the long lengths are about equally common") {
  // Up to 7 digits, 3000 numbers: a length is drawn uniformly, so the 10 one-digit and 90 two-digit
  // numbers are used up early and the lengths 4 to 7 share most of the rest about equally.
  const auto d = make_number_dataset(9'999'999, 3000, 0, 0, 11);
  std::vector<int> by_length(8, 0);
  for (const auto& p : d.train) ++by_length[p.source.size()];
  CHECK(by_length[1] == 10);
  CHECK(by_length[2] == 90);
  CHECK(by_length[3] > 300);
  const double long_mean = (by_length[4] + by_length[5] + by_length[6] + by_length[7]) / 4.0;
  CHECK(long_mean > by_length[3]);
  for (std::size_t len = 4; len <= 7; ++len) {
    INFO("length " << len << ": " << by_length[len] << ", mean of lengths 4 to 7: " << long_mean);
    CHECK(std::abs(by_length[len] - long_mean) < 0.15 * long_mean);
  }
}

TEST_CASE("asking for every number in the range gives each exactly once") {
  const auto d = make_number_dataset(120, 100, 11, 10, 5);
  std::set<std::string> all = sources(d.train);
  for (const auto& p : d.valid) all.insert(p.source);
  for (const auto& p : d.test) all.insert(p.source);
  CHECK(all.size() == 121);
  CHECK(all.count("0") == 1);
  CHECK(all.count("120") == 1);
}

TEST_CASE("make_number_dataset throws value_error when more numbers are asked than exist") {
  CHECK_THROWS_AS(make_number_dataset(99, 90, 10, 1, 0), value_error);
  CHECK_THROWS_WITH(make_number_dataset(99, 90, 10, 1, 0), Catch::Contains("101") && Catch::Contains("100"));
  CHECK_THROWS_AS(make_number_dataset(-1, 0, 0, 0, 0), value_error);
  CHECK_THROWS_AS(make_number_dataset(1'000'000'000, 1, 0, 0, 0), value_error);
}

TEST_CASE("a character vocabulary has the special tokens first, then the sorted characters") {
  const auto v = vocab::characters({"4071", "19", "7"});
  REQUIRE(v.size() == 9);  // <pad> <bos> <eos> <unk> 0 1 4 7 9
  const std::vector<std::string> expected = {"<pad>", "<bos>", "<eos>", "<unk>", "0", "1", "4", "7", "9"};
  for (int i = 0; i < 9; ++i) CHECK(v.token(i) == expected[static_cast<std::size_t>(i)]);
  CHECK(v.id("<pad>") == vocab::pad);
  CHECK(v.id("<bos>") == vocab::bos);
  CHECK(v.id("<eos>") == vocab::eos);
  CHECK(v.id("<unk>") == vocab::unk);
  CHECK(v.encode("4071") == std::vector<int>{6, 4, 7, 5});
  CHECK(v.per_character());
}

TEST_CASE("a word vocabulary splits at any whitespace and sorts the words") {
  const auto v = vocab::words({"four thousand seventy one", "  one\thundred\n", "<unk> ten"});
  // <pad> <bos> <eos> <unk> four hundred one seventy ten thousand; "<unk>" is the special token
  REQUIRE(v.size() == 10);
  CHECK(v.token(4) == "four");
  CHECK(v.token(9) == "thousand");
  CHECK(v.encode("  four   thousand seventy one ") == std::vector<int>{4, 9, 7, 6});
  CHECK(v.encode("") == std::vector<int>{});
  CHECK_FALSE(v.per_character());
}

TEST_CASE("unknown tokens encode as <unk>") {
  const auto digits = vocab::characters({"123"});
  CHECK(digits.encode("1x3") == std::vector<int>{digits.id("1"), vocab::unk, digits.id("3")});
  const auto words = vocab::words({"one two"});
  CHECK(words.encode("one three") == std::vector<int>{words.id("one"), vocab::unk});
  CHECK(words.id("three") == vocab::unk);
  CHECK_FALSE(words.contains("three"));
  CHECK(words.contains("<eos>"));
}

TEST_CASE("decoding an encoded sentence gives it back, words joined by one space") {
  const auto d = make_number_dataset(9'999'999, 200, 0, 0, 1);
  std::vector<std::string> src, tgt;
  for (const auto& p : d.train) src.push_back(p.source), tgt.push_back(p.target);
  const auto sv = vocab::characters(src), tv = vocab::words(tgt);
  for (const auto& p : d.train) {
    CHECK(sv.decode(sv.encode(p.source)) == p.source);
    CHECK(tv.decode(tv.encode(p.target)) == p.target);
  }
}

TEST_CASE("decode stops at <eos> and skips <pad> and <bos>") {
  const auto v = vocab::words({"one two three"});  // one=4 three=5 two=6
  const std::vector<int> ids = {vocab::bos, 4, vocab::pad, 6, vocab::eos, 5, 5};
  CHECK(v.decode(ids) == "one two");
  const std::vector<int> unknown = {4, vocab::unk};
  CHECK(v.decode(unknown) == "one <unk>");
  const auto c = vocab::characters({"12"});
  const std::vector<int> digits = {vocab::bos, 4, 5, 4, vocab::eos, vocab::pad};
  CHECK(c.decode(digits) == "121");
}

TEST_CASE("an id outside the vocabulary throws value_error naming the id and the size") {
  const auto v = vocab::words({"one"});
  CHECK_THROWS_AS(v.token(5), value_error);
  CHECK_THROWS_AS(v.token(-1), value_error);
  const std::vector<int> ids = {4, 17};
  CHECK_THROWS_WITH(v.decode(ids), Catch::Contains("17") && Catch::Contains("[0, 5)"));
}

TEST_CASE("a batch pads sources and shifts targets: decoder input starts with <bos>, labels end with <eos>") {
  const std::vector<translation_pair> pairs = {
      {"4071", "four thousand seventy one"}, {"19", "nineteen"}, {"110", "one hundred ten"}};
  const auto sv = vocab::characters({"4071", "19", "110"});  // 0=4 1=5 4=6 7=7 9=8
  const auto tv = vocab::words({"four thousand seventy one", "nineteen", "one hundred ten"});
  // four=4 hundred=5 nineteen=6 one=7 seventy=8 ten=9 thousand=10
  const std::vector<std::size_t> indices = {1, 0, 2};
  const auto b = make_batch(pairs, indices, sv, tv);

  REQUIRE(b.src.dims() == dims_t{3, 4});  // S = 4 ("4071")
  REQUIRE(b.src_len.dims() == dims_t{3});
  REQUIRE(b.tgt.dims() == dims_t{3, 5});  // T = 4 words + 1
  REQUIRE(b.target.dims() == dims_t{3, 5});

  const std::vector<std::int32_t> src = {5, 8, 0, 0,  //
                                         6, 4, 7, 5,  //
                                         5, 5, 4, 0};
  const std::vector<std::int32_t> src_len = {2, 4, 3};
  const std::vector<std::int32_t> tgt = {1, 6, 0,  0, 0,  //
                                         1, 4, 10, 8, 7,  //
                                         1, 7, 5,  9, 0};
  const std::vector<std::int32_t> target = {6, 2,  0, 0, 0,  //
                                            4, 10, 8, 7, 2,  //
                                            7, 5,  9, 2, 0};
  CHECK(std::vector<std::int32_t>(b.src.values().begin(), b.src.values().end()) == src);
  CHECK(std::vector<std::int32_t>(b.src_len.values().begin(), b.src_len.values().end()) == src_len);
  CHECK(std::vector<std::int32_t>(b.tgt.values().begin(), b.tgt.values().end()) == tgt);
  CHECK(std::vector<std::int32_t>(b.target.values().begin(), b.target.values().end()) == target);
}

TEST_CASE("make_batch throws value_error for no indices or an index past the end") {
  const std::vector<translation_pair> pairs = {{"1", "one"}};
  const auto sv = vocab::characters({"1"});
  const auto tv = vocab::words({"one"});
  CHECK_THROWS_AS(make_batch(pairs, std::vector<std::size_t>{}, sv, tv), value_error);
  CHECK_THROWS_WITH(make_batch(pairs, std::vector<std::size_t>{0, 1}, sv, tv),
                    Catch::Contains("index 1") && Catch::Contains("1 pairs"));
}

TEST_CASE("window_batcher cuts a sequence into windows whose targets are the next ids") {
  std::vector<int> ids(50);
  for (int i = 0; i < 50; ++i) ids[static_cast<std::size_t>(i)] = i;  // id = position: the offsets are visible
  const window_batcher w(ids, 8);
  CHECK(w.windows() == 6);  // (50 − 1) / 8
  const lm_batch b = w.random(3, 5, 11);
  REQUIRE(b.tokens.dims() == dims_t{5, 8});
  REQUIRE(b.target.dims() == dims_t{5, 8});
  for (std::int64_t r = 0; r < 5; ++r) {
    const int start = b.tokens[r * 8];
    CHECK(start >= 0);
    CHECK(start + 8 <= 49);  // the last target is still inside the sequence
    for (std::int64_t t = 0; t < 8; ++t) {
      CHECK(b.tokens[r * 8 + t] == start + t);
      CHECK(b.target[r * 8 + t] == start + t + 1);
    }
  }
  // the same step, the same batch; another step, another one
  const lm_batch again = w.random(3, 5, 11);
  CHECK(std::equal(b.tokens.values().begin(), b.tokens.values().end(), again.tokens.values().begin()));
  bool differs = false;
  const lm_batch other = w.random(4, 5, 11);
  for (std::int64_t i = 0; i < 40; ++i) differs = differs || other.tokens[i] != b.tokens[i];
  CHECK(differs);
  // consecutive windows tile the sequence, wrapping after the last
  const lm_batch c = w.consecutive(4, 3);
  CHECK(c.tokens[0] == 32);
  CHECK(c.tokens[8] == 40);
  CHECK(c.tokens[16] == 0);
  CHECK(c.target[23] == 8);
  CHECK_THROWS_AS(window_batcher(std::vector<int>(8), 8), value_error);
  CHECK_THROWS_AS(window_batcher(ids, 0), value_error);
  CHECK_THROWS_AS(w.random(1, 0, 1), value_error);
}
