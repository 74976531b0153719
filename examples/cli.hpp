// Command lines of the examples, parsed with CLI11: every value is checked against its range,
// and a bad one ends the program with one line on stderr and exit status 2 (--help: usage, 0).
#pragma once

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

namespace cli {

/// A whole number in [lo, hi], digits only: "3x", "-1", "0x10", "1e3" and "" are refused (CLI11
/// alone would wrap "-1" in an unsigned option to 2^64 − 1, and takes hexadecimal).
inline CLI::Validator whole_number(std::uint64_t lo = 0, std::uint64_t hi = UINT64_MAX) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        std::uint64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
          return "\"" + s + "\" is not a whole number";
        if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi)
          return s + " is not in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        return {};
      },
      "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", "whole_number");
}

/// A finite decimal number in [lo, hi]: "nan", "inf" and "1.5x" are refused.
inline CLI::Validator number(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v))
          return "\"" + s + "\" is not a finite number";
        if (v < lo || v > hi) return s + " is not in [" + CLI::detail::to_string(lo) + ", " + CLI::detail::to_string(hi) + "]";
        return {};
      },
      "NUMBER", "number");
}

/// A folder that exists or can be created, and that a file can be written in.
inline const CLI::Validator writable_folder(
    [](std::string& s) -> std::string {
      std::error_code ec;
      std::filesystem::create_directories(s, ec);
      if (ec) return "cannot create the folder \"" + s + "\": " + ec.message();
      const std::string probe = (std::filesystem::path(s) / ".loom-write-test").string();
      std::FILE* f = std::fopen(probe.c_str(), "w");
      if (!f) return "cannot write in the folder \"" + s + "\"";
      std::fclose(f);
      std::filesystem::remove(probe, ec);
      return {};
    },
    "DIR", "writable_folder");

/// Ends the program with one line: "<program>: <message>" and exit status 2. Messages of
/// several lines (a checkpoint's list of differences) are joined with "; ".
[[noreturn]] inline void fail(const CLI::App& app, const std::string& message) {
  std::string line;
  int lines = 0, more = 0;
  for (std::size_t pos = 0; pos < message.size();) {
    const std::size_t end = std::min(message.find('\n', pos), message.size());
    if (++lines <= 4) line += (lines > 1 ? ";" : "") + message.substr(pos, end - pos);
    else ++more;
    pos = end + 1;
  }
  if (more > 0) line += "; and " + std::to_string(more) + " more";
  std::fprintf(stderr, "%s: %s\n", app.get_name().c_str(), line.c_str());
  std::exit(2);
}

/// Parses the command line: --help prints the usage and exits 0; a bad value or an unknown
/// option fails as above, naming the option.
inline void parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    fail(app, std::string(e.what()) + " (see --help)");
  }
}

}  // namespace cli
