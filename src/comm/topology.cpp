#include "comm/topology.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "core/config.hpp"

namespace shoal::comm {

static thread_local std::string thread_host_id;

void set_thread_host_id_for_testing(std::string id) { thread_host_id = std::move(id); }

std::string host_identity() {
  if (!thread_host_id.empty()) return thread_host_id;
  std::string id = config::get("SHOAL_HOST_ID");
  if (!id.empty()) return id;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat st{};
  std::string netns = stat("/proc/self/ns/net", &st) == 0 ? std::to_string(st.st_ino) : "";
  return std::string(host) + "/" + boot + "/" + netns;
}

Topology discover_topology(Store& store, const std::string& prefix, int rank, int size) {
  store.set(prefix + "/host/" + std::to_string(rank), host_identity());
  std::vector<std::string> ids(size);
  for (int r = 0; r < size; ++r) ids[r] = store.get_string(prefix + "/host/" + std::to_string(r));
  Topology t;
  std::map<std::string, int> index;
  t.host_of.resize(size);
  t.local_rank = 0;
  t.local_size = 0;
  for (int r = 0; r < size; ++r) {
    auto [it, fresh] = index.emplace(ids[r], static_cast<int>(index.size()));
    t.host_of[r] = it->second;
    if (ids[r] == ids[rank]) {
      if (r < rank) ++t.local_rank;
      ++t.local_size;
    }
  }
  t.num_hosts = static_cast<int>(index.size());
  return t;
}

}  // namespace shoal::comm
