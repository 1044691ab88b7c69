// Ranks that issue different calls at the same position must fail with MismatchError on every
// rank, at that call (or, where a rank checks nobody, a queued broadcast's root, at the next),
// never return different results nor wait until the timeout. One case per path a call can
// take (shared slots, direct, queued broadcast, schedules over TCP and over shared-memory
// rings, hierarchical) and per field every rank must agree on (op, dtype, count, root,
// collective). Ranks are forked processes, so a rank that hangs or dies fails only its case.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "comm/comm_impl.hpp"
#include "support/deaths.hpp"
#include "support/processes.hpp"

namespace shoal::testing {
namespace {

using namespace std::chrono_literals;

enum class Path { slots, direct, queued, schedules_tcp, schedules_rings, hierarchical };

const char* path_name(Path p) {
  switch (p) {
    case Path::slots:
      return "slots";
    case Path::direct:
      return "direct";
    case Path::queued:
      return "queued";
    case Path::schedules_tcp:
      return "schedules_tcp";
    case Path::schedules_rings:
      return "schedules_rings";
    case Path::hierarchical:
      return "hierarchical";
  }
  return "?";
}

// The settings that send a call down `path`; the counts below are chosen for their defaults
// (slots up to 256 KiB per rank, direct from 32 KiB, queued broadcasts up to 4 KiB).
std::vector<std::pair<const char*, const char*>> environment(Path path) {
  switch (path) {
    case Path::slots:
      return {{"SHOAL_FLAT_DIRECT_BYTES", "0"}};
    case Path::direct:
    case Path::queued:
      return {};
    case Path::schedules_tcp:
      return {{"SHOAL_TRANSPORT", "tcp"}};
    case Path::schedules_rings:
      return {{"SHOAL_TRANSPORT", "shm"}, {"SHOAL_FLAT_MAX_BYTES", "0"}};
    case Path::hierarchical:
      return {{"SHOAL_HIERARCHICAL", "on"}, {"SHOAL_SOCKET_IFNAME", "lo"}};
  }
  return {};
}

struct Case {
  std::string name;
  Path path;
  // Issues this rank's call: side 0 or 1 (the two sides issue different calls).
  std::function<void(Communicator&, int side)> call;
};

// Buffers big enough for any call below (the largest: an all_reduce of 2 x 256K floats).
struct Buffers {
  std::vector<float> in = std::vector<float>(1 << 20, 1.0f), out = std::vector<float>(1 << 20);
};

void all_reduce(Communicator& c, Buffers& b, size_t n, DataType t, ReduceOp op) {
  c.all_reduce(b.in.data(), b.out.data(), n, t, op);
}

// Cases for a path whose calls are all_reduce-shaped at `n` floats (slots, direct, schedules,
// hierarchical): op, dtype (same bytes), count, collective (reduce_scatter of the same input
// bytes: only the collective differs).
std::vector<Case> reduction_cases(Path path, size_t n, const std::string& suffix = "") {
  auto with = [](std::function<void(Communicator&, Buffers&, int)> f) {
    return [f](Communicator& c, int side) {
      Buffers b;
      f(c, b, side);
    };
  };
  std::vector<Case> cases = {
      {"op", path, with([n](Communicator& c, Buffers& b, int side) {
         all_reduce(c, b, n, DataType::float32, side == 0 ? ReduceOp::sum : ReduceOp::max);
       })},
      {"op_avg", path, with([n](Communicator& c, Buffers& b, int side) {
         all_reduce(c, b, n, DataType::float32, side == 0 ? ReduceOp::sum : ReduceOp::avg);
       })},
      {"dtype", path, with([n](Communicator& c, Buffers& b, int side) {
         all_reduce(c, b, n, side == 0 ? DataType::float32 : DataType::int32, ReduceOp::sum);
       })},
      {"count", path, with([n](Communicator& c, Buffers& b, int side) {
         all_reduce(c, b, side == 0 ? n : 2 * n, DataType::float32, ReduceOp::sum);
       })},
      {"collective", path, with([n](Communicator& c, Buffers& b, int side) {
         if (side == 0)
           all_reduce(c, b, n, DataType::float32, ReduceOp::sum);
         else
           c.reduce_scatter(b.in.data(), b.out.data(), n / c.size(), DataType::float32,
                            ReduceOp::sum);
       })},
  };
  for (auto& c : cases) c.name += suffix;
  return cases;
}

// Each side believes it holds the root (rank 0 and the last rank): a root needs nothing from
// its peers, so only the comparison of the calls can tell. The barrier after it is where a
// queued broadcast's root, which checks nobody, learns of it.
Case root_case(std::string name, Path path, bool broadcast, size_t n) {
  return {name, path, [broadcast, n](Communicator& c, int side) {
            Buffers b;
            const int root = side == 0 ? 0 : c.size() - 1;
            if (broadcast)
              c.broadcast(b.in.data(), b.out.data(), n, DataType::float32, root);
            else
              c.reduce(b.in.data(), b.out.data(), n, DataType::float32, ReduceOp::sum, root);
            c.barrier();
          }};
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  auto add = [&](std::vector<Case> more) { cases.insert(cases.end(), more.begin(), more.end()); };
  // slots: 64 floats; a broadcast of 8 KiB (beyond the queue: through the slots)
  add(reduction_cases(Path::slots, 64));
  cases.push_back(root_case("root_reduce", Path::slots, false, 64));
  cases.push_back(root_case("root_broadcast", Path::slots, true, 2048));
  // direct: an all_reduce beyond the slots (512 KiB), a broadcast of 64 KiB
  add(reduction_cases(Path::direct, 128 << 10));
  cases.push_back(root_case("root_broadcast", Path::direct, true, 16 << 10));
  // queued broadcasts: 1 KiB
  cases.push_back(root_case("root", Path::queued, true, 256));
  cases.push_back({"dtype", Path::queued, [](Communicator& c, int side) {
                     Buffers b;
                     c.broadcast(b.in.data(), b.out.data(), 256,
                                 side == 0 ? DataType::float32 : DataType::int32, 0);
                     c.barrier();
                   }});
  cases.push_back({"count", Path::queued, [](Communicator& c, int side) {
                     Buffers b;
                     c.broadcast(b.in.data(), b.out.data(), side == 0 ? 256 : 512,
                                 DataType::float32, 0);
                     c.barrier();
                   }});
  cases.push_back({"collective", Path::queued, [](Communicator& c, int side) {
                     Buffers b;
                     if (side == 0)
                       c.broadcast(b.in.data(), b.out.data(), 256, DataType::float32, 0);
                     else
                       c.all_gather(b.in.data(), b.out.data(), 256 / c.size(), DataType::float32);
                     c.barrier();
                   }});
  // schedules: small and large calls over TCP and over shared-memory rings
  for (Path p : {Path::schedules_tcp, Path::schedules_rings}) {
    add(reduction_cases(p, 64));
    add(reduction_cases(p, 256 << 10, "_large"));
    cases.push_back(root_case("root_reduce", p, false, 64));
    cases.push_back(root_case("root_reduce_large", p, false, 256 << 10));
    cases.push_back(root_case("root_broadcast", p, true, 64));
    cases.push_back(root_case("root_broadcast_large", p, true, 256 << 10));
  }
  // hierarchical: each host one side (a difference inside one host is the slots' case)
  add(reduction_cases(Path::hierarchical, 4096));
  cases.push_back({"collective_all_gather", Path::hierarchical, [](Communicator& c, int side) {
                     Buffers b;
                     if (side == 0)
                       c.all_reduce(b.in.data(), b.out.data(), 4096, DataType::float32,
                                    ReduceOp::sum);
                     else
                       c.all_gather(b.in.data(), b.out.data(), 4096 / c.size(), DataType::float32);
                   }});
  cases.push_back({"count_all_gather", Path::hierarchical, [](Communicator& c, int side) {
                     Buffers b;
                     c.all_gather(b.in.data(), b.out.data(), side == 0 ? 1024 : 2048,
                                  DataType::float32);
                   }});
  return cases;
}

class Mismatch : public ::testing::TestWithParam<Case> {};

// Every rank fails with MismatchError, well within the timeout, whose message names both
// sides; with 2 ranks the sides are the ranks (and peer() is the other one), hierarchical
// 2 x 2: the hosts.
TEST_P(Mismatch, RaisesMismatchErrorNamingBothSidesOnEveryRank) {
  const Case& c = GetParam();
  const bool hier = c.path == Path::hierarchical;
  const int ranks = hier ? 4 : 2;
  auto side_of = [&](int rank) { return hier ? rank / 2 : rank; };
  ProcessJob job(ranks);
  const double start = monotonic_seconds();
  auto results = job.run(
      [&](int rank, const ProcessJob& j) {
        for (const auto& [k, v] : environment(c.path)) setenv(k, v, 1);
        if (hier)
          setenv("SHOAL_HOST_ID", ("emulated-host-" + std::to_string(side_of(rank))).c_str(), 1);
        setenv("SHOAL_TUNE_CALIBRATE", "off", 1);  // the first collectives are the test's
        Options o;
        o.timeout = 30s;  // detection must come from comparing the calls, far sooner
        Communicator comm = Communicator::create(j.store(), rank, ranks, o);
        // The path must be the one named (else the case tests another).
        const auto& engine = *shoal::detail::Internals::of(comm).engine;
        const auto* shm = engine.shm();
        const auto* flat_memory = engine.flat();  // where every rank shares memory
        const bool all_shm = flat_memory != nullptr;
        if ((c.path == Path::direct || c.path == Path::queued || c.path == Path::slots) && !all_shm)
          return 10;
        if (c.path == Path::direct && flat_memory->direct_bytes() == UINT64_MAX)
          return 11;  // no cross-memory attach
        if ((c.path == Path::schedules_tcp || hier) && all_shm) return 12;
        if (c.path == Path::schedules_rings &&
            (!shm || !flat_memory || flat_memory->slot_bytes() != 0))
          return 13;
        if (hier && comm.num_hosts() != 2) return 14;
        comm.barrier();
        const auto& planner = *shoal::detail::Internals::of(comm).planner;
        const uint64_t flat_before = planner.planned(comm::Path::flat),
                       hier_before = planner.planned(comm::Path::hierarchy);
        const int code = expect_error<MismatchError>(rank, j, [&] { c.call(comm, side_of(rank)); });
        // ...and the call took it (the planner counts the calls of each path).
        const bool flat = planner.planned(comm::Path::flat) != flat_before;
        const bool flat_path =
            c.path == Path::slots || c.path == Path::direct || c.path == Path::queued;
        if (flat != flat_path || hier != (planner.planned(comm::Path::hierarchy) != hier_before))
          return 15;
        return code;
      },
      60s);
  const double took = monotonic_seconds() - start;
  for (int r = 0; r < ranks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + results[r].report);
    ASSERT_LT(results[r].exit_code, 10)
        << "the path was not the one named (exit code " << results[r].exit_code << ")";
    ASSERT_EQ(results[r].exit_code, kGotExpectedError);
    std::istringstream report(results[r].report);
    std::string when, peer, message;
    std::getline(report, when);
    std::getline(report, peer);
    std::getline(report, message, '\0');
    const int culprit = std::stoi(peer);
    ASSERT_TRUE(culprit >= 0 && culprit < ranks) << "peer() must name a rank";
    auto names = [&](int q) {
      return message.find("rank " + std::to_string(q)) != std::string::npos;
    };
    if (!hier) {
      EXPECT_NE(culprit, r) << "peer() must be the other rank";
      EXPECT_TRUE(names(culprit) && names(r)) << "the message must name both ranks";
      continue;
    }
    // Hierarchical: the error reaches most ranks relayed (through the groups and the parent),
    // and a relay names one rank as culprit, which from a rank of the same host is not "the
    // other side"; the message still names the two ranks whose calls were compared.
    EXPECT_TRUE(names(0) || names(1)) << "the message must name a rank of host 0";
    EXPECT_TRUE(names(2) || names(3)) << "and one of host 1";
  }
  EXPECT_LT(took, 15.0) << "a mismatch must be found by comparing the calls, not by the timeout";
}

INSTANTIATE_TEST_SUITE_P(Paths, Mismatch, ::testing::ValuesIn(all_cases()), [](const auto& info) {
  return std::string(path_name(info.param.path)) + "_" + info.param.name;
});

}  // namespace
}  // namespace shoal::testing
