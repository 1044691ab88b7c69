// Flat collectives beyond the slots (comm/flat.hpp). Direct: among ranks of one host,
// all_gather, broadcast, all_reduce and reduce_scatter publish their buffers' addresses and the
// peers read them straight from that process's memory (process_vm_readv; an all_reduce writes its
// reduced slice into the peers' outputs with process_vm_writev). In rounds: an all_reduce runs
// through the slots a slot's worth at a time. Ranks here are forked processes, so every copy
// crosses address spaces as in a real job; results are compared byte for byte with a reference
// built independently, and a rank killed in the middle must surface as PeerFailure on every
// survivor.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "comm/comm_impl.hpp"
#include "support/deaths.hpp"
#include "support/processes.hpp"
#include "support/values.hpp"

namespace shoal::testing {
namespace {

using namespace std::chrono_literals;

// Byte j of rank r's contribution: distinct per rank and per offset (no short period).
uint8_t byte_of(int r, uint64_t j) {
  uint64_t x = (static_cast<uint64_t>(r) << 40) + j + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint8_t>(x ^ (x >> 31));
}

std::vector<uint8_t> contribution(int r, uint64_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (uint64_t j = 0; j < bytes; ++j) v[j] = byte_of(r, j);
  return v;
}

// The first byte where `got` differs from what it should be, or -1.
int64_t first_wrong(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) return 0;
  for (uint64_t j = 0; j < got.size(); ++j)
    if (got[j] != want[j]) return static_cast<int64_t>(j);
  return -1;
}

// Runs all_gather (out of place and in place), broadcast (from every root), all_reduce and
// reduce_scatter (every op, out of place and in place) at each count and dtype, on `ranks`
// processes with the environment `env`. Each rank reports the flat calls it made and the first
// wrong result, if any; returns the reports.
std::vector<RankResult> gather_and_broadcast(
    int ranks, const std::vector<std::pair<const char*, const char*>>& env) {
  ProcessJob job(ranks);
  return job.run(
      [&](int rank, const ProcessJob& j) {
        for (const auto& [k, v] : env) setenv(k, v, 1);
        Communicator comm = Communicator::create(j.store(), rank, ranks);
        const uint64_t flat_before =
            shoal::detail::Internals::of(comm).planner->planned(comm::Path::flat);
        std::ostringstream errors;
        int calls = 0;
        for (DataType t : {DataType::int8, DataType::float16, DataType::float32, DataType::float64})
          for (uint64_t count : {uint64_t{20000 + 3}, uint64_t{(1u << 18) + 5}}) {
            const uint64_t es = size_of(t), bytes = count * es;
            const auto mine = contribution(rank, bytes);
            std::vector<uint8_t> want(bytes * ranks);
            for (int q = 0; q < ranks; ++q) {
              const auto theirs = contribution(q, bytes);
              std::memcpy(want.data() + q * bytes, theirs.data(), bytes);
            }
            const std::string what = std::string(to_string(t)) + " x" + std::to_string(count);
            std::vector<uint8_t> out(bytes * ranks, 0);
            comm.all_gather(mine.data(), out.data(), count, t);
            if (int64_t at = first_wrong(out, want); at >= 0)
              errors << "all_gather " << what << " byte " << at << "; ";
            std::vector<uint8_t> in_place(bytes * ranks, 0);
            std::memcpy(in_place.data() + rank * bytes, mine.data(), bytes);
            comm.all_gather(in_place.data(), count, t);
            if (int64_t at = first_wrong(in_place, want); at >= 0)
              errors << "in-place all_gather " << what << " byte " << at << "; ";
            calls += 2;
            for (int root = 0; root < ranks; ++root) {
              std::vector<uint8_t> buf = rank == root ? mine : std::vector<uint8_t>(bytes, 0);
              comm.broadcast(buf.data(), count, t, root);
              if (int64_t at = first_wrong(buf, contribution(root, bytes)); at >= 0)
                errors << "broadcast from " << root << " " << what << " byte " << at << "; ";
              ++calls;
            }
            // all_reduce and reduce_scatter, every op, out of place and in place, against
            // reductions computed here (values.hpp's: exact in every dtype).
            for (ReduceOp op : ops_for(t)) {
              const std::string how = what + " " + std::string(to_string(op));
              std::vector<uint8_t> in(bytes), ar(bytes, 0);
              for (uint64_t i = 0; i < count; ++i) store(in.data(), i, t, value(rank, i, t, op));
              comm.all_reduce(in.data(), ar.data(), count, t, op);
              if (uint64_t bad = wrong(ar.data(), 0, count, t,
                                       [&](uint64_t i) { return expected(ranks, i, t, op); }))
                errors << "all_reduce " << how << ": " << bad << " wrong; ";
              comm.all_reduce(in.data(), count, t, op);
              if (uint64_t bad = wrong(in.data(), 0, count, t,
                                       [&](uint64_t i) { return expected(ranks, i, t, op); }))
                errors << "in-place all_reduce " << how << ": " << bad << " wrong; ";
              const uint64_t block = count / ranks + 1;  // the input: `ranks` blocks
              std::vector<uint8_t> rs_in(block * ranks * es), rs_out(block * es, 0);
              for (uint64_t i = 0; i < block * ranks; ++i)
                store(rs_in.data(), i, t, value(rank, i, t, op));
              auto rs_want = [&](uint64_t i) { return expected(ranks, rank * block + i, t, op); };
              comm.reduce_scatter(rs_in.data(), rs_out.data(), block, t, op);
              if (uint64_t bad = wrong(rs_out.data(), 0, block, t, rs_want))
                errors << "reduce_scatter " << how << ": " << bad << " wrong; ";
              comm.reduce_scatter(rs_in.data(), block, t, op);
              if (uint64_t bad = wrong(rs_in.data(), rank * block, block, t, rs_want))
                errors << "in-place reduce_scatter " << how << ": " << bad << " wrong; ";
              calls += 4;
            }
            // The source's buffer is the user's again once the call returns: reuse it at once.
            std::vector<uint8_t> scratch = mine;
            comm.all_gather(scratch.data(), out.data(), count, t);
            std::fill(scratch.begin(), scratch.end(), 0xee);
            if (int64_t at = first_wrong(out, want); at >= 0)
              errors << "reused all_gather " << what << " byte " << at << "; ";
            ++calls;
          }
        comm.barrier();  // on shared memory a barrier is a flat call too
        ++calls;
        j.report(rank, std::to_string(
                           shoal::detail::Internals::of(comm).planner->planned(comm::Path::flat) -
                           flat_before) +
                           " of " + std::to_string(calls) + " flat\n" + errors.str());
        return errors.str().empty() ? 0 : 1;
      },
      120s);
}

// The calls gather_and_broadcast makes: per type and count 2 all_gathers, a broadcast per root,
// 4 reductions per op (int8 runs the 3 bitwise ops too) and a reused all_gather; then a barrier.
int gather_and_broadcast_calls(int ranks) {
  return 2 * (3 + ranks + 4 * 8) + 6 * (3 + ranks + 4 * 5) + 1;
}

// Runs gather_and_broadcast on `ranks` processes with 8 KiB slots, SHOAL_FLAT_DIRECT_BYTES
// `direct` and SHOAL_FLAT_ROUNDS `rounds`, and expects every rank right and `flat` of its calls
// flat.
void expect_flat_calls(int ranks, const char* direct, const char* rounds, int flat) {
  SCOPED_TRACE(std::to_string(ranks) + " processes, direct from " + direct + ", rounds " + rounds);
  auto results = gather_and_broadcast(ranks, {{"SHOAL_FLAT_MAX_BYTES", "8K"},
                                              {"SHOAL_FLAT_DIRECT_BYTES", direct},
                                              {"SHOAL_FLAT_ROUNDS", rounds}});
  for (int r = 0; r < ranks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + results[r].report);
    EXPECT_EQ(results[r].exit_code, 0);
    EXPECT_EQ(results[r].report.substr(0, results[r].report.find('\n')),
              std::to_string(flat) + " of " + std::to_string(gather_and_broadcast_calls(ranks)) +
                  " flat");
  }
}

// From 16 KiB per rank (8 KiB slots here, so that only the direct path can be flat at these
// sizes, whatever the core count), every all_gather, broadcast, all_reduce and reduce_scatter
// is flat and right, at two and at three processes.
TEST(FlatDirect, EveryDirectCollectiveAcrossProcessesMatchesTheReference) {
  for (int ranks : {2, 3})
    expect_flat_calls(ranks, "16K", "off", gather_and_broadcast_calls(ranks));
}

// SHOAL_FLAT_DIRECT_BYTES=0 turns the direct path off: the same calls run through the engine
// (no flat call but the closing barrier: they do not fit the slots), with the same results.
TEST(FlatDirect, TurnedOffTheSameCallsTakeTheEngineWithTheSameResults) {
  expect_flat_calls(2, "0", "off", 1);
}

// With rounds (and no direct path), every all_reduce and reduce_scatter beyond the slots is
// flat, through them in rounds (the last one shorter: an all_reduce of 20,003 int8 takes 3
// rounds of 8 KiB slots, one of (2^18 + 5) float64 257; a reduce_scatter's rounds take a piece
// of each block), and right, out of place and in place, at 2 processes and at 3 on 2 cores or
// more; all_gather and broadcast run through the engine as before.
TEST(FlatRounds, EveryReductionBeyondTheSlotsRunsThroughThemWithTheSameResults) {
  // Per dtype and count, two all_reduces and two reduce_scatters per op (8 ops for int8, 5 for
  // the others); a barrier.
  const int reductions = 2 * 2 * 2 * (8 + 3 * 5) + 1;
  for (int ranks : {2, 3}) expect_flat_calls(ranks, "0", "on", reductions);
}

// Beyond the slots a SHOAL_ALGO rule for the call still runs the named algorithm (the direct
// path stands aside), with the same results; within them the flat path stays.
TEST(FlatDirect, AnAlgorithmRuleBeyondTheSlotsRunsThatAlgorithm) {
  ProcessJob job(2);
  auto results = job.run(
      [&](int rank, const ProcessJob& j) {
        setenv("SHOAL_FLAT_MAX_BYTES", "8K", 1);
        setenv("SHOAL_FLAT_DIRECT_BYTES", "16K", 1);
        setenv("SHOAL_ALGO", "all_reduce:ring", 1);
        Communicator comm = Communicator::create(j.store(), rank, 2);
        std::ostringstream out;
        for (uint64_t count :
             {uint64_t{1000}, uint64_t{1} << 18}) {  // 4 KB (slots), 1 MiB (beyond)
          std::vector<float> v(count);
          for (uint64_t i = 0; i < count; ++i) v[i] = static_cast<float>(rank + 1 + (i % 7));
          const uint64_t before =
              shoal::detail::Internals::of(comm).planner->planned(comm::Path::flat);
          comm.all_reduce(v.data(), count, DataType::float32, ReduceOp::sum);
          uint64_t bad = 0;
          for (uint64_t i = 0; i < count; ++i) bad += v[i] != static_cast<float>(3 + 2 * (i % 7));
          std::vector<float> g(count * 2);
          comm.all_gather(v.data(), g.data(), count,
                          DataType::float32);  // no rule: direct beyond the slots
          out << (shoal::detail::Internals::of(comm).planner->planned(comm::Path::flat) - before)
              << (bad ? " wrong" : "") << " ";
        }
        j.report(rank, out.str());
        return 0;
      },
      60s);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].exit_code, 0);
    // 4 KB: both flat; 1 MiB: the all_reduce by the ring, the all_gather direct.
    EXPECT_EQ(results[r].report, "2 1 ") << "rank " << r;
  }
}

// A rank killed while it and its peers run direct all_gathers (or all_reduces) back to back
// (its death lands anywhere: while it publishes, while peers copy from its memory or write into
// it, while it waits for its readers): every survivor gets PeerFailureError naming it within
// seconds, and nothing is left in /dev/shm.
void a_killed_rank_raises_peer_failure_on_every_survivor(algorithms::Collective collective,
                                                         const char* rounds = "off") {
  constexpr int kRanks = 3, kVictim = 1;
  ProcessJob job(kRanks);
  auto results = job.run(
      [&](int rank, const ProcessJob& j) {
        setenv("SHOAL_FLAT_MAX_BYTES", "8K", 1);
        setenv("SHOAL_FLAT_DIRECT_BYTES", "16K", 1);
        setenv("SHOAL_FLAT_ROUNDS", rounds, 1);
        Options o;
        o.timeout = 60s;  // detection must come far sooner than this
        Communicator comm = Communicator::create(j.store(), rank, kRanks, o);
        const uint64_t count = 1 << 20;  // 4 MiB of floats per rank
        std::vector<float> in(count, 1.0f + rank), out(count * kRanks);
        auto call = [&] {
          if (collective == algorithms::Collective::all_gather)
            comm.all_gather(in.data(), out.data(), count, DataType::float32);
          else if (collective == algorithms::Collective::reduce_scatter)  // `count` blocks of 1/3
            comm.reduce_scatter(in.data(), out.data(), count / kRanks, DataType::float32,
                                ReduceOp::sum);
          else
            comm.all_reduce(in.data(), out.data(), count, DataType::float32, ReduceOp::sum);
        };
        comm.barrier();
        if (rank == kVictim) {
          std::thread killer([&] {
            std::this_thread::sleep_for(300ms);
            report_and_die(j, rank, shoal::detail::Internals::of(comm).comm_id);
          });
          for (;;) call();
        }
        return expect_error<PeerFailureError>(rank, j, [&] {
          for (int i = 0; i < 1000000; ++i) call();
        });
      },
      90s);
  expect_every_survivor_saw_the_death(results, kVictim);
}

TEST(FlatDirect, AKilledRankRaisesPeerFailureOnEverySurvivor) {
  a_killed_rank_raises_peer_failure_on_every_survivor(algorithms::Collective::all_gather);
}

// An all_reduce also writes into the peers' outputs: a dead peer's too.
TEST(FlatDirect, AKilledRankRaisesPeerFailureOnEverySurvivorOfAnAllReduce) {
  a_killed_rank_raises_peer_failure_on_every_survivor(algorithms::Collective::all_reduce);
}

// In rounds, the survivors wait in the slots for the dead rank's next round.
TEST(FlatRounds, AKilledRankRaisesPeerFailureOnEverySurvivorOfAReduction) {
  a_killed_rank_raises_peer_failure_on_every_survivor(algorithms::Collective::all_reduce, "on");
  a_killed_rank_raises_peer_failure_on_every_survivor(algorithms::Collective::reduce_scatter, "on");
}

}  // namespace
}  // namespace shoal::testing
