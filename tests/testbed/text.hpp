// SPDX-License-Identifier: Apache-2.0
// The substring check behind the tests' assertions on error messages and logs. One
// definition for every test file: a grouped program compiles them as one unit
// (tests/meson.build), where a helper defined in two files is a redefinition.
#pragma once

#include <string_view>

namespace gradsync::testbed {

/// Whether `part` occurs in `text`.
inline bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

}  // namespace gradsync::testbed
