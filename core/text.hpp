// Text helpers the library's messages share. Private to the library.
#pragma once

#include <string>
#include <string_view>

namespace loom {

/// s between double quotes, for messages: "w" in `parameter "w"`. At most 256 bytes of s, then
/// "...": names can come from files, and a message should not carry a megabyte of one.
inline std::string in_quotes(std::string_view s) {
  return "\"" + std::string(s.substr(0, 256)) + (s.size() > 256 ? "...\"" : "\"");
}

}  // namespace loom
