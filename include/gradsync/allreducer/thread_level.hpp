// SPDX-License-Identifier: Apache-2.0
// The thread-support check of the progress thread. A transport whose library has thread
// levels says so with a static `require_thread_level()` that throws a gradsync::error
// with a fix-it message when the level is too low: transport::mpi needs
// MPI_THREAD_SERIALIZED (the progress thread makes the MPI calls while work is in
// flight, the caller's thread at other times; never both at once). Declared in its
// traits (.thread_levels), so this header never includes <mpi.h>.
#pragma once

#include "gradsync/transport/concept.hpp"

namespace gradsync::detail {

/// Throws when `Tr` cannot be used from the allreducer's progress thread.
template <class Tr>
void check_thread_level(Tr&) {
  if constexpr (transport_traits_of<Tr>().thread_levels) {
    Tr::require_thread_level();
  }
}

}  // namespace gradsync::detail
