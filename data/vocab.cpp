// Vocabularies and padded sequence-to-sequence batches.
#include "loom/data/vocab.hpp"

#include <algorithm>
#include <array>
#include <set>

#include "loom/core/errors.hpp"

namespace loom {

namespace {

constexpr std::string_view whitespace = " \t\n\r\f\v";
constexpr std::array<std::string_view, 4> special_tokens = {"<pad>", "<bos>", "<eos>", "<unk>"};

// Calls fn(token) for each token of the sentence, in order.
template <class Fn>
void for_each_token(std::string_view sentence, bool per_character, Fn&& fn) {
  if (per_character) {
    for (std::size_t i = 0; i < sentence.size(); ++i) fn(sentence.substr(i, 1));
    return;
  }
  std::size_t start = sentence.find_first_not_of(whitespace);
  while (start != std::string_view::npos) {
    const std::size_t end = sentence.find_first_of(whitespace, start);
    fn(sentence.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    start = sentence.find_first_not_of(whitespace, end);
  }
}

std::vector<std::string> collect(const std::vector<std::string>& sentences, bool per_character) {
  std::set<std::string, std::less<>> seen;
  for (const auto& s : sentences)
    for_each_token(s, per_character, [&](std::string_view t) {
      if (std::find(special_tokens.begin(), special_tokens.end(), t) == special_tokens.end()) seen.emplace(t);
    });
  std::vector<std::string> tokens(special_tokens.begin(), special_tokens.end());
  tokens.insert(tokens.end(), seen.begin(), seen.end());
  return tokens;
}

}  // namespace

vocab::vocab(std::vector<std::string> tokens, bool per_character)
    : tokens_(std::move(tokens)), per_character_(per_character) {
  for (std::size_t i = 0; i < tokens_.size(); ++i) ids_.emplace(tokens_[i], static_cast<int>(i));
}

vocab vocab::characters(const std::vector<std::string>& sentences) {
  return vocab(collect(sentences, true), true);
}

vocab vocab::words(const std::vector<std::string>& sentences) {
  return vocab(collect(sentences, false), false);
}

int vocab::id(std::string_view token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? unk : it->second;
}

const std::string& vocab::token(int id) const {
  if (id < 0 || id >= size())
    throw value_error("vocab: token id " + std::to_string(id) + " is outside [0, " + std::to_string(size()) + ")");
  return tokens_[static_cast<std::size_t>(id)];
}

std::vector<int> vocab::encode(std::string_view sentence) const {
  std::vector<int> ids;
  for_each_token(sentence, per_character_, [&](std::string_view t) { ids.push_back(id(t)); });
  return ids;
}

std::string vocab::decode(std::span<const int> ids) const {
  std::string sentence;
  bool first = true;
  for (int i : ids) {
    const std::string& t = token(i);  // checks the range
    if (i == eos) break;
    if (i == pad || i == bos) continue;
    if (!per_character_ && !first) sentence += ' ';
    sentence += t;
    first = false;
  }
  return sentence;
}

seq2seq_batch make_batch(const std::vector<translation_pair>& pairs, std::span<const std::size_t> indices,
                         const vocab& src, const vocab& tgt) {
  if (indices.empty()) throw value_error("make_batch: no indices given (a batch needs at least one pair)");
  std::vector<std::vector<int>> sources, targets;
  for (std::size_t i : indices) {
    if (i >= pairs.size())
      throw value_error("make_batch: index " + std::to_string(i) + " is past the end of the " +
                        std::to_string(pairs.size()) + " pairs");
    sources.push_back(src.encode(pairs[i].source));
    targets.push_back(tgt.encode(pairs[i].target));
  }
  auto longest = [](const std::vector<std::vector<int>>& seqs) {
    std::size_t n = 0;
    for (const auto& s : seqs) n = std::max(n, s.size());
    return static_cast<std::int64_t>(n);
  };
  const auto B = static_cast<std::int64_t>(indices.size());
  const std::int64_t S = std::max<std::int64_t>(1, longest(sources)), T = longest(targets) + 1;

  seq2seq_batch batch{tensor<std::int32_t>({B, S}), tensor<std::int32_t>({B}), tensor<std::int32_t>({B, T}),
                      tensor<std::int32_t>({B, T})};  // zero-filled: <pad>
  for (std::int64_t b = 0; b < B; ++b) {
    const auto& s = sources[static_cast<std::size_t>(b)];
    const auto& t = targets[static_cast<std::size_t>(b)];
    const auto n = static_cast<std::int64_t>(t.size());
    for (std::int64_t j = 0; j < static_cast<std::int64_t>(s.size()); ++j)
      batch.src[b * S + j] = s[static_cast<std::size_t>(j)];
    batch.src_len[b] = static_cast<std::int32_t>(s.size());
    batch.tgt[b * T] = vocab::bos;
    for (std::int64_t j = 0; j < n; ++j) {
      batch.tgt[b * T + j + 1] = t[static_cast<std::size_t>(j)];
      batch.target[b * T + j] = t[static_cast<std::size_t>(j)];
    }
    batch.target[b * T + n] = vocab::eos;
  }
  return batch;
}

}  // namespace loom
