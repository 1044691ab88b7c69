// Launcher environments -> LaunchInfo, their precedence and error messages, SLURM host lists,
// and open_store (TCP, external store, the one-host file store and its clean-up).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "shoal/error.hpp"
#include "shoal/store.hpp"
#include "store/bootstrap.hpp"
#include "support/ports.hpp"

using namespace shoal;
using namespace shoal::bootstrap;
using shoal::testing::free_port;
using namespace std::chrono_literals;

namespace {

using Vars = std::map<std::string, std::string>;

EnvLookup fake(const Vars& vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

LaunchInfo detect_in(const Vars& vars) { return detect(fake(vars)); }

// The message of the InvalidArgumentError that detect() raises for `vars`.
std::string detect_error(const Vars& vars) {
  try {
    detect_in(vars);
  } catch (const InvalidArgumentError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no error";
}

#define EXPECT_CONTAINS(haystack, needle)                          \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) \
      << "'" << needle << "' not in: " << (haystack)

Vars merge(Vars a, const Vars& b) {
  for (const auto& [k, v] : b) a[k] = v;
  return a;
}

const Vars kTorchrun = {
    {"RANK", "3"},
    {"WORLD_SIZE", "8"},
    {"LOCAL_RANK", "1"},
    {"LOCAL_WORLD_SIZE", "2"},
    {"MASTER_ADDR", "node01"},
    {"MASTER_PORT", "29400"},
    {"TORCHELASTIC_RUN_ID", "job42"},
    {"TORCHELASTIC_RESTART_COUNT", "2"},
    {"TORCHELASTIC_USE_AGENT_STORE", "True"},
};
const Vars kOpenMpi = {
    {"OMPI_COMM_WORLD_RANK", "2"},
    {"OMPI_COMM_WORLD_SIZE", "4"},
    {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
    {"OMPI_MCA_ess_base_jobid", "3735748609"},
};
const Vars kMpich = {
    {"PMI_RANK", "1"},
    {"PMI_SIZE", "4"},
    {"MPI_LOCALRANKID", "1"},
    {"MPI_LOCALNRANKS", "2"},
    {"PMI_KVSNAME", "kvs_1234_0"},
};
const Vars kSlurm = {
    {"SLURM_PROCID", "5"},
    {"SLURM_NTASKS", "8"},
    {"SLURM_LOCALID", "1"},
    {"SLURM_NODEID", "1"},
    {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
    {"SLURM_STEP_NODELIST", "gpu[07-08]"},
    {"SLURM_JOB_NODELIST", "gpu[01-08]"},
    {"SLURM_JOB_ID", "123456"},
    {"SLURM_STEP_ID", "0"},
};

std::string unique_id() {
  std::random_device rd;
  return "test" + std::to_string(::getpid()) + "_" + std::to_string(rd());
}

}  // namespace

// ---- torchrun / shoal-run / plain env ----

TEST(Detect, Torchrun) {
  LaunchInfo i = detect_in(kTorchrun);
  EXPECT_EQ(i.launcher, "torchrun");
  EXPECT_EQ(i.rank, 3);
  EXPECT_EQ(i.size, 8);
  EXPECT_EQ(i.local_rank, 1);
  EXPECT_EQ(i.local_size, 2);
  EXPECT_EQ(i.store_host, "node01");
  EXPECT_EQ(i.store_port, 29400);
  EXPECT_TRUE(i.store_is_external) << "the agent hosts the store: ranks must not bind";
  EXPECT_TRUE(i.file_store_path.empty());
  EXPECT_CONTAINS(i.key_prefix, "job42");
  EXPECT_CONTAINS(i.key_prefix, "attempt_2");
  // Another restart of the same run gets other keys.
  EXPECT_NE(detect_in(merge(kTorchrun, {{"TORCHELASTIC_RESTART_COUNT", "3"}})).key_prefix,
            i.key_prefix);
  EXPECT_NE(detect_in(merge(kTorchrun, {{"TORCHELASTIC_RUN_ID", "other"}})).key_prefix,
            i.key_prefix);
}

TEST(Detect, TorchrunWithoutAgentStoreLetsRankZeroHost) {
  LaunchInfo i = detect_in(merge(kTorchrun, {{"TORCHELASTIC_USE_AGENT_STORE", "False"}}));
  EXPECT_EQ(i.launcher, "torchrun");
  EXPECT_FALSE(i.store_is_external);
}

TEST(Detect, ShoalRun) {
  LaunchInfo i = detect_in(merge(kTorchrun, {{"TORCHELASTIC_RUN_ID", "shoal-run-77-00ff"}}));
  EXPECT_EQ(i.launcher, "shoal-run");
  EXPECT_TRUE(i.store_is_external);
  EXPECT_CONTAINS(i.key_prefix, "shoal-run-77-00ff");
}

TEST(Detect, PlainEnvironment) {
  LaunchInfo i = detect_in(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "1234"}});
  EXPECT_EQ(i.launcher, "env");
  EXPECT_EQ(i.rank, 0);
  EXPECT_EQ(i.size, 2);
  EXPECT_EQ(i.local_rank, 0);
  EXPECT_EQ(i.local_size, 1);
  EXPECT_FALSE(i.store_is_external);
  EXPECT_EQ(i.key_prefix, "");
  EXPECT_EQ(i.store_host, "10.0.0.1");
  // IPv6 in brackets
  EXPECT_EQ(
      detect_in(
          {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "[::1]"}, {"MASTER_PORT", "5"}})
          .store_host,
      "::1");
}

TEST(Detect, TorchrunErrorsNameTheVariable) {
  Vars v = kTorchrun;
  v.erase("WORLD_SIZE");
  std::string m = detect_error(v);
  EXPECT_CONTAINS(m, "WORLD_SIZE is not set");

  v = kTorchrun;
  v.erase("MASTER_PORT");
  m = detect_error(v);
  EXPECT_CONTAINS(m, "MASTER_PORT is not set");
  EXPECT_EQ(m.find("MASTER_ADDR and"), std::string::npos) << m;

  v.erase("MASTER_ADDR");
  EXPECT_CONTAINS(detect_error(v), "MASTER_ADDR and MASTER_PORT are not set");

  EXPECT_CONTAINS(detect_error(merge(kTorchrun, {{"RANK", "abc"}})),
                  "RANK='abc' is not an integer");
  EXPECT_CONTAINS(detect_error(merge(kTorchrun, {{"RANK", "3x"}})), "RANK='3x'");
  EXPECT_CONTAINS(detect_error(merge(kTorchrun, {{"RANK", "8"}})), "RANK=8 is outside [0, 8)");
  EXPECT_CONTAINS(detect_error(merge(kTorchrun, {{"RANK", "-1"}})), "RANK=-1");
  EXPECT_CONTAINS(detect_error(merge(kTorchrun, {{"WORLD_SIZE", "0"}, {"RANK", "0"}})),
                  "WORLD_SIZE=0");
  EXPECT_CONTAINS(detect_error(merge(kTorchrun, {{"LOCAL_RANK", "2"}})), "LOCAL_RANK=2");
  EXPECT_CONTAINS(detect_error(merge(kTorchrun, {{"WORLD_SIZE", "99999999999"}})),
                  "WORLD_SIZE='99999999999'");
  EXPECT_CONTAINS(detect_error(merge(kTorchrun, {{"MASTER_PORT", "70000"}})),
                  "MASTER_PORT='70000'");
  EXPECT_CONTAINS(detect_error(merge(kTorchrun, {{"MASTER_PORT", "http"}})), "MASTER_PORT='http'");
  // An empty value counts as unset.
  EXPECT_CONTAINS(detect_error(merge(kTorchrun, {{"MASTER_ADDR", ""}})), "MASTER_ADDR is not set");
}

// ---- SHOAL_STORE_ADDR / SHOAL_STORE_PATH / SHOAL_STORE_EXTERNAL ----

TEST(Detect, StoreAddrOverridesMasterAddr) {
  LaunchInfo i = detect_in(merge(kTorchrun, {{"SHOAL_STORE_ADDR", "store.example:1234"}}));
  EXPECT_EQ(i.store_host, "store.example");
  EXPECT_EQ(i.store_port, 1234);
  EXPECT_FALSE(i.store_is_external) << "the agent does not host SHOAL_STORE_ADDR";
  i = detect_in(
      merge(kTorchrun, {{"SHOAL_STORE_ADDR", "store:1234"}, {"SHOAL_STORE_EXTERNAL", "1"}}));
  EXPECT_TRUE(i.store_is_external);
  i = detect_in(
      merge(kOpenMpi,
            {{"SHOAL_STORE_ADDR", "[fe80::1]:99"}, {"MASTER_ADDR", "x"}, {"MASTER_PORT", "1"}}));
  EXPECT_EQ(i.store_host, "fe80::1");
  EXPECT_EQ(i.store_port, 99);

  EXPECT_CONTAINS(detect_error(merge(kTorchrun, {{"SHOAL_STORE_ADDR", "justahost"}})),
                  "SHOAL_STORE_ADDR='justahost'");
  EXPECT_CONTAINS(detect_error(merge(kTorchrun, {{"SHOAL_STORE_ADDR", "h:0"}})),
                  "SHOAL_STORE_ADDR='0'");
  EXPECT_CONTAINS(detect_error(merge(kTorchrun, {{"SHOAL_STORE_ADDR", ":80"}})),
                  "SHOAL_STORE_ADDR");
}

TEST(Detect, StorePathForcesAFileStore) {
  for (const Vars& base : {kTorchrun, kOpenMpi, kMpich, kSlurm}) {
    LaunchInfo i = detect_in(merge(base, {{"SHOAL_STORE_PATH", "/shared/job.store"}}));
    EXPECT_EQ(i.file_store_path, "/shared/job.store") << i.launcher;
    EXPECT_FALSE(i.store_is_external);
  }
}

// ---- precedence ----

TEST(Detect, Precedence) {
  Vars all = merge(merge(merge(kTorchrun, kOpenMpi), kMpich), kSlurm);
  EXPECT_EQ(detect_in(all).launcher, "torchrun");  // torchrun inside srun/mpirun: torchrun's view
  EXPECT_EQ(detect_in(all).rank, 3);
  Vars no_torch = merge(merge(kOpenMpi, kMpich), kSlurm);
  no_torch["MASTER_ADDR"] = "a";
  no_torch["MASTER_PORT"] = "1";
  EXPECT_EQ(detect_in(no_torch).launcher, "openmpi");  // mpirun inside sbatch
  EXPECT_EQ(detect_in(no_torch).rank, 2);
  Vars mpich_slurm = merge(merge(kMpich, kSlurm), {{"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}});
  EXPECT_EQ(detect_in(mpich_slurm).launcher, "mpich");
  EXPECT_EQ(detect_in(mpich_slurm).rank, 1);
  EXPECT_EQ(detect_in(kSlurm).launcher, "slurm");
}

TEST(Detect, NoLauncher) {
  std::string m = detect_error({{"HOME", "/root"}});
  EXPECT_CONTAINS(m, "no launcher");
  EXPECT_CONTAINS(m, "RANK");
  EXPECT_CONTAINS(m, "shoal-run");
  EXPECT_CONTAINS(detect_error({{"SLURM_JOB_ID", "5"}}), "not started by srun");
}

// ---- Open MPI ----

TEST(Detect, OpenMpiWithMasterAddr) {
  LaunchInfo i = detect_in(merge(kOpenMpi, {{"MASTER_ADDR", "head"}, {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(i.launcher, "openmpi");
  EXPECT_EQ(i.rank, 2);
  EXPECT_EQ(i.size, 4);
  EXPECT_EQ(i.local_rank, 0);
  EXPECT_EQ(i.local_size, 2);
  EXPECT_EQ(i.store_host, "head");
  EXPECT_EQ(i.store_port, 29500);
  EXPECT_FALSE(i.store_is_external);
  EXPECT_TRUE(i.file_store_path.empty());
}

TEST(Detect, OpenMpiOneHostFallsBackToAFileStoreNamedAfterTheJob) {
  Vars v =
      merge(kOpenMpi, {{"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}});
  LaunchInfo i = detect_in(v);
  EXPECT_EQ(i.file_store_path.rfind("/tmp/", 0), 0u) << i.file_store_path;
  EXPECT_CONTAINS(i.file_store_path, "3735748609");
  EXPECT_CONTAINS(i.file_store_path, std::to_string(::getuid()));
  // Every rank computes the same path.
  Vars other = merge(v, {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}});
  EXPECT_EQ(detect_in(other).file_store_path, i.file_store_path);
  // Another job, another file; PMIX_NAMESPACE when the jobid variable is absent (sanitized).
  v.erase("OMPI_MCA_ess_base_jobid");
  v["PMIX_NAMESPACE"] = "prterun-host-77@1";
  std::string p = detect_in(v).file_store_path;
  EXPECT_CONTAINS(p, "prterun-host-77_1");
  EXPECT_NE(p, i.file_store_path);
}

TEST(Detect, OpenMpiAcrossHostsWithoutAddressExplainsTheFix) {
  std::string m = detect_error(kOpenMpi);
  EXPECT_CONTAINS(m, "Open MPI");
  EXPECT_CONTAINS(m, "MASTER_ADDR and MASTER_PORT are not set");
  EXPECT_CONTAINS(m, "mpirun -x MASTER_ADDR=");
  EXPECT_CONTAINS(m, "SHOAL_STORE_ADDR");
  m = detect_error(merge(kOpenMpi, {{"MASTER_ADDR", "head"}}));
  EXPECT_CONTAINS(m, "MASTER_PORT is not set");
  m = detect_error(merge(kOpenMpi, {{"OMPI_COMM_WORLD_SIZE", "x"}}));
  EXPECT_CONTAINS(m, "OMPI_COMM_WORLD_SIZE='x'");
  Vars v = kOpenMpi;
  v.erase("OMPI_COMM_WORLD_SIZE");
  EXPECT_CONTAINS(detect_error(v), "OMPI_COMM_WORLD_SIZE is not set");
  EXPECT_CONTAINS(detect_error(merge(kOpenMpi, {{"OMPI_COMM_WORLD_LOCAL_SIZE", "9"}})),
                  "OMPI_COMM_WORLD_LOCAL_SIZE=9");
}

// ---- MPICH / Hydra ----

TEST(Detect, Mpich) {
  LaunchInfo i = detect_in(merge(kMpich, {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "7"}}));
  EXPECT_EQ(i.launcher, "mpich");
  EXPECT_EQ(i.rank, 1);
  EXPECT_EQ(i.size, 4);
  EXPECT_EQ(i.local_rank, 1);
  EXPECT_EQ(i.local_size, 2);
  EXPECT_EQ(i.store_host, "h");

  // One host: the file store, named after PMI_KVSNAME.
  i = detect_in(merge(kMpich, {{"MPI_LOCALNRANKS", "4"}}));
  EXPECT_CONTAINS(i.file_store_path, "kvs_1234_0");

  std::string m = detect_error(kMpich);
  EXPECT_CONTAINS(m, "MPICH");
  EXPECT_CONTAINS(m, "-genv MASTER_ADDR");
  // Without Hydra's local variables nothing proves the ranks share a host.
  Vars v = kMpich;
  v.erase("MPI_LOCALRANKID");
  v.erase("MPI_LOCALNRANKS");
  EXPECT_EQ(detect_error(v).find("no error"), std::string::npos);
  EXPECT_CONTAINS(detect_error(merge(kMpich, {{"PMI_RANK", "4"}})), "PMI_RANK=4 is outside [0, 4)");
}

// ---- SLURM ----

TEST(Detect, SlurmDerivesHostAndPort) {
  LaunchInfo i = detect_in(kSlurm);
  EXPECT_EQ(i.launcher, "slurm");
  EXPECT_EQ(i.rank, 5);
  EXPECT_EQ(i.size, 8);
  EXPECT_EQ(i.local_rank, 1);
  EXPECT_EQ(i.local_size, 4);
  EXPECT_EQ(i.store_host, "gpu07");      // the step's first node, not the job's
  EXPECT_EQ(i.store_port, 29500 + 456);  // 29500 + SLURM_JOB_ID % 1000
  EXPECT_FALSE(i.store_is_external);
  EXPECT_CONTAINS(i.key_prefix, "123456.0");

  Vars v = kSlurm;
  v.erase("SLURM_STEP_NODELIST");
  EXPECT_EQ(detect_in(v).store_host, "gpu01");
  EXPECT_EQ(detect_in(merge(kSlurm, {{"MASTER_PORT", "4000"}})).store_port, 4000);
  EXPECT_EQ(detect_in(merge(kSlurm, {{"MASTER_ADDR", "login"}})).store_host, "login");
  EXPECT_EQ(
      detect_in(merge(kSlurm, {{"SLURM_NTASKS_PER_NODE", "4"}, {"SLURM_STEP_TASKS_PER_NODE", "x"}}))
          .local_size,
      4);
}

TEST(Detect, SlurmUnevenTasksPerNode) {
  Vars v = merge(kSlurm, {{"SLURM_STEP_TASKS_PER_NODE", "3(x2),2"},
                          {"SLURM_NODEID", "2"},
                          {"SLURM_PROCID", "7"},
                          {"SLURM_LOCALID", "1"},
                          {"SLURM_STEP_NODELIST", "a[1-3]"}});
  EXPECT_EQ(detect_in(v).local_size, 2);
  v["SLURM_NODEID"] = "0";
  EXPECT_EQ(detect_in(v).local_size, 3);
  v["SLURM_NODEID"] = "3";
  EXPECT_CONTAINS(detect_error(v), "SLURM_NODEID=3");
  v["SLURM_STEP_TASKS_PER_NODE"] = "3(y2)";
  EXPECT_CONTAINS(detect_error(v), "SLURM_STEP_TASKS_PER_NODE='3(y2)'");
}

TEST(Detect, SlurmOneNodeUsesAFileStore) {
  Vars v = merge(kSlurm, {{"SLURM_PROCID", "1"},
                          {"SLURM_NTASKS", "4"},
                          {"SLURM_NODEID", "0"},
                          {"SLURM_STEP_TASKS_PER_NODE", "4"},
                          {"SLURM_STEP_NODELIST", "gpu07"}});
  LaunchInfo i = detect_in(v);
  EXPECT_CONTAINS(i.file_store_path, "123456.0");
  EXPECT_TRUE(i.store_host.empty());
  // An explicit port means TCP.
  EXPECT_TRUE(detect_in(merge(v, {{"MASTER_PORT", "4000"}})).file_store_path.empty());
}

TEST(Detect, SlurmErrors) {
  Vars v = kSlurm;
  v.erase("SLURM_NTASKS");
  EXPECT_CONTAINS(detect_error(v), "SLURM_NTASKS is not set");
  v = kSlurm;
  v.erase("SLURM_STEP_NODELIST");
  v.erase("SLURM_JOB_NODELIST");
  std::string m = detect_error(v);
  EXPECT_CONTAINS(m, "MASTER_ADDR and MASTER_PORT are not set");
  EXPECT_CONTAINS(m, "SLURM_STEP_NODELIST");
  EXPECT_CONTAINS(detect_error(merge(kSlurm, {{"SLURM_PROCID", "8"}})),
                  "SLURM_PROCID=8 is outside [0, 8)");
  EXPECT_CONTAINS(detect_error(merge(kSlurm, {{"SLURM_JOB_ID", "12a"}})), "SLURM_JOB_ID='12a'");
  EXPECT_CONTAINS(detect_error(merge(kSlurm, {{"SLURM_STEP_NODELIST", "gpu[07"}})),
                  "unmatched '['");
}

// ---- SLURM host lists ----

TEST(FirstSlurmHost, Forms) {
  EXPECT_EQ(first_slurm_host("a"), "a");
  EXPECT_EQ(first_slurm_host("a,b"), "a");
  EXPECT_EQ(first_slurm_host("node[03-05,9]"), "node03");
  EXPECT_EQ(first_slurm_host("node[9,03-05]"), "node9");
  EXPECT_EQ(first_slurm_host("n[1-2],m[3]"), "n1");
  EXPECT_EQ(first_slurm_host("x-[001-004]-y"), "x-001-y");
  EXPECT_EQ(first_slurm_host("rack[2-3]-node[010-020]"), "rack2-node010");
  EXPECT_EQ(first_slurm_host("  host.domain  "), "host.domain");
  EXPECT_EQ(first_slurm_host("gpu[007]"), "gpu007");
}

TEST(FirstSlurmHost, Errors) {
  EXPECT_THROW(first_slurm_host(""), InvalidArgumentError);
  EXPECT_THROW(first_slurm_host("node[1-2"), InvalidArgumentError);
  EXPECT_THROW(first_slurm_host("node]1["), InvalidArgumentError);
  EXPECT_THROW(first_slurm_host("node[a-b]"), InvalidArgumentError);
}

// ---- open_store ----

TEST(OpenStore, TcpRankZeroHostsAndKeysArePrefixed) {
  const uint16_t port = free_port();
  constexpr int kRanks = 4;
  std::vector<std::string> got(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r)
    ranks.emplace_back([&, r] {
      LaunchInfo info = detect_in({{"RANK", std::to_string(r)},
                                   {"WORLD_SIZE", std::to_string(kRanks)},
                                   {"MASTER_ADDR", "127.0.0.1"},
                                   {"MASTER_PORT", std::to_string(port)},
                                   {"TORCHELASTIC_RUN_ID", "run1"},
                                   {"TORCHELASTIC_RESTART_COUNT", "0"}});
      auto store = open_store(info, 10s);
      store->set("rank" + std::to_string(r), std::to_string(r * r));
      std::string all;
      for (int p = 0; p < kRanks; ++p) all += store->get_string("rank" + std::to_string(p)) + ",";
      got[r] = all;
      store->set("finished" + std::to_string(r), std::string("1"));
      if (r == 0) {
        // The host leaves last; and the keys live under the run's prefix.
        store->wait({"finished1", "finished2", "finished3"});
        TcpStore raw("127.0.0.1", port, TcpStore::Options{});
        EXPECT_TRUE(raw.check({"shoal/run1/attempt_0/rank0"}));
        EXPECT_FALSE(raw.check({"rank0"}));
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(got[r], "0,1,4,9,");
}

TEST(OpenStore, ExternalStoreIsJoinedNotHosted) {
  TcpStore::Options o;
  o.is_server = true;
  TcpStore agent("127.0.0.1", 0, o);  // plays torchrun's agent
  Vars v = {{"RANK", "0"},
            {"WORLD_SIZE", "2"},
            {"MASTER_ADDR", "127.0.0.1"},
            {"MASTER_PORT", std::to_string(agent.port())},
            {"TORCHELASTIC_RUN_ID", "r"},
            {"TORCHELASTIC_RESTART_COUNT", "1"},
            {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  LaunchInfo info = detect_in(v);
  ASSERT_TRUE(info.store_is_external);
  auto store = open_store(info, 5s);  // would fail with "already in use" if rank 0 tried to bind
  store->set("hello", std::string("world"));
  EXPECT_EQ(agent.get_string(info.key_prefix + "/hello"), "world");
}

TEST(OpenStore, OneHostFileStoreIsSharedAndDeletedByTheLastRank) {
  const std::string job = unique_id();
  constexpr int kRanks = 3;
  auto info_of = [&](int r) {
    return detect_in({{"OMPI_COMM_WORLD_RANK", std::to_string(r)},
                      {"OMPI_COMM_WORLD_SIZE", std::to_string(kRanks)},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r)},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(kRanks)},
                      {"OMPI_MCA_ess_base_jobid", job}});
  };
  const std::string path = info_of(0).file_store_path;
  ASSERT_FALSE(path.empty());
  std::vector<std::shared_ptr<Store>> stores(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r)
    ranks.emplace_back([&, r] {
      stores[r] = open_store(info_of(r), 10s);
      stores[r]->set("r" + std::to_string(r), std::string("x"));
      stores[r]->wait({"r0", "r1", "r2"});
    });
  for (auto& t : ranks) t.join();
  EXPECT_TRUE(std::filesystem::exists(path));
  struct stat st {};
  ASSERT_EQ(::stat(path.substr(0, path.rfind('/')).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "the fallback directory must be private";
  stores[1].reset();
  stores[0].reset();
  EXPECT_TRUE(std::filesystem::exists(path)) << "deleted while a rank still uses it";
  stores[2].reset();
  EXPECT_FALSE(std::filesystem::exists(path)) << "the last rank to leave did not delete " << path;
}

TEST(OpenStore, StaleFallbackFileFromACrashedJobIsEmptied) {
  const std::string job = unique_id();
  Vars v = {{"OMPI_COMM_WORLD_RANK", "0"},
            {"OMPI_COMM_WORLD_SIZE", "1"},
            {"OMPI_MCA_ess_base_jobid", job}};
  LaunchInfo info = detect_in(v);
  std::filesystem::create_directories(
      info.file_store_path.substr(0, info.file_store_path.rfind('/')));
  ::chmod(info.file_store_path.substr(0, info.file_store_path.rfind('/')).c_str(), 0700);
  {
    FileStore old(info.file_store_path);
    old.set(info.key_prefix + "/stale_key", std::string("from a crashed job"));
  }
  // A file written a day ago: stale.
  timeval times[2] = {{::time(nullptr) - 86400, 0}, {::time(nullptr) - 86400, 0}};
  ASSERT_EQ(::utimes(info.file_store_path.c_str(), times), 0);
  {
    auto store = open_store(info, 2s);
    EXPECT_FALSE(store->check({"stale_key"}));
  }
  // A fresh file (another rank of this very job wrote it) is kept.
  {
    FileStore fresh(info.file_store_path);
    fresh.set(info.key_prefix + "/fresh_key", std::string("1"));
  }
  {
    auto store = open_store(info, 2s);
    EXPECT_TRUE(store->check({"fresh_key"}));
  }
  std::filesystem::remove(info.file_store_path);
}

TEST(OpenStore, ExplicitFileStorePath) {
  // Right in /tmp, next to (but not in) the private directory of the automatic files.
  const std::string path = "/tmp/shoal-" + unique_id() + ".store";
  std::vector<std::thread> ranks;
  std::vector<std::string> seen(2);
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      LaunchInfo info = detect_in(
          {{"PMI_RANK", std::to_string(r)}, {"PMI_SIZE", "2"}, {"SHOAL_STORE_PATH", path}});
      auto store = open_store(info, 10s);
      store->set("k" + std::to_string(r), std::to_string(r + 10));
      seen[r] = store->get_string("k" + std::to_string(1 - r));
    });
  for (auto& t : ranks) t.join();
  EXPECT_EQ(seen[0], "11");
  EXPECT_EQ(seen[1], "10");
  EXPECT_FALSE(std::filesystem::exists(path)) << "the last rank did not delete " << path;
  std::filesystem::remove(path);
}
