#!/usr/bin/env python3
"""Generates the C++ of onnx_node_suite: one loom graph per applicable ONNX backend node test.

    generate_cases.py --data DATA_DIR --out OUT_DIR [--parts N]

DATA_DIR holds ONNX's node tests (Debian's libonnx-testdata: one folder per case with model.onnx
and test_data_set_*/input_N.pb, output_N.pb). loom's shapes are types, so each case's graph is
written out with the case's exact fixed shapes (loom::fix<N>). For every case this script reads
model.onnx and decides whether loom can run it: every node an op loom has, with attributes loom
supports, on float32 values (int64 or int32 only as Gather's indices or SoftmaxCrossEntropyLoss's
labels, bool only as Where's condition). Besides the ops that are one loom op, a few are loom ops
put together exactly (see HANDLERS and each op_ function): the layout ops Flatten, Squeeze,
Unsqueeze and Split as reshape and slice; Max, Min, Sum and Mean of more than two inputs as a
chain of two-input ops; Gemm as matmul, scale and add; Clip as maximum and minimum;
LayerNormalization's Mean and InvStdDev outputs from mean, square and rsqrt. It writes

  OUT_DIR/cases_part_K.cpp  K = 0 .. N-1: the applicable cases' graph builders, spread evenly so
                            that the parts compile in parallel;
  OUT_DIR/cases_index.cpp   onnx_node::all_cases(): every case, the ones loom cannot run with the
                            reason, and the documented differences (DOCUMENTED_DIFFERENCES).

The input and output tensors are read when the suite runs (onnx_node_support.cpp), except the
few inputs loom takes as types — a Reshape's shape, a ReduceSum's axes, a Slice's bounds, which
are attributes in loom: those are read here from the case's data sets, written into the graph,
and checked again by the suite against each data set. Constants of the model (Constant nodes,
LayerNormalization's epsilon where loom needs it as a tensor) become loom parameters set when the
graph is built. Files are rewritten only when their text changes.
"""

import argparse
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Cases that fail for a known reason, with that reason: the suite reports them but does not
# fail because of them. Each entry says what loom does and what ONNX expects.
DOCUMENTED_DIFFERENCES = {
    "test_gather_negative_indices":
        "ONNX's Gather counts a negative index from the end (-9 is row 1 of 10); loom's embedding refuses an id "
        "outside [0, V) with value_error, as torch.nn.Embedding does",
}

MAX_RANK = 6  # loom's tensors have at most 6 axes (include/loom/core/dims.hpp)


class NotApplicable(Exception):
    """The case cannot be written as a loom graph; the message says why."""


class Value:
    """A value of the ONNX graph as the generator sees it.

    kind: 'real', 'index' or 'bool' (a loom node, `expr` names its C++ variable), 'const' (a
    value known here: `array`, from a Constant node or a typed input), or 'input' (a graph input
    not used yet: its loom kind is decided by its first use).
    """

    def __init__(self, kind, shape, expr=None, array=None, elem=None, index=None, name=None):
        self.kind = kind
        self.shape = tuple(int(d) for d in shape)
        self.expr = expr
        self.array = array
        self.elem = elem    # the ONNX element type of a graph input
        self.index = index  # the position of a graph input
        self.name = name    # the ONNX name


def shape_type(shape):
    return "loom::shape<" + ", ".join("loom::fix<%d>" % d for d in shape) + ">"


def shape_text(shape):
    return "[" + ", ".join(str(d) for d in shape) + "]"


def c_float(v):
    v = float(np.float32(v))
    if math.isnan(v):
        return "std::numeric_limits<float>::quiet_NaN()"
    if math.isinf(v):
        return ("-" if v < 0 else "") + "std::numeric_limits<float>::infinity()"
    return repr(v) + "f"


def c_double(v):
    """A float32 attribute as the double that loom's compile-time attributes take."""
    v = float(np.float32(v))
    if not math.isfinite(v):
        raise NotApplicable("attribute value %r" % v)
    return repr(v)


def c_string(s):
    out = '"'
    for ch in s:
        if ch in '"\\':
            out += "\\" + ch
        elif 32 <= ord(ch) < 127:
            out += ch
        else:
            out += "\\x%02x" % ord(ch)
    return out + '"'


def elem_name(elem):
    return TensorProto.DataType.Name(elem)


def broadcast(*shapes):
    """NumPy's broadcast of the shapes, or NotApplicable (the model would be invalid)."""
    rank = max(len(s) for s in shapes)
    out = []
    for k in range(rank):
        dims = {s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise NotApplicable("shapes %s do not broadcast" % ", ".join(shape_text(s) for s in shapes))
        out.append(dims.pop() if dims else 1)
    return tuple(out)


class Graph:
    """The loom graph of one case, written as C++ while the ONNX nodes are translated."""

    def __init__(self, sets):
        self.sets = sets
        self.lines = []
        self.constants = []  # (param name, shape, flat values)
        self.fed = []        # (onnx index, loom name, kind)
        self.typed = []      # (onnx index, int64 values)
        self.extra = []      # (loom name, dims, values)
        self.loom_names = set()
        self.count = 0

    def var(self, prefix="v"):
        self.count += 1
        return "%s%d" % (prefix, self.count)

    def node(self, expr, shape, kind="real"):
        if len(shape) > MAX_RANK:
            raise NotApplicable("a value of rank %d: loom's tensors have at most %d axes" % (len(shape), MAX_RANK))
        name = self.var()
        self.lines.append("auto %s = %s;" % (name, expr))
        return Value(kind, shape, expr=name)

    def loom_name(self, onnx_name, index):
        ok = onnx_name and all(c.isalnum() or c in "_.:/-" for c in onnx_name)
        name = onnx_name if ok else "input_%d" % index
        if name in self.loom_names or name.startswith("onnx."):
            name = "input_%d" % index
        self.loom_names.add(name)
        return name

    def declare_input(self, v, kind):
        """Makes graph input v a loom input of `kind` ('real', 'index' or 'bool')."""
        wanted = {"real": (TensorProto.FLOAT,), "index": (TensorProto.INT64, TensorProto.INT32),
                  "bool": (TensorProto.BOOL,)}[kind]
        if v.elem not in wanted:
            what = {"real": "float32 values (loom computes in float)", "index": "int64 or int32 indices",
                    "bool": "a bool condition"}[kind]
            raise NotApplicable("input '%s' is %s where loom takes %s" % (v.name, elem_name(v.elem), what))
        if len(v.shape) > MAX_RANK:
            raise NotApplicable("input '%s' has rank %d: loom's tensors have at most %d axes"
                                % (v.name, len(v.shape), MAX_RANK))
        name = self.loom_name(v.name, v.index)
        elem = {"real": "", "index": ", std::int64_t", "bool": ", bool"}[kind]
        var = self.var("in")
        self.lines.append("auto %s = loom::input<%s, %s%s>();  // ONNX input %d, %s"
                          % (var, c_string(name), shape_type(v.shape), elem, v.index, c_string(v.name)))
        self.fed.append((v.index, name, kind))
        v.kind, v.expr = kind, var
        return v

    def real(self, v, what="an operand"):
        """The loom node of a real value (a graph input becomes a real input, a constant a parameter)."""
        if v is None:
            raise NotApplicable("%s is missing" % what)
        if v.kind == "input":
            self.declare_input(v, "real")
        if v.kind == "const":
            if v.array.dtype not in (np.float32, np.float64):
                raise NotApplicable("%s is a constant of %s: loom computes in float" % (what, v.array.dtype))
            if len(v.shape) > MAX_RANK:
                raise NotApplicable("a constant of rank %d" % len(v.shape))
            pname = "onnx.const.%d" % len(self.constants)
            self.constants.append((pname, v.shape, [float(x) for x in v.array.reshape(-1)]))
            var = self.var("c")
            self.lines.append("auto %s = loom::param<%s, %s>();" % (var, c_string(pname), shape_type(v.shape)))
            v.kind, v.expr = "real", var
        if v.kind != "real":
            raise NotApplicable("%s is %s where loom takes float values" % (what, v.kind))
        return v.expr

    def const(self, v, what):
        """The value of an operand that loom takes as a type (a graph input is read from the data sets)."""
        if v is None:
            return None
        if v.kind == "input":
            arrays = [numpy_helper.to_array(onnx.load_tensor(os.path.join(s, "input_%d.pb" % v.index)))
                      for s in self.sets]
            if any(a.shape != arrays[0].shape or not np.array_equal(a, arrays[0]) for a in arrays[1:]):
                raise NotApplicable("%s differs between data sets: loom takes it as a type" % what)
            if arrays[0].dtype not in (np.int64, np.int32, np.bool_):
                raise NotApplicable("%s is %s: loom takes it as a type, from integers" % (what, arrays[0].dtype))
            self.typed.append((v.index, [int(x) for x in arrays[0].reshape(-1)]))
            v.kind, v.array = "const", arrays[0]
        if v.kind != "const":
            raise NotApplicable("%s is not a constant: loom takes it as a type" % what)
        return v.array


# ---- the ops ---------------------------------------------------------------------------------

def attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def only_attrs(node, allowed):
    for a in node.attribute:
        if a.name not in allowed:
            raise NotApplicable("attribute %s of %s" % (a.name, node.op_type))


def norm_axis(axis, rank, what="axis"):
    if not -rank <= axis < max(rank, 1):
        raise NotApplicable("%s %d out of range for rank %d" % (what, axis, rank))
    return axis + rank if axis < 0 else axis


UNARY = {"Relu": "loom::relu", "Sigmoid": "loom::sigmoid", "Tanh": "loom::tanh", "Exp": "loom::exp",
         "Log": "loom::log", "Sqrt": "loom::sqrt", "Abs": "loom::abs", "Neg": "loom::neg"}
BINARY = {"Add": "loom::add", "Sub": "loom::sub", "Mul": "loom::mul", "Div": "loom::div",
          "Max": "loom::maximum", "Min": "loom::minimum", "Sum": "loom::add", "Mean": "loom::add"}


def op_unary(g, node, ins, opset):
    only_attrs(node, ())
    x = ins[0]
    return [g.node("%s(%s)" % (UNARY[node.op_type], g.real(x, "X")), x.shape)]


def op_binary(g, node, ins, opset):
    """Add, Sub, Mul, Div with two operands; Max, Min, Sum, Mean with any number, chained left to
    right (loom's maximum, minimum and add take two)."""
    only_attrs(node, ())
    if any(v is None for v in ins) or not ins:
        raise NotApplicable("an empty operand")
    fn = BINARY[node.op_type]
    acc = ins[0]
    if len(ins) == 1:
        g.real(acc)
        return [acc]
    for v in ins[1:]:
        shape = broadcast(acc.shape, v.shape)
        acc = g.node("%s(%s, %s)" % (fn, g.real(acc), g.real(v)), shape)
    if node.op_type == "Mean":
        acc = g.node("loom::scale<%r>(%s)" % (1.0 / len(ins), acc.expr), acc.shape)
    return [acc]


def op_where(g, node, ins, opset):
    only_attrs(node, ())
    c, x, y = ins
    if c.kind == "input":
        g.declare_input(c, "bool")
    if c.kind != "bool":
        raise NotApplicable("the condition is computed by the graph: loom's where takes a bool input")
    shape = broadcast(c.shape, x.shape, y.shape)
    return [g.node("loom::where(%s, %s, %s)" % (c.expr, g.real(x, "X"), g.real(y, "Y")), shape)]


def op_matmul(g, node, ins, opset):
    only_attrs(node, ())
    a, b = ins
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise NotApplicable("MatMul of a vector (%s · %s): loom's matmul takes [.., M, K] and [.., K, N]"
                            % (shape_text(a.shape), shape_text(b.shape)))
    if a.shape[-1] != b.shape[-2]:
        raise NotApplicable("inner dims differ")
    batch = broadcast(a.shape[:-2], b.shape[:-2])
    return [g.node("loom::matmul(%s, %s)" % (g.real(a, "A"), g.real(b, "B")), batch + (a.shape[-2], b.shape[-1]))]


def op_gemm(g, node, ins, opset):
    """alpha · A'B' + beta · C: matmul with its transposes, scale for alpha and beta, add (C
    broadcast)."""
    only_attrs(node, ("alpha", "beta", "transA", "transB"))
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    ta, tb = int(attr(node, "transA", 0)), int(attr(node, "transB", 0))
    alpha, beta = float(attr(node, "alpha", 1.0)), float(attr(node, "beta", 1.0))
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise NotApplicable("Gemm of rank %d and %d operands" % (len(a.shape), len(b.shape)))
    m, k = (a.shape[1], a.shape[0]) if ta else a.shape
    k2, n = (b.shape[1], b.shape[0]) if tb else b.shape
    if k != k2:
        raise NotApplicable("inner dims differ")
    y = g.node("loom::matmul<%s, %s>(%s, %s)" % ("true" if ta else "false", "true" if tb else "false",
                                                 g.real(a, "A"), g.real(b, "B")), (m, n))
    if alpha != 1.0:
        y = g.node("loom::scale<%s>(%s)" % (c_double(alpha), y.expr), y.shape)
    if c is not None and beta != 0.0:
        if broadcast((m, n), c.shape) != (m, n):
            raise NotApplicable("C %s does not broadcast to [%d, %d]" % (shape_text(c.shape), m, n))
        cexpr = g.real(c, "C")
        if beta != 1.0:
            cexpr = g.node("loom::scale<%s>(%s)" % (c_double(beta), cexpr), c.shape).expr
        y = g.node("loom::add(%s, %s)" % (y.expr, cexpr), (m, n))
    return [y]


def op_softmax(g, node, ins, opset):
    only_attrs(node, ("axis",))
    x = ins[0]
    rank = len(x.shape)
    if rank == 0:
        raise NotApplicable("softmax of a scalar")
    axis = norm_axis(int(attr(node, "axis", -1 if opset >= 13 else 1)), rank)
    if axis != rank - 1:
        if opset >= 13:
            raise NotApplicable("softmax over axis %d of a rank-%d tensor: loom's softmax is over the last axis only"
                                % (axis, rank))
        raise NotApplicable("softmax (opset %d) over axes %d.. flattened: loom's softmax is over the last axis only"
                            % (opset, axis))
    return [g.node("loom::softmax(%s)" % g.real(x, "X"), x.shape)]


def op_concat(g, node, ins, opset):
    only_attrs(node, ("axis",))
    if any(v is None for v in ins):
        raise NotApplicable("an empty operand")
    rank = len(ins[0].shape)
    if rank == 0:
        raise NotApplicable("concat of scalars")
    axis = norm_axis(int(attr(node, "axis")), rank)
    for v in ins[1:]:
        if len(v.shape) != rank or any(v.shape[k] != ins[0].shape[k] for k in range(rank) if k != axis):
            raise NotApplicable("operands differ off the axis")
    if len(ins) == 1:
        g.real(ins[0])
        return [ins[0]]
    shape = list(ins[0].shape)
    shape[axis] = sum(v.shape[axis] for v in ins)
    return [g.node("loom::concat<%d>(%s)" % (axis, ", ".join(g.real(v) for v in ins)), shape)]


def op_gather(g, node, ins, opset):
    """Gather along axis 0 of a table [V, D] is loom's embedding; data of another rank is
    reshaped to the table [V, product of the other dims] and the rows back to its dims."""
    only_attrs(node, ("axis",))
    data, indices = ins
    rank = len(data.shape)
    if rank == 0:
        raise NotApplicable("Gather of a scalar")
    axis = norm_axis(int(attr(node, "axis", 0)), rank)
    if axis != 0:
        raise NotApplicable("Gather along axis %d: loom's embedding gathers rows (axis 0)" % axis)
    if indices.kind == "input":
        g.declare_input(indices, "index")
    if indices.kind != "index":
        raise NotApplicable("the indices are not a graph input: loom's embedding takes an int input")
    row = int(np.prod(data.shape[1:], dtype=np.int64))
    table = g.real(data, "data") if rank == 2 else reshaped(g, data, (data.shape[0], row)).expr
    rows = g.node("loom::embedding(%s, %s)" % (indices.expr, table), indices.shape + (row,))
    return [rows if rank == 2 else reshaped(g, rows, indices.shape + data.shape[1:])]


def op_layer_norm(g, node, ins, opset):
    """loom's layer_norm for Y; Mean and InvStdDev, when the node has them, from loom's mean,
    square and rsqrt (loom's layer_norm returns Y only)."""
    only_attrs(node, ("axis", "epsilon", "stash_type"))
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    rank = len(x.shape)
    if rank == 0:
        raise NotApplicable("LayerNormalization of a scalar")
    axis = norm_axis(int(attr(node, "axis", -1)), rank)
    if axis != rank - 1:
        raise NotApplicable("LayerNormalization over axes %d.. of a rank-%d tensor: loom's layer_norm normalises "
                            "the last axis only" % (axis, rank))
    if int(attr(node, "stash_type", 1)) != 1:
        raise NotApplicable("stash_type %d" % attr(node, "stash_type"))
    d = x.shape[-1]
    eps = float(np.float32(attr(node, "epsilon", 1e-5)))
    if eps <= 0:
        raise NotApplicable("epsilon %r: loom's layer_norm needs a positive one" % eps)
    if scale.shape != (d,) or (bias is not None and bias.shape != (d,)):
        raise NotApplicable("scale or bias of shape other than [%d]" % d)
    if bias is None:
        bias = Value("const", (d,), array=np.zeros((d,), np.float32))
    outs = [g.node("loom::layer_norm<%s>(%s, %s, %s)" % (c_double(eps), g.real(x, "X"), g.real(scale, "Scale"),
                                                         g.real(bias, "B")), x.shape)]
    names = list(node.output) + [""] * 3
    stat_shape = x.shape[:-1] + (1,)
    if names[1] or names[2]:
        mean = g.node("loom::mean<-1, true>(%s)" % x.expr, stat_shape)
        outs.append(mean if names[1] else None)
    if names[2]:
        centred = g.node("loom::sub(%s, %s)" % (x.expr, mean.expr), x.shape)
        var = g.node("loom::mean<-1, true>(loom::square(%s))" % centred.expr, stat_shape)
        eps_v = Value("const", (1,), array=np.array([eps], np.float32))
        outs.append(g.node("loom::rsqrt(loom::add(%s, %s))" % (var.expr, g.real(eps_v)), stat_shape))
    return outs


REDUCE = {"ReduceSum": ("loom::reduce_sum", 13), "ReduceMean": ("loom::mean", 18), "ReduceMax": ("loom::amax", 18)}


def op_reduce(g, node, ins, opset):
    fn, axes_input_from = REDUCE[node.op_type]
    x = ins[0]
    rank = len(x.shape)
    if opset >= axes_input_from:
        only_attrs(node, ("keepdims", "noop_with_empty_axes"))
        axes = g.const(ins[1] if len(ins) > 1 else None, "axes")
        noop = int(attr(node, "noop_with_empty_axes", 0))
    else:
        only_attrs(node, ("axes", "keepdims"))
        axes = attr(node, "axes")
        noop = 0
    keep = int(attr(node, "keepdims", 1))
    axes = [] if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    if not axes:
        if noop:
            g.real(x)
            return [x]
        axes = list(range(rank))
    axes = sorted({norm_axis(a, rank) for a in axes})
    if len(axes) != 1:
        raise NotApplicable("%s over %d axes %s: loom's reductions are over one axis"
                            % (node.op_type, len(axes), axes))
    axis = axes[0]
    if node.op_type == "ReduceMax" and x.shape[axis] == 0:
        raise NotApplicable("ReduceMax over an empty axis: loom's amax refuses it (shape_error)")
    shape = list(x.shape)
    if keep:
        shape[axis] = 1
    else:
        del shape[axis]
    return [g.node("%s<%d, %s>(%s)" % (fn, axis, "true" if keep else "false", g.real(x, "data")), shape)]


def op_transpose(g, node, ins, opset):
    only_attrs(node, ("perm",))
    x = ins[0]
    rank = len(x.shape)
    perm = [int(p) for p in attr(node, "perm", list(reversed(range(rank))))]
    if sorted(perm) != list(range(rank)):
        raise NotApplicable("perm %s is not a permutation" % perm)
    if rank == 0:
        g.real(x)
        return [x]
    return [g.node("loom::transpose<%s>(%s)" % (", ".join(map(str, perm)), g.real(x, "data")),
                   [x.shape[p] for p in perm])]


def reshaped(g, x, shape):
    shape = tuple(int(d) for d in shape)
    if int(np.prod(shape, dtype=np.int64)) != int(np.prod(x.shape, dtype=np.int64)):
        raise NotApplicable("reshape of %s to %s" % (shape_text(x.shape), shape_text(shape)))
    return g.node("loom::reshape<%s>(%s)" % (shape_type(shape), g.real(x, "data")), shape)


def op_reshape(g, node, ins, opset):
    only_attrs(node, ("allowzero",))
    x = ins[0]
    target = [int(s) for s in g.const(ins[1], "the target shape").reshape(-1)]
    allowzero = int(attr(node, "allowzero", 0))
    out = []
    for k, s in enumerate(target):
        if s == 0 and not allowzero:
            if k >= len(x.shape):
                raise NotApplicable("shape entry 0 past the input's rank")
            out.append(x.shape[k])
        else:
            out.append(s)
    if out.count(-1) > 1 or any(s < -1 for s in out):
        raise NotApplicable("target shape %s" % target)
    if -1 in out:
        known = int(np.prod([s for s in out if s != -1], dtype=np.int64))
        total = int(np.prod(x.shape, dtype=np.int64))
        if known == 0 or total % known:
            raise NotApplicable("target shape %s" % target)
        out[out.index(-1)] = total // known
    return [reshaped(g, x, out)]


def op_flatten(g, node, ins, opset):
    only_attrs(node, ("axis",))
    x = ins[0]
    rank = len(x.shape)
    axis = int(attr(node, "axis", 1))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis <= rank:
        raise NotApplicable("axis out of range")
    return [reshaped(g, x, (int(np.prod(x.shape[:axis], dtype=np.int64)), int(np.prod(x.shape[axis:], dtype=np.int64))))]


def op_squeeze(g, node, ins, opset):
    x = ins[0]
    rank = len(x.shape)
    if opset >= 13:
        only_attrs(node, ())
        axes = g.const(ins[1] if len(ins) > 1 else None, "axes")
    else:
        only_attrs(node, ("axes",))
        axes = attr(node, "axes")
    if axes is None:
        axes = [k for k in range(rank) if x.shape[k] == 1]
    axes = {norm_axis(int(a), rank) for a in np.asarray(axes).reshape(-1)}
    if any(x.shape[a] != 1 for a in axes):
        raise NotApplicable("squeezes an axis of size other than 1")
    return [reshaped(g, x, [d for k, d in enumerate(x.shape) if k not in axes])]


def op_unsqueeze(g, node, ins, opset):
    x = ins[0]
    if opset >= 13:
        only_attrs(node, ())
        axes = g.const(ins[1], "axes")
    else:
        only_attrs(node, ("axes",))
        axes = attr(node, "axes")
    axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    rank = len(x.shape) + len(axes)
    axes = {norm_axis(a, rank) for a in axes}
    dims = iter(x.shape)
    return [reshaped(g, x, [1 if k in axes else next(dims) for k in range(rank)])]


def op_identity(g, node, ins, opset):
    only_attrs(node, ())
    g.real(ins[0], "the input")
    return [ins[0]]


def slice_node(g, x, axis, begin, size):
    shape = list(x.shape)
    shape[axis] = size
    return g.node("loom::slice<%d, loom::fix<%d>, loom::fix<%d>>(%s)" % (axis, begin, size, g.real(x, "data")), shape)


def op_slice(g, node, ins, opset):
    """One axis, step 1: loom's slice<Axis, Begin, Size>, with ONNX's clamping of the bounds."""
    x = ins[0]
    rank = len(x.shape)
    if opset >= 10:
        only_attrs(node, ())
        starts = g.const(ins[1], "starts")
        ends = g.const(ins[2], "ends")
        axes = g.const(ins[3] if len(ins) > 3 else None, "axes")
        steps = g.const(ins[4] if len(ins) > 4 else None, "steps")
    else:
        only_attrs(node, ("starts", "ends", "axes"))
        starts, ends, axes, steps = attr(node, "starts"), attr(node, "ends"), attr(node, "axes"), None
    starts = [int(s) for s in np.asarray(starts).reshape(-1)]
    ends = [int(s) for s in np.asarray(ends).reshape(-1)]
    axes = list(range(len(starts))) if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    steps = [1] * len(starts) if steps is None else [int(s) for s in np.asarray(steps).reshape(-1)]
    if len(axes) != 1:
        raise NotApplicable("Slice along %d axes: loom's slice cuts one" % len(axes))
    if steps[0] != 1:
        raise NotApplicable("Slice with step %d: loom's slice takes consecutive elements" % steps[0])
    axis = norm_axis(axes[0], rank)
    dim = x.shape[axis]
    begin, end = starts[0], ends[0]
    begin = min(max(begin + dim if begin < 0 else begin, 0), dim)
    end = min(max(end + dim if end < 0 else end, 0), dim)
    return [slice_node(g, x, axis, begin, max(end - begin, 0))]


def op_split(g, node, ins, opset):
    x = ins[0]
    rank = len(x.shape)
    if opset >= 13:
        only_attrs(node, ("axis",))
        split = g.const(ins[1] if len(ins) > 1 else None, "split")
    else:
        only_attrs(node, ("axis", "split"))
        split = attr(node, "split")
    axis = norm_axis(int(attr(node, "axis", 0)), rank)
    n = len(node.output)
    dim = x.shape[axis]
    if split is None or len(np.asarray(split).reshape(-1)) == 0:
        if dim % n:
            raise NotApplicable("Split of %d into %d parts" % (dim, n))
        split = [dim // n] * n
    split = [int(s) for s in np.asarray(split).reshape(-1)]
    if len(split) != n or sum(split) != dim:
        raise NotApplicable("split %s of an axis of %d" % (split, dim))
    outs, begin = [], 0
    for size in split:
        outs.append(slice_node(g, x, axis, begin, size))
        begin += size
    return outs


def op_dropout(g, node, ins, opset):
    """Dropout when not training is loom's dropout in an inference executor: the identity. Its
    seed input, which ONNX does not have, is fed [0, 0]; the ratio input (opset 12 on) is not
    read, as it does not matter when not training."""
    names = list(node.output) + [""]
    if names[1]:
        raise NotApplicable("the mask output is bool: loom's outputs are real")
    ratio = 0.5
    if opset >= 12:
        only_attrs(node, ("seed",))
        training = g.const(ins[2] if len(ins) > 2 else None, "training_mode")
        if training is not None and bool(np.asarray(training).reshape(-1)[0]):
            raise NotApplicable("Dropout in training mode: the suite runs loom's graphs for inference, and loom's "
                                "random mask (its own generator) could not match ONNX's")
    else:
        only_attrs(node, ("ratio", "is_test"))
        ratio = float(attr(node, "ratio", 0.5))
    x = ins[0]
    seed = "onnx.dropout_seed"
    if seed not in [e[0] for e in g.extra]:
        g.extra.append((seed, [2], [0, 0]))
        g.lines.append("auto seed = loom::input<%s, loom::shape<loom::fix<2>>, std::int64_t>();" % c_string(seed))
    return [g.node("loom::dropout<%s>(%s, seed)" % (c_double(ratio), g.real(x, "data")), x.shape)]


def op_clip(g, node, ins, opset):
    """min(max(x, lo), hi): loom's maximum and minimum (NaN propagates, as numpy.clip)."""
    x = ins[0]
    if opset >= 11:
        only_attrs(node, ())
        lo = ins[1] if len(ins) > 1 else None
        hi = ins[2] if len(ins) > 2 else None
    else:
        only_attrs(node, ("min", "max"))
        lo, hi = [None if attr(node, a) is None else Value("const", (), array=np.array(attr(node, a), np.float32))
                  for a in ("min", "max")]
    y = x
    for bound, fn in ((lo, "loom::maximum"), (hi, "loom::minimum")):
        if bound is not None:
            if len(bound.shape) != 0:
                raise NotApplicable("a bound of shape %s" % shape_text(bound.shape))
            y = g.node("%s(%s, %s)" % (fn, g.real(y, "input"), g.real(bound, "a bound")), x.shape)
    g.real(y, "input")
    return [y]


def op_softmax_cross_entropy(g, node, ins, opset):
    """The mean loss over classes on the last axis, without class weights, is loom's
    cross_entropy (ignore_index its IgnoreIndex)."""
    only_attrs(node, ("ignore_index", "reduction"))
    scores, labels = ins[0], ins[1]
    if len(ins) > 2 and ins[2] is not None:
        raise NotApplicable("class weights: loom's cross_entropy has none")
    if len(node.output) > 1 and node.output[1]:
        raise NotApplicable("the log_prob output: loom's cross_entropy returns the loss only")
    reduction = attr(node, "reduction", b"mean")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction != "mean":
        raise NotApplicable("reduction '%s': loom's cross_entropy returns the mean" % reduction)
    if len(scores.shape) != 2:
        raise NotApplicable("classes on axis 1 of a rank-%d input: loom's cross_entropy takes them on the last axis"
                            % len(scores.shape))
    if labels.kind == "input":
        g.declare_input(labels, "index")
    if labels.kind != "index":
        raise NotApplicable("the labels are not a graph input: loom's cross_entropy takes an int input")
    ignore = attr(node, "ignore_index")
    template = "" if ignore is None else "<%d>" % int(ignore)
    return [g.node("loom::cross_entropy%s(%s, %s)" % (template, g.real(scores, "scores"), labels.expr), ())]


def op_constant(g, node, ins, opset):
    if len(node.attribute) != 1:
        raise NotApplicable("Constant with %d attributes" % len(node.attribute))
    a = node.attribute[0]
    v = helper.get_attribute_value(a)
    if a.name == "value":
        arr = numpy_helper.to_array(v)
    elif a.name in ("value_float", "value_floats"):
        arr = np.array(v, np.float32)
    elif a.name in ("value_int", "value_ints"):
        arr = np.array(v, np.int64)
    else:
        raise NotApplicable("Constant's %s" % a.name)
    return [Value("const", arr.shape, array=arr)]


HANDLERS = dict(
    {op: op_unary for op in UNARY},
    **{op: op_binary for op in BINARY},
    Where=op_where, MatMul=op_matmul, Gemm=op_gemm, Softmax=op_softmax, Concat=op_concat, Gather=op_gather,
    LayerNormalization=op_layer_norm, ReduceSum=op_reduce, ReduceMean=op_reduce, ReduceMax=op_reduce,
    Transpose=op_transpose, Reshape=op_reshape, Flatten=op_flatten, Squeeze=op_squeeze, Unsqueeze=op_unsqueeze,
    Identity=op_identity, Slice=op_slice, Split=op_split, Dropout=op_dropout, Constant=op_constant, Clip=op_clip,
    SoftmaxCrossEntropyLoss=op_softmax_cross_entropy)


# ---- one case --------------------------------------------------------------------------------

class Case:
    def __init__(self, name):
        self.name = name
        self.reason = None  # why loom cannot run it
        self.error = None   # why this script could not read it: the case fails in the suite
        self.graph = None
        self.outputs = 0


def translate(name, case_dir):
    case = Case(name)
    try:
        model = onnx.load(os.path.join(case_dir, "model.onnx"))
        sets = sorted(os.path.join(case_dir, d) for d in os.listdir(case_dir) if d.startswith("test_data_set_"))
        if not sets:
            raise NotApplicable("no data set")
        case.graph, case.outputs = translate_model(model, sets)
    except NotApplicable as e:
        case.reason = str(e)
    except Exception as e:  # a model this script does not understand: reported as a failure, not hidden
        case.error = "%s: %s" % (type(e).__name__, e)
    return case


def translate_model(model, sets):
    graph = model.graph
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    opset = opsets.get("ai.onnx", 0)
    for n in graph.node:
        if n.domain not in ("", "ai.onnx"):
            raise NotApplicable("loom has no %s (an op of domain %s)" % (n.op_type, n.domain))
    missing = []
    for n in graph.node:
        if n.op_type not in HANDLERS and n.op_type not in missing:
            missing.append(n.op_type)
    if missing:
        names = missing[0] if len(missing) == 1 else ", ".join(missing[:-1]) + " or " + missing[-1]
        raise NotApplicable("loom has no %s" % names + ("" if len(graph.node) == 1 else
                                                         " (a graph of %d nodes)" % len(graph.node)))

    g = Graph(sets)
    values = {}
    for init in graph.initializer:
        arr = numpy_helper.to_array(init)
        values[init.name] = Value("const", arr.shape, array=arr)
    index = 0
    for vi in graph.input:
        if vi.name in values:
            continue
        t = vi.type
        if not t.HasField("tensor_type"):
            raise NotApplicable("input '%s' is not a tensor" % vi.name)
        dims = t.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            raise NotApplicable("input '%s' has a dim unknown until run time" % vi.name)
        values[vi.name] = Value("input", [d.dim_value for d in dims], elem=t.tensor_type.elem_type, index=index,
                                name=vi.name)
        index += 1
    if not any(v.kind == "input" for v in values.values()):
        raise NotApplicable("the graph has no input (its output is a constant)")

    for n in graph.node:
        ins = [values[i] if i else None for i in n.input]
        for i in n.input:
            if i and i not in values:
                raise RuntimeError("input %s of %s is not computed before it" % (i, n.op_type))
        outs = HANDLERS[n.op_type](g, n, ins, opset)
        for name, v in zip(n.output, outs):
            if name and v is not None:
                values[name] = v
        for name in n.output[len(outs):]:
            if name:
                raise NotApplicable("output %s of %s" % (name, n.op_type))

    roots = []
    for vo in graph.output:
        v = values.get(vo.name)
        t = vo.type.tensor_type
        if v is None:
            raise NotApplicable("output '%s' is not computed" % vo.name)
        if t.elem_type != TensorProto.FLOAT:
            raise NotApplicable("output '%s' is %s: loom's outputs are float" % (vo.name, elem_name(t.elem_type)))
        if v.kind == "input":
            g.real(v)
        if v.kind != "real":
            raise NotApplicable("output '%s' is a constant" % vo.name)
        declared = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if t.HasField("shape") and None not in declared and tuple(declared) != v.shape:
            raise RuntimeError("output '%s' inferred as %s, the model declares %s"
                               % (vo.name, shape_text(v.shape), shape_text(declared)))
        roots.append(v.expr)
    g.lines.append("return loom::make_graph(%s).executor<float>(store, {.inference = true});" % ", ".join(roots))
    return g, len(graph.output)


# ---- writing ---------------------------------------------------------------------------------

HEADER = "// Generated by tests/onnx_node/generate_cases.py from the ONNX node tests in %s; do not edit.\n"


def function_name(case):
    return "build_" + "".join(c if c.isalnum() else "_" for c in case.name)


def write_builder(case):
    g = case.graph
    out = ["// %s" % c_string(case.name),
           "loom::executor<float> %s(loom::param_store<float>& store) {" % function_name(case)]
    for line in g.lines[:-1]:
        out.append("  " + line)
    for pname, shape, vals in g.constants:
        out.append("  store.set(%s, loom::tensor<float>(loom::dims_t{%s}, {%s}));"
                   % (c_string(pname), ", ".join(map(str, shape)), ", ".join(c_float(v) for v in vals)))
    out.append("  " + g.lines[-1])
    out.append("}")
    return "\n".join(out)


def spec_text(case):
    g = case.graph
    fed = ", ".join("{%d, %s, onnx_node::feed_kind::%s}" % (i, c_string(n), {"bool": "boolean"}.get(k, k))
                    for i, n, k in g.fed)
    typed = ", ".join("{%d, {%s}}" % (i, ", ".join(map(str, v))) for i, v in g.typed)
    extra = ", ".join("{%s, {%s}, {%s}}" % (c_string(n), ", ".join(map(str, d)), ", ".join(map(str, v)))
                      for n, d, v in g.extra)
    return "{%s, {}, {}, &%s, {%s}, {%s}, {%s}, %d, %s}" % (
        c_string(case.name), function_name(case), fed, typed, extra, case.outputs,
        c_string(DOCUMENTED_DIFFERENCES.get(case.name, "")))


def write_if_changed(path, text):
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except OSError:
        pass
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="the folder of ONNX's node tests")
    ap.add_argument("--out", required=True, help="where to write the C++ files")
    ap.add_argument("--parts", type=int, default=8, help="number of cases_part_K.cpp files")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    names = sorted(d for d in os.listdir(args.data) if os.path.isdir(os.path.join(args.data, d))) \
        if os.path.isdir(args.data) else []
    cases = [translate(n, os.path.join(args.data, n)) for n in names]
    unknown = set(DOCUMENTED_DIFFERENCES) - {c.name for c in cases if c.reason is None and c.error is None}
    if names and unknown:
        sys.exit("generate_cases.py: documented differences name no applicable case: %s" % ", ".join(sorted(unknown)))
    applicable = [c for c in cases if c.reason is None and c.error is None]
    header = HEADER % args.data

    for k in range(args.parts):
        mine = applicable[k::args.parts]
        text = [header, "// Part %d of %d: the loom graphs of %d cases.\n" % (k, args.parts, len(mine)),
                "#include <cstdint>", "#include <limits>", "#include <vector>", "",
                '#include "onnx_node_support.hpp"', "", "namespace {", ""]
        for c in mine:
            text.append(write_builder(c))
            text.append("")
        text.append("}  // namespace")
        text.append("")
        text.append("namespace onnx_node {")
        text.append("void add_cases_part_%d(std::vector<case_spec>& out) {" % k)
        for c in mine:
            text.append("  out.push_back(%s);" % spec_text(c))
        if not mine:
            text.append("  (void)out;")
        text.append("}")
        text.append("}  // namespace onnx_node")
        write_if_changed(os.path.join(args.out, "cases_part_%d.cpp" % k), "\n".join(text) + "\n")

    text = [header, "// Every case: the parts' applicable ones and the others with the reason.\n",
            "#include <algorithm>", "#include <utility>", "#include <vector>", "", '#include "onnx_node_support.hpp"', "",
            "namespace onnx_node {", ""]
    for k in range(args.parts):
        text.append("void add_cases_part_%d(std::vector<case_spec>& out);" % k)
    text += ["", "std::vector<case_spec> all_cases() {", "  std::vector<case_spec> out;"]
    for k in range(args.parts):
        text.append("  add_cases_part_%d(out);" % k)
    for helper_name, field, used in (("not_applicable", "not_applicable", any(c.reason is not None for c in cases)),
                                     ("unreadable", "generator_error", any(c.error is not None for c in cases))):
        if used:
            text += ["  auto %s = [&out](const char* name, const char* why) {" % helper_name,
                     "    case_spec c;", "    c.name = name;", "    c.%s = why;" % field, "    out.push_back(std::move(c));",
                     "  };"]
    for c in cases:
        if c.reason is not None:
            text.append("  not_applicable(%s, %s);" % (c_string(c.name), c_string(c.reason)))
        elif c.error is not None:
            text.append("  unreadable(%s, %s);" % (c_string(c.name), c_string(c.error)))
    text += ["  std::sort(out.begin(), out.end(), [](const case_spec& a, const case_spec& b) { return a.name < b.name; });",
             "  return out;", "}", "", "}  // namespace onnx_node"]
    write_if_changed(os.path.join(args.out, "cases_index.cpp"), "\n".join(text) + "\n")
    errors = [c.name for c in cases if c.error is not None]
    print("generate_cases.py: %d ONNX node tests, %d with a loom graph%s" % (
        len(cases), len(applicable), "; not understood (failing): " + ", ".join(errors) if errors else ""))


if __name__ == "__main__":
    main()
