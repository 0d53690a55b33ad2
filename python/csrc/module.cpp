// SPDX-License-Identifier: Apache-2.0
// gradsync_torch._C: the Python face of ProcessGroupGradsync. The class derives from
// torch's own ProcessGroup binding (same pybind11 internals: torch and this module are
// built by one GCC with pybind11 2.10), so every torch.distributed call and DDP take it as
// a process group. gradsync::error reaches Python as gradsync_torch.GradsyncError, a
// RuntimeError whose `code` names the gradsync error (timeout, mismatch, peer_lost, ...).
#include <chrono>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <gradsync/core/error.hpp>

#include "engine.hpp"
#include "exact.hpp"
#include "process_group.hpp"

namespace py = pybind11;
using gradsync_torch::ProcessGroupGradsync;

PYBIND11_MODULE(_C, m) {
  m.doc() = "The 'gradsync' backend of torch.distributed (import gradsync_torch to register it)";
  // The base classes (ProcessGroup, Store, Work) must be registered before ours.
  py::module_::import("torch._C._distributed_c10d");

  // A new reference held for the life of the process, as the module keeps it too.
  static PyObject* error_type =
      PyErr_NewException("gradsync_torch.GradsyncError", PyExc_RuntimeError, nullptr);
  m.add_object("GradsyncError", py::handle(error_type));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const gradsync::error& e) {
      py::object err = py::reinterpret_borrow<py::object>(error_type)(e.what());
      err.attr("code") = std::string(gradsync::errc_name(e.code()));
      PyErr_SetObject(error_type, err.ptr());
    }
  });

  gradsync_torch::bind_exact(m);

  py::class_<ProcessGroupGradsync, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupGradsync>>(
      m, "ProcessGroupGradsync",
      "torch.distributed process group over gradsync (shm on one host, MPI across hosts)")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             // Opening waits for the peers: without the GIL. (Not a call_guard: pybind
             // registers the new instance inside the guarded call, and needs the GIL then.)
             py::gil_scoped_release nogil;
             return ProcessGroupGradsync::create(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           "Opens the group (collective); what Backend.register_backend's creator returns")
      .def("transport", &ProcessGroupGradsync::transport, "'shm', 'mpi' or 'two_level'")
      .def("describe", &ProcessGroupGradsync::describe,
           "The transport, its algorithm and the group's shape")
      .def(
          "_compressed_average",
          [](ProcessGroupGradsync& pg, at::Tensor& bucket, const std::string& codec,
             std::size_t index, std::vector<std::size_t> tensors) {
            gradsync_torch::codec c = gradsync_torch::codec::int8;
            if (codec == "topk") {
              c = gradsync_torch::codec::topk;
            } else if (codec == "exact") {
              c = gradsync_torch::codec::exact;
            } else if (codec != "int8") {
              throw py::value_error("codec must be 'int8', 'topk' or 'exact', not '" + codec + "'");
            }
            return pg.compressed_average(bucket, c, index, std::move(tensors));
          },
          py::arg("bucket"), py::arg("codec"), py::arg("index"),
          py::arg("tensors") = std::vector<std::size_t>{}, py::call_guard<py::gil_scoped_release>(),
          "Averages a DDP bucket through error_feedback<int8> or <topk>, or exact (blocks "
          "starting at each of `tensors`, the element counts of its parameters); returns a "
          "Work")
      .def("shutdown", &ProcessGroupGradsync::shutdown,
           "Finishes queued calls and closes the transport; later calls raise");

  m.def(
      "_at_exit",
      [] {
        ProcessGroupGradsync::shutdown_all();
        py::gil_scoped_release nogil;
        gradsync_torch::finalize_mpi();
      },
      "Closes every gradsync group, then ends MPI if this module started it");
}
