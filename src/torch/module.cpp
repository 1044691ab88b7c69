// shoal._C: the Python entry points of the torch backend (python/shoal/torch.py registers them).
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include "process_group.hpp"

namespace py = pybind11;
using shoal::torch_glue::BackendBase;
using shoal::torch_glue::ProcessGroupShoal;

PYBIND11_MODULE(_C, m) {
  m.doc() = "shoal's torch.distributed backend (use `import shoal.torch`)";
  m.def("create_process_group", &ProcessGroupShoal::create, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
        "Creates a shoal process group over a c10d store; the creator torch.distributed calls.");
  m.def(
      "describe",
      [](const c10::intrusive_ptr<BackendBase>& pg) {
        auto* shoal_pg = dynamic_cast<ProcessGroupShoal*>(pg.get());
        if (!shoal_pg) throw py::type_error("not a shoal process group");
        return shoal_pg->describe();
      },
      py::arg("process_group"), "The shoal communicator behind a process group: ranks, hosts, transport.");
  m.attr("TORCH_VERSION_MAJOR") = TORCH_VERSION_MAJOR;
  m.attr("TORCH_VERSION_MINOR") = TORCH_VERSION_MINOR;
}
