// SPDX-License-Identifier: Apache-2.0
// gradsync's rows: every algorithm named on the command line, over one transport.
// The algorithms are gradsync's host list (algo/list.hpp): a new entry there is a new
// --algo name here.
#pragma once

#include <cstdio>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <string_view>
#include <vector>

#include "gradsync/algo/list.hpp"
#include "gradsync/algo/runs_on.hpp"
#include "gradsync/allreduce.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/op.hpp"
#include "options.hpp"
#include "rows.hpp"
#include "sweep.hpp"

namespace gradsync::bench {

/// No subject to time alongside gradsync's (run_gradsync_rows' default partner).
struct no_partner {};

/// Runs every requested algorithm over transport `t` (collective over `g`, whose ranks
/// must be the transport's ranks). `mpi_name` labels the MPI flavour in the rows.
/// `registered`: the buffers come from the transport's heap (t.allocate; shm_reg rows).
/// `partner` (optional): makes, per element type and op, a subject that every gradsync
/// table is timed interleaved with (partner->make<T, Op>(o); --interleave); its wrong
/// elements count in the totals as well. With --p2p, a partner that has
/// make_exchange<T> also sweeps that subject (p2p_exchange) right after the pair.
template <class Tr, class Partner = no_partner>
gradsync_totals run_gradsync_rows(Tr& t, group& g, const options& o, csv_writer& csv,
                                  const std::string& mpi_name, bool registered = false,
                                  Partner* partner = nullptr) {
  gradsync_totals tot;
  const bool explicit_list = o.algos != all_algos;
  for (const std::string& name : o.algos) {
    bool composed = false;
    const bool built = algo::with_algorithm<algo::host_algorithms>(name, [&]<class A>() {
      if constexpr (runs_on_v<A, Tr>) {  // skip what does not compose
        composed = true;
        visit_type_op(o, [&]<class T, class Op>() {
          subject<T> s;
          s.label =
              make_label("gradsync", "gradsync", std::string(Tr::name) + (registered ? "_reg" : ""),
                         name, mpi_name, o);
          if constexpr (requires { t.template allocate<T>(std::size_t{1}); }) {
            if (registered) {
              auto held = std::make_shared<decltype(t.template allocate<T>(1))>();
              s.buffer = [&t, held](std::size_t count) {
                *held = t.template allocate<T>(count);
                return held->span();
              };
            }
          }
          call_options opt;
          opt.check = o.agree;
          opt.verify = o.verify;
          opt.check_finite = o.check_finite;
          s.run = [&t, opt](std::span<T> d) { allreduce<A>(t, d, Op{}, opt); };
          sweep_result r;
          if constexpr (!std::is_same_v<Partner, no_partner>) {
            if (partner) {
              subject<T> p = partner->template make<T, Op>(o);
              subject<T>* both[] = {&s, &p};
              auto rs = sweep(g, o, std::span<subject<T>* const>(both), csv);
              tot.wrong += rs[1].wrong;
              r = std::move(rs[0]);
              // Its own table, after the pair: inside the turn, the exchange's footprint
              // would evict the caches of whichever subject follows it.
              if constexpr (requires { partner->template make_exchange<T>(o); }) {
                if (o.p2p) {
                  subject<T> f = partner->template make_exchange<T>(o);
                  sweep(g, o, f, csv);
                }
              }
            } else {
              r = sweep(g, o, s, csv);
            }
          } else {
            r = sweep(g, o, s, csv);
          }
          tot.wrong += r.wrong;
          for (const row& x : r.rows) tot.checked += x.wrong >= 0 ? 1 : 0;
          ++tot.tables;
        });
      }
    });
    if (g.rank() == 0 && (!built || !composed) && explicit_list) {
      std::printf("#\n# gradsync transport=%s algo=%s: %s\n", std::string(Tr::name).c_str(),
                  name.c_str(),
                  !built ? "not in this build (its header is missing)"
                         : "does not compose with this transport; skipped");
    }
  }
  return tot;
}

}  // namespace gradsync::bench
