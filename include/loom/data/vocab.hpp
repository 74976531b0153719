// A vocabulary of tokens (characters or whitespace-separated words) with the special tokens
// <pad>, <bos>, <eos>, <unk>, and the padded batches a sequence-to-sequence model trains on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/tensor.hpp"
#include "loom/data/numbers.hpp"

namespace loom {

/// Token ids <-> strings. Ids 0..3 are <pad>, <bos>, <eos>, <unk>; the tokens seen in the
/// building sentences follow in sorted (byte) order, so the same sentences give the same ids.
class vocab {
 public:
  static constexpr int pad = 0, bos = 1, eos = 2, unk = 3;

  /// One token per byte of the sentences ("4071" -> "4", "0", "7", "1"); for digit sources.
  static vocab characters(const std::vector<std::string>& sentences);
  /// One token per whitespace-separated word; for English targets. A word spelled like a special
  /// token ("<unk>") is that special token.
  static vocab words(const std::vector<std::string>& sentences);

  /// The ids of a sentence's tokens, without <bos>/<eos>; a token not in the vocabulary is <unk>.
  std::vector<int> encode(std::string_view sentence) const;
  /// The sentence of a sequence of ids: stops at the first <eos>, skips <pad> and <bos>; words are
  /// joined by one space, characters by nothing. Throws value_error for an id outside [0, size()).
  std::string decode(std::span<const int> ids) const;

  /// The number of tokens, special tokens included.
  int size() const { return static_cast<int>(tokens_.size()); }
  /// The id of a token, or unk if it is not in the vocabulary.
  int id(std::string_view token) const;
  /// Whether the token is in the vocabulary (the special tokens are).
  bool contains(std::string_view token) const { return ids_.find(token) != ids_.end(); }
  /// The token of an id; throws value_error for an id outside [0, size()).
  const std::string& token(int id) const;
  /// True if tokens are characters, false if they are words.
  bool per_character() const { return per_character_; }

 private:
  vocab(std::vector<std::string> tokens, bool per_character);
  std::vector<std::string> tokens_;
  std::map<std::string, int, std::less<>> ids_;
  bool per_character_;
};

/// A padded batch for an encoder-decoder trained with teacher forcing. B sentences; S the
/// longest source (at least 1); T the longest target + 1. Padding is <pad> = 0 throughout.
struct seq2seq_batch {
  tensor<std::int32_t> src;      // [B, S] source ids, padded
  tensor<std::int32_t> src_len;  // [B] unpadded source lengths
  tensor<std::int32_t> tgt;      // [B, T] decoder inputs: <bos> + target ids, padded
  tensor<std::int32_t> target;   // [B, T] labels: target ids + <eos>, padded (<pad> is the ignore index)
};

/// The batch of pairs[indices[0]], pairs[indices[1]], ... encoded with the source and target
/// vocabularies. Throws value_error if indices is empty or an index is past the end of pairs.
seq2seq_batch make_batch(const std::vector<translation_pair>& pairs, std::span<const std::size_t> indices,
                         const vocab& src, const vocab& tgt);

}  // namespace loom
