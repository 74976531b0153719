// fixed_string: a string literal usable as a template argument ("x", "enc.0.self_attn").
#pragma once

#include <cstddef>
#include <string_view>

namespace loom {

/// A compile-time string that can be a non-type template parameter.
/// `N` counts the terminating zero, as for a string literal.
template <std::size_t N>
struct fixed_string {
  char data[N]{};

  constexpr fixed_string() = default;
  constexpr fixed_string(const char (&s)[N]) {  // NOLINT: implicit by design
    for (std::size_t i = 0; i < N; ++i) data[i] = s[i];
  }
  static constexpr std::size_t length = N - 1;
  constexpr std::string_view view() const { return {data, N - 1}; }
  constexpr operator std::string_view() const { return view(); }  // NOLINT
};

/// Concatenation, so that layers can name their parameters under a prefix:
/// `Prefix + ".weight"`.
template <std::size_t A, std::size_t B>
constexpr fixed_string<A + B - 1> operator+(const fixed_string<A>& a, const fixed_string<B>& b) {
  fixed_string<A + B - 1> r;
  for (std::size_t i = 0; i < A - 1; ++i) r.data[i] = a.data[i];
  for (std::size_t i = 0; i < B; ++i) r.data[A - 1 + i] = b.data[i];
  return r;
}
template <std::size_t A, std::size_t B>
constexpr fixed_string<A + B - 1> operator+(const fixed_string<A>& a, const char (&b)[B]) {
  return a + fixed_string<B>(b);
}

template <std::size_t A, std::size_t B>
constexpr fixed_string<A + B - 1> operator+(const char (&a)[A], const fixed_string<B>& b) {
  return fixed_string<A>(a) + b;
}

/// The decimal digits of a non-negative number as a fixed_string (layer indices in names).
template <int V>
constexpr auto to_fixed_string() {
  constexpr int digits = [] {
    int n = 1;
    for (int v = V; v >= 10; v /= 10) ++n;
    return n;
  }();
  static_assert(V >= 0, "to_fixed_string: negative numbers are not names");
  fixed_string<digits + 1> r;
  int v = V;
  for (int i = digits - 1; i >= 0; --i) {
    r.data[i] = static_cast<char>('0' + v % 10);
    v /= 10;
  }
  return r;
}

}  // namespace loom
