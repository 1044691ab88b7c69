#include "comm/topology.hpp"

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
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
  struct stat st {};
  std::string netns = stat("/proc/self/ns/net", &st) == 0 ? std::to_string(st.st_ino) : "";
  return std::string(host) + "/" + boot + "/" + netns;
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

Topology discover_topology(Store& store, const std::string& prefix, int rank, int size) {
  // One value per rank, "<affinity mask> <host identity>": the identity may hold spaces.
  store.set(prefix + "/host/" + std::to_string(rank), affinity_mask() + " " + host_identity());
  std::vector<std::string> ids(size), masks(size);
  for (int r = 0; r < size; ++r) {
    const std::string v = store.get_string(prefix + "/host/" + std::to_string(r));
    const size_t space = v.find(' ');
    masks[r] = v.substr(0, space);
    ids[r] = space == std::string::npos ? "" : v.substr(space + 1);
  }
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
  std::vector<std::vector<std::string>> host_masks(t.num_hosts);
  for (int r = 0; r < size; ++r) host_masks[t.host_of[r]].push_back(masks[r]);
  for (const auto& m : host_masks) t.cores_of_host.push_back(std::max(1, cores_in_union(m)));
  t.local_cores = t.cores_of_host[t.host_of[rank]];
  return t;
}

}  // namespace shoal::comm
