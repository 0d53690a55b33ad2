// SPDX-License-Identifier: Apache-2.0
// Why transport::mpi ignores SIGPIPE: Open MPI's TCP transport writes to its sockets
// without MSG_NOSIGNAL, so a rank sending to a peer whose process just died gets
// SIGPIPE, and its default action ends the rank at once, with no gradsync error and no
// message (the fault suite's kill trials across simulated hosts: "died of signal 13"
// in about 1 in 20). Ignored, the write fails instead and gradsync reports the lost
// peer by its deadline. Python ignores SIGPIPE in every program it starts, so C++
// trainers are the ones that need this; a handler the user installed is left alone.
#pragma once

#include <signal.h>

namespace gradsync::transport::detail {

/// Sets SIGPIPE to ignored when it is at its default action; true when it did.
inline bool ignore_default_sigpipe() noexcept {
  struct sigaction now {};
  if (sigaction(SIGPIPE, nullptr, &now) != 0 || now.sa_handler != SIG_DFL) return false;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  return sigaction(SIGPIPE, &ignore, nullptr) == 0;
}

}  // namespace gradsync::transport::detail
