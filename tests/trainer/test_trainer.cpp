// SPDX-License-Identifier: Apache-2.0
// Unit tests of the mini-trainer's pieces on synthetic data (no data set needed):
// exact gradients equal across 1/2/4 ranks and every algorithm/fusion, checkpoint
// round trip and refusals, data-file errors, the shuffle; exact_math.hpp, the per-element
// math the CUDA trainer's kernels share with the CPU model, and the CUDA trainer's
// order of operations replayed on the host against the CPU model.
#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "checkpoint.hpp"
#include "data.hpp"
#include "exact_math.hpp"
#include "grad_sync.hpp"
#include "model.hpp"
#include "rng.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
namespace mt = mini_trainer;
namespace fs = std::filesystem;

namespace {

mt::dataset synthetic(std::size_t n, std::uint64_t seed) {
  mt::dataset d;
  d.n = n;
  d.pixels = 784;
  mt::rng r(seed);
  d.images.resize(n * 784);
  for (auto& b : d.images) b = static_cast<std::uint8_t>(r.below(256));
  d.labels.resize(n);
  for (auto& l : d.labels) l = static_cast<std::uint8_t>(r.below(10));
  return d;
}

const mt::mlp_shape shape{{784, 64, 32, 10}};

enum class sync_kind { ring, tree, halving_doubling, bucket_ring, bucket_hd };

template <class Tr>
std::unique_ptr<mt::gradient_sync> make(sync_kind k, Tr& t, std::vector<std::span<float>> g) {
  using namespace gs::algo;
  switch (k) {
    case sync_kind::ring:
      return std::make_unique<mt::per_tensor_sync<Tr, ring>>(t, g);
    case sync_kind::tree:
      return std::make_unique<mt::per_tensor_sync<Tr, tree>>(t, g);
    case sync_kind::halving_doubling:
      return std::make_unique<mt::per_tensor_sync<Tr, halving_doubling>>(t, g);
    case sync_kind::bucket_ring:
      return std::make_unique<mt::bucket_sync<Tr, ring, gs::fusion::bucket<16384>>>(t, g);
    case sync_kind::bucket_hd:
      return std::make_unique<mt::bucket_sync<Tr, halving_doubling, gs::fusion::bucket<16384>>>(t,
                                                                                                g);
  }
  return nullptr;
}

struct step_result {
  std::vector<float> synced;              // rank 0's gradient after the sync
  std::vector<std::vector<float>> local;  // every rank's gradient before the sync
  std::vector<std::vector<float>> all;    // every rank's gradient after the sync
};

/// One training step's gradient of the global batch [0, B) of `d`, on `ranks` ranks.
step_result one_step(const mt::dataset& d, std::size_t B, std::size_t ranks, bool exact,
                     sync_kind k, const std::vector<float>& params) {
  step_result res;
  res.local.resize(ranks);
  res.all.resize(ranks);
  gs::transport::run_local(ranks, [&](gs::transport::local& t) {
    const std::size_t n = t.size(), r = t.rank(), lo = r * B / n, hi = (r + 1) * B / n;
    mt::mlp net(shape, hi - lo, exact);
    std::vector<std::uint32_t> idx(hi - lo);
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::uint32_t>(lo + i);
    std::vector<std::uint8_t> y(idx.size());
    mt::gather_batch(d, idx.data(), idx.size(), net.input(), y.data());
    std::vector<float> g(params.size());
    auto sync = make(k, t, shape.tensors(g));
    net.forward(params, y.data(), idx.size());
    net.backward(params, y.data(), idx.size(), float(double(n) / double(B)), g,
                 [&](std::size_t l) { sync->layer_ready(l); });
    // Only the per-tensor variants leave the local gradient intact until finish().
    if (k == sync_kind::ring || k == sync_kind::tree || k == sync_kind::halving_doubling)
      res.local[r] = g;
    sync->finish();
    res.all[r] = g;
  });
  res.synced = res.all[0];
  return res;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void write_gz(const std::string& path, const std::vector<unsigned char>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == int(bytes.size()));
  gzclose(f);
}

void put_be32(std::vector<unsigned char>& v, std::uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<unsigned char>(x >> s));
}

struct temp_dir {
  fs::path p;
  temp_dir() {
    char tmpl[] = "/tmp/trainer_test_XXXXXX";
    p = ::mkdtemp(tmpl);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(p, ec);
  }
  std::string str() const { return p.string(); }
};

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("exact grads: the synced gradient equals the single-rank gradient bit for bit") {
  gs::testbed::watchdog wd(120, "exact grads");
  const auto d = synthetic(512, 7);
  std::vector<float> params;
  mt::mlp::init_params(shape, 3, params);
  for (std::size_t B : {64, 256}) {
    const auto one = one_step(d, B, 1, true, sync_kind::ring, params);
    // The gradient is substantial: most weights of the first layer have one.
    std::size_t nonzero = 0;
    for (std::size_t i = 0; i < 784 * 64; ++i) nonzero += one.synced[i] != 0.0f;
    CHECK(nonzero > 784 * 64 / 2);
    for (std::size_t ranks : {2, 4}) {
      for (auto k : {sync_kind::ring, sync_kind::tree, sync_kind::halving_doubling,
                     sync_kind::bucket_ring, sync_kind::bucket_hd}) {
        CAPTURE(B);
        CAPTURE(ranks);
        CAPTURE(int(k));
        const auto many = one_step(d, B, ranks, true, k, params);
        CHECK(same_bits(many.synced, one.synced));
        for (std::size_t r = 1; r < ranks; ++r) CHECK(same_bits(many.all[r], many.all[0]));
        if (!many.local[0].empty()) {
          // Each rank's own shard gradient is not the answer: the sync did the work.
          CHECK_FALSE(same_bits(many.local[0], one.synced));
        }
      }
    }
  }
}

TEST_CASE("without exact grads every rank still ends with identical gradients") {
  gs::testbed::watchdog wd(60, "replicas identical");
  const auto d = synthetic(256, 9);
  std::vector<float> params;
  mt::mlp::init_params(shape, 4, params);
  for (std::size_t ranks : {2, 3, 4}) {
    const auto res = one_step(d, 256, ranks, false, sync_kind::bucket_ring, params);
    for (std::size_t r = 1; r < ranks; ++r) CHECK(same_bits(res.all[r], res.all[0]));
    const auto ref = one_step(d, 256, 1, false, sync_kind::ring, params);
    // Regrouped float sums differ in the last bits only.
    for (std::size_t i = 0; i < ref.synced.size(); ++i) {
      REQUIRE(res.synced[i] == doctest::Approx(ref.synced[i]).epsilon(1e-3).scale(1e-3));
    }
  }
}

TEST_CASE("the shuffle is a permutation that depends on the seed only") {
  mt::rng a(42), b(42), c(43);
  const auto pa = a.permutation(1000), pb = b.permutation(1000), pc = c.permutation(1000);
  CHECK(pa == pb);
  CHECK(pa != pc);
  std::vector<int> seen(1000, 0);
  for (auto i : pa) seen.at(i)++;
  CHECK(std::count(seen.begin(), seen.end(), 1) == 1000);
}

TEST_CASE("checkpoint: round trip, refusals, atomic writes") {
  temp_dir tmp;
  mt::train_state s;
  s.dims = shape.dims;
  s.batch = 128, s.seed = 5, s.exact = 0, s.lr = 0.02f, s.momentum = 0.9f;
  s.epoch = 1, s.step_in_epoch = 17, s.global_step = 93;
  s.epoch_rng = mt::rng(11).state();
  s.ranks = 4, s.algo = "ring", s.fusion = "bucket", s.transport = "local";
  s.loss_sum = 12.5, s.correct = 100, s.seen = 128, s.last_test_acc = 0.8125;
  mt::mlp::init_params(shape, 1, s.params);
  s.momentum_buf.assign(s.params.size(), 0.25f);

  const std::string path = mt::save_checkpoint(tmp.str(), s);
  CHECK(path == tmp.str() + "/ckpt-0000000093.bin");
  CHECK(mt::latest_checkpoint(tmp.str()) == path);
  // Nothing but the checkpoint is left in the directory.
  CHECK(std::distance(fs::directory_iterator(tmp.p), fs::directory_iterator{}) == 1);

  const mt::train_state back = mt::load_checkpoint(path);
  CHECK(back.dims == s.dims);
  CHECK(back.epoch == 1);
  CHECK(back.step_in_epoch == 17);
  CHECK(back.global_step == 93);
  CHECK(back.epoch_rng == s.epoch_rng);
  CHECK(back.ranks == 4);
  CHECK(back.fusion == "bucket");
  CHECK(back.last_test_acc == 0.8125);
  CHECK(same_bits(back.params, s.params));
  CHECK(same_bits(back.momentum_buf, s.momentum_buf));

  // Only the two newest are kept.
  s.global_step = 100;
  mt::save_checkpoint(tmp.str(), s);
  s.global_step = 110;
  const std::string p110 = mt::save_checkpoint(tmp.str(), s);
  CHECK_FALSE(fs::exists(path));
  CHECK(mt::latest_checkpoint(tmp.str()) == p110);

  mt::config c;
  c.batch = 128, c.seed = 5;
  const mt::mlp_shape other{{784, 256, 128, 10}};
  const std::string shape_err = error_of([&] { mt::check_compatible(back, path, c, other); });
  CHECK(shape_err.find("784-64-32-10") != std::string::npos);
  CHECK(shape_err.find("784-256-128-10") != std::string::npos);
  CHECK(shape_err.find(path) != std::string::npos);
  c.batch = 64;
  const std::string batch_err = error_of([&] { mt::check_compatible(back, path, c, shape); });
  CHECK(batch_err.find("global batch 128") != std::string::npos);
  CHECK(batch_err.find("--batch 64") != std::string::npos);

  // One flipped byte is caught by the checksum.
  {
    std::fstream f(p110, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    char ch;
    f.seekg(200);
    f.get(ch);
    f.seekp(200);
    f.put(static_cast<char>(ch ^ 0x40));
  }
  const std::string corrupt = error_of([&] { mt::load_checkpoint(p110); });
  CHECK(corrupt.find("checksum") != std::string::npos);
  CHECK(corrupt.find(p110) != std::string::npos);

  // A directory that cannot be created is refused up front, naming it.
  const std::string file = tmp.str() + "/plain_file";
  std::ofstream(file) << "x";
  const std::string bad_dir = error_of([&] { mt::check_checkpoint_dir(file + "/sub"); });
  CHECK(bad_dir.find(file + "/sub") != std::string::npos);
  // A save into a directory that vanished fails without leaving anything behind.
  const std::string gone = error_of([&] { mt::save_checkpoint(tmp.str() + "/missing", s); });
  CHECK(gone.find(tmp.str() + "/missing/") != std::string::npos);
}

// What load_for_resume printed on its log (a temporary file).
struct captured_log {
  std::FILE* f = std::tmpfile();
  ~captured_log() { std::fclose(f); }
  captured_log() = default;
  captured_log(const captured_log&) = delete;
  captured_log& operator=(const captured_log&) = delete;
  std::string text() {
    std::fflush(f);
    std::rewind(f);
    std::string out;
    for (int c; (c = std::fgetc(f)) != EOF;) out += static_cast<char>(c);
    return out;
  }
};

TEST_CASE(
    "--resume: a damaged newest checkpoint falls back to the older; no directory is an "
    "error, an empty one a fresh start that says so") {
  temp_dir tmp;
  mt::train_state s;
  s.dims = shape.dims;
  s.batch = 128, s.seed = 5;
  mt::mlp::init_params(shape, 1, s.params);
  s.momentum_buf.assign(s.params.size(), 0.0f);
  s.global_step = 100;
  const std::string older = mt::save_checkpoint(tmp.str(), s);
  s.global_step = 110;
  const std::string newest = mt::save_checkpoint(tmp.str(), s);
  fs::resize_file(newest, fs::file_size(newest) / 2);  // cut short by a full disk

  mt::train_state got;
  std::string from;
  {
    captured_log log;
    REQUIRE(mt::load_for_resume(tmp.str(), got, from, log.f));
    CHECK(from == older);
    CHECK(got.global_step == 100);
    const std::string said = log.text();
    CHECK_MESSAGE(said.find("checkpoint " + newest + " is") != std::string::npos, said);
    CHECK_MESSAGE(said.find("resuming from the older " + older + " instead") != std::string::npos,
                  said);
  }
  // Both damaged: the newest's error, and that the older did not load either.
  fs::resize_file(older, 100);
  const std::string none = error_of([&] { mt::load_for_resume(tmp.str(), got, from); });
  CHECK_MESSAGE(none.find("checkpoint " + newest) != std::string::npos, none);
  CHECK_MESSAGE(
      none.find("no older checkpoint in " + tmp.str() + " loads either") != std::string::npos,
      none);

  // A directory that does not exist (mistyped): an error naming it, and not created.
  const std::string typo = tmp.str() + "/chekpoints";
  const std::string missing = error_of([&] { mt::check_checkpoint_dir(typo, true); });
  CHECK_MESSAGE(missing.find("--resume: checkpoint directory " + typo + " does not exist") !=
                    std::string::npos,
                missing);
  CHECK_FALSE(fs::exists(typo));
  // An empty one (an elastic relaunch before the first checkpoint): a fresh start, said.
  fs::create_directory(typo);
  mt::check_checkpoint_dir(typo, true);
  captured_log log;
  CHECK_FALSE(mt::load_for_resume(typo, got, from, log.f));
  CHECK(log.text() == "--resume: no checkpoint (ckpt-*.bin) in " + typo + ": starting fresh\n");
}

TEST_CASE("data files: errors name the file and what is wrong") {
  temp_dir tmp;
  const std::string dir = tmp.str();
  auto images = [&](std::uint32_t magic, std::uint32_t n, std::size_t pixel_bytes) {
    std::vector<unsigned char> v;
    put_be32(v, magic), put_be32(v, n), put_be32(v, 28), put_be32(v, 28);
    for (std::size_t i = 0; i < pixel_bytes; ++i) v.push_back(static_cast<unsigned char>(i));
    return v;
  };
  auto labels = [&](std::uint32_t n, unsigned char value) {
    std::vector<unsigned char> v;
    put_be32(v, 0x801), put_be32(v, n);
    for (std::uint32_t i = 0; i < n; ++i) v.push_back(static_cast<unsigned char>((i + value) % 10));
    if (value > 9) v.back() = value;
    return v;
  };
  const std::string ip = dir + "/train-images-idx3-ubyte.gz";
  const std::string lp = dir + "/train-labels-idx1-ubyte.gz";

  // Missing.
  std::string e = error_of([&] { mt::load_split(dir, "train", 0); });
  CHECK(e.find("cannot open data file " + ip) != std::string::npos);
  CHECK(e.find("No such file") != std::string::npos);

  // Valid: 3 images; --limit 2 keeps two.
  write_gz(ip, images(0x803, 3, 3 * 784));
  write_gz(lp, labels(3, 0));
  const auto d = mt::load_split(dir, "train", 2);
  CHECK(d.n == 2);
  CHECK(d.images.size() == 2 * 784);
  CHECK(d.labels[1] == 1);
  CHECK(d.images[785] == static_cast<unsigned char>(785));

  // Truncated pixel data.
  write_gz(ip, images(0x803, 3, 2 * 784));
  e = error_of([&] { mt::load_split(dir, "train", 0); });
  CHECK(e.find("corrupt data file " + ip) != std::string::npos);
  CHECK(e.find("truncated") != std::string::npos);

  // Wrong magic (e.g. a labels file in the images' place).
  write_gz(ip, images(0x801, 3, 3 * 784));
  e = error_of([&] { mt::load_split(dir, "train", 0); });
  CHECK(e.find(ip) != std::string::npos);
  CHECK(e.find("0x00000801") != std::string::npos);

  // A damaged gzip stream (a flipped byte in the compressed data).
  write_gz(ip, images(0x803, 3, 3 * 784));
  {
    std::fstream f(ip, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const auto size = static_cast<std::streamoff>(f.tellg());
    f.seekp(size - 12);
    f.put('\x55');
    f.put('\xaa');
  }
  e = error_of([&] { mt::load_split(dir, "train", 0); });
  CHECK(e.find("corrupt data file " + ip) != std::string::npos);

  // Counts that disagree, labels out of range.
  write_gz(ip, images(0x803, 3, 3 * 784));
  write_gz(lp, labels(4, 0));
  e = error_of([&] { mt::load_split(dir, "train", 0); });
  CHECK(e.find("4 labels") != std::string::npos);
  CHECK(e.find("3 images") != std::string::npos);
  write_gz(lp, labels(3, 200));
  e = error_of([&] { mt::load_split(dir, "train", 0); });
  CHECK(e.find(lp) != std::string::npos);
  CHECK(e.find("label 2 is 200") != std::string::npos);
}

TEST_CASE("exact_math: exp, dot and quantize are right, and dot's strides index like the kernels") {
  namespace ex = mt::exact;
  CHECK(ex::exp_nonpositive(0.0) == 1.0);
  CHECK(ex::exp_nonpositive(-709.0) == 0.0);
  double worst = 0;
  for (int i = 0; i <= 20000; ++i) {
    const double x = -60.0 * i / 20000.0;
    worst = std::max(worst, std::fabs(ex::exp_nonpositive(x) / std::exp(x) - 1.0));
  }
  CHECK(worst < 1e-15);
  // Round to nearest, ties to even, then clamp.
  CHECK(ex::quantize(0x1.0p-7f, -1, 1) == 0.0f);           // a tie: to the even 0
  CHECK(ex::quantize(3 * 0x1.0p-7f, -1, 1) == 0x1.0p-5f);  // a tie: to the even 2/64
  CHECK(ex::quantize(0.3f, -1, 1) == 19 * 0x1.0p-6f);
  CHECK(ex::quantize(5.0f, 0, ex::act_hi) == ex::act_hi);
  CHECK(ex::quantize(-5.0f, -ex::delta_lim, ex::delta_lim) == -2.0f);
  // A strided dot (a column of a row-major matrix, as exact_backprop reads W) equals the
  // contiguous one over a transposed copy, for lengths with every remainder mod 4, and
  // is within float rounding of a long double sum.
  mt::rng r(5);
  for (std::size_t n : {1, 2, 3, 4, 5, 10, 127, 784}) {
    const std::size_t cols = 3;
    std::vector<float> m(n * cols), col(n), v(n);
    for (auto& x : m) x = r.uniform(1.0f);
    for (auto& x : v) x = r.uniform(2.0f);
    for (std::size_t c = 0; c < cols; ++c) {
      long double ref = 0;
      for (std::size_t i = 0; i < n; ++i) {
        col[i] = m[i * cols + c];
        ref += static_cast<long double>(col[i]) * v[i];
      }
      CAPTURE(n);
      const float strided = ex::dot(v.data(), 1, m.data() + c, cols, n);
      const float contiguous = ex::dot(col.data(), 1, v.data(), 1, n);
      CHECK(std::memcmp(&strided, &contiguous, sizeof(float)) == 0);
      CHECK(std::fabs(strided - static_cast<double>(ref)) <= 1e-6 * (1 + std::fabs(double(ref))));
    }
  }
}

TEST_CASE("exact mode's tiled dots give exact::dot's bits for every shape remainder") {
  // model.cpp's tiles (four rows by two samples, four columns) against one exact::dot per
  // result: sizes with every remainder mod 4 (the tails) and mod 2 (a lone sample). The
  // values are +-{1, 1.25, 1.5, 1.75} x 2^{-30, 0, 30}: large products cancel exactly and
  // whether a small one survives depends on the order, so a lane or order change shows
  // in the float (with uniform values the float's rounding would hide it).
  namespace ex = mt::exact;
  mt::rng r(9);
  auto value = [&] {
    const float mag = std::ldexp(1.0f + 0.25f * static_cast<float>(r.below(4)),
                                 30 * (static_cast<int>(r.below(3)) - 1));
    return r.below(2) ? mag : -mag;
  };
  std::size_t checked = 0;
  for (std::size_t m : {1, 2, 3, 5}) {
    for (std::size_t in : {1, 3, 4, 6, 13, 784}) {
      for (std::size_t out : {1, 4, 7, 10}) {
        std::vector<float> w(out * in), a(m * in), d(m * out), z(m * out), dp(m * in);
        for (auto* v : {&w, &a, &d}) {
          for (auto& x : *v) x = value();
        }
        CAPTURE(m);
        CAPTURE(in);
        CAPTURE(out);
        mt::exact_dot_rows(w.data(), a.data(), m, in, out, z.data());
        for (std::size_t s = 0; s < m; ++s) {
          mt::exact_dot_cols(d.data() + s * out, w.data(), in, out, dp.data() + s * in);
          for (std::size_t j = 0; j < out; ++j, ++checked) {
            const float want = ex::dot(w.data() + j * in, 1, a.data() + s * in, 1, in);
            REQUIRE(std::memcmp(&z[s * out + j], &want, sizeof want) == 0);
          }
          for (std::size_t i = 0; i < in; ++i, ++checked) {
            const float want = ex::dot(d.data() + s * out, 1, w.data() + i, in, out);
            REQUIRE(std::memcmp(&dp[s * in + i], &want, sizeof want) == 0);
          }
        }
      }
    }
  }
  CHECK(checked == 37136);
}

TEST_CASE("exact grads: the CUDA trainer's order of operations gives the CPU model's bits") {
  // device_mlp's kernels, one thread body per element, replayed on the host in the
  // device's order: forward per (sample, unit), softmax per sample, the weight
  // gradient summed in another order than OpenBLAS's (cuBLAS picks its own), the bias
  // gradient in sample order, back-propagation per (sample, input). Exact mode only:
  // these are the bits the CUDA trainer must reproduce.
  namespace ex = mt::exact;
  const auto d = synthetic(64, 11);
  std::vector<float> params;
  mt::mlp::init_params(shape, 5, params);
  const std::size_t m = 64, L = shape.layers();
  const float scale = 1.0f / 64;
  std::vector<std::uint32_t> idx(m);
  for (std::size_t i = 0; i < m; ++i) idx[i] = static_cast<std::uint32_t>(i);
  std::vector<std::uint8_t> y(m);

  mt::mlp net(shape, m, true);
  mt::gather_batch(d, idx.data(), m, net.input(), y.data());
  std::vector<float> want(params.size());
  const auto st = net.forward(params, y.data(), m);
  net.backward(params, y.data(), m, scale, want);

  std::vector<std::vector<float>> acts(L + 1), deltas(L + 1);
  acts[0].resize(m * 784);
  mt::gather_batch(d, idx.data(), m, acts[0].data(), y.data());
  for (std::size_t l = 0; l < L; ++l) {  // kernels::exact_linear
    const std::size_t in = shape.dims[l], out = shape.dims[l + 1];
    acts[l + 1].resize(m * out);
    const float* w = params.data() + shape.weight_offset(l);
    const float* b = params.data() + shape.bias_offset(l);
    for (std::size_t t = 0; t < m * out; ++t) {
      const std::size_t s = t / out, j = t % out;
      acts[l + 1][t] = ex::activation(ex::dot(w + j * in, 1, acts[l].data() + s * in, 1, in), b[j],
                                      l + 1 < L, true);
    }
  }
  const std::size_t k = shape.dims[L];
  deltas[L].resize(m * k);
  std::size_t hits = 0;
  for (std::size_t s = 0; s < m; ++s) {  // kernels::softmax_delta
    bool h = false;
    ex::softmax_xent(acts[L].data() + s * k, k, y[s], true, &h);
    hits += h;
    for (std::size_t j = 0; j < k; ++j) {
      deltas[L][s * k + j] = ex::output_delta(acts[L][s * k + j], j == y[s], true);
    }
  }
  CHECK(hits == st.correct);
  std::vector<float> got(params.size());
  for (std::size_t l = L; l-- > 0;) {
    const std::size_t in = shape.dims[l], out = shape.dims[l + 1];
    float* gw = got.data() + shape.weight_offset(l);
    float* gb = got.data() + shape.bias_offset(l);
    for (std::size_t j = 0; j < out; ++j) {  // cuBLAS's place: samples summed last to first
      for (std::size_t i = 0; i < in; ++i) {
        float acc = 0;
        for (std::size_t s = m; s-- > 0;) acc += deltas[l + 1][s * out + j] * acts[l][s * in + i];
        gw[j * in + i] = acc * scale;
      }
      float acc = 0;  // kernels::bias_grad
      for (std::size_t s = 0; s < m; ++s) acc += deltas[l + 1][s * out + j];
      gb[j] = acc * scale;
    }
    if (l > 0) {  // kernels::exact_backprop
      deltas[l].resize(m * in);
      const float* w = params.data() + shape.weight_offset(l);
      for (std::size_t t = 0; t < m * in; ++t) {
        const std::size_t s = t / in, i = t % in;
        deltas[l][t] = ex::relu_delta(
            acts[l][t], ex::dot(deltas[l + 1].data() + s * out, 1, w + i, in, out), true);
      }
    }
  }
  std::size_t nonzero = 0;
  for (float g : got) nonzero += g != 0.0f;
  CHECK(nonzero > got.size() / 4);
  CHECK(same_bits(got, want));
  // And the update: kernels::sgd applies the same function as sgd_momentum_step.
  std::vector<float> w1 = params, v1(params.size(), 0.5f), w2 = params, v2 = v1;
  mt::sgd_momentum_step(w1, v1, want, 0.02f, 0.9f);
  for (std::size_t i = 0; i < w2.size(); ++i) ex::sgd_momentum(w2[i], v2[i], got[i], 0.02f, 0.9f);
  CHECK(same_bits(w1, w2));
  CHECK(same_bits(v1, v2));
}
