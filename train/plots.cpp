// Standalone SVG plots: loss curves and attention heat maps. Plain SVG 1.1, no scripts, no
// external resources, so a browser or any SVG viewer shows them as they are.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string_view>

#include "../core/atomic_file.hpp"
#include "loom/core/errors.hpp"
#include "loom/train/progress.hpp"

namespace loom {

namespace {

std::string escape_xml(std::string_view s) {
  std::string r;
  for (char ch : s) {
    switch (ch) {
      case '&':
        r += "&amp;";
        break;
      case '<':
        r += "&lt;";
        break;
      case '>':
        r += "&gt;";
        break;
      case '"':
        r += "&quot;";
        break;
      case '\'':
        r += "&apos;";
        break;
      default:
        r += ch;
    }
  }
  return r;
}

// A pixel coordinate.
std::string px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A tick label: 0.05 -> "0.05", 2500 -> "2500", 25000 -> "25k", 1.5e6 -> "1.5M".
std::string tick_label(double v) {
  char buf[32];
  const double a = std::abs(v);
  if (a >= 1e6 && a < 1e12)
    std::snprintf(buf, sizeof buf, "%gM", v / 1e6);
  else if (a >= 1e4 && a < 1e6)
    std::snprintf(buf, sizeof buf, "%gk", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Whole or not at all: a plot being rewritten while its job is killed stays the old plot.
void write_file(const std::string& path, const std::string& content, const char* fn) {
  detail::write_file_atomically(path, content, fn);
}

// Advance widths of ASCII 32..126 in DejaVu Sans and DejaVu Sans Bold (the first font the
// plots ask for, and the widest of them), in thousandths of an em, read from the fonts' hmtx
// tables. Other bytes count as 1 em per character (UTF-8 continuation bytes as nothing).
constexpr short dejavu_regular[95] = {
    318, 401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337, 636, 636, 636, 636,
    636, 636, 636, 636, 636, 636, 337, 337, 838, 838, 838, 531, 1000, 684, 686, 698, 770, 632, 575, 775,
    752, 295, 295, 656, 557, 863, 748, 787, 603, 787, 695, 635, 611, 732, 684, 989, 685, 611, 685, 390,
    337, 390, 838, 500, 500, 613, 635, 550, 635, 615, 352, 635, 634, 278, 278, 579, 278, 974, 634, 612,
    635, 635, 411, 521, 392, 634, 592, 818, 592, 592, 525, 636, 337, 636, 838};
constexpr short dejavu_bold[95] = {
    348, 456, 521, 838, 696, 1002, 872, 306, 457, 457, 523, 838, 380, 415, 380, 365, 696, 696, 696, 696,
    696, 696, 696, 696, 696, 696, 400, 400, 838, 838, 838, 580, 1000, 774, 762, 734, 830, 683, 683, 821,
    837, 372, 372, 775, 637, 995, 837, 850, 733, 850, 770, 720, 682, 812, 774, 1103, 771, 724, 725, 457,
    365, 457, 838, 500, 500, 675, 716, 593, 716, 678, 435, 716, 712, 343, 343, 665, 343, 1042, 712, 687,
    716, 716, 493, 595, 478, 712, 652, 924, 645, 652, 582, 712, 365, 712, 838};

// Width in pixels of a text in the plots' font at `size` pixels.
double text_width(std::string_view s, double size, bool bold = false) {
  double em = 0;
  for (unsigned char ch : s) {
    if (ch >= 32 && ch < 127) em += (bold ? dejavu_bold : dejavu_regular)[ch - 32] / 1000.0;
    else if ((ch & 0xC0) != 0x80) em += 1.0;
  }
  return em * size;
}

std::string svg_open(int width, int height) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
         std::to_string(width) + "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) +
         " " + std::to_string(height) +
         "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n<rect width=\"100%\" "
         "height=\"100%\" fill=\"white\"/>\n";
}

std::string text(double x, double y, std::string_view s, std::string_view attrs = "") {
  return "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\"" + (attrs.empty() ? "" : " ") + std::string(attrs) + ">" +
         escape_xml(s) + "</text>\n";
}

std::string line(double x1, double y1, double x2, double y2, std::string_view attrs) {
  return "<line x1=\"" + px(x1) + "\" y1=\"" + px(y1) + "\" x2=\"" + px(x2) + "\" y2=\"" + px(y2) + "\" " +
         std::string(attrs) + "/>\n";
}

// ---- loss curves ----

// An axis: its range, labelled ticks and unlabelled minor ticks, linear or log10.
struct axis {
  double lo, hi;
  bool log;
  std::vector<double> major, minor;

  // Position of v between pixel a (at lo) and pixel b (at hi).
  double to_px(double v, double a, double b) const {
    const double t = log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) : (v - lo) / (hi - lo);
    return a + t * (b - a);
  }
};

// A step of 1, 2 or 5 times a power of ten giving about `count` intervals over range.
double nice_step(double range, int count) {
  const double raw = range / count;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / p;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
}

axis linear_axis(double lo, double hi, int count) {
  if (!(hi > lo)) {  // one value (or none): a unit-wide range around it
    const double half = lo == 0 ? 1.0 : std::abs(lo) * 0.5;
    lo -= half, hi += half;
  }
  const double step = nice_step(hi - lo, count);
  axis a{std::floor(lo / step) * step, std::ceil(hi / step) * step, false, {}, {}};
  for (double k = std::round(a.lo / step); k * step <= a.hi + step * 1e-9; ++k)
    a.major.push_back(std::abs(k) < 1e-9 ? 0.0 : k * step);
  return a;
}

axis log_axis(double lo, double hi) {
  double e_lo = std::floor(std::log10(lo)), e_hi = std::ceil(std::log10(hi));
  if (e_hi <= e_lo) e_hi = e_lo + 1;
  axis a{std::pow(10.0, e_lo), std::pow(10.0, e_hi), true, {}, {}};
  const bool few_decades = e_hi - e_lo <= 2;
  for (double e = e_lo; e <= e_hi; ++e) {
    const double decade = std::pow(10.0, e);
    a.major.push_back(decade);
    if (e == e_hi) break;
    for (int m = 2; m <= 9; ++m) (few_decades && (m == 2 || m == 5) ? a.major : a.minor).push_back(m * decade);
  }
  return a;
}

using series = std::vector<std::pair<double, double>>;

series usable(const series& points, bool log_y) {
  series r;
  for (auto [x, y] : points)
    if (std::isfinite(x) && std::isfinite(y) && (!log_y || y > 0)) r.emplace_back(x, y);
  return r;
}

}  // namespace

void write_loss_curve_svg(const std::string& path, const std::vector<std::pair<double, double>>& train,
                          const std::vector<std::pair<double, double>>& valid, std::string title,
                          const loss_plot_options& options) {
  const series curves[2] = {usable(train, options.log_y), usable(valid, options.log_y)};
  const std::string names[2] = {options.train_name, options.valid_name};
  const char* colours[2] = {"#1f77b4", "#d62728"};

  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (const auto& s : curves)
    for (auto [x, y] : s)
      x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x), y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
  if (!std::isfinite(x_lo)) x_lo = 0, x_hi = 1, y_lo = options.log_y ? 0.1 : 0, y_hi = 1;  // no data: empty axes

  const int W = static_cast<int>(std::ceil(std::max({static_cast<double>(options.width), 200.0,
                                                      24 + text_width(title, 16, true) + 24}))),
            H = std::max(options.height, 150);
  const double left = 72, right = W - 24.0, top = 44, bottom = H - 56.0;  // the plot area
  const axis xa = linear_axis(x_lo, x_hi, 6);
  const axis ya = options.log_y ? log_axis(y_lo, y_hi) : linear_axis(y_lo, y_hi, 5);
  auto X = [&](double x) { return xa.to_px(x, left, right); };
  auto Y = [&](double y) { return ya.to_px(y, bottom, top); };

  std::string svg = svg_open(W, H);
  svg += text(W / 2.0, 26, title, "text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\"");
  svg += "<defs><clipPath id=\"plot-area\"><rect x=\"" + px(left) + "\" y=\"" + px(top) + "\" width=\"" +
         px(right - left) + "\" height=\"" + px(bottom - top) + "\"/></clipPath></defs>\n";

  svg += "<g stroke=\"#f0f0f0\">\n";  // minor grid
  for (double y : ya.minor) svg += line(left, Y(y), right, Y(y), "");
  svg += "</g>\n<g stroke=\"#dcdcdc\">\n";  // major grid
  for (double y : ya.major) svg += line(left, Y(y), right, Y(y), "");
  for (double x : xa.major) svg += line(X(x), top, X(x), bottom, "");
  svg += "</g>\n";

  svg += "<g stroke=\"#333\">\n";  // tick marks
  for (double y : ya.major) svg += line(left - 5, Y(y), left, Y(y), "");
  for (double y : ya.minor) svg += line(left - 3, Y(y), left, Y(y), "");
  for (double x : xa.major) svg += line(X(x), bottom, X(x), bottom + 5, "");
  svg += "</g>\n<g fill=\"#333\">\n";  // tick labels
  for (double y : ya.major) svg += text(left - 8, Y(y) + 4, tick_label(y), "text-anchor=\"end\"");
  for (double x : xa.major) svg += text(X(x), bottom + 19, tick_label(x), "text-anchor=\"middle\"");
  svg += "</g>\n";
  svg += text((left + right) / 2, H - 14.0, options.x_label, "text-anchor=\"middle\" font-size=\"13\"");
  svg += text(
      0, 0, options.y_label + (options.log_y ? " (log scale)" : ""),
      "text-anchor=\"middle\" font-size=\"13\" transform=\"translate(18 " + px((top + bottom) / 2) + ") rotate(-90)\"");

  for (int s = 0; s < 2; ++s) {
    if (curves[s].empty()) continue;
    svg += "<polyline clip-path=\"url(#plot-area)\" fill=\"none\" stroke=\"" + std::string(colours[s]) +
           "\" stroke-width=\"" + (s == 0 ? "1.5" : "2") + "\" stroke-linejoin=\"round\" points=\"";
    for (auto [x, y] : curves[s]) svg += px(X(x)) + "," + px(Y(y)) + " ";
    svg += "\"/>\n";
    if (s == 1 && curves[s].size() <= 200) {  // sparse validation points get markers
      svg += "<g fill=\"" + std::string(colours[s]) + "\">\n";
      for (auto [x, y] : curves[s]) svg += "<circle cx=\"" + px(X(x)) + "\" cy=\"" + px(Y(y)) + "\" r=\"3\"/>\n";
      svg += "</g>\n";
    }
  }
  svg += "<rect x=\"" + px(left) + "\" y=\"" + px(top) + "\" width=\"" + px(right - left) + "\" height=\"" +
         px(bottom - top) + "\" fill=\"none\" stroke=\"#333\"/>\n";

  int entries = 0;  // legend, top right inside the plot
  std::size_t longest = 0;
  for (int s = 0; s < 2; ++s)
    if (!curves[s].empty()) ++entries, longest = std::max(longest, names[s].size());
  if (entries > 0) {
    const double w = 44 + 7.5 * static_cast<double>(longest), h = 8 + 20.0 * entries;
    const double lx = right - w - 10, ly = top + 10;
    svg += "<rect x=\"" + px(lx) + "\" y=\"" + px(ly) + "\" width=\"" + px(w) + "\" height=\"" + px(h) +
           "\" fill=\"white\" fill-opacity=\"0.9\" stroke=\"#999\"/>\n";
    double ey = ly + 18;
    for (int s = 0; s < 2; ++s) {
      if (curves[s].empty()) continue;
      svg += line(lx + 8, ey - 4, lx + 32, ey - 4, "stroke=\"" + std::string(colours[s]) + "\" stroke-width=\"2\"");
      svg += text(lx + 38, ey, names[s]);
      ey += 20;
    }
  }
  svg += "</svg>\n";
  write_file(path, svg, "write_loss_curve_svg");
}

// ---- heat maps ----

namespace {

// ColorBrewer "Blues": near-white at 0, dark blue at 1; linear in RGB between the stops.
std::array<int, 3> blues(double t) {
  constexpr std::array<std::array<double, 3>, 5> stops = {
      {{247, 251, 255}, {198, 219, 239}, {107, 174, 214}, {33, 113, 181}, {8, 48, 107}}};
  t = std::clamp(t, 0.0, 1.0) * 4;
  const auto i = std::min<std::size_t>(static_cast<std::size_t>(t), 3);
  const double f = t - static_cast<double>(i);
  std::array<int, 3> rgb{};
  for (std::size_t c = 0; c < 3; ++c)
    rgb[c] = static_cast<int>(std::lround(stops[i][c] + f * (stops[i + 1][c] - stops[i][c])));
  return rgb;
}

std::string colour(double t) {
  if (std::isnan(t)) return "#bdbdbd";
  auto [r, g, b] = blues(t);
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
  return buf;
}

// Width of a label in the 12 px font.
double label_width(const std::string& s) { return text_width(s, 12); }

}  // namespace

void write_heatmap_svg(const std::string& path, const tensor<float>& weights,
                       const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels,
                       std::string title, const heatmap_options& options) {
  if (weights.rank() != 2)
    throw shape_error("write_heatmap_svg: weights must be [rows, cols], got shape " + weights.dims().str());
  const std::int64_t rows = weights.dim(0), cols = weights.dim(1);
  if (static_cast<std::int64_t>(row_labels.size()) != rows || static_cast<std::int64_t>(col_labels.size()) != cols)
    throw shape_error("write_heatmap_svg: weights " + weights.dims().str() + " need " + std::to_string(rows) +
                      " row labels and " + std::to_string(cols) + " column labels, got " +
                      std::to_string(row_labels.size()) + " and " + std::to_string(col_labels.size()));

  const double cell =
      std::clamp(std::floor(520.0 / static_cast<double>(std::max<std::int64_t>({rows, cols, 1}))), 8.0, 36.0);
  double row_w = 0, col_h = 0;
  for (const auto& l : row_labels) row_w = std::max(row_w, label_width(l));
  for (const auto& l : col_labels) col_h = std::max(col_h, label_width(l));
  const bool upright_cols = col_h <= cell - 2;  // column labels fit across their cells
  const double gx = 34 + row_w + 10;            // the grid's top-left corner
  const double gy = 40 + 20 + (upright_cols ? 16 : col_h + 8);
  const double gw = cell * static_cast<double>(cols), gh = cell * static_cast<double>(rows);
  const double bar_x = gx + gw + 24, bar_h = std::max(gh, 120.0);
  // wide enough for the title (centred: too narrow, it would be cut on both sides)
  const int W = static_cast<int>(std::ceil(std::max(bar_x + 14 + 44, 24 + text_width(title, 16, true) + 24)));
  const int H = static_cast<int>(std::ceil(gy + std::max(gh, bar_h) + 16));

  std::string svg = svg_open(W, H);
  svg += text(W / 2.0, 26, title, "text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\"");
  svg += text(gx + gw / 2, 52, options.col_axis, "text-anchor=\"middle\" font-size=\"13\" fill=\"#555\"");
  svg += text(0, 0, options.row_axis,
              "text-anchor=\"middle\" font-size=\"13\" fill=\"#555\" transform=\"translate(16 " + px(gy + gh / 2) +
                  ") rotate(-90)\"");

  for (std::int64_t c = 0; c < cols; ++c) {
    const double x = gx + cell * (static_cast<double>(c) + 0.5);
    const auto& l = col_labels[static_cast<std::size_t>(c)];
    if (upright_cols)
      svg += text(x, gy - 6, l, "text-anchor=\"middle\"");
    else
      svg += text(0, 0, l, "transform=\"translate(" + px(x + 4) + " " + px(gy - 6) + ") rotate(-90)\"");
  }
  for (std::int64_t r = 0; r < rows; ++r)
    svg += text(gx - 6, gy + cell * (static_cast<double>(r) + 0.5) + 4, row_labels[static_cast<std::size_t>(r)],
                "text-anchor=\"end\"");

  const double value_font = std::min(11.0, cell * 0.32);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const double w = weights[r * cols + c], x = gx + cell * static_cast<double>(c),
                   y = gy + cell * static_cast<double>(r);
      char value[32];
      std::snprintf(value, sizeof value, "%.3f", w);
      svg += "<rect x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"" + px(cell) + "\" height=\"" + px(cell) +
             "\" fill=\"" + colour(w) + "\"><title>" + escape_xml(row_labels[static_cast<std::size_t>(r)]) +
             " \xe2\x86\x92 " + escape_xml(col_labels[static_cast<std::size_t>(c)]) + ": " + value +
             "</title></rect>\n";
      if (options.show_values && cell >= 20) {
        std::snprintf(value, sizeof value, "%.2f", w);
        svg += text(x + cell / 2, y + cell / 2 + value_font * 0.35, value,
                    "text-anchor=\"middle\" font-size=\"" + px(value_font) + "\" fill=\"" +
                        (w > 0.55 ? "white" : "#222") + "\"");
      }
    }
  svg += "<rect x=\"" + px(gx) + "\" y=\"" + px(gy) + "\" width=\"" + px(gw) + "\" height=\"" + px(gh) +
         "\" fill=\"none\" stroke=\"#666\"/>\n";

  // Colour scale: 1 at the top, 0 at the bottom.
  svg += "<defs><linearGradient id=\"scale\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
  for (int i = 0; i <= 8; ++i)
    svg += "<stop offset=\"" + px(i / 8.0 * 100) + "%\" stop-color=\"" + colour(i / 8.0) + "\"/>";
  svg += "</linearGradient></defs>\n";
  svg += "<rect x=\"" + px(bar_x) + "\" y=\"" + px(gy) + "\" width=\"14\" height=\"" + px(bar_h) +
         "\" fill=\"url(#scale)\" stroke=\"#666\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double v = i / 4.0, y = gy + bar_h * (1 - v);
    svg += line(bar_x + 14, y, bar_x + 18, y, "stroke=\"#333\"");
    svg += text(bar_x + 21, y + 4, tick_label(v), "fill=\"#333\"");
  }
  svg += "</svg>\n";
  write_file(path, svg, "write_heatmap_svg");
}

}  // namespace loom
