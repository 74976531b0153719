// onnx_node_suite: ONNX's backend node tests (Debian's libonnx-testdata) run against loom.
//
//   onnx_node_suite DATA_DIR [--report FILE] [--only SUBSTRING]
//
// DATA_DIR holds one folder per case (model.onnx, test_data_set_*/input_N.pb, output_N.pb). For
// every case the generated loom graph (generate_cases.py) is run on the case's inputs and its
// outputs compared with the expected ones at ONNX's own tolerance (rtol 1e-3, atol 1e-7). One
// line per case — passed, failed (max abs err …), or not applicable (reason) — then the totals,
// on standard output and in FILE. The exit status is 1 when an applicable case fails that is
// not one of the documented differences (generate_cases.py, DOCUMENTED_DIFFERENCES), when a
// documented difference no longer shows, or when no case passed at all (without --only); 2 for
// a missing data folder or a bad command line.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "onnx_node_support.hpp"

namespace {

std::string error_text(double e) {
  if (std::isnan(e)) return "nan";
  std::ostringstream s;
  s.precision(3);
  s << e;
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::string data_dir, report_path, only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--report" && i + 1 < argc) report_path = argv[++i];
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (data_dir.empty() && a.rfind("--", 0) != 0) data_dir = a;
    else {
      std::cerr << "usage: onnx_node_suite DATA_DIR [--report FILE] [--only SUBSTRING]\n";
      return 2;
    }
  }
  if (data_dir.empty()) {
    std::cerr << "usage: onnx_node_suite DATA_DIR [--report FILE] [--only SUBSTRING]\n";
    return 2;
  }
  const auto cases = onnx_node::all_cases();
  if (!fs::is_directory(data_dir) || cases.empty()) {
    std::cerr << "onnx_node_suite: no ONNX node tests in " << data_dir
              << (fs::is_directory(data_dir) ? " when the suite was generated" : " (no such folder)")
              << ". They come with Debian's package libonnx-testdata (installed by scripts/setup); "
                 "install it, then configure and build again so that the cases are generated.\n";
    return 2;
  }

  std::ofstream report_file;
  if (!report_path.empty()) {
    report_file.open(report_path);
    if (!report_file) {
      std::cerr << "onnx_node_suite: cannot write " << report_path << "\n";
      return 2;
    }
  }
  auto out = [&](const std::string& line) {
    std::cout << line << '\n';
    if (report_file) report_file << line << '\n';
  };

  int passed = 0, tight = 0, failed = 0, documented = 0, not_applicable = 0, documented_passing = 0;
  std::vector<std::string> undocumented_failures;
  for (const auto& c : cases) {
    if (!only.empty() && c.name.find(only) == std::string::npos) continue;
    if (!c.not_applicable.empty()) {
      ++not_applicable;
      out(c.name + ": not applicable (" + c.not_applicable + ")");
      continue;
    }
    const fs::path dir = fs::path(data_dir) / c.name;
    onnx_node::case_result r;
    if (fs::is_directory(dir)) r = onnx_node::run_case(c, dir);
    else r.detail = "its folder is missing";
    if (r.passed) {
      ++passed;
      tight += r.within_tight;
      std::string line = c.name + ": passed";
      if (!c.documented.empty()) {
        ++documented_passing;
        line += " [listed as a documented difference, which no longer shows: " + c.documented + "]";
      }
      out(line);
      continue;
    }
    ++failed;
    std::string line = c.name + ": failed (" +
                       (r.compared ? "max abs err " + error_text(r.max_abs_err) + (r.detail.empty() ? "" : "; ") : "") +
                       r.detail + ")";
    if (!c.documented.empty()) {
      ++documented;
      line += " [documented difference: " + c.documented + "]";
    } else {
      undocumented_failures.push_back(c.name);
    }
    out(line);
  }

  std::ostringstream totals;
  totals << "totals: " << passed << " passed, " << failed << " failed (" << documented
         << " of them documented differences), " << not_applicable << " not applicable, of "
         << passed + failed + not_applicable << " cases";
  out("");
  out(totals.str());
  out("tolerance: ONNX's node-test default, |loom - expected| <= 1e-7 + 1e-3 * |expected|; " + std::to_string(tight) +
      " of the " + std::to_string(passed) + " passed cases are also within 1e-6 + 1e-5 * |expected|");
  int status = 0;
  if (documented_passing) {  // the table must stay true: a difference that went away is removed from it
    out(std::to_string(documented_passing) + " documented difference(s) no longer show: remove them from the table");
    status = 1;
  }
  if (!undocumented_failures.empty()) {
    std::string names;
    for (const auto& n : undocumented_failures) names += " " + n;
    out("undocumented failures:" + names);
    status = 1;
  }
  if (only.empty() && passed == 0) {  // every case found not applicable: the generator, not loom, is wrong
    out("no case passed: is the generator reading the cases?");
    status = 1;
  }
  return status;
}
