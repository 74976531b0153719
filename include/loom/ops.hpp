// All primitive ops.
#pragma once

#include "loom/ops/activation.hpp"
#include "loom/ops/add.hpp"
#include "loom/ops/checkpoint.hpp"
#include "loom/ops/concat.hpp"
#include "loom/ops/cross_entropy.hpp"
#include "loom/ops/dropout.hpp"
#include "loom/ops/embedding.hpp"
#include "loom/ops/layer_norm.hpp"
#include "loom/ops/mask.hpp"
#include "loom/ops/matmul.hpp"
#include "loom/ops/mul.hpp"
#include "loom/ops/positional_encoding.hpp"
#include "loom/ops/reshape.hpp"
#include "loom/ops/scale.hpp"
#include "loom/ops/silu.hpp"
#include "loom/ops/softmax.hpp"
