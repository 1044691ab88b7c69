// Collectives on "device" memory staged through host buffers (src/staging): results against
// values computed from the ranks' inputs, the pipeline's order from the copy engine's log, and
// its failures (a copy that fails, a peer that dies) ending in errors with no copy in flight.
// HostCopyEngine stands for the GPU: the same interface, host memory and threads.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "comm/spin.hpp"
#include "staging/copy_engine.hpp"
#include "staging/pipeline.hpp"
#include "support/deaths.hpp"
#include "support/processes.hpp"

namespace shoal::testing {
namespace {

using namespace std::chrono_literals;
using staging::Direction;
using staging::HostCopyEngine;

// A failure must be found by what the call sees, far sooner than this timeout.
Communicator bounded_communicator(const ProcessJob& j, int rank, int ranks) {
  Options o;
  o.timeout = 30s;
  return Communicator::create(j.store(), rank, ranks, o);
}

// Rank r's input element i: distinct per rank and element, exact in float32 sums.
float input(int rank, uint64_t i) { return static_cast<float>((rank + 1) * 1000 + i % 997); }

struct Shape {
  const char* collective;
  uint64_t count;        // elements (per rank for all_gather's input / reduce_scatter's output)
  uint64_t chunk_bytes;  // staging chunk
};

// Runs one staged collective on 3 ranks and checks every element; returns "" or what is wrong.
std::string run_and_check(Communicator& comm, HostCopyEngine& engine, const Shape& s) {
  const int p = comm.size(), me = comm.rank();
  const std::string name = s.collective;
  std::ostringstream wrong;
  auto expect = [&](const std::vector<float>& got, auto want) {
    for (uint64_t i = 0; i < got.size(); ++i)
      if (got[i] != want(i)) {
        wrong << name << " count " << s.count << " chunk " << s.chunk_bytes << ": element " << i
              << " is " << got[i] << ", not " << want(i);
        return;
      }
  };
  if (name == "all_reduce" || name == "all_reduce_in_place") {
    std::vector<float> in(s.count), out(s.count, -1);
    for (uint64_t i = 0; i < s.count; ++i) in[i] = input(me, i);
    float* dst = name == "all_reduce" ? out.data() : in.data();
    staging::staged_all_reduce(engine, comm, in.data(), dst, s.count, DataType::float32,
                               ReduceOp::sum, s.chunk_bytes);
    expect(name == "all_reduce" ? out : in, [&](uint64_t i) {
      float sum = 0;
      for (int r = 0; r < p; ++r) sum += input(r, i);
      return sum;
    });
  } else if (name == "broadcast") {
    const int root = 1;
    std::vector<float> buf(s.count, -1);
    if (me == root)
      for (uint64_t i = 0; i < s.count; ++i) buf[i] = input(root, i);
    staging::staged_broadcast(engine, comm, buf.data(), s.count, DataType::float32, root,
                              s.chunk_bytes);
    expect(buf, [&](uint64_t i) { return input(root, i); });
  } else if (name == "all_gather") {
    std::vector<float> in(s.count), out(s.count * p, -1);
    for (uint64_t i = 0; i < s.count; ++i) in[i] = input(me, i);
    staging::staged_all_gather(engine, comm, in.data(), out.data(), s.count, DataType::float32,
                               s.chunk_bytes);
    expect(out, [&](uint64_t i) { return input(static_cast<int>(i / s.count), i % s.count); });
  } else if (name == "reduce_scatter") {
    std::vector<float> in(s.count * p), out(s.count, -1);
    for (uint64_t i = 0; i < in.size(); ++i) in[i] = input(me, i);
    staging::staged_reduce_scatter(engine, comm, in.data(), out.data(), s.count, DataType::float32,
                                   ReduceOp::sum, s.chunk_bytes);
    expect(out, [&](uint64_t i) {
      float sum = 0;
      for (int r = 0; r < p; ++r) sum += input(r, me * s.count + i);
      return sum;
    });
  }
  if (engine.in_flight() != 0) wrong << name << ": copies still in flight after the call; ";
  return wrong.str();
}

// Every collective, at counts around the chunk's size (one element, one short of a chunk, one
// over, several and a remainder), in chunks that do and do not divide the elements.
TEST(Staging, EveryCollectiveMatchesTheInputsAtEveryChunking) {
  std::vector<Shape> shapes;
  for (const char* c :
       {"all_reduce", "all_reduce_in_place", "broadcast", "all_gather", "reduce_scatter"})
    for (uint64_t count : {0, 1, 255, 256, 257, 1000, 5 * 256 + 17})
      for (uint64_t chunk : {1024, 1000, 4})  // 256 floats, 250, one (the floor)
        shapes.push_back({c, count, chunk});
  ProcessJob job(3);
  auto results = job.run(
      [&](int rank, const ProcessJob& j) {
        Communicator comm = Communicator::create(j.store(), rank, 3);
        HostCopyEngine engine;
        std::string wrong;
        for (const auto& s : shapes) {
          wrong += run_and_check(comm, engine, s);
          if (!wrong.empty()) break;
        }
        if (engine.after_caller_calls() == 0 || engine.before_caller_calls() == 0)
          wrong += "the caller's stream was not ordered around the copies; ";
        j.report(rank, wrong);
        return wrong.empty() ? 0 : 1;
      },
      120s);
  expect_every_rank_passed(results);
}

// The pipeline's order, from the engine's log of one all_reduce of 8 chunks: every chunk's
// download ends before its collective starts and its upload starts after it ends; chunk k+1's
// download is queued before chunk k's collective (it overlaps it); a host slot is downloaded
// into again only after the upload that read it ended; nothing is in flight at the end.
TEST(Staging, ChunksOverlapTheirCopiesAndNeverReuseASlotTooEarly) {
  ProcessJob job(2);
  auto results = job.run(
      [&](int rank, const ProcessJob& j) {
        Communicator comm = Communicator::create(j.store(), rank, 2);
        HostCopyEngine engine;
        constexpr uint64_t kCount = 8 * 256, kChunk = 1024;
        std::vector<float> buf(kCount);
        for (uint64_t i = 0; i < kCount; ++i) buf[i] = input(rank, i);
        struct Run {
          int64_t start_ns, end_ns;
          const void* slot;
        };
        std::vector<Run> runs;
        auto chunks = staging::elementwise_chunks(kCount, sizeof(float), kChunk);
        staging::run_staged(engine, comm, buf.data(), buf.data(), chunks, true,
                            [&](const void*, void* host, const staging::Chunk& c) {
                              const int64_t start = comm::monotonic_ns();
                              comm.all_reduce(host, c.elements, DataType::float32, ReduceOp::sum);
                              runs.push_back({start, comm::monotonic_ns(), host});
                            });
        std::ostringstream wrong;
        if (engine.in_flight() != 0) wrong << "copies in flight after the call; ";
        for (uint64_t i = 0; i < kCount; ++i)
          if (buf[i] != input(0, i) + input(1, i)) {
            wrong << "element " << i << " wrong; ";
            break;
          }
        std::map<uint64_t, HostCopyEngine::Event> down, up;
        for (const auto& e : engine.events())
          (e.direction == Direction::to_host ? down : up)[e.ticket] = e;
        if (runs.size() != 8 || down.size() != 8 || up.size() != 8)
          wrong << runs.size() << " runs, " << down.size() << " downloads, " << up.size()
                << " uploads, not 8 each; ";
        for (size_t k = 0; wrong.str().empty() && k < 8; ++k) {
          const auto& d = down[k + 1];
          const auto& u = up[k + 1];
          if (d.host != runs[k].slot || u.host != runs[k].slot)
            wrong << "chunk " << k << " copied through another slot than it ran in; ";
          if (d.end_ns > runs[k].start_ns) wrong << "chunk " << k << " ran before its download; ";
          if (u.start_ns < runs[k].end_ns) wrong << "chunk " << k << " uploaded before it ran; ";
          // The slot's previous user (chunk k-3) finished uploading before this download began.
          if (k >= 3 && up[k - 2].end_ns > d.start_ns)
            wrong << "chunk " << k << " downloaded into a slot still being uploaded; ";
        }
        // Pipelining: chunk k+1 was downloading while chunk k ran, at least once.
        int overlapped = 0;
        for (size_t k = 0; k + 1 < runs.size() && k + 2 <= down.size(); ++k)
          overlapped += down[k + 2].start_ns < runs[k].end_ns;
        if (wrong.str().empty() && overlapped == 0) wrong << "no download overlapped a collective";
        j.report(rank, wrong.str());
        return wrong.str().empty() ? 0 : 1;
      },
      60s);
  expect_every_rank_passed(results);
}

// A copy that fails on one rank: it raises that failure, its communicator is aborted so that the
// others raise at once (not at their timeout), no upload follows the failure, and no copy is in
// flight on any rank when the call returns.
TEST(Staging, AFailedCopyAbortsTheCallOnEveryRankAtOnce) {
  for (Direction failing : {Direction::to_host, Direction::to_device}) {
    SCOPED_TRACE(failing == Direction::to_host ? "download fails" : "upload fails");
    ProcessJob job(3);
    const double start = monotonic_seconds();
    auto results = job.run(
        [&](int rank, const ProcessJob& j) {
          Communicator comm = bounded_communicator(j, rank, 3);
          HostCopyEngine engine;
          if (rank == 1) engine.fail_copy(failing, 3);
          std::vector<float> buf(16 * 256, 1.0f);
          auto call = [&] {
            staging::staged_all_reduce(engine, comm, buf.data(), buf.data(), buf.size(),
                                       DataType::float32, ReduceOp::sum, 1024);
          };
          int code = rank == 1 ? expect_error<InternalError>(rank, j, call)
                               : expect_error<Error>(rank, j, call);
          if (engine.in_flight() != 0) code = 20;
          // The third download is chunk 2's: only chunks 0 and 1 may have gone back.
          if (rank == 1 && failing == Direction::to_host)
            for (const auto& e : engine.events())
              if (e.direction == Direction::to_device && e.ticket > 2) code = 21;
          return code;
        },
        60s);
    const double took = monotonic_seconds() - start;
    for (int r = 0; r < 3; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r) + ": " + results[r].report);
      EXPECT_NE(results[r].exit_code, 20) << "a copy was in flight after the call";
      EXPECT_NE(results[r].exit_code, 21) << "an upload followed the failed download";
      EXPECT_EQ(results[r].exit_code, kGotExpectedError);
    }
    EXPECT_NE(results[1].report.find("injected failure"), std::string::npos);
    EXPECT_LT(took, 20.0) << "the others must learn by the abort, not by the 30 s timeout";
  }
}

// A peer killed in the middle of a staged all_reduce: the survivors raise PeerFailure naming it,
// with no copy in flight.
TEST(Staging, APeerKilledMidPipelineFailsTheSurvivorsCleanly) {
  ProcessJob job(3);
  auto results = job.run(
      [&](int rank, const ProcessJob& j) {
        Communicator comm = bounded_communicator(j, rank, 3);
        HostCopyEngine engine;
        std::vector<float> buf(64 * 256, 1.0f);
        int chunks_done = 0;
        auto chunks = staging::elementwise_chunks(buf.size(), sizeof(float), 1024);
        int code = expect_error<PeerFailureError>(rank, j, [&] {
          staging::run_staged(engine, comm, buf.data(), buf.data(), chunks, true,
                              [&](const void*, void* host, const staging::Chunk& c) {
                                if (rank == 2 && ++chunks_done == 5) {
                                  j.report(rank, std::to_string(monotonic_seconds()));
                                  ::kill(::getpid(), SIGKILL);
                                }
                                comm.all_reduce(host, c.elements, DataType::float32, ReduceOp::sum);
                              });
        });
        if (engine.in_flight() != 0) code = 20;
        return code;
      },
      60s);
  ASSERT_EQ(results[2].exit_code, 128 + SIGKILL) << results[2].report;
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + results[r].report);
    EXPECT_EQ(results[r].exit_code, kGotExpectedError);
  }
}

}  // namespace
}  // namespace shoal::testing
