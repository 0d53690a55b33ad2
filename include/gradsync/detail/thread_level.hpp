// The thread-support check of the progress thread: a transport that depends on its
// library's thread level (transport::mpi needs MPI_THREAD_SERIALIZED, because the
// progress thread makes MPI calls while the caller's thread may make them at other
// times) says so through a member `check_thread_level_serialized(what)` that throws a
// gradsync::error with a fix-it message. Transports without one need nothing.
#pragma once

namespace gradsync::detail {

/// Throws when `t` cannot be used from the allreducer's progress thread.
template <class Tr>
void check_thread_level(Tr& t) {
  if constexpr (requires { t.check_thread_level_serialized("gradsync::allreducer"); }) {
    t.check_thread_level_serialized("gradsync::allreducer");
  }
}

}  // namespace gradsync::detail
