// gloo_bench: shoal-bench's measurement (nccl-tests' method and output) over Gloo, calling
// the algorithms torch.distributed's gloo backend calls for CPU tensors:
//   all_reduce     gloo::allreduce, algorithm unspecified (= ring), as torch;
//   GLOO_BENCH_ALLREDUCE=bcube all_gather     gloo::allgather (ring) reduce_scatter
//   gloo::ReduceScatterHalvingDoubling (torch copies in and out around it; so do we) broadcast
//   gloo::broadcast (binomial tree) reduce         gloo::reduce (ring reduce-scatter, then gather
//   to the root) all_to_all     gloo::alltoall (pairwise)
// over Gloo's TCP transport.
//
// Launch: one process per rank, rank/size from RANK/WORLD_SIZE (torchrun, shoal-run),
// OMPI_COMM_WORLD_RANK/SIZE (mpirun), PMI_RANK/PMI_SIZE (MPICH) or SLURM_PROCID/SLURM_NTASKS.
// Rendezvous: Gloo's FileStore in GLOO_BENCH_STORE (a fresh directory every rank can see), or
// in /tmp/gloo_bench.<job id> derived from the launcher's variables.
// Interface: GLOO_SOCKET_IFNAME if set, else the local address that routes to MASTER_ADDR,
// else loopback.
#include <arpa/inet.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "nccl_tests_driver.h"  // tools/bench/: the measurement shared with shoal-bench

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

const char* first_env(std::initializer_list<const char*> names, const char** which) {
  for (const char* n : names)
    if (const char* v = env(n)) {
      if (which) *which = n;
      return v;
    }
  return nullptr;
}

std::string sanitize(std::string s) {
  for (char& c : s)
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return s;
}

// A directory name every rank of this job derives alike from its launcher's variables.
std::string store_dir() {
  if (const char* d = env("GLOO_BENCH_STORE")) return d;
  std::string key;
  if (const char* a = env("MASTER_ADDR")) {
    const char* p = env("MASTER_PORT");
    key = std::string("m-") + a + "-" + (p ? p : "0");
    if (const char* id = env("TORCHELASTIC_RUN_ID")) key += std::string("-") + id;
  } else if (const char* ns = first_env({"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"}, nullptr)) {
    key = std::string("ompi-") + ns;
  } else if (const char* job = env("SLURM_JOB_ID")) {
    const char* step = env("SLURM_STEP_ID");
    key = std::string("slurm-") + job + "-" + (step ? step : "0");
  } else {
    throw std::runtime_error(
        "no rendezvous: set GLOO_BENCH_STORE to a fresh directory all ranks can see (or "
        "launch with MASTER_ADDR/MASTER_PORT, mpirun or srun)");
  }
  const char* tmp = env("TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/gloo_bench." + sanitize(key);
}

// The local address the kernel would use to reach MASTER_ADDR (no packet is sent).
std::string local_address_towards(const char* host) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(host, "9", &hints, &res) != 0 || !res)
    throw std::runtime_error(std::string("cannot resolve MASTER_ADDR=") + host);
  int fd = socket(res->ai_family, SOCK_DGRAM, 0);
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  bool ok = fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  if (!ok) throw std::runtime_error(std::string("no route to MASTER_ADDR=") + host);
  char buf[INET6_ADDRSTRLEN] = "";
  const void* a =
      local.ss_family == AF_INET6
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
  inet_ntop(local.ss_family, a, buf, sizeof buf);
  return buf;
}

struct Gloo {
  std::shared_ptr<gloo::Context> ctx;
  int rank = 0, size = 1;
  uint32_t tag = 0;  // every collective gets the next tag, as torch's ProcessGroupGloo does
  gloo::AllreduceOptions::Algorithm allreduce_algo = gloo::AllreduceOptions::Algorithm::UNSPECIFIED;

  // reduce_scatter: Gloo's halving-doubling binds its buffer at construction, so one instance
  // per (size, mode) is built before timing; torch builds one per call.
  std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> rs;
  size_t rs_count = 0;
  int rs_in_place = -1;
  std::vector<float> rs_scratch;  // out of place: the input is copied here, as torch does

  uint32_t next_tag() { return tag++; }
};

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

void g_barrier(void* c) {
  auto* g = static_cast<Gloo*>(c);
  gloo::BarrierOptions opts(g->ctx);
  opts.setTag(g->next_tag());
  gloo::barrier(opts);
}

template <typename T>
T g_allreduce_scalar(Gloo* g, T v, ReduceFn fn) {
  gloo::AllreduceOptions opts(g->ctx);
  opts.setOutput(&v, 1);
  opts.setReduceFunction(fn);
  opts.setTag(g->next_tag());
  gloo::allreduce(opts);
  return v;
}

double g_reduce_double(void* c, double v, int op) {
  auto* g = static_cast<Gloo*>(c);
  ReduceFn fn = op == 1   ? static_cast<ReduceFn>(&gloo::sum<double>)
                : op == 2 ? static_cast<ReduceFn>(&gloo::min<double>)
                          : static_cast<ReduceFn>(&gloo::max<double>);
  return g_allreduce_scalar<double>(g, v, fn);
}

long long g_sum_ll(void* c, long long v) {
  return g_allreduce_scalar<long long>(static_cast<Gloo*>(c), v,
                                       static_cast<ReduceFn>(&gloo::sum<long long>));
}

int g_has_inplace(void*, Coll c) {
  return c != COLL_ALL_TO_ALL;
}  // gloo::alltoall needs two buffers

int g_can_shift(void*, Coll c, int in_place) { return !(c == COLL_REDUCE_SCATTER && in_place); }

void g_prepare(void* c, Coll coll, void*, void* recv_base_v, size_t count, int in_place) {
  float* recv_base = static_cast<float*>(recv_base_v);
  auto* g = static_cast<Gloo*>(c);
  if (coll != COLL_REDUCE_SCATTER || count == 0) return;
  if (g->rs && g->rs_count == count && g->rs_in_place == in_place) return;
  g->rs.reset();
  const size_t total = count * static_cast<size_t>(g->size);
  if (total > 0x7fffffffu) throw std::runtime_error("reduce_scatter: Gloo counts are int");
  float* buf = recv_base;
  if (!in_place) {
    if (g->rs_scratch.size() < total) g->rs_scratch.assign(total, 0.0f);
    buf = g->rs_scratch.data();
  }
  g->rs = std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(
      g->ctx, std::vector<float*>{buf}, static_cast<int>(total),
      std::vector<int>(static_cast<size_t>(g->size), static_cast<int>(count)));
  g->rs_count = count;
  g->rs_in_place = in_place;
}

void g_run(void* c, Coll coll, const void* send_v, void* recv_v, size_t count, int root,
           int in_place, int) {
  auto* g = static_cast<Gloo*>(c);
  float* send =
      static_cast<float*>(const_cast<void*>(send_v));  // Gloo's setters take non-const pointers
  float* recv = static_cast<float*>(recv_v);
  const size_t n = static_cast<size_t>(g->size);
  const ReduceFn sum = static_cast<ReduceFn>(&gloo::sum<float>);
  switch (coll) {
    case COLL_ALL_REDUCE: {
      gloo::AllreduceOptions opts(g->ctx);
      opts.setAlgorithm(g->allreduce_algo);
      if (!in_place) opts.setInput(send, count);
      opts.setOutput(recv, count);
      opts.setReduceFunction(sum);
      opts.setTag(g->next_tag());
      gloo::allreduce(opts);
      break;
    }
    case COLL_ALL_GATHER: {
      gloo::AllgatherOptions opts(g->ctx);
      if (!in_place) opts.setInput(send, count);  // in place: our block is at recv + rank*count
      opts.setOutput(recv, count * n);
      opts.setTag(g->next_tag());
      gloo::allgather(opts);
      break;
    }
    case COLL_REDUCE_SCATTER:
      g->next_tag();
      if (in_place) {
        g->rs->run();  // on the whole buffer at send (== recv base); result at its start
      } else {
        std::memcpy(g->rs_scratch.data(), send, count * n * sizeof(float));
        g->rs->run();
        std::memcpy(recv, g->rs_scratch.data(), count * sizeof(float));
      }
      break;
    case COLL_BROADCAST: {
      gloo::BroadcastOptions opts(g->ctx);
      if (!in_place && g->rank == root) opts.setInput(send, count);
      opts.setOutput(recv, count);
      opts.setRoot(root);
      opts.setTag(g->next_tag());
      gloo::broadcast(opts);
      break;
    }
    case COLL_REDUCE: {
      gloo::ReduceOptions opts(g->ctx);
      if (!in_place) opts.setInput(send, count);
      opts.setOutput(recv, count);  // on non-roots Gloo also uses it as scratch
      opts.setRoot(root);
      opts.setReduceFunction(sum);
      opts.setTag(g->next_tag());
      gloo::reduce(opts);
      break;
    }
    case COLL_ALL_TO_ALL: {
      gloo::AlltoallOptions opts(g->ctx);
      opts.setInput(send, count * n);
      opts.setOutput(recv, count * n);
      opts.setTag(g->next_tag());
      gloo::alltoall(opts);
      break;
    }
    default:
      break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* rank_s =
      first_env({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, nullptr);
  const char* size_s =
      first_env({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, nullptr);
  const int rank = rank_s ? std::atoi(rank_s) : 0;
  const int size = size_s ? std::atoi(size_s) : 1;

  BenchOptions o;
  int rc = pb_parse_args(argc, argv, rank, &o);
  if (rc != 0) return rc < 0 ? 2 : 0;
  if (!rank_s || !size_s) {
    std::fprintf(stderr,
                 "gloo_bench: no rank/size in the environment; launch with shoal-run, torchrun, "
                 "mpirun or srun, or set RANK and WORLD_SIZE (and GLOO_BENCH_STORE) yourself\n");
    return 2;
  }
  if (size < 1 || rank < 0 || rank >= size) {
    std::fprintf(stderr, "gloo_bench: rank %d out of range for world size %d\n", rank, size);
    return 2;
  }

  std::string dir;
  try {
    Gloo g;
    g.rank = rank;
    g.size = size;
    if (const char* a = env("GLOO_BENCH_ALLREDUCE")) {
      if (!std::strcmp(a, "bcube"))
        g.allreduce_algo = gloo::AllreduceOptions::Algorithm::BCUBE;
      else if (!std::strcmp(a, "ring"))
        g.allreduce_algo = gloo::AllreduceOptions::Algorithm::RING;
      else
        throw std::runtime_error(std::string("GLOO_BENCH_ALLREDUCE must be ring or bcube, not ") +
                                 a);
    }

    gloo::transport::tcp::attr attr;
    std::string where;
    if (const char* ifname = env("GLOO_SOCKET_IFNAME")) {
      attr.iface = ifname;
      where = std::string("interface ") + ifname;
    } else if (const char* master = env("MASTER_ADDR")) {
      attr.hostname = local_address_towards(master);
      where = attr.hostname + " (towards MASTER_ADDR " + master + ")";
    } else {
      attr.hostname = "127.0.0.1";
      where = "127.0.0.1";
    }
    auto dev = gloo::transport::tcp::CreateDevice(attr);

    dir = store_dir();
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      throw std::runtime_error("cannot create store directory " + dir + ": " +
                               std::strerror(errno));
    gloo::rendezvous::FileStore store(dir);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    int timeout_s = env("GLOO_BENCH_TIMEOUT") ? std::atoi(env("GLOO_BENCH_TIMEOUT")) : 300;
    ctx->setTimeout(std::chrono::seconds(timeout_s));
    ctx->connectFullMesh(store, dev);
    g.ctx = ctx;

    char library[96], details[256];
    std::snprintf(library, sizeof library, "Gloo %d.%d.%d (tcp transport)", GLOO_VERSION_MAJOR,
                  GLOO_VERSION_MINOR, GLOO_VERSION_PATCH);
    const char* algo = o.coll == COLL_ALL_REDUCE
                           ? (g.allreduce_algo == gloo::AllreduceOptions::Algorithm::BCUBE
                                  ? "gloo::allreduce bcube"
                                  : "gloo::allreduce ring (torch's default)")
                       : o.coll == COLL_ALL_GATHER ? "gloo::allgather ring"
                       : o.coll == COLL_REDUCE_SCATTER
                           ? "ReduceScatterHalvingDoubling; out-of-place copies in and out as torch"
                       : o.coll == COLL_BROADCAST ? "gloo::broadcast binomial tree"
                       : o.coll == COLL_REDUCE    ? "gloo::reduce ring + gather"
                                                  : "gloo::alltoall pairwise, no in-place form";
    std::snprintf(details, sizeof details, "%s; tcp on %s; store %s", algo, where.c_str(),
                  dir.c_str());

    PeerOps ops;
    std::memset(&ops, 0, sizeof ops);
    ops.name = "gloo_bench";
    ops.library = library;
    ops.details = details;
    ops.rank = rank;
    ops.size = size;
    ops.rs_inplace = RS_INPLACE_AT_START;
    ops.ctx = &g;
    ops.barrier = g_barrier;
    ops.reduce_double = g_reduce_double;
    ops.sum_ll = g_sum_ll;
    ops.has_inplace = g_has_inplace;
    ops.run = g_run;
    ops.prepare = g_prepare;
    ops.can_shift = g_can_shift;
    rc = peer_bench_main(&o, &ops);

    // Everyone is long past the rendezvous: remove our key, and the directory when it was ours,
    // so that the next run with the same job id starts clean (FileStore refuses existing keys).
    std::error_code ec;
    for (const auto& k : store.getAllKeyFilePaths()) std::filesystem::remove(k, ec);
    g_barrier(&g);
    g.rs.reset();
    if (rank == 0 && !env("GLOO_BENCH_STORE")) std::filesystem::remove(dir, ec);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_bench: rank %d of %d: %s\n", rank, size, e.what());
    if (!dir.empty())
      std::fprintf(stderr, "gloo_bench: rendezvous directory was %s (remove it before rerunning)\n",
                   dir.c_str());
    std::fflush(stderr);
    return 1;
  }
  return rc;
}
