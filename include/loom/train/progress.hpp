// Watching a training run: a live progress line, a CSV log of metrics, and standalone SVG plots
// (loss curves, attention heat maps) to open in a browser.
//
//   progress_line progress(total_steps);
//   csv_log log("train.csv", {"step", "loss", "lr", "tokens_per_s", "valid_loss"});
//   for (long step = 1; step <= total_steps; ++step) { ...; progress.update(step, loss, batch_tokens); }
//   progress.finish();
//   write_loss_curve_svg("loss.svg", train_points, valid_points, "loss", {.log_y = true});
#pragma once

#include <cstdio>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/core/tensor.hpp"

namespace loom {

/// How progress_line shows itself: redrawn in place on a terminal, or plain lines (for logs and
/// pipes). automatic picks terminal when the output stream is a terminal.
enum class progress_mode { automatic, terminal, plain };

struct progress_options {
  std::FILE* out = stderr;
  progress_mode mode = progress_mode::automatic;
  long print_every = 100;           // plain mode: one line every this many steps (and at the last)
  double redraw_seconds = 0.1;      // terminal mode: at most one redraw per this many seconds
  std::function<double()> clock{};  // seconds since any fixed point; a steady clock when empty
};

/// One status line, "step 120/3000  loss 1.234  12.3k tok/s  elapsed 0:42  ETA 3:15". The loss
/// shown is the mean of the losses given since the previous line or redraw; tok/s is the tokens
/// given so far over the time since construction. Not thread-safe: update from one thread.
class progress_line {
 public:
  /// A progress line for a run of total_steps steps (<= 0: unknown; no total and no ETA).
  /// Throws value_error if print_every < 1.
  explicit progress_line(long total_steps, progress_options options = {});
  ~progress_line();
  progress_line(const progress_line&) = delete;
  progress_line& operator=(const progress_line&) = delete;

  /// Records that step `step` (counting from 1) ended with this loss after processing `tokens`
  /// tokens, and redraws or prints if it is time to.
  void update(long step, double loss, long tokens);
  /// Prints a message on its own line without breaking the live line (e.g. a validation result).
  void note(std::string_view message);
  /// Shows the last state and ends the line; later calls do nothing. The destructor calls it.
  void finish();
  /// Whether the line is redrawn in place (terminal mode).
  bool redraws() const { return terminal_; }

 private:
  double now() const;
  std::string status(double elapsed);
  void show();
  long total_;
  progress_options options_;
  bool terminal_;
  double start_, last_draw_ = -1e300;
  long step_ = 0, shown_step_ = -1;
  double tokens_ = 0, loss_sum_ = 0, shown_loss_ = 0;
  long loss_count_ = 0;
  bool finished_ = false;
};

/// A CSV file of metrics: a header of the given columns, then one row per call, each written
/// whole by one write(2) and flushed at once, so that a crashed or running job leaves a
/// readable file. NaN is written as an empty cell (e.g. valid_loss on steps without
/// validation); numbers in shortest round-trip form.
class csv_log {
 public:
  /// Creates (replaces) the file with the header, atomically: a crash leaves the old file or
  /// the header, never an empty or partial one. Throws io_error if it cannot be written,
  /// value_error if there are no columns or a name holds ',', '"' or a newline (before touching
  /// the file).
  csv_log(const std::string& path, std::vector<std::string> columns);
  /// Continues the log of a run resumed at `last_step`: keeps the header and the rows whose
  /// first column is at most last_step (later rows, written after the checkpoint the run
  /// resumes from, and a last line cut short by a crash are dropped), rewrites the file whole
  /// (atomically) and appends to it. A missing file starts a new log. Stores the kept rows in
  /// *kept (empty cells as NaN) when given. Throws io_error if the file's header is not
  /// `columns` or a kept row is not numbers, one per column, value_error for columns the
  /// constructor refuses; the file is left as it was then.
  static csv_log resume(const std::string& path, std::vector<std::string> columns, double last_step,
                        std::vector<std::vector<double>>* kept = nullptr);
  /// Appends one row; throws value_error unless there is one value per column, io_error if the
  /// write fails.
  void row(std::span<const double> values);
  void row(std::initializer_list<double> values) { row(std::span<const double>(values.begin(), values.size())); }
  const std::vector<std::string>& columns() const { return columns_; }

 private:
  struct append_tag {};
  csv_log(const std::string& path, std::vector<std::string> columns, append_tag);
  static void check_columns(const std::string& path, const std::vector<std::string>& columns);
  static std::string header_line(const std::vector<std::string>& columns);  // without its newline
  void open_for_append();
  std::string path_;
  std::vector<std::string> columns_;
  std::ofstream out_;
};

struct loss_plot_options {
  bool log_y = false;  // logarithmic loss axis (non-positive values are left out)
  std::string x_label = "step", y_label = "loss";
  std::string train_name = "train", valid_name = "valid";
  int width = 720, height = 440;  // pixels
};

/// Writes a standalone SVG of loss curves: (x, y) points of training and validation loss as two
/// polylines, with axes, ticks, grid, labels and a legend. Either series may be empty; points
/// that are not finite are left out. Throws io_error if the file cannot be written.
void write_loss_curve_svg(const std::string& path, const std::vector<std::pair<double, double>>& train,
                          const std::vector<std::pair<double, double>>& valid, std::string title,
                          const loss_plot_options& options = {});

struct heatmap_options {
  std::string row_axis = "generated", col_axis = "source";  // axis names
  bool show_values = false;                                 // print each weight in its cell
};

/// Writes a standalone SVG heat map of weights [rows, cols] in [0, 1] (e.g. cross-attention:
/// rows the generated target tokens, columns the source tokens): cells shaded by weight, labels
/// on both axes, a colour scale; hovering a cell shows its value. Throws shape_error if weights
/// is not rank 2 or the label counts differ from its dims, io_error if the file cannot be written.
void write_heatmap_svg(const std::string& path, const tensor<float>& weights,
                       const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels,
                       std::string title, const heatmap_options& options = {});

}  // namespace loom
