// SPDX-License-Identifier: Apache-2.0
// Peer: Gloo's allreduce_ring_chunked and allreduce_halving_doubling over TCP loopback
// (Debian's libgloo-dev). The caller provides the rendezvous store: a HashStore shared
// by threads, or a FileStore in a directory every process can see.
#pragma once

#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "gradsync/core/dtype.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/kernels/host.hpp"
#include "options.hpp"
#include "sweep.hpp"

namespace gradsync::bench {

namespace detail {
/// Gloo reduction function for types Gloo's own math does not cover (half, bfloat16).
template <class T, class Op>
void gloo_reduce(T* x, const T* y, std::size_t n) {
  kernels::reduce_into(x, y, n, Op{});
}

/// The gloo::ReductionFunction for (T, Op); avg reduces with sum (divided afterwards).
template <class T, class Op>
const gloo::ReductionFunction<T>* gloo_fn() {
  constexpr bool builtin = std::is_arithmetic_v<T>;
  if constexpr (builtin) {
    switch (Op::id) {
      case reduce_op::prod:
        return gloo::ReductionFunction<T>::product;
      case reduce_op::min:
        return gloo::ReductionFunction<T>::min;
      case reduce_op::max:
        return gloo::ReductionFunction<T>::max;
      default:
        return gloo::ReductionFunction<T>::sum;
    }
  } else {
    using R = std::conditional_t<Op::id == reduce_op::avg, op::sum_t, Op>;
    static const gloo::ReductionFunction<T> fn(Op::id == reduce_op::max    ? gloo::MAX
                                               : Op::id == reduce_op::min  ? gloo::MIN
                                               : Op::id == reduce_op::prod ? gloo::PRODUCT
                                                                           : gloo::SUM,
                                               &gloo_reduce<T, R>);
    return &fn;
  }
}
}  // namespace detail

/// Connects a Gloo context over TCP for rank g.rank() of g.size(): on interface `iface`
/// (across hosts), or on 127.0.0.1 when it is empty.
inline std::shared_ptr<gloo::Context> gloo_connect(group& g, gloo::rendezvous::Store& store,
                                                   const std::string& iface = {}) {
  gloo::transport::tcp::attr attr;
  if (iface.empty()) {
    attr.hostname = "127.0.0.1";
  } else {
    attr.iface = iface;
  }
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(g.rank()),
                                                         static_cast<int>(g.size()));
  ctx->setTimeout(std::chrono::seconds(300));
  ctx->connectFullMesh(store, dev);
  return ctx;
}

/// Sweeps Gloo's allreduce algorithms named in o.gloo_algos (collective over g).
inline std::uint64_t run_gloo_peer(group& g, gloo::rendezvous::Store& store, const options& o,
                                   csv_writer& csv, const std::string& mpi_name) {
  std::shared_ptr<gloo::Context> ctx = gloo_connect(g, store, o.gloo_iface);
  std::uint64_t wrong = 0;
  for (const std::string& algo : split_list(o.gloo_algos)) {
    if (algo != "ring_chunked" && algo != "halving_doubling") {
      if (g.rank() == 0) std::printf("#\n# gloo algo=%s: unknown; skipped\n", algo.c_str());
      continue;
    }
    visit_type_op(o, [&]<class T, class Op>() {
      const gloo::ReductionFunction<T>* fn = detail::gloo_fn<T, Op>();
      std::shared_ptr<gloo::Algorithm> a;
      const std::size_t n = g.size();
      subject<T> s;
      s.label = make_label("peer", "gloo", "tcp", algo, mpi_name, o);
      s.prepare = [&](std::span<T> d) {
        a.reset();  // free the previous size's buffers first
        std::vector<T*> ptrs{d.data()};
        const int count = static_cast<int>(d.size());
        if (algo == "ring_chunked") {
          a = std::make_shared<gloo::AllreduceRingChunked<T>>(ctx, ptrs, count, fn);
        } else {
          a = std::make_shared<gloo::AllreduceHalvingDoubling<T>>(ctx, ptrs, count, fn);
        }
      };
      s.run = [&](std::span<T> d) {
        a->run();
        if constexpr (Op::id == reduce_op::avg) kernels::finalize(d.data(), d.size(), n, Op{});
      };
      wrong += sweep(g, o, s, csv).wrong;
    });
  }
  return wrong;
}

}  // namespace gradsync::bench
