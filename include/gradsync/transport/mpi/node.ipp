// SPDX-License-Identifier: Apache-2.0
// The functions node.hpp declares: inline in a header-only build, compiled once by
// <gradsync/src_mpi.hpp> under GRADSYNC_SEPARATE_COMPILATION (config.hpp).
#pragma once

#include "gradsync/transport/mpi/node.hpp"

namespace gradsync::transport::detail {

GRADSYNC_DECL void allgather_polled(MPI_Comm comm, const void* mine, std::size_t bytes,
                                    std::vector<char>& all, std::size_t size, deadline until,
                                    const char* what) {
  auto out = std::make_unique<std::vector<char>>(bytes * size);
  auto in = std::make_unique<std::vector<char>>(static_cast<const char*>(mine),
                                                static_cast<const char*>(mine) + bytes);
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallgather(in->data(), static_cast<int>(bytes), MPI_BYTE, out->data(),
                           static_cast<int>(bytes), MPI_BYTE, comm, &req),
            "MPI_Iallgather", {});
  const int rc = poll_collective(
      req, until,
      [&] {
        (void)out.release();
        (void)in.release();
      },
      {}, what);
  check_mpi(rc, "MPI_Iallgather", {});
  all = std::move(*out);
}

GRADSYNC_DECL std::vector<rank_place> place_ranks(MPI_Comm comm, deadline until) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  struct card {
    int world = 0;
    std::uint64_t shm_dev = 0, shm_ino = 0;  // the /dev/shm this rank's segments go to
    char host[48] = {};
    char boot[40] = {};  // the kernel's boot id: ranks on one host have the same
  } me;
  MPI_Comm_rank(MPI_COMM_WORLD, &me.world);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::memcpy(me.host, name,
              std::min<std::size_t>(static_cast<std::size_t>(len), sizeof me.host - 1));
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    if (!std::fgets(me.boot, sizeof me.boot, f)) me.boot[0] = 0;
    std::fclose(f);
  }
  struct stat sb {};
  if (::stat("/dev/shm", &sb) == 0) {
    me.shm_dev = static_cast<std::uint64_t>(sb.st_dev);
    me.shm_ino = static_cast<std::uint64_t>(sb.st_ino);
  } else {
    me.boot[0] = 0;  // no way to tell: ask MPI
  }
  const auto n = static_cast<std::size_t>(size);
  std::vector<char> raw;
  allgather_polled(comm, &me, sizeof me, raw, n, until, "finding the ranks' hosts");
  std::vector<card> all(n);
  std::memcpy(all.data(), raw.data(), raw.size());

  std::vector<int> key(n, 0);  // ranks with equal keys share a host (all, on one host)
  bool one_host = true;
  for (const card& c : all) {
    one_host = one_host && c.boot[0] != 0 && std::strcmp(c.host, all[0].host) == 0 &&
               std::strcmp(c.boot, all[0].boot) == 0 && c.shm_dev == all[0].shm_dev &&
               c.shm_ino == all[0].shm_ino;
  }
  if (!one_host) {
    // Every rank saw the same table, so all of them take this branch.
    MPI_Comm node = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
              "MPI_Comm_split_type", {});
    MPI_Group ng = MPI_GROUP_NULL, cg = MPI_GROUP_NULL;
    MPI_Comm_group(node, &ng);
    MPI_Comm_group(comm, &cg);
    const int first = 0;
    int lead = 0;  // node rank 0 is the lowest rank of comm there (split key 0: comm's order)
    const int rc = MPI_Group_translate_ranks(ng, 1, &first, cg, &lead);
    MPI_Group_free(&ng);
    MPI_Group_free(&cg);
    MPI_Comm_free(&node);
    check_mpi(rc, "MPI_Group_translate_ranks", {});
    allgather_polled(comm, &lead, sizeof lead, raw, n, until, "finding the ranks' hosts");
    std::memcpy(key.data(), raw.data(), raw.size());
  }
  std::vector<rank_place> out(n);
  for (std::size_t r = 0; r < n; ++r) {
    std::size_t q = 0;
    while (key[q] != key[r]) ++q;  // the lowest rank with r's key
    out[r].world = all[r].world;
    out[r].leader = static_cast<int>(q);
    out[r].host = all[r].host;
  }
  return out;
}

}  // namespace gradsync::transport::detail
