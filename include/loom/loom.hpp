// loom: neural models as typed dataflow graphs known at compile time.
// This header: the core (dims, tensors, nodes, parameters), graphs, executors, gradcheck, the
// ops, checkpoints and safetensors, the PyTorch and Hugging Face readers, the optimizers. The
// layers and models (loom/nn/...), the trainer and its progress line (loom/train/trainer.hpp,
// progress.hpp), data sets (loom/data/...), BLEU and loom::distributed have headers of their own.
#pragma once

#include "loom/core/dims.hpp"
#include "loom/core/errors.hpp"
#include "loom/core/fixed_string.hpp"
#include "loom/core/node.hpp"
#include "loom/core/onnx_mapping.hpp"  // onnx_emitter: an op's to_onnx (loom::onnx writes the model)
#include "loom/core/params.hpp"
#include "loom/core/random.hpp"
#include "loom/core/tensor.hpp"
#include "loom/graph/executor.hpp"
#include "loom/graph/gradcheck.hpp"
#include "loom/graph/precision_report.hpp"
#include "loom/graph/graph.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/io/hf_checkpoint.hpp"
#include "loom/io/safetensors.hpp"
#include "loom/io/torch_import.hpp"
#include "loom/ops.hpp"
#include "loom/train/optim.hpp"
