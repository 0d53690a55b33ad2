// SPDX-License-Identifier: Apache-2.0
// _ExactCore: compress::exact_accumulator for Python (gradsync_torch.ExactAccumulator). It
// codes and decodes on this rank only; the two allreduces between (the exponent fields'
// max, the codes' sum) are torch.distributed calls on whatever group the caller names.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <torch/csrc/utils/pybind.h>
#include <ATen/ATen.h>

#include <gradsync/compress/exact_accumulator.hpp>

#include "exact.hpp"

namespace gradsync_torch {

namespace {

namespace py = pybind11;

/// Up to 4096 micro-batches a step over all ranks; a value is coded exactly within 2^27
/// of its block's exponent (docs/reproducibility.md).
using accumulator = gradsync::compress::exact_accumulator<64, 256, 4096>;

void check_flat(const at::Tensor& t, std::size_t n, at::ScalarType type, const char* what) {
  TORCH_CHECK(t.defined() && t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == type &&
                  static_cast<std::size_t>(t.numel()) == n,
              "gradsync: ExactAccumulator: ", what, " must be a contiguous CPU ", type,
              " tensor of ", n, " elements");
}

class exact_core {
 public:
  explicit exact_core(const std::vector<std::size_t>& counts) : acc_(counts) {}

  std::size_t size() const { return acc_.size(); }
  void begin() { acc_.begin(); }
  void add(const at::Tensor& flat) {
    check_flat(flat, acc_.size(), at::kFloat, "a contribution");
    acc_.add(std::span<const float>(flat.data_ptr<float>(), acc_.size()));
  }
  /// The fields to allreduce with MAX, as int32 (every backend reduces it).
  at::Tensor fields() {
    const auto f = acc_.fields();
    at::Tensor t = at::empty({static_cast<std::int64_t>(f.size())}, at::kInt);
    for (std::size_t i = 0; i < f.size(); ++i) t.data_ptr<std::int32_t>()[i] = f[i];
    return t;
  }
  /// Takes the agreed fields back; true when the step must be added again.
  bool needs_redo(const at::Tensor& agreed) {
    const auto f = acc_.fields();
    check_flat(agreed, f.size(), at::kInt, "the agreed fields");
    const std::int32_t* a = agreed.data_ptr<std::int32_t>();
    for (std::size_t i = 0; i < f.size(); ++i) {
      TORCH_CHECK(a[i] >= -128 && a[i] <= 127, "gradsync: ExactAccumulator: agreed field ", i,
                  " is ", a[i], ", out of range (were the fields reduced with MAX?)");
      f[i] = static_cast<std::int8_t>(a[i]);
    }
    return acc_.needs_redo();
  }
  /// The codes to allreduce with SUM, in place: a view of the accumulator's own (valid
  /// while this object lives; the Python wrapper keeps it no longer than one step).
  at::Tensor codes() {
    const auto c = acc_.codes();
    return at::from_blob(c.data(), {static_cast<std::int64_t>(c.size())}, at::kLong);
  }
  /// Decodes the summed codes (codes() after its allreduce, or a tensor holding them),
  /// divided by `divisor`, into `out`.
  void decode(const at::Tensor& summed, at::Tensor& out, std::uint64_t divisor) {
    const auto c = acc_.codes();
    check_flat(summed, c.size(), at::kLong, "the summed codes");
    check_flat(out, acc_.size(), at::kFloat, "the output");
    TORCH_CHECK(divisor > 0, "gradsync: ExactAccumulator: no contributions to average");
    const auto* from = summed.data_ptr<std::int64_t>();
    if (!c.empty() && from != c.data()) std::memcpy(c.data(), from, c.size_bytes());
    acc_.decode(std::span<float>(out.data_ptr<float>(), acc_.size()), divisor);
  }

 private:
  accumulator acc_;
};

}  // namespace

void bind_exact(pybind11::module_& m) {
  py::class_<exact_core>(m, "_ExactCore",
                         "compress::exact_accumulator<64, 256, 4096> (gradsync_torch.exact)")
      .def(py::init<std::vector<std::size_t>>(), py::arg("tensor_counts"))
      .def("size", &exact_core::size)
      .def("begin", &exact_core::begin)
      .def("add", &exact_core::add, py::arg("flat"))
      .def("fields", &exact_core::fields)
      .def("needs_redo", &exact_core::needs_redo, py::arg("agreed"))
      .def("codes", &exact_core::codes)
      .def("decode", &exact_core::decode, py::arg("summed"), py::arg("out"), py::arg("divisor"));
}

}  // namespace gradsync_torch
