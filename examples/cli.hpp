// Command lines of the examples: every value is checked against its range, and a bad one ends
// the program with one line on stderr and exit status 2 (--help: usage, exit 0). Parsed by
// CLI11, compiled once in examples/cli.cpp: CLI11 is header-only and costs ~6 s of compile time
// in every file that includes it, so this header does not.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/core/fixed_string.hpp"
#include "loom/core/reflect.hpp"

namespace cli {

/// A setting that carries its own command-line description: its help text and, for numbers,
/// its range. A struct of settings adapted with BOOST_HANA_ADAPT_STRUCT is then one declaration
/// of its options (command_line::options: "--<field name>", '_' written '-'), of a run's
/// metadata (loom::reflect::to_map) and of the message naming a field that differs.
/// Reads as its value (`s.steps / 20`); `.value` is the variable itself.
template <class V, loom::fixed_string Help, auto Lo = 0, auto Hi = 0>
struct setting {
  V value{};
  static constexpr std::string_view help = Help.view();
  static constexpr auto lo = Lo;
  static constexpr auto hi = Hi;
  constexpr setting() = default;
  constexpr setting(V v) : value(v) {}  // NOLINT: a setting is initialised like its value
  constexpr operator V() const { return value; }
};

/// The options of one program. Each add_* binds a variable that parse() sets when the option is
/// given (otherwise it keeps its value: the default) and returns *this.
class command_line {
 public:
  command_line(const std::string& description, const std::string& name);
  ~command_line();
  command_line(const command_line&) = delete;
  command_line& operator=(const command_line&) = delete;

  /// A whole number in [lo, hi], digits only: "3x", "-1", "0x10", "1e3" and "" are refused (CLI11
  /// alone would wrap "-1" in an unsigned option to 2^64 − 1, and takes hexadecimal). hi must
  /// fit the variable's type.
  template <class Int>
  command_line& whole(const std::string& flag, Int& value, std::uint64_t lo, std::uint64_t hi,
                      const std::string& help) {
    return add_whole(flag, [&value](std::uint64_t v) { value = static_cast<Int>(v); }, lo, hi, help);
  }
  /// A finite decimal number in [lo, hi]: "nan", "inf" and "1.5x" are refused.
  command_line& number(const std::string& flag, double& value, double lo, double hi, const std::string& help);
  /// A folder that exists or can be created, and that a file can be written in.
  command_line& folder(const std::string& flag, std::string& value, const std::string& help);
  /// A file that exists; *given (if not null) says whether the option was on the command line.
  command_line& existing_file(const std::string& flag, std::string& value, const std::string& help,
                              bool* given = nullptr);
  /// Any text.
  command_line& text(const std::string& flag, std::string& value, const std::string& help);
  /// A flag without a value.
  command_line& flag(const std::string& flag, bool& value, const std::string& help);
  /// Positional arguments, each checked by `check` (returns "" if fine, else the problem).
  command_line& positional(const std::string& name, std::vector<std::string>& values, const std::string& help,
                           std::function<std::string(const std::string&)> check);

  /// One option per field of the reflected struct `s` whose fields are settings (above):
  /// whole numbers and reals checked against the setting's range, bools as flags.
  template <class S>
  command_line& options(S& s) {
    loom::reflect::for_each_field(s, [&](const char* name, auto& field) {
      using F = std::remove_cvref_t<decltype(field)>;
      using V = decltype(field.value);
      std::string flag = std::string("--") + name;
      for (char& c : flag)
        if (c == '_') c = '-';
      const std::string help(F::help);
      if constexpr (std::is_same_v<V, bool>) this->flag(flag, field.value, help);
      else if constexpr (std::is_integral_v<V>) whole(flag, field.value, F::lo, F::hi, help);
      else if constexpr (std::is_same_v<V, double>) number(flag, field.value, F::lo, F::hi, help);
      else text(flag, field.value, help);
    });
    return *this;
  }

  /// Parses: --help prints the usage and exits 0; a bad value or an unknown option fails as
  /// below, naming the option.
  void parse(int argc, char** argv);
  /// Ends the program with one line, "<program>: <message>", and exit status 2. Messages of
  /// several lines (a checkpoint's list of differences) are joined with "; ". Under an MPI
  /// launcher only rank 0 prints it (every rank finds the same problem).
  [[noreturn]] void fail(const std::string& message) const;
  /// Prints the line fail() prints, and returns.
  void report(const std::string& message) const;

 private:
  command_line& add_whole(const std::string& flag, std::function<void(std::uint64_t)> set, std::uint64_t lo,
                          std::uint64_t hi, const std::string& help);
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// "" if `path` is a folder that exists or could be made (it is made) and can be written in;
/// otherwise what is wrong.
std::string writable_folder(const std::string& path);

}  // namespace cli
