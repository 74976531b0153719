// Reflection of plain structs (loom/core/reflect.hpp, Boost.Hana): one declaration of a struct
// gives its fields by name — an op's attributes in its node's slots and DOT label, a model's
// configuration as a checkpoint's metadata and as the line naming the field that differs.
#include <catch2/catch.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/keys.hpp>
#include <boost/hana/length.hpp>
#include <boost/hana/string.hpp>

#include <map>
#include <string>

#include "loom/loom.hpp"
#include "loom/nn/transformer.hpp"

using namespace loom;

namespace {
struct two_fields {
  long a = 1;
  double b = 0.5;
};
struct one_forgotten {  // adapted below without `c`
  long a = 0;
  bool c = false;
};
}  // namespace
BOOST_HANA_ADAPT_STRUCT(two_fields, a, b);
BOOST_HANA_ADAPT_STRUCT(one_forgotten, a);

TEST_CASE("a reflected struct's fields come by name, in order, and a forgotten field is caught at compile time") {
  STATIC_REQUIRE(reflect::is_reflected<two_fields>);
  STATIC_REQUIRE(reflect::field_count<two_fields>() == 2);
  STATIC_REQUIRE(reflect::fields_complete<two_fields>);
  STATIC_REQUIRE_FALSE(reflect::fields_complete<one_forgotten>);
  STATIC_REQUIRE_FALSE(reflect::is_reflected<int>);
  std::string names;
  const two_fields s{7, 0.25};
  reflect::for_each_field(s, [&](const char* name, const auto&) { names += std::string(name) + ";"; });
  CHECK(names == "a;b;");
  CHECK(reflect::to_map(s, "x.") == std::map<std::string, std::string>{{"x.a", "7"}, {"x.b", "0.25"}});
}

TEST_CASE("a model configuration becomes metadata by field name, and a differing field is named") {
  constexpr nn::transformer_config c{.d_model = 32, .heads = 2, .dropout = 0.1, .norm_first = true};
  const auto m = reflect::to_map(c, "model.");
  CHECK(m.at("model.d_model") == "32");
  CHECK(m.at("model.heads") == "2");
  CHECK(m.at("model.dropout") == "0.1");
  CHECK(m.at("model.norm_first") == "true");
  CHECK(m.at("model.eps") == "1e-05");
  CHECK(m.size() == 12);  // every field of transformer_config

  auto recorded = m;
  CHECK(reflect::differences(c, recorded, "ckpt", "model.").empty());
  recorded["model.heads"] = "4";
  recorded.erase("model.eps");
  const auto d = reflect::differences(c, recorded, "ckpt", "model.");
  REQUIRE(d.size() == 2);
  CHECK(d[0] == "model.heads: 2 in this program, 4 in ckpt");
  CHECK(d[1] == "model.eps: 1e-05 in this program, not recorded in ckpt");
}

TEST_CASE("reals are written so that they read back to the same value") {
  for (double v : {0.1, 1.0 / 3.0, 1e-5, 6.02214076e23, -2.5})
    CHECK(std::stod(reflect::to_text(v)) == v);
}

TEST_CASE("an op's attributes are stored in its node, read back, and named in its DOT label") {
  auto x = input<"x", shape<fix<2>, fix<3>>>();
  auto w = param<"w", shape<fix<4>, fix<3>>>();
  auto g = make_graph(sum(scale<0.25>(matmul<false, true>(x, w))));
  const std::string dot = to_dot(g.plan());
  CHECK_THAT(dot, Catch::Contains("scale\\n[2, 4]\\nfactor=0.25\""));
  CHECK_THAT(dot, Catch::Contains("trans_a=false\\ntrans_b=true"));

  using S = decltype(slice<-1, fix<1>, dyn<"P">>(x));
  const node_desc& d = desc_of<resolve_t<S>>;
  const auto a = load_attrs<slice_attrs>(d);
  CHECK(a.axis == 1);
  CHECK(a.begin.constant == 1);
  CHECK(a.size.n_syms == 1);
  CHECK(a.size.syms[0] == "P");
  CHECK(d.attrs_text(d) == "axis=1\nbegin=1\nsize=P");
}

TEST_CASE("a feed the graph makes names one of its inputs, checked at compile time") {
  auto x = input<"x", shape<dyn<"T">, fix<3>>>();
  auto tok = input<"tok", shape<dyn<"T">>, int>();
  auto w = param<"w", shape<fix<5>, fix<3>>>();
  auto g = make_graph(sum(mul(x, embedding(tok, w))));
  STATIC_REQUIRE(g.input_named("x") >= 0);
  STATIC_REQUIRE(g.input_named("tok") >= 0);
  STATIC_REQUIRE(g.input_named("w") == -1);  // a parameter, not an input
  auto params = g.make_params<double>(1);
  auto run = g.executor<double>(params);
  const tensor<double> xs({2, 3}, {1, 2, 3, 4, 5, 6});
  run.forward({g.feed<"x">(xs), g.feed<"tok">(tensor<std::int64_t>({2}, {4, 0}))});
  double want = 0;
  for (int j = 0; j < 3; ++j) want += xs[j] * params.value("w")[4 * 3 + j] + xs[3 + j] * params.value("w")[j];
  CHECK(run.output()[0] == Approx(want).epsilon(1e-12));
  // g.feed<"y">(xs) and g.feed<"tok">(xs) do not compile (tests/compile_fail/feed_*.cpp)
}

TEST_CASE("a graph's inputs and named outputs are compile-time maps from name to port") {
  namespace hana = boost::hana;
  auto x = input<"x", shape<dyn<"T">, fix<3>>>();
  auto tok = input<"tok", shape<dyn<"T">>, int>();
  auto w = param<"w", shape<fix<5>, fix<3>>>();
  auto g = make_graph(sum(named<"hidden">(mul(x, embedding(tok, w)))));
  using G = decltype(g);
  STATIC_REQUIRE(hana::length(inputs_of(g)) == hana::size_c<2>);
  STATIC_REQUIRE(hana::contains(inputs_of(g), BOOST_HANA_STRING("x")));
  STATIC_REQUIRE(!hana::contains(inputs_of(g), BOOST_HANA_STRING("w")));  // a parameter
  STATIC_REQUIRE(std::is_same_v<input_port<G, "x">, port<dtype::real, 2>>);
  STATIC_REQUIRE(std::is_same_v<input_port<G, "tok">, port<dtype::i32, 1>>);
  STATIC_REQUIRE(hana::length(named_outputs_of(g)) == hana::size_c<1>);
  STATIC_REQUIRE(std::is_same_v<decltype(+named_outputs_of(G{})[detail::hana_key<"hidden">()])::type,
                                port<dtype::real, 2>>);
  // Every input, listed from the map (what a tool printing a graph's signature does).
  std::string listed;
  hana::for_each(hana::keys(inputs_of(g)), [&](auto name) { listed += std::string(hana::to<const char*>(name)) + ";"; });
  CHECK((listed == "tok;x;" || listed == "x;tok;"));

  // A feed with its dims written out: rank checked at compile time, dims at binding.
  auto params = g.make_params<double>(1);
  auto run = g.executor<double>(params);
  const double xs[6] = {1, 2, 3, 4, 5, 6};
  const std::int32_t ids[2] = {4, 0};
  run.forward({g.feed<"x">(xs, {2, 3}), g.feed<"tok">(ids, {2})});
  double want = 0;
  for (int j = 0; j < 3; ++j) want += xs[j] * params.value("w")[4 * 3 + j] + xs[3 + j] * params.value("w")[j];
  CHECK(run.output()[0] == Approx(want).epsilon(1e-12));
  const auto hidden = g.output<"hidden">(run);
  REQUIRE(hidden.dims.rank == 2);
  CHECK(hidden.data[0] == Approx(xs[0] * params.value("w")[12]).epsilon(1e-12));
  // Dims of the right rank but the wrong size are refused when the executor binds them.
  CHECK_THROWS_AS(run.forward({g.feed<"x">(xs, {3, 2}), g.feed<"tok">(ids, {2})}), shape_error);
  // g.feed<"tok">(ids, {1, 2}) and g.output<"hiden">(run) do not compile
  // (tests/compile_fail/feed_wrong_rank.cpp, output_unknown_name.cpp).
}
