// Eight training pairs of the translation task (examples/translation.hpp), as its model's feeds
// take them: the batch the precision tests run the translation model on.
#pragma once

#include <cstddef>
#include <vector>

#include "translation.hpp"

namespace test {

inline loom::seq2seq_batch translation_batch() {
  translation::task t(9999, 8, 2, 2, 1);
  std::vector<std::size_t> idx{0, 1, 2, 3, 4, 5, 6, 7};
  return loom::make_batch(t.data.train, idx, t.source, t.target);
}

}  // namespace test
