// SPDX-License-Identifier: Apache-2.0
// The two jobs of torch_trainer (model.hpp): the CNN and its Fashion-MNIST data, and the
// GPT-style language model and its byte corpus.
#include "model.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "../mini_trainer/data.hpp"

namespace torch_trainer {

namespace {

/// conv(1->16, 5x5) -> pool -> conv(16->32, 5x5) -> pool -> fc(1568->128) -> fc(128->10).
struct cnn_impl final : model {
  cnn_impl() {
    conv1 =
        register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 5).padding(2)));
    conv2 =
        register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 5).padding(2)));
    fc1 = register_module("fc1", torch::nn::Linear(32 * 7 * 7, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }
  torch::Tensor logits(const torch::Tensor& x) override {
    auto h = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    h = torch::max_pool2d(torch::relu(conv2->forward(h)), 2);
    return fc2->forward(torch::relu(fc1->forward(h.flatten(1))));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

/// The GPT block: pre-norm causal self-attention and a 4x MLP, each with a residual.
struct block_impl final : torch::nn::Module {
  block_impl(std::int64_t d, std::int64_t heads) : d_(d), heads_(heads) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    qkv = register_module("qkv", torch::nn::Linear(d, 3 * d));
    proj = register_module("proj", torch::nn::Linear(d, d));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    ff1 = register_module("ff1", torch::nn::Linear(d, 4 * d));
    ff2 = register_module("ff2", torch::nn::Linear(4 * d, d));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) {
    const auto B = x.size(0), T = x.size(1), hd = d_ / heads_;
    auto parts = qkv->forward(ln1->forward(x)).split(d_, 2);
    auto heads = [&](const torch::Tensor& t) { return t.view({B, T, heads_, hd}).transpose(1, 2); };
    const auto q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
    auto att = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
    att = torch::softmax(att.masked_fill(mask.slice(0, 0, T).slice(1, 0, T), -INFINITY), -1);
    const auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, d_});
    const auto h = x + proj->forward(y);
    return h + ff2->forward(torch::gelu(ff1->forward(ln2->forward(h))));
  }
  std::int64_t d_, heads_;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, ff1{nullptr}, ff2{nullptr};
};
TORCH_MODULE_IMPL(block, block_impl);

/// Byte embeddings + positions, `layers` blocks, a final norm and a head over 256 bytes:
/// at d = 256, 4 heads, 3 layers, context 64: 2.5M parameters in 41 tensors.
struct gpt_impl final : model {
  gpt_impl(std::int64_t context, std::int64_t d, std::int64_t heads, std::int64_t layers) {
    tok = register_module("tok", torch::nn::Embedding(256, d));
    pos = register_module("pos", torch::nn::Embedding(context, d));
    for (std::int64_t l = 0; l < layers; ++l) {
      blocks.push_back(register_module("block" + std::to_string(l), block(d, heads)));
    }
    ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(d, 256).bias(false)));
    torch::NoGradGuard no_grad;
    torch::nn::init::normal_(tok->weight, 0.0, 0.02);
    torch::nn::init::normal_(pos->weight, 0.0, 0.02);
    // A constant, not a buffer: nothing to broadcast or checkpoint.
    mask_ = torch::ones({context, context}, torch::kBool).triu(1);
  }
  torch::Tensor logits(const torch::Tensor& x) override {
    const auto T = x.size(1);
    auto h = tok->forward(x) + pos->forward(torch::arange(T, torch::kLong));
    for (auto& b : blocks) h = b->forward(h, mask_);
    return head->forward(ln->forward(h));
  }
  torch::nn::Embedding tok{nullptr}, pos{nullptr};
  std::vector<block> blocks;
  torch::nn::LayerNorm ln{nullptr};
  torch::nn::Linear head{nullptr};
  torch::Tensor mask_;
};

class cnn_task final : public task {
 public:
  explicit cnn_task(const config& cfg)
      : train_(mini_trainer::load_split(cfg.data_dir, "train", cfg.limit)),
        test_(mini_trainer::load_split(cfg.data_dir, "t10k", cfg.limit)) {}
  std::string name() const override { return "cnn"; }
  std::shared_ptr<model> make_model() const override { return std::make_shared<cnn_impl>(); }
  std::size_t train_samples() const override { return train_.n; }
  std::size_t test_samples() const override { return test_.n; }
  void batch(const std::vector<std::uint32_t>& idx, bool test, torch::Tensor& x,
             torch::Tensor& y) const override {
    const auto m = static_cast<std::int64_t>(idx.size());
    x = torch::empty({m, 1, 28, 28});
    auto labels = std::vector<std::uint8_t>(idx.size());
    mini_trainer::gather_batch(test ? test_ : train_, idx.data(), idx.size(), x.data_ptr<float>(),
                               labels.data());
    y = torch::empty({m}, torch::kLong);
    auto* yp = y.data_ptr<std::int64_t>();
    for (std::size_t i = 0; i < labels.size(); ++i) yp[i] = labels[i];
  }
  std::size_t positions() const override { return 1; }
  std::string metric(double correct, double, double n) const override {
    char b[48];
    std::snprintf(b, sizeof b, "test_acc=%.4f", n > 0 ? correct / n : 0.0);
    return b;
  }

 private:
  mini_trainer::dataset train_, test_;
};

/// Every regular text file of `dir` (sorted by name; fortune's .dat indexes and .u8
/// links left out), concatenated: the corpus's bytes.
std::string read_corpus(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    throw usage_error("cannot read the corpus directory " + dir + ": " + std::strerror(errno) +
                      " (install Debian's fortunes with scripts/setup-deps, or pass --data DIR)");
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.empty() || n[0] == '.' || n.ends_with(".dat") || n.ends_with(".u8")) continue;
    struct stat st {};
    if (::lstat((dir + "/" + n).c_str(), &st) == 0 && S_ISREG(st.st_mode)) names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  std::string text;
  for (const auto& n : names) {
    std::ifstream f(dir + "/" + n, std::ios::binary);
    if (!f) throw usage_error("cannot read corpus file " + dir + "/" + n);
    text.append(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  return text;
}

class lm_task final : public task {
 public:
  static constexpr std::int64_t context = 64;
  explicit lm_task(const config& cfg) : text_(read_corpus(cfg.data_dir)) {
    // Non-overlapping windows of context + 1 bytes; the last tenth is the test text.
    const std::size_t windows = text_.size() / context;
    if (windows < 20) {
      throw usage_error("the corpus in " + cfg.data_dir + " has " + std::to_string(text_.size()) +
                        " bytes; the language model needs at least " +
                        std::to_string(20 * context));
    }
    test_ = std::max<std::size_t>(1, windows / 10);
    train_ = windows - test_ - 1;
    if (cfg.limit) {
      train_ = std::min(train_, cfg.limit);
      test_ = std::min(test_, std::max<std::size_t>(1, cfg.limit / 8));
    }
    test_ = std::min<std::size_t>(test_, 256);  // evaluating is a forward pass per sequence
    test_start_ = (windows - std::max<std::size_t>(1, windows / 10)) * context;
  }
  std::string name() const override { return "transformer"; }
  std::shared_ptr<model> make_model() const override {
    return std::make_shared<gpt_impl>(context, 256, 4, 3);
  }
  std::size_t train_samples() const override { return train_; }
  std::size_t test_samples() const override { return test_; }
  void batch(const std::vector<std::uint32_t>& idx, bool test, torch::Tensor& x,
             torch::Tensor& y) const override {
    const auto m = static_cast<std::int64_t>(idx.size());
    auto all = torch::empty({m, context + 1}, torch::kLong);
    auto* p = all.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < m; ++i) {
      const std::size_t at =
          (test ? test_start_ : 0) + std::size_t{idx[static_cast<std::size_t>(i)]} * context;
      for (std::int64_t j = 0; j <= context; ++j) {
        p[i * (context + 1) + j] =
            static_cast<unsigned char>(text_[at + static_cast<std::size_t>(j)]);
      }
    }
    x = all.slice(1, 0, context);
    y = all.slice(1, 1, context + 1);
  }
  std::size_t positions() const override { return context; }
  std::string metric(double, double loss_sum, double n) const override {
    char b[48];
    std::snprintf(b, sizeof b, "perplexity=%.3f", n > 0 ? std::exp(loss_sum / n) : 0.0);
    return b;
  }

 private:
  std::string text_;
  std::size_t train_ = 0, test_ = 0, test_start_ = 0;
};

}  // namespace

std::string task::describe() const {
  auto m = make_model();
  std::size_t n = 0, tensors = 0;
  for (const auto& p : m->parameters()) n += static_cast<std::size_t>(p.numel()), ++tensors;
  return name() + " (" + std::to_string(n) + " parameters in " + std::to_string(tensors) +
         " tensors)";
}

std::unique_ptr<task> make_task(const config& cfg) {
  if (cfg.model == "cnn") return std::make_unique<cnn_task>(cfg);
  return std::make_unique<lm_task>(cfg);
}

std::vector<torch::Tensor> initial_params(const task& job, std::uint64_t seed) {
  torch::manual_seed(seed);
  auto m = job.make_model();
  std::vector<torch::Tensor> v;
  for (const auto& p : m->parameters()) v.push_back(p.detach().clone());
  return v;
}

void load_params(model& m, const std::vector<torch::Tensor>& init) {
  torch::NoGradGuard no_grad;
  auto ps = m.parameters();
  if (ps.size() != init.size()) throw std::logic_error("load_params: the model changed");
  for (std::size_t i = 0; i < ps.size(); ++i) ps[i].copy_(init[i]);
}

}  // namespace torch_trainer
