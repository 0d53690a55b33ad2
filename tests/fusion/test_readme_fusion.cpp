// Compiles and runs the README example of bucket fusion (readme_fusion_snippet.hpp).
#include <doctest/doctest.h>

#include <vector>

#include "readme_fusion_snippet.hpp"
#include "watchdog.hpp"

TEST_CASE("README bucket-fusion example: averaged gradients, identical on every rank") {
  gs::testbed::watchdog wd(60, "readme example");
  std::vector<std::vector<std::vector<float>>> out(2);
  gs::transport::run_local(2, [&](gs::transport::local& comm) {
    // A toy model: 6 layers of different sizes; rank r's gradient of layer i is r + i.
    std::vector<std::vector<float>> grads;
    for (std::size_t i = 0; i < 6; ++i) grads.emplace_back(1000 * (i + 1));
    train(comm, grads, 3, [&](std::size_t i) {
      for (auto& x : grads[i]) x = static_cast<float>(comm.rank() + i);
    });
    out[comm.rank()] = grads;
  });
  for (std::size_t i = 0; i < 6; ++i) {
    for (std::size_t r = 0; r < 2; ++r) {
      for (float x : out[r][i]) {
        if (x != static_cast<float>(i) + 0.5f) FAIL("layer " << i << " rank " << r << ": " << x);
      }
    }
  }
}
