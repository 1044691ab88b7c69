// shoal._C: the Python entry points of the torch backend (python/shoal/torch/__init__.py
// registers them).
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "process_group.hpp"

namespace py = pybind11;
using shoal::torch_glue::BackendBase;
using shoal::torch_glue::ProcessGroupShoal;
using shoal::torch_glue::ShoalOptions;

namespace {

// A ProcessGroup that names its backend: torch's says "custom" for every plugin (DDP's logging
// data, and code that asks the group rather than torch.distributed.get_backend).
class NamedProcessGroup : public c10d::ProcessGroup {
 public:
  using c10d::ProcessGroup::ProcessGroup;
  const std::string getBackendName() const override { return "shoal"; }
};

ProcessGroupShoal& shoal_group(const c10::intrusive_ptr<BackendBase>& pg, const char* what) {
  auto* shoal_pg = pg ? dynamic_cast<ProcessGroupShoal*>(pg.get()) : nullptr;
  if (!shoal_pg) throw py::type_error(std::string(what) + ": not a shoal process group");
  return *shoal_pg;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.def(
      "quiesce",
      [](double seconds) {
        ProcessGroupShoal::quiesce(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
      },
      py::arg("seconds"), py::call_guard<py::gil_scoped_release>(),
      "Waits until no group has an operation outstanding (registered with atexit).");
  m.doc() = "shoal's torch.distributed backend (use `import shoal.torch`)";
  py::class_<ShoalOptions, c10d::Backend::Options, c10::intrusive_ptr<ShoalOptions>>(
      m, "Options",
      "A shoal group's options (pg_options of init_process_group, new_group, split_group): "
      "the timeout, and the algorithm (a row of `shoal-info --algorithms`) that runs every "
      "all_reduce, all_gather or reduce_scatter of the group; empty: shoal's usual choice.")
      .def(py::init([](std::chrono::milliseconds timeout, std::string all_reduce,
                       std::string all_gather, std::string reduce_scatter) {
             auto o = c10::make_intrusive<ShoalOptions>(timeout);
             o->all_reduce_algorithm = std::move(all_reduce);
             o->all_gather_algorithm = std::move(all_gather);
             o->reduce_scatter_algorithm = std::move(reduce_scatter);
             return o;
           }),
           py::arg("timeout") = std::chrono::milliseconds(0), py::arg("all_reduce_algorithm") = "",
           py::arg("all_gather_algorithm") = "", py::arg("reduce_scatter_algorithm") = "")
      .def_readwrite("all_reduce_algorithm", &ShoalOptions::all_reduce_algorithm)
      .def_readwrite("all_gather_algorithm", &ShoalOptions::all_gather_algorithm)
      .def_readwrite("reduce_scatter_algorithm", &ShoalOptions::reduce_scatter_algorithm);
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store,
         const c10::intrusive_ptr<c10d::Store>& pg_store, int rank, int size,
         std::chrono::milliseconds timeout,
         const c10::intrusive_ptr<c10d::Backend::Options>& options)
          -> c10::intrusive_ptr<c10d::ProcessGroup> {
        auto backend = ProcessGroupShoal::create(store, rank, size, timeout, options);
        auto pg = c10::make_intrusive<NamedProcessGroup>(pg_store, rank, size);
        pg->setDefaultBackend(c10d::ProcessGroup::BackendType::CUSTOM);
        pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::CUSTOM, backend);
        return pg;
      },
      py::arg("store"), py::arg("pg_store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::arg("options"), py::call_guard<py::gil_scoped_release>(),
      "Creates a ProcessGroup whose CPU backend is shoal's, over c10d stores (the backend's and "
      "the group's); the creator torch.distributed calls.");
  m.def(
      "describe",
      [](const c10::intrusive_ptr<BackendBase>& pg) {
        auto* shoal_pg = dynamic_cast<ProcessGroupShoal*>(pg.get());
        if (!shoal_pg) throw py::type_error("not a shoal process group");
        return shoal_pg->describe();
      },
      py::arg("process_group"),
      "The shoal communicator behind a process group: ranks, hosts, transport.");
  m.def(
      "measure_links",
      [](const c10::intrusive_ptr<BackendBase>& pg) {
        auto& g = shoal_group(pg, "measure_links");
        py::gil_scoped_release release;
        return g.measure_links();
      },
      py::arg("process_group"),
      "Times every directed pair of the group's ranks (collective) and uses the rates: bytes per "
      "second, [from * size + to].");
  m.def(
      "ring_order",
      [](const c10::intrusive_ptr<BackendBase>& pg) {
        return shoal_group(pg, "ring_order").ring_order();
      },
      py::arg("process_group"), "The ranks in the order the link_ring rows go around them.");
  // Elastic jobs. The GIL is released while they block (the store, the new rendezvous); the
  // group is checked first, with the GIL held, so that a wrong one is a TypeError.
  m.def(
      "shrink",
      [](const c10::intrusive_ptr<BackendBase>& pg) -> c10::intrusive_ptr<BackendBase> {
        auto& g = shoal_group(pg, "shrink");
        py::gil_scoped_release release;
        return g.shrink();
      },
      py::arg("process_group"),
      "After a failure: the survivors of a shoal group form a new one, ranked in their old order.");
  m.def(
      "grow",
      [](const c10::intrusive_ptr<BackendBase>& pg, int joining,
         const std::string& name) -> c10::intrusive_ptr<BackendBase> {
        auto& g = shoal_group(pg, "grow");
        py::gil_scoped_release release;
        return g.grow(joining, name);
      },
      py::arg("process_group"), py::arg("joining"), py::arg("name"),
      "A larger shoal group: this group's ranks keep their numbers, `joining` processes calling "
      "join(store, name) follow.");
  m.def(
      "join",
      [](const c10::intrusive_ptr<c10d::Store>& store, const std::string& name,
         std::chrono::milliseconds timeout) -> c10::intrusive_ptr<BackendBase> {
        return ProcessGroupShoal::join(store, name, timeout);
      },
      py::arg("store"), py::arg("name"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>(),
      "The new process's side of grow(): waits for the job's grow(name) in the job's store.");
  m.attr("TORCH_VERSION_MAJOR") = TORCH_VERSION_MAJOR;
  m.attr("TORCH_VERSION_MINOR") = TORCH_VERSION_MINOR;
}
