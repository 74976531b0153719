// Graphviz DOT output of a plan: one box per node (op name and shape; inputs and parameters by
// name), the outputs doubly outlined.
#include <sstream>

#include "loom/graph/graph.hpp"

namespace loom {

std::string to_dot(const plan_view& plan) {
  std::ostringstream o;
  o << "digraph loom {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n";
  for (int i = 0; i < plan.size(); ++i) {
    const node_desc* d = plan.order[static_cast<std::size_t>(i)];
    const std::string dims = plan.shape_text(i);
    o << "  n" << i << " [label=\"";
    if (d->op->role == node_role::input) o << "input " << d->name << "\\n" << dims << "\", shape=box, style=filled, fillcolor=\"#dbe9f6\"";
    else if (d->op->role == node_role::param) o << d->name << "\\n" << dims << "\", shape=box, style=\"rounded,filled\", fillcolor=\"#fde9c9\"";
    else if (d->op->is_named_output) o << d->op->name << "\\n\\\"" << d->name << "\\\"\\n" << dims << "\", shape=ellipse, style=filled, fillcolor=\"#e3f1dc\"";
    else {
      o << d->op->name << "\\n" << dims;
      if (d->attrs_text) {  // the op's attributes, one per line: "factor=0.125"
        o << "\\n";
        for (char c : d->attrs_text(*d)) o << (c == '\n' ? std::string("\\n") : c == '"' ? std::string("\\\"") : std::string(1, c));
      }
      o << "\", shape=ellipse";
    }
    o << "];\n";
  }
  for (int i = 0; i < plan.size(); ++i)
    for (int j : plan.inputs(i)) o << "  n" << j << " -> n" << i << ";\n";
  for (int r : plan.roots) o << "  n" << r << " [peripheries=2];\n";
  o << "}\n";
  return o.str();
}


}  // namespace loom
