// SPDX-License-Identifier: Apache-2.0
// Runs a function on n transport::local ranks and records, per rank, the gradsync::error
// it ended with (if any): the failure tests check every rank's code and message.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <gradsync/core/error.hpp>
#include <gradsync/transport/local.hpp>
#include <gradsync/transport/local/run.hpp>

namespace gradsync::testbed {

/// What one rank saw: the error it caught, if any.
struct outcome {
  bool threw = false;
  errc code{};
  std::string what;
};

/// Runs f(t) on n local ranks; element r is rank r's outcome.
template <class F>
std::vector<outcome> run_catching(std::size_t n, F f) {
  std::vector<outcome> out(n);
  transport::run_local(n, [&](transport::local& t) {
    try {
      f(t);
    } catch (const error& e) {
      out[t.rank()] = {true, e.code(), e.what()};
    }
  });
  return out;
}

}  // namespace gradsync::testbed
