// The examples' command lines with CLI11, compiled once (see cli.hpp).
#include "cli.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>

#include <CLI/CLI.hpp>

namespace cli {
namespace {

CLI::Validator whole_number(std::uint64_t lo, std::uint64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
          return "\"" + s + "\" is not a whole number";
        std::uint64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi)
          return s + " is not in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        return {};
      },
      "", "whole_number");  // described by the option's type name
}

CLI::Validator finite_number(double lo, double hi) {
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

const CLI::Validator folder_check([](std::string& s) { return writable_folder(s); }, "DIR", "writable_folder");

}  // namespace

struct command_line::impl {
  CLI::App app;
  std::deque<std::string> texts;  // whole numbers, parsed as text after their check
  std::vector<std::function<void()>> after;  // assignments once parsed
  impl(const std::string& description, const std::string& name) : app(description, name) {}
};

command_line::command_line(const std::string& description, const std::string& name)
    : impl_(std::make_unique<impl>(description, name)) {}

command_line::~command_line() = default;

command_line& command_line::add_whole(const std::string& flag, std::function<void(std::uint64_t)> set,
                                      std::uint64_t lo, std::uint64_t hi, const std::string& help) {
  std::string& text = impl_->texts.emplace_back();
  CLI::Option* option = impl_->app.add_option(flag, text, help)
                            ->check(whole_number(lo, hi))
                            ->type_name("INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  impl_->after.push_back([option, &text, set = std::move(set)] {
    if (option->count() > 0) set(std::stoull(text));  // checked: digits only, in range
  });
  return *this;
}

command_line& command_line::number(const std::string& flag, double& value, double lo, double hi,
                                   const std::string& help) {
  impl_->app.add_option(flag, value, help)->check(finite_number(lo, hi));
  return *this;
}

command_line& command_line::folder(const std::string& flag, std::string& value, const std::string& help) {
  impl_->app.add_option(flag, value, help)->check(folder_check);
  return *this;
}

command_line& command_line::existing_file(const std::string& flag, std::string& value, const std::string& help,
                                          bool* given) {
  CLI::Option* option = impl_->app.add_option(flag, value, help)->check(CLI::ExistingFile);
  if (given) impl_->after.push_back([option, given] { *given = option->count() > 0; });
  return *this;
}

command_line& command_line::text(const std::string& flag, std::string& value, const std::string& help) {
  impl_->app.add_option(flag, value, help);
  return *this;
}

command_line& command_line::flag(const std::string& flag, bool& value, const std::string& help) {
  impl_->app.add_flag(flag, value, help);
  return *this;
}

command_line& command_line::positional(const std::string& name, std::vector<std::string>& values,
                                       const std::string& help, std::function<std::string(const std::string&)> check) {
  impl_->app.add_option(name, values, help)
      ->check(CLI::Validator([check = std::move(check)](std::string& s) { return check(s); }, "VALUE", name));
  return *this;
}

void command_line::parse(int argc, char** argv) {
  try {
    impl_->app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::exit(impl_->app.exit(e));
  } catch (const CLI::ParseError& e) {
    fail(std::string(e.what()) + " (see --help)");
  }
  for (const auto& assign : impl_->after) assign();
}

namespace {
/// The rank an MPI launcher gave this process (from its environment), 0 when there is none.
long launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* value = std::getenv(name)) return std::strtol(value, nullptr, 10);
  return 0;
}
}  // namespace

void command_line::fail(const std::string& message) const {
  if (launcher_rank() == 0) report(message);
  std::exit(2);
}

void command_line::report(const std::string& message) const {
  std::string line;
  int lines = 0, more = 0;
  for (std::size_t pos = 0; pos < message.size();) {
    const std::size_t end = std::min(message.find('\n', pos), message.size());
    if (++lines <= 4) line += (lines > 1 ? ";" : "") + message.substr(pos, end - pos);
    else ++more;
    pos = end + 1;
  }
  if (more > 0) line += "; and " + std::to_string(more) + " more";
  std::fprintf(stderr, "%s: %s\n", impl_->app.get_name().c_str(), line.c_str());
}

std::string writable_folder(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return "cannot create the folder \"" + path + "\": " + ec.message();
  const std::string probe = (std::filesystem::path(path) / ".loom-write-test").string();
  std::FILE* f = std::fopen(probe.c_str(), "w");
  if (!f) return "cannot write in the folder \"" + path + "\"";
  std::fclose(f);
  std::filesystem::remove(probe, ec);
  return {};
}

}  // namespace cli
