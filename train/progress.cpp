// The live progress line and the CSV metrics log.
#include "loom/train/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <iterator>
#include <limits>

#include "../core/atomic_file.hpp"
#include "loom/core/errors.hpp"

namespace loom {

namespace {

// 42 s -> "0:42", 3725 s -> "1:02:05".
std::string clock_time(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

// 850 -> "850", 12345 -> "12.3k", 4.2e6 -> "4.2M".
std::string rate(double per_second) {
  char buf[32];
  if (per_second < 1e3)
    std::snprintf(buf, sizeof buf, "%.0f", per_second);
  else if (per_second < 1e6)
    std::snprintf(buf, sizeof buf, "%.1fk", per_second / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.1fM", per_second / 1e6);
  return buf;
}

}  // namespace

progress_line::progress_line(long total_steps, progress_options options)
    : total_(total_steps), options_(std::move(options)) {
  if (options_.print_every < 1)
    throw value_error("progress_line: print_every must be at least 1, got " + std::to_string(options_.print_every));
  if (!options_.out) options_.out = stderr;
  terminal_ = options_.mode == progress_mode::terminal ||
              (options_.mode == progress_mode::automatic && ::isatty(::fileno(options_.out)));
  start_ = now();
}

progress_line::~progress_line() {
  finish();
}

double progress_line::now() const {
  if (options_.clock) return options_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string progress_line::status(double elapsed) {
  if (loss_count_ > 0) shown_loss_ = loss_sum_ / static_cast<double>(loss_count_);
  loss_sum_ = 0, loss_count_ = 0;
  char loss[32];
  std::snprintf(loss, sizeof loss, "%.4g", shown_loss_);
  std::string line = "step " + std::to_string(step_);
  if (total_ > 0) line += "/" + std::to_string(total_);
  line += "  loss " + std::string(loss);
  if (elapsed > 0) line += "  " + rate(tokens_ / elapsed) + " tok/s";
  line += "  elapsed " + clock_time(elapsed);
  if (total_ > 0 && step_ > 0)
    line +=
        "  ETA " + clock_time(elapsed * static_cast<double>(std::max(0L, total_ - step_)) / static_cast<double>(step_));
  return line;
}

void progress_line::show() {
  const double t = now();
  const std::string line = status(t - start_);
  if (terminal_)
    std::fprintf(options_.out, "\r%s\x1b[K", line.c_str());  // \x1b[K clears the rest of a longer old line
  else
    std::fprintf(options_.out, "%s\n", line.c_str());
  std::fflush(options_.out);
  last_draw_ = t;
  shown_step_ = step_;
}

void progress_line::update(long step, double loss, long tokens) {
  if (finished_) return;
  step_ = step;
  tokens_ += static_cast<double>(tokens);
  loss_sum_ += loss, ++loss_count_;
  const bool last = total_ > 0 && step >= total_;
  if (terminal_ ? (last || now() - last_draw_ >= options_.redraw_seconds) : (last || step % options_.print_every == 0))
    show();
}

void progress_line::note(std::string_view message) {
  if (terminal_ && shown_step_ >= 0) std::fprintf(options_.out, "\r\x1b[K");
  std::fprintf(options_.out, "%.*s\n", static_cast<int>(message.size()), message.data());
  if (terminal_ && shown_step_ >= 0 && !finished_) {
    shown_step_ = -1;  // redraw the live line below the message
    show();
  }
  std::fflush(options_.out);
}

void progress_line::finish() {
  if (finished_) return;
  finished_ = true;
  if (step_ > 0 && shown_step_ != step_) show();
  if (terminal_ && shown_step_ >= 0) std::fprintf(options_.out, "\n");
  std::fflush(options_.out);
}

csv_log::csv_log(const std::string& path, std::vector<std::string> columns)
    : path_(path), columns_(std::move(columns)) {
  check_columns(path_, columns_);
  // the header as a whole new file (written, then renamed over the path): a crash leaves the
  // old file or the header, never an empty file (an ofstream creates the file before it writes)
  detail::write_file_atomically(path_, header_line(columns_) + '\n', "csv_log");
  open_for_append();
}

csv_log::csv_log(const std::string& path, std::vector<std::string> columns, append_tag)
    : path_(path), columns_(std::move(columns)) {
  open_for_append();  // resume() checked the columns before touching the file
}

void csv_log::check_columns(const std::string& path, const std::vector<std::string>& columns) {
  if (columns.empty()) throw value_error("csv_log \"" + path + "\": no columns given");
  for (const auto& c : columns)
    if (c.find_first_of(",\"\r\n") != std::string::npos)
      throw value_error("csv_log \"" + path + "\": column name \"" + c + "\" holds a comma, quote or newline");
}

void csv_log::open_for_append() {
  out_.open(path_, std::ios::out | std::ios::app);
  if (!out_) throw io_error("csv_log: cannot open \"" + path_ + "\" for writing");
}

std::string csv_log::header_line(const std::vector<std::string>& columns) {
  std::string h;
  for (std::size_t i = 0; i < columns.size(); ++i) h += (i ? "," : "") + columns[i];
  return h;
}

csv_log csv_log::resume(const std::string& path, std::vector<std::string> columns, double last_step,
                        std::vector<std::vector<double>>* kept) {
  check_columns(path, columns);  // before the file is rewritten
  if (kept) kept->clear();
  std::ifstream in(path, std::ios::binary);
  if (!in) return csv_log(path, std::move(columns));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string header = header_line(columns);
  const std::string where = "csv_log: resuming \"" + path + "\": ";
  if (text.compare(0, header.size() + 1, header + '\n') != 0)
    throw io_error(where + "its first line is not the header \"" + header + "\"");
  std::string keep = header + '\n';
  std::size_t pos = header.size() + 1, line_number = 1;
  for (std::size_t end; (end = text.find('\n', pos)) != std::string::npos; pos = end + 1) {
    ++line_number;
    const std::string_view line(text.data() + pos, end - pos);
    std::vector<double> values;
    std::size_t cell = 0;
    for (std::size_t comma; cell <= line.size(); cell = comma + 1) {
      comma = std::min(line.find(',', cell), line.size());
      const std::string_view v = line.substr(cell, comma - cell);
      double x = std::numeric_limits<double>::quiet_NaN();
      if (!v.empty()) {
        auto [stop, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
        if (ec != std::errc() || stop != v.data() + v.size())
          throw io_error(where + "line " + std::to_string(line_number) + " holds \"" + std::string(v) +
                         "\", not a number");
      }
      values.push_back(x);
    }
    if (values.size() != columns.size())
      throw io_error(where + "line " + std::to_string(line_number) + " has " + std::to_string(values.size()) +
                     " cells for " + std::to_string(columns.size()) + " columns");
    if (!(values[0] <= last_step)) break;  // written after the checkpoint the run resumes from
    keep.append(line.data(), line.size()).push_back('\n');
    if (kept) kept->push_back(std::move(values));
  }
  detail::write_file_atomically(path, keep, "csv_log");
  return csv_log(path, std::move(columns), append_tag{});
}

void csv_log::row(std::span<const double> values) {
  if (values.size() != columns_.size())
    throw value_error("csv_log \"" + path_ + "\": row of " + std::to_string(values.size()) + " values for " +
                      std::to_string(columns_.size()) + " columns");
  std::string line;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) line += ',';
    if (std::isnan(values[i])) continue;
    char buf[64];
    const double v = values[i];
    // Whole numbers (steps, token counts) in full; others in the shortest form that reads back
    // exactly, scientific only for very small or large magnitudes ("0.0003", "3e-05").
    const bool whole = std::abs(v) < 1e15 && v == std::trunc(v);
    auto [end, ec] = whole ? std::to_chars(buf, buf + sizeof buf, static_cast<long long>(v))
                           : std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
    line.append(buf, end);
  }
  line += '\n';
  out_.write(line.data(), static_cast<std::streamsize>(line.size()));  // one write(2) at the flush
  out_.flush();
  if (!out_) throw io_error("csv_log: cannot write a row to \"" + path_ + "\"");
}

}  // namespace loom
