// layer_norm is declared in loom/ops/norm.hpp, beside rms_norm; this header is kept so that
// code including it still compiles.
#pragma once

#include "loom/ops/norm.hpp"
