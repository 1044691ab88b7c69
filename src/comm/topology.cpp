#include "comm/topology.hpp"

#include <dirent.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/check.hpp"
#include "core/config.hpp"

namespace shoal::comm {

static thread_local std::string thread_host_id;

void set_thread_host_id_for_testing(std::string id) { thread_host_id = std::move(id); }

std::string machine_identity() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  std::string id = std::string(host) + "/" + boot;
  std::replace(id.begin(), id.end(), ' ', '_');  // one word of discover_topology's value
  return id;
}

std::string host_identity() {
  if (!thread_host_id.empty()) return thread_host_id;
  std::string id = config::get("SHOAL_HOST_ID");
  if (!id.empty()) return id;
  struct stat st {};
  std::string netns = stat("/proc/self/ns/net", &st) == 0 ? std::to_string(st.st_ino) : "";
  return machine_identity() + "/" + netns;
}

namespace {
constexpr char kHexDigits[] = "0123456789abcdef";
int hex_value(char h) {  // 0 for anything else: a malformed mask names no CPU
  if (h >= '0' && h <= '9') return h - '0';
  return h >= 'a' && h <= 'f' ? h - 'a' + 10 : 0;
}
}  // namespace

std::string affinity_mask() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < std::min<long>(online, CPU_SETSIZE); ++c) CPU_SET(c, &set);
  }
  std::string hex;
  for (int c = 0; c < CPU_SETSIZE; c += 4) {
    int nibble = 0;
    for (int b = 0; b < 4; ++b)
      if (CPU_ISSET(c + b, &set)) nibble |= 1 << b;
    hex += kHexDigits[nibble];
  }
  while (hex.size() > 1 && hex.back() == '0') hex.pop_back();
  return hex;
}

int cores_in_union(const std::vector<std::string>& masks) {
  std::vector<int> all;  // one nibble per hex digit
  for (const auto& m : masks) {
    if (m.size() > all.size()) all.resize(m.size(), 0);
    for (size_t i = 0; i < m.size(); ++i) all[i] |= hex_value(m[i]);
  }
  int n = 0;
  for (int nibble : all) n += std::popcount(static_cast<unsigned>(nibble));
  return n;
}

int choose_bind_cpu(const std::vector<std::string>& masks, const std::vector<long>& pids,
                    int local_rank) {
  if (masks.empty() || local_rank < 0 || local_rank >= static_cast<int>(masks.size())) return -1;
  if (pids.size() != masks.size()) return -1;
  for (const auto& m : masks)
    if (m != masks.front()) return -1;  // a launcher bound them (or some of them)
  if (std::set<long>(pids.begin(), pids.end()).size() != pids.size()) return -1;
  // The mask's CPUs in order: hex digits, lowest CPUs first, 4 per digit.
  int seen = 0;
  const std::string& m = masks[local_rank];
  for (size_t i = 0; i < m.size(); ++i)
    for (int b = 0; b < 4; ++b)
      if (hex_value(m[i]) & (1 << b)) {
        if (seen == local_rank) return static_cast<int>(i) * 4 + b;
        ++seen;
      }
  return -1;  // fewer CPUs than ranks: binding would stack ranks that could float
}

bool bind_process_to_cpu(int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) return false;
  // sched_setaffinity binds one thread: the process's others (torch's pools, shoal's progress
  // threads of earlier communicators) follow one by one.
  if (DIR* tasks = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(tasks))
      if (e->d_name[0] != '.') sched_setaffinity(std::atoi(e->d_name), sizeof set, &set);
    closedir(tasks);
  }
  return true;
}

// How many ranks the launcher started on this node (torchrun's and shoal-run's LOCAL_WORLD_SIZE,
// Open MPI's, MPICH/Hydra's), 0 when it does not say. Binding is for a communicator of all of
// them: one of a few processes among others (a SWARM stage's replicas) must not take a core.
static size_t launched_ranks_on_node() {
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const char* v = std::getenv(name); v && *v) return static_cast<size_t>(std::atol(v));
  return 0;
}

Topology discover_topology(Store& store, const std::string& prefix, int rank, int size) {
  // One value per rank, "<affinity mask> <pid> <machine> <host identity>": the identity may
  // hold spaces.
  store.set(prefix + "/host/" + std::to_string(rank),
            affinity_mask() + " " + std::to_string(getpid()) + " " + machine_identity() + " " +
                host_identity());
  std::vector<std::string> ids(size), masks(size), machines(size);
  std::vector<long> pids(size, 0);
  for (int r = 0; r < size; ++r) {
    std::istringstream v(store.get_string(prefix + "/host/" + std::to_string(r)));
    v >> masks[r] >> pids[r] >> machines[r];
    v.get();
    std::getline(v, ids[r]);
  }
  Topology t;
  std::map<std::string, int> index;
  t.host_of.resize(size);
  t.local_rank = 0;
  t.local_size = 0;
  std::vector<std::string> machine_masks;  // of this machine's ranks, in rank order
  std::vector<long> machine_pids;
  int machine_rank = 0;
  for (int r = 0; r < size; ++r) {
    auto [it, fresh] = index.emplace(ids[r], static_cast<int>(index.size()));
    t.host_of[r] = it->second;
    if (ids[r] == ids[rank]) {
      if (r < rank) ++t.local_rank;
      ++t.local_size;
    }
    if (machines[r] == machines[rank]) {
      if (r < rank) ++machine_rank;
      machine_masks.push_back(masks[r]);
      machine_pids.push_back(pids[r]);
    }
  }
  t.num_hosts = static_cast<int>(index.size());
  std::vector<std::vector<std::string>> host_masks(t.num_hosts);
  for (int r = 0; r < size; ++r) host_masks[t.host_of[r]].push_back(masks[r]);
  for (const auto& m : host_masks) t.cores_of_host.push_back(std::max(1, cores_in_union(m)));
  t.local_cores = t.cores_of_host[t.host_of[rank]];
  // Bound once per process: a later communicator (a split, the hierarchy's groups) sees the
  // masks this one left, which differ, and leaves them.
  static std::atomic<bool> bound{false};
  const std::string policy = config::get("SHOAL_BIND");
  SHOAL_CHECK(policy == "auto" || policy == "none", InvalidArgument,
              "SHOAL_BIND='" << policy << "' must be auto or none");
  if (policy == "auto" && !bound.load() && launched_ranks_on_node() == machine_masks.size()) {
    t.bind_cpu = choose_bind_cpu(machine_masks, machine_pids, machine_rank);
    if (t.bind_cpu >= 0 && !bound.exchange(true)) {
      if (bind_process_to_cpu(t.bind_cpu))
        SHOAL_INFO("bound to CPU " << t.bind_cpu << " (SHOAL_BIND=auto: nobody bound the "
                                   << machine_masks.size() << " ranks of this machine)");
      else
        t.bind_cpu = -1;
    }
  }
  return t;
}

}  // namespace shoal::comm
