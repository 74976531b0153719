// The progress line (plain and terminal output, with a fake clock), the CSV log, and the SVG
// plots: well-formed XML with the expected parts.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "io_test_support.hpp"
#include "loom/core/errors.hpp"
#include "loom/train/progress.hpp"

using namespace loom;
using test::scratch_dir;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Everything written to a temporary FILE*.
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  for (int c; (c = std::fgetc(f)) != EOF;) s += static_cast<char>(c);
  return s;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto i = s.find(what); i != std::string::npos; i = s.find(what, i + what.size())) ++n;
  return n;
}

// A small well-formedness check that needs no parser: every tag closes in order, and '&' only
// starts an entity. Returns an empty string or what is wrong.
std::string xml_problem(const std::string& xml) {
  std::vector<std::string> open;
  for (std::size_t i = 0; i < xml.size(); ++i) {
    if (xml[i] == '&') {
      const auto semi = xml.find(';', i);
      if (semi == std::string::npos || semi - i > 6) return "bare '&' at " + std::to_string(i);
      continue;
    }
    if (xml[i] != '<') continue;
    const auto end = xml.find('>', i);
    if (end == std::string::npos) return "unclosed '<' at " + std::to_string(i);
    const std::string tag = xml.substr(i + 1, end - i - 1);
    i = end;
    if (tag.starts_with("?") || tag.starts_with("!")) continue;
    if (tag.starts_with("/")) {
      if (open.empty() || open.back() != tag.substr(1)) return "</" + tag.substr(1) + "> does not close its element";
      open.pop_back();
    } else if (!tag.ends_with("/")) {
      open.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
    }
  }
  return open.empty() ? "" : "<" + open.back() + "> never closed";
}

// Requires a well-formed SVG document; also parses it with Python's xml.dom.minidom when
// /usr/bin/python3 exists.
void require_well_formed(const std::string& path) {
  const std::string svg = read_text(path);
  REQUIRE(svg.find("<svg") != std::string::npos);
  REQUIRE(xml_problem(svg) == "");
  if (std::filesystem::exists("/usr/bin/python3")) {
    const std::string cmd =
        "/usr/bin/python3 -c \"import xml.dom.minidom,sys; "
        "d = xml.dom.minidom.parse(sys.argv[1]); "
        "sys.exit(d.documentElement.tagName != 'svg')\" '" +
        path + "'";
    REQUIRE(std::system(cmd.c_str()) == 0);
  }
}

}  // namespace

TEST_CASE("progress_line in plain mode prints a line every print_every steps and at the last step") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f);
  double t = 0;
  {
    progress_line progress(5, {.out = f, .mode = progress_mode::plain, .print_every = 2, .clock = [&] { return t; }});
    CHECK_FALSE(progress.redraws());
    t = 1, progress.update(1, 4.0, 1000);
    t = 2, progress.update(2, 2.0, 1000);  // mean loss 3; 2000 tokens in 2 s; 3 steps left at 1 s each
    t = 3, progress.update(3, 1.5, 1000);
    t = 80, progress.update(4, 1.25, 1000);  // mean 1.375; 4000 tokens in 80 s; 1 step left at 20 s
    t = 100, progress.update(5, 1.0, 1000);  // the last step: printed although 5 % 2 != 0
    progress.finish();
    progress.finish();
  }
  CHECK(contents(f) ==
        "step 2/5  loss 3  1.0k tok/s  elapsed 0:02  ETA 0:03\n"
        "step 4/5  loss 1.375  50 tok/s  elapsed 1:20  ETA 0:20\n"
        "step 5/5  loss 1  50 tok/s  elapsed 1:40  ETA 0:00\n");
  std::fclose(f);
}

TEST_CASE("progress_line finish prints the state of an unprinted last step, no total means no ETA") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f);
  double t = 0;
  {
    progress_line progress(0, {.out = f, .mode = progress_mode::plain, .print_every = 10, .clock = [&] { return t; }});
    t = 1, progress.update(1, 0.5, 4'000'000);
    t = 2, progress.update(2, 0.25, 4'000'000);
    t = 3725, progress.update(3, 0.75, 4'000'000);
  }  // the destructor finishes
  CHECK(contents(f) == "step 3  loss 0.5  3.2k tok/s  elapsed 1:02:05\n");
  std::fclose(f);
}

TEST_CASE("progress_line in terminal mode redraws one line with a carriage return at most once per redraw_seconds") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f);
  double t = 0;
  progress_line progress(
      10, {.out = f, .mode = progress_mode::terminal, .redraw_seconds = 0.1, .clock = [&] { return t; }});
  CHECK(progress.redraws());
  for (int k = 1; k <= 10; ++k) t = 0.04 * k, progress.update(k, 1.0, 100);  // draws at k = 1, 4, 7, 10
  progress.finish();
  const std::string out = contents(f);
  CHECK(count(out, "\r") == 4);
  CHECK(count(out, "\n") == 1);
  CHECK(out.ends_with("step 10/10  loss 1  2.5k tok/s  elapsed 0:00  ETA 0:00\x1b[K\n"));
  std::fclose(f);
}

TEST_CASE("progress_line note prints a message on its own line and redraws the live line below") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f);
  double t = 0;
  progress_line progress(10, {.out = f, .mode = progress_mode::terminal, .clock = [&] { return t; }});
  t = 1, progress.update(1, 2.0, 10);
  progress.note("valid loss 1.9");
  progress.finish();
  const std::string out = contents(f);
  CHECK(out ==
        "\rstep 1/10  loss 2  10 tok/s  elapsed 0:01  ETA 0:09\x1b[K"
        "\r\x1b[Kvalid loss 1.9\n"
        "\rstep 1/10  loss 2  10 tok/s  elapsed 0:01  ETA 0:09\x1b[K\n");
  std::fclose(f);
}

TEST_CASE("csv_log writes the header and one flushed row per call, NaN as an empty cell") {
  scratch_dir dir("csv");
  const auto path = dir.file("train.csv");
  csv_log log(path, {"step", "loss", "lr", "tokens_per_s", "valid_loss"});
  log.row({1, 4.25, 3e-4, 12345, std::nan("")});
  CHECK(read_text(path) == "step,loss,lr,tokens_per_s,valid_loss\n1,4.25,0.0003,12345,\n");  // flushed
  const std::vector<double> second = {200, 0.125, 0.001, 1.5e6, 0.5};
  log.row(second);
  CHECK(read_text(path) == "step,loss,lr,tokens_per_s,valid_loss\n1,4.25,0.0003,12345,\n200,0.125,0.001,1500000,0.5\n");
}

TEST_CASE("csv_log refuses a row of the wrong length, bad column names and unwritable paths") {
  scratch_dir dir("csv-bad");
  csv_log log(dir.file("a.csv"), {"step", "loss"});
  CHECK_THROWS_WITH(log.row({1, 2, 3}), Catch::Contains("row of 3 values for 2 columns"));
  CHECK_THROWS_AS(csv_log(dir.file("b.csv"), {"step", "lr,max"}), value_error);
  CHECK_THROWS_AS(csv_log(dir.file("c.csv"), {}), value_error);
  CHECK_THROWS_AS(csv_log(dir.file("no/such/dir/d.csv"), {"step"}), io_error);
}

TEST_CASE("a loss curve SVG is well-formed XML with both curves, a legend and an escaped title") {
  scratch_dir dir("svg-loss");
  std::vector<std::pair<double, double>> train, valid;
  for (int s = 1; s <= 3000; s += 10) train.emplace_back(s, 4.0 * std::exp(-s / 600.0) + 0.05);
  for (int s = 250; s <= 3000; s += 250) valid.emplace_back(s, 4.0 * std::exp(-s / 600.0) + 0.12);
  const auto path = dir.file("loss.svg");
  write_loss_curve_svg(path, train, valid, "numbers -> words <train & valid>");
  require_well_formed(path);
  const std::string svg = read_text(path);
  CHECK(count(svg, "<polyline") == 2);
  CHECK(count(svg, "<circle") == valid.size());  // validation points are marked
  CHECK(svg.find("numbers -&gt; words &lt;train &amp; valid&gt;") != std::string::npos);
  CHECK(svg.find(">train</text>") != std::string::npos);
  CHECK(svg.find(">valid</text>") != std::string::npos);
  CHECK(svg.find(">3000</text>") != std::string::npos);  // an x tick at the last step
}

TEST_CASE("a log-scale loss curve labels decades and leaves out non-positive and non-finite points") {
  scratch_dir dir("svg-log");
  const std::vector<std::pair<double, double>> train = {
      {0, 5.0}, {100, 0.5}, {200, 0.0}, {300, std::nan("")}, {400, 0.02}};
  const auto path = dir.file("loss.svg");
  write_loss_curve_svg(path, train, {}, "log", {.log_y = true});
  require_well_formed(path);
  const std::string svg = read_text(path);
  for (const char* label : {">0.01</text>", ">0.1</text>", ">1</text>", ">10</text>"})
    CHECK(svg.find(label) != std::string::npos);
  CHECK(svg.find("loss (log scale)") != std::string::npos);
  CHECK(count(svg, "<polyline") == 1);
  const auto points = svg.substr(svg.find("points=\""));
  CHECK(count(points.substr(0, points.find("\"/>")), ",") == 3);  // 3 of the 5 points are drawn
}

TEST_CASE("a loss curve with no points is still a well-formed, empty plot") {
  scratch_dir dir("svg-empty");
  const auto path = dir.file("empty.svg");
  write_loss_curve_svg(path, {}, {}, "nothing yet");
  require_well_formed(path);
  CHECK(read_text(path).find("<polyline") == std::string::npos);
  CHECK_THROWS_AS(write_loss_curve_svg(dir.file("no/such/dir/x.svg"), {}, {}, "x"), io_error);
}

TEST_CASE("a heat map SVG is well-formed with one shaded cell per weight and labels on both axes") {
  scratch_dir dir("svg-heat");
  const std::vector<std::string> rows = {"four", "thousand", "seventy", "one", "<eos>"};
  const std::vector<std::string> cols = {"4", "0", "7", "1"};
  tensor<float> w({5, 4});
  for (std::int64_t r = 0; r < 5; ++r)
    for (std::int64_t c = 0; c < 4; ++c) w[r * 4 + c] = r == c ? 0.85f : 0.05f;
  const auto path = dir.file("attention.svg");
  write_heatmap_svg(path, w, rows, cols, "cross-attention, layer 1", {.show_values = true});
  require_well_formed(path);
  const std::string svg = read_text(path);
  CHECK(count(svg, "<title>") == 20);  // one hover title per cell
  CHECK(svg.find(">&lt;eos&gt;</text>") != std::string::npos);
  CHECK(svg.find(">thousand</text>") != std::string::npos);
  CHECK(svg.find("linearGradient") != std::string::npos);
  CHECK(svg.find("fill=\"#f7fbff\"") == std::string::npos);  // 0 is not used ...
  CHECK(count(svg, ">0.85</text>") == 4);                    // ... the diagonal's values are printed
}

TEST_CASE("a heat map throws shape_error for weights that are not 2-d or labels of the wrong count") {
  scratch_dir dir("svg-heat-bad");
  tensor<float> w({2, 3});
  CHECK_THROWS_AS(write_heatmap_svg(dir.file("a.svg"), tensor<float>({6}), {"a"}, {"b"}, "t"), shape_error);
  CHECK_THROWS_WITH(write_heatmap_svg(dir.file("b.svg"), w, {"a", "b"}, {"x", "y"}, "t"),
                    Catch::Contains("[2, 3]") && Catch::Contains("3 column labels"));
}

TEST_CASE("a heat map and a loss plot are wide enough for their title in DejaVu Sans Bold 16 px, the widest font") {
  // In DejaVu Sans Bold, 'W' advances 1.103 em (the font's hmtx table); a centred title wider
  // than the picture would be cut on both sides.
  scratch_dir dir("svg-title");
  const std::string ws(60, 'W');
  auto width_of = [](const std::string& svg) { return std::stod(svg.substr(svg.find("width=\"") + 7)); };
  tensor<float> w({1, 2});
  write_heatmap_svg(dir.file("w.svg"), w, {"a"}, {"1", "2"}, ws);
  CHECK(width_of(read_text(dir.file("w.svg"))) >= 60 * 1.103 * 16);
  write_loss_curve_svg(dir.file("l.svg"), {{1, 1.0}, {2, 0.5}}, {}, ws);
  CHECK(width_of(read_text(dir.file("l.svg"))) >= 60 * 1.103 * 16);
}
