// loom::onnx::save: a plan written as an ONNX ModelProto through ONNX's generated protobuf
// classes, checked by ONNX's checker and shape inference, then written atomically.
#include "loom/onnx/export.hpp"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>

#include "core/atomic_file.hpp"
#include "loom/core/errors.hpp"
#include "loom/core/onnx_mapping.hpp"

#ifndef LOOM_VERSION_STRING
#define LOOM_VERSION_STRING "unknown"
#endif

namespace loom::onnx {

namespace {

namespace pb = ::onnx;

constexpr std::int64_t ir_version = 8;  // ONNX 1.12's
constexpr std::int64_t opset = 17;
// Initializers past this many bytes go to external data (a protobuf message holds < 2 GiB).
constexpr std::size_t inline_limit = std::size_t{3} << 29;

template <class T>
constexpr int real_elem = std::is_same_v<T, float> ? pb::TensorProto::FLOAT : pb::TensorProto::DOUBLE;

int elem_of(dtype t, int real) {
  switch (t) {
    case dtype::real: return real;
    case dtype::i32: return pb::TensorProto::INT64;
    case dtype::u8: return pb::TensorProto::BOOL;
  }
  return real;
}

// A value's type: element type and the node's dims (fixed ones as values, the others by their
// text: "B", "P + T").
void set_type(pb::ValueInfoProto& v, const plan_view& p, int node, int elem) {
  auto* t = v.mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem);
  auto* shape = t->mutable_shape();
  const node_desc& d = *p.order[static_cast<std::size_t>(node)];
  for (int a = 0; a < d.rank; ++a) {
    const dim_expr& e = d.dims[static_cast<std::size_t>(a)];
    if (e.is_fixed()) shape->add_dim()->set_dim_value(e.constant);
    else shape->add_dim()->set_dim_param(detail::dim_text(e));
  }
}

// Where a named dim's value comes from when the model runs: an axis of an input (read with
// Shape), or a parameter's size (a constant).
struct sym_source {
  std::string input;  // empty: `value` is the size
  long axis = 0;
  long value = -1;
};

class writer final : public onnx_emitter {
 public:
  writer(const plan_view& plan, pb::GraphProto& graph, int real) : plan_(plan), graph_(graph), real_(real) {
    value_.resize(static_cast<std::size_t>(plan.size()));
    syms_.resize(plan.syms.size());
    sym_value_.resize(plan.syms.size());
  }

  // ---- onnx_emitter ----
  const node_desc& node() const override { return *plan_.order[static_cast<std::size_t>(current_)]; }
  std::string input(int i) override {
    const auto in = plan_.inputs(current_);
    if (i < 0 || i >= static_cast<int>(in.size())) unsupported("its mapping reads an input it does not have");
    return value_[static_cast<std::size_t>(in[static_cast<std::size_t>(i)])];
  }
  std::string add(std::string_view op_type, std::vector<std::string> inputs, std::vector<onnx_attr> attributes,
                  std::string_view domain) override {
    auto* n = graph_.add_node();
    n->set_op_type(std::string(op_type));
    if (!domain.empty()) n->set_domain(std::string(domain));
    const std::string out = fresh_name(op_type);
    n->set_name(out);
    for (auto& in : inputs) n->add_input(std::move(in));
    n->add_output(out);
    for (const onnx_attr& a : attributes) {
      auto* p = n->add_attribute();
      p->set_name(a.name);
      switch (a.k) {
        case onnx_attr::kind::integer:
          p->set_type(pb::AttributeProto::INT);
          p->set_i(a.i);
          break;
        case onnx_attr::kind::real:
          p->set_type(pb::AttributeProto::FLOAT);
          p->set_f(static_cast<float>(a.f));
          break;
        case onnx_attr::kind::integers:
          p->set_type(pb::AttributeProto::INTS);
          for (long v : a.ints) p->add_ints(v);
          break;
        case onnx_attr::kind::text:
          p->set_type(pb::AttributeProto::STRING);
          p->set_s(a.s);
          break;
      }
    }
    return out;
  }
  std::string real(std::span<const double> values, std::vector<long> shape) override {
    auto* t = constant_tensor(shape);
    t->set_data_type(real_);
    if (real_ == pb::TensorProto::FLOAT)
      for (double v : values) t->add_float_data(static_cast<float>(v));
    else
      for (double v : values) t->add_double_data(v);
    return t->name();
  }
  std::string int64(std::vector<long> values, std::vector<long> shape) override {
    auto* t = constant_tensor(shape);
    t->set_data_type(pb::TensorProto::INT64);
    for (long v : values) t->add_int64_data(v);
    return t->name();
  }
  std::string dims(std::span<const dim_expr> dims) override {
    std::string key;
    for (const dim_expr& d : dims) key += detail::dim_text(d) + ";";
    if (auto it = dims_cache_.find(key); it != dims_cache_.end()) return it->second;
    std::vector<std::string> parts;
    std::vector<long> fixed;  // a run of fixed dims, one constant
    auto flush = [&] {
      if (!fixed.empty()) parts.push_back(int64s(fixed));
      fixed.clear();
    };
    for (const dim_expr& d : dims) {
      if (d.is_fixed()) {
        fixed.push_back(d.constant);
        continue;
      }
      flush();
      std::string sum = sym(d.syms[0]);
      for (int k = 1; k < d.n_syms; ++k) sum = self().add("Add", {sum, sym(d.syms[static_cast<std::size_t>(k)])});
      if (d.constant != 0) sum = self().add("Add", {sum, int64s({d.constant})});
      parts.push_back(sum);
    }
    flush();
    std::string out = parts.size() == 1 ? parts[0] : self().add("Concat", parts, {onnx_attr::integer("axis", 0)});
    dims_cache_.emplace(key, out);
    return out;
  }
  std::string dim_scalar(const dim_expr& d) override {
    return self().add("Squeeze", {dims(std::span(&d, 1)), int64s({0})});
  }
  int real_type() const override { return real_; }
  [[noreturn]] void unsupported(std::string_view why) override {
    throw error("loom::onnx::save: cannot export " + plan_.describe(current_) + ": " + std::string(why));
  }

  // ---- the writer's own ----
  onnx_emitter& self() { return *this; }  // the interface's defaults (add's optional arguments)
  void set_value(int node, std::string name) { value_[static_cast<std::size_t>(node)] = std::move(name); }
  const std::string& value(int node) const { return value_[static_cast<std::size_t>(node)]; }
  void bind_sym(int s, sym_source src) {
    if (syms_[static_cast<std::size_t>(s)].input.empty() && syms_[static_cast<std::size_t>(s)].value < 0)
      syms_[static_cast<std::size_t>(s)] = std::move(src);
  }
  void emit(int node) {
    current_ = node;
    value_[static_cast<std::size_t>(node)] = node_desc_of(node).op->to_onnx(*this);
  }
  const node_desc& node_desc_of(int node) const { return *plan_.order[static_cast<std::size_t>(node)]; }

 private:
  std::string fresh_name(std::string_view what) {
    std::string base =
        current_ >= 0 ? std::string(node_desc_of(current_).op->name) + "_" + std::to_string(current_) : "dims";
    return base + "/" + std::string(what) + "_" + std::to_string(counter_++);
  }
  pb::TensorProto* constant_tensor(const std::vector<long>& shape) {
    auto* t = graph_.add_initializer();
    t->set_name("const_" + std::to_string(constants_++));
    for (long d : shape) t->add_dims(d);
    return t;
  }
  // The [1] int64 tensor of a named dim's value.
  std::string sym(std::string_view name) {
    std::size_t s = 0;
    while (s < plan_.syms.size() && plan_.syms[s] != name) ++s;
    if (s == plan_.syms.size()) unsupported("a dim names \"" + std::string(name) + "\", which the graph does not know");
    std::string& v = sym_value_[s];
    if (!v.empty()) return v;
    const sym_source& src = syms_[s];
    if (!src.input.empty()) {
      v = self().add("Shape", {src.input},
                     {onnx_attr::integer("start", src.axis), onnx_attr::integer("end", src.axis + 1)});
    } else if (src.value >= 0) {
      v = int64s({src.value});
    } else {
      throw value_error("loom::onnx::save: the dim \"" + std::string(name) +
                        "\" is not a whole axis of any input or parameter of the graph, so the exported "
                        "model could not compute it");
    }
    return v;
  }

  const plan_view& plan_;
  pb::GraphProto& graph_;
  int real_;
  int current_ = -1;
  int counter_ = 0, constants_ = 0;
  std::vector<std::string> value_;
  std::vector<sym_source> syms_;
  std::vector<std::string> sym_value_;
  std::map<std::string, std::string> dims_cache_;
};

// The tensor's bytes as ONNX stores them (little-endian, which is this machine's order).
template <class T>
void set_raw(pb::TensorProto& t, const tensor<T>& v) {
  t.set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), static_cast<std::size_t>(v.size()) * sizeof(T)));
}

std::string base_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::vector<std::string> unsupported_ops(const plan_view& plan) {
  std::vector<std::string> out;
  for (const node_desc* d : plan.order)
    if (d->op->role == node_role::op && d->op->to_onnx == nullptr &&
        std::find(out.begin(), out.end(), d->op->name) == out.end())
      out.emplace_back(d->op->name);
  return out;
}

template <class T>
void save(const plan_view& plan, const param_store<T>& params, const std::string& path, const export_options& options) {
  if (const auto missing = unsupported_ops(plan); !missing.empty()) {
    std::string names;
    for (const auto& m : missing) names += (names.empty() ? "" : ", ") + m;
    const bool fused = std::any_of(plan.order.begin(), plan.order.end(), [](const node_desc* d) { return d->op->fused; });
    throw error("loom::onnx::save: no ONNX mapping for the op(s) " + names +
                (fused ? " (fused nodes are in an executor's plan: export the graph's plan, g.plan(), which holds "
                         "the ops they were made from)"
                       : " (an op exports when its declaration has `static std::string to_onnx(onnx_emitter&)`)"));
  }
  if (options.present_prefix.empty())
    throw value_error("loom::onnx::save: present_prefix is empty: a state's output would take its input's name");

  pb::ModelProto model;
  model.set_ir_version(ir_version);
  model.set_producer_name("loom");
  model.set_producer_version(LOOM_VERSION_STRING);
  auto* op_set = model.add_opset_import();
  op_set->set_domain("");
  op_set->set_version(opset);
  {
    auto* m = model.add_metadata_props();
    m->set_key("loom.version");
    m->set_value(LOOM_VERSION_STRING);
  }
  for (const auto& [k, v] : options.metadata) {
    auto* m = model.add_metadata_props();
    m->set_key(k);
    m->set_value(v);
  }
  pb::GraphProto& graph = *model.mutable_graph();
  graph.set_name(options.graph_name);
  constexpr int real = real_elem<T>;
  writer w(plan, graph, real);

  // Inputs and parameters first: their names are their values', and they bind the named dims.
  std::size_t param_bytes = 0;
  std::vector<int> param_nodes;
  for (int i = 0; i < plan.size(); ++i) {
    const node_desc& d = *plan.order[static_cast<std::size_t>(i)];
    if (d.op->role == node_role::input) {
      auto* v = graph.add_input();
      v->set_name(std::string(d.name));
      set_type(*v, plan, i, elem_of(d.elem, real));
      w.set_value(i, std::string(d.name));
      for (int a = 0; a < d.rank; ++a) {
        const plan_dim& pd = plan.dims[static_cast<std::size_t>(i)][static_cast<std::size_t>(a)];
        if (pd.n_syms == 1 && pd.constant == 0) w.bind_sym(pd.sym[0], {std::string(d.name), a, -1});
      }
    } else if (d.op->role == node_role::param) {
      const auto* e = params.find(d.name);
      if (e == nullptr)
        throw missing_error("loom::onnx::save: the parameter \"" + std::string(d.name) + "\" is not in the store");
      const tensor<T>& value = e->value;
      bool fits = value.shape().size() == static_cast<std::size_t>(d.rank);
      for (int a = 0; fits && a < d.rank; ++a) {
        const plan_dim& pd = plan.dims[static_cast<std::size_t>(i)][static_cast<std::size_t>(a)];
        if (pd.n_syms == 0 && pd.constant != value.shape()[static_cast<std::size_t>(a)]) fits = false;
      }
      if (!fits)
        throw shape_error("loom::onnx::save: the parameter \"" + std::string(d.name) + "\" is " +
                          value.dims().str() + " in the store, the graph wants " + plan.shape_text(i));
      param_nodes.push_back(i);
      param_bytes += static_cast<std::size_t>(value.size()) * sizeof(T);
      w.set_value(i, std::string(d.name));
    }
  }
  // Parameters bind the dims no input binds (a vocabulary size learnt at run time).
  for (int i : param_nodes) {
    const node_desc& d = *plan.order[static_cast<std::size_t>(i)];
    const tensor<T>& value = params.find(d.name)->value;
    for (int a = 0; a < d.rank; ++a) {
      const plan_dim& pd = plan.dims[static_cast<std::size_t>(i)][static_cast<std::size_t>(a)];
      if (pd.n_syms == 1 && pd.constant == 0) w.bind_sym(pd.sym[0], {{}, 0, static_cast<long>(value.shape()[static_cast<std::size_t>(a)])});
    }
  }
  for (int i = 0; i < plan.size(); ++i)
    if (plan.order[static_cast<std::size_t>(i)]->op->role == node_role::op) w.emit(i);

  // Outputs: the graph's, then every other named node; a state's as present_prefix + name.
  std::vector<std::pair<int, std::string>> outputs;
  auto name_of_named = [&](int node) {
    const std::string n(plan.order[static_cast<std::size_t>(node)]->name);
    return plan.is_state(node) ? options.present_prefix + n : n;
  };
  if (!options.output_names.empty() && options.output_names.size() != plan.roots.size())
    throw value_error("loom::onnx::save: " + std::to_string(options.output_names.size()) + " output names for " +
                      std::to_string(plan.roots.size()) + " outputs");
  for (std::size_t k = 0; k < plan.roots.size(); ++k) {
    const int node = plan.roots[k];
    std::string name = !options.output_names.empty() ? options.output_names[k]
                       : plan.order[static_cast<std::size_t>(node)]->op->is_named_output ? name_of_named(node)
                                                                                        : "output" + std::to_string(k);
    outputs.emplace_back(node, std::move(name));
  }
  for (int node : plan.named)
    if (std::none_of(outputs.begin(), outputs.end(), [&](const auto& o) { return o.first == node; }))
      outputs.emplace_back(node, name_of_named(node));
  std::set<std::string> taken;
  for (int i = 0; i < plan.size(); ++i)
    if (plan.order[static_cast<std::size_t>(i)]->op->role == node_role::input) taken.emplace(plan.order[static_cast<std::size_t>(i)]->name);
  for (const auto& [node, name] : outputs) {
    if (!taken.insert(name).second)
      throw value_error("loom::onnx::save: the output name \"" + name + "\" is taken by an input or another output");
    auto* n = graph.add_node();
    n->set_op_type("Identity");
    n->set_name("output/" + name);
    n->add_input(w.value(node));
    n->add_output(name);
    auto* v = graph.add_output();
    v->set_name(name);
    set_type(*v, plan, node, real);
  }

  // Parameters last, so that the constants the mappings made come first in the file's order.
  for (int i : param_nodes) {
    const node_desc& d = *plan.order[static_cast<std::size_t>(i)];
    const tensor<T>& value = params.find(d.name)->value;
    auto* t = graph.add_initializer();
    t->set_name(std::string(d.name));
    t->set_data_type(real);
    for (auto s : value.shape()) t->add_dims(s);
    set_raw(*t, value);
  }

  try {
    pb::checker::check_model(model);
    pb::ModelProto inferred = model;
    pb::shape_inference::InferShapes(inferred, pb::OpSchemaRegistry::Instance(),
                                      pb::ShapeInferenceOptions(/*check_type=*/true, /*strict=*/1));
  } catch (const std::exception& e) {
    throw error(std::string("loom::onnx::save: ONNX's checker refuses the model: ") + e.what());
  }

  if (options.external_data || param_bytes > inline_limit) {
    const std::string data_name = base_name(path) + ".data";
    std::string data;
    for (auto& t : *graph.mutable_initializer()) {
      if (!t.has_raw_data() || t.raw_data().size() < 1024) continue;
      data.resize((data.size() + 63) / 64 * 64, '\0');  // each tensor on a 64-byte boundary
      const std::size_t offset = data.size();
      data += t.raw_data();
      t.clear_raw_data();
      t.set_data_location(pb::TensorProto::EXTERNAL);
      const std::pair<const char*, std::string> entries[] = {
          {"location", data_name}, {"offset", std::to_string(offset)}, {"length", std::to_string(data.size() - offset)}};
      for (const auto& [key, val] : entries) {
        auto* e = t.add_external_data();
        e->set_key(key);
        e->set_value(val);
      }
    }
    detail::write_file_atomically(path + ".data", data, "loom::onnx::save");
  }
  std::string bytes;
  if (!model.SerializeToString(&bytes)) throw io_error("loom::onnx::save: the model could not be serialised: " + path);
  detail::write_file_atomically(path, bytes, "loom::onnx::save");
}

void check_file(const std::string& path) {
  if (!std::ifstream(path).good()) throw io_error("loom::onnx::check_file: cannot read " + path);
  try {
    pb::checker::check_model(path);
  } catch (const std::exception& e) {
    throw error("loom::onnx::check_file: " + path + ": " + e.what());
  }
}

template void save<float>(const plan_view&, const param_store<float>&, const std::string&, const export_options&);
template void save<double>(const plan_view&, const param_store<double>&, const std::string&, const export_options&);

}  // namespace loom::onnx
