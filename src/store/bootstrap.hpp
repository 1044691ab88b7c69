// From a launcher's environment to (rank, size, local rank, store): torchrun, shoal-run,
// Open MPI's mpirun, MPICH/Hydra, SLURM srun. See docs/launchers.md.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "shoal/store.hpp"

namespace shoal::bootstrap {

/// Reads one environment variable; nullopt when unset. Tests pass a fake.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

struct LaunchInfo {
  std::string launcher;  // "torchrun", "shoal-run", "openmpi", "mpich", "slurm", "env"
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // as the launcher says; the communicator re-discovers it
  int local_size = 1;
  // Rendezvous: a TCP store at store_host:store_port (rank 0 hosts it unless
  // store_is_external), or a file store at file_store_path when that is non-empty.
  std::string store_host;
  int store_port = 0;
  bool store_is_external = false;  // e.g. TORCHELASTIC_USE_AGENT_STORE=True: connect, never bind
  std::string file_store_path;
  std::string key_prefix;  // distinguishes restarts and jobs sharing one store
};

/// Interprets the environment; throws InvalidArgumentError with a message that says which
/// variables are missing and how to provide them.
LaunchInfo detect(const EnvLookup& env);

/// Expands the first host name of a SLURM host list: "node[03-05,9],gpu1" -> "node03".
std::string first_slurm_host(const std::string& nodelist);

/// Opens (and for rank 0, hosts) the store the LaunchInfo describes, with keys under key_prefix.
std::shared_ptr<Store> open_store(const LaunchInfo& info, Milliseconds timeout);

}  // namespace shoal::bootstrap
