// SPDX-License-Identifier: Apache-2.0
// One translation unit of a separately compiled program (check_separate.sh): an allreducer
// over in-process ranks, whose non-template functions live in another object.
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "parts.hpp"

namespace gs = gradsync;

int local_part() {
  int bad = 0;
  gs::transport::run_local(3, [&](gs::transport::local& t) {
    gs::allreducer<gs::transport::local, gs::algo::auto_select, gs::fusion::bucket<1 << 20>> sync{
        t};
    // Rank r holds r + 1 + i: exact in float, the sum is 6 + 3i.
    std::vector<float> a(1000), b(77);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(t.rank() + 1 + i);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(t.rank() + 1 + i);
    // A grouped call, then a step of registered tensors.
    const std::vector<gs::tensor_ref> list{gs::tensor_ref(std::span<float>(a)),
                                           gs::tensor_ref(std::span<float>(b))};
    sync.allreduce_async(std::span<const gs::tensor_ref>(list), gs::op::sum).wait();
    for (std::size_t i = 0; i < a.size(); ++i) bad += a[i] != static_cast<float>(6 + 3 * i);
    for (std::size_t i = 0; i < b.size(); ++i) bad += b[i] != static_cast<float>(6 + 3 * i);
    std::vector<double> w(300, static_cast<double>(t.rank() + 1));
    sync.add(std::span<double>(w), "w");
    sync.commit(gs::op::sum);
    sync.ready(0);
    sync.wait();
    for (double x : w) bad += x != 6.0;
    // An error raised and formatted by the separately compiled functions.
    try {
      sync.ready(5);
      ++bad;
    } catch (const gs::error& e) {
      if (e.code() != gs::errc::invalid_argument ||
          std::string(e.what()).find("gradsync invalid_argument on rank") != 0) {
        std::printf("local part: unexpected error text: %s\n", e.what());
        ++bad;
      }
    }
  });
  std::printf("local part: allreducer over 3 in-process ranks %s\n",
              bad ? "WRONG" : "ok (a grouped call and a step: exact sums; error text)");
  return bad;
}
