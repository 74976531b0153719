// All primitive ops.
#pragma once

#include "loom/ops/add.hpp"
#include "loom/ops/concat.hpp"
#include "loom/ops/mask.hpp"
#include "loom/ops/matmul.hpp"
#include "loom/ops/reshape.hpp"
#include "loom/ops/scale.hpp"
#include "loom/ops/softmax.hpp"
