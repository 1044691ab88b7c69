// Vectored all_reduce, all_gather, reduce_scatter, gather and scatter (Segment lists): every
// registry algorithm of each (gather and scatter from every root), forced, over TCP and shared
// memory, with segments of uneven sizes (empty ones and ones that cut the algorithms' blocks and
// chunks anywhere), against the values the plain call's reference gives (support/values.hpp).
// Torch's coalesced layouts: a list of tensors in, one output tensor per input tensor holding every
// rank's block of it.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "algorithms/registry.hpp"
#include "support/env.hpp"
#include "support/ranks.hpp"
#include "support/values.hpp"

namespace shoal::testing {
namespace {

using algorithms::Collective;

// Tensor sizes (elements): an empty one, single elements, and sizes that straddle any
// algorithm's block of a 3- or 4-rank split and the 512 KiB chunks (a schedule runs); and a
// list small enough for the shared slots (packed into one buffer there).
const std::vector<std::vector<size_t>> kSizeLists = {{5, 0, 1, 131072 + 3, 77, 1}, {3, 0, 1, 20}};

std::string label(const algorithms::AlgorithmInfo& algo, DataType t, const char* form) {
  return std::string(to_string(algo.collective)) + ":" + std::string(algo.name) + " " +
         std::string(to_string(t)) + " " + form;
}

// Rank r's element k of tensor i holds the reference's value for the plain call's element at
// the same place of the concatenation.
void check_all_reduce(Communicator& c, const algorithms::AlgorithmInfo& algo,
                      const std::vector<size_t>& sizes, DataType t, ReduceOp op) {
  const int p = c.size(), r = c.rank();
  std::vector<std::vector<uint8_t>> in, out;
  std::vector<ConstSegment> send;
  std::vector<Segment> recv;
  uint64_t at = 0;
  for (size_t n : sizes) {
    in.push_back(bytes_for(n, t));
    out.push_back(bytes_for(n, t));
    for (size_t k = 0; k < n; ++k) store(in.back().data(), k, t, value(r, at + k, t, op));
    at += n;
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    send.push_back({in[i].data(), sizes[i]});
    recv.push_back({out[i].data(), sizes[i]});
  }
  auto check = [&](const std::vector<std::vector<uint8_t>>& got, const char* form) {
    uint64_t first = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(wrong(got[i].data(), 0, sizes[i], t,
                      [&](uint64_t k) { return expected(p, first + k, t, op); }),
                0u)
          << label(algo, t, form) << " " << to_string(op) << ", tensor " << i;
      first += sizes[i];
    }
  };
  c.all_reduce_async(send, recv, t, op).wait();
  check(out, "out of place");
  // In place: the same segments on both sides.
  std::vector<Segment> both;
  for (size_t i = 0; i < sizes.size(); ++i) both.push_back({in[i].data(), sizes[i]});
  c.all_reduce_async(std::vector<ConstSegment>(send), both, t, op).wait();
  check(in, "in place");
}

void check_all_gather(Communicator& c, const algorithms::AlgorithmInfo& algo,
                      const std::vector<size_t>& sizes, DataType t) {
  const int p = c.size(), r = c.rank();
  const uint64_t es = size_of(t);
  std::vector<std::vector<uint8_t>> in, out;
  std::vector<ConstSegment> send;
  std::vector<Segment> recv;
  uint64_t at = 0;
  for (size_t n : sizes) {
    in.push_back(bytes_for(n, t));
    out.push_back(bytes_for(n * p, t));
    for (size_t k = 0; k < n; ++k)
      store(in.back().data(), k, t, value(r, at + k, t, ReduceOp::sum));
    send.push_back({in.back().data(), n});
    at += n;
  }
  for (int q = 0; q < p; ++q)
    for (size_t i = 0; i < sizes.size(); ++i)
      recv.push_back({out[i].data() + q * sizes[i] * es, sizes[i]});
  c.all_gather_async(send, recv, t).wait();
  at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const uint64_t first = at, n = sizes[i];
    // out[i] = rank 0's tensor i, rank 1's, ...
    EXPECT_EQ(wrong(out[i].data(), 0, n * p, t,
                    [&](uint64_t k) {
                      return as_stored(
                          value(static_cast<int>(k / n), first + k % n, t, ReduceOp::sum), t);
                    }),
              0u)
        << label(algo, t, "list outputs") << ", tensor " << i;
    at += n;
  }
}

void check_reduce_scatter(Communicator& c, const algorithms::AlgorithmInfo& algo,
                          const std::vector<size_t>& sizes, DataType t, ReduceOp op) {
  const int p = c.size(), r = c.rank();
  const uint64_t es = size_of(t);
  const uint64_t total = std::accumulate(sizes.begin(), sizes.end(), uint64_t{0});
  // Tensor i holds p blocks of sizes[i]; rank q's share of the plain call is block q of every
  // tensor, in tensor order: its element j of tensor i is plain element q * total + off_i + j.
  std::vector<std::vector<uint8_t>> in, out;
  std::vector<ConstSegment> send;
  std::vector<Segment> recv;
  std::vector<uint64_t> offset;
  uint64_t at = 0;
  for (size_t n : sizes) {
    offset.push_back(at);
    in.push_back(bytes_for(n * p, t));
    out.push_back(bytes_for(n, t));
    for (int q = 0; q < p; ++q)
      for (size_t j = 0; j < n; ++j)
        store(in.back().data(), q * n + j, t, value(r, q * total + at + j, t, op));
    recv.push_back({out.back().data(), n});
    at += n;
  }
  for (int q = 0; q < p; ++q)
    for (size_t i = 0; i < sizes.size(); ++i)
      send.push_back({in[i].data() + q * sizes[i] * es, sizes[i]});
  c.reduce_scatter_async(send, recv, t, op).wait();
  for (size_t i = 0; i < sizes.size(); ++i)
    EXPECT_EQ(wrong(out[i].data(), 0, sizes[i], t,
                    [&](uint64_t j) { return expected(p, r * total + offset[i] + j, t, op); }),
              0u)
        << label(algo, t, "list inputs") << " " << to_string(op) << ", tensor " << i;
}

// The root's recv is every rank's block cut into `sizes`: their concatenation is the plain
// call's buffer, rank q's element j at q * total + j. Only the root passes it.
void check_gather(Communicator& c, const algorithms::AlgorithmInfo& algo,
                  const std::vector<size_t>& sizes, DataType t, int root) {
  const int p = c.size(), r = c.rank();
  const uint64_t es = size_of(t);
  const uint64_t total = std::accumulate(sizes.begin(), sizes.end(), uint64_t{0});
  std::vector<uint8_t> in = bytes_for(total, t), out = bytes_for(total * p, t);
  for (uint64_t k = 0; k < total; ++k) store(in.data(), k, t, value(r, k, t, ReduceOp::sum));
  std::vector<ConstSegment> send;
  std::vector<Segment> recv;
  uint64_t at = 0;
  for (size_t n : sizes) {
    send.push_back({in.data() + at * es, n});
    at += n;
  }
  at = 0;
  if (r == root)
    for (int q = 0; q < p; ++q)
      for (size_t n : sizes) {
        recv.push_back({out.data() + at * es, n});
        at += n;
      }
  c.gather_async(send, recv, t, root).wait();
  if (r != root) return;
  EXPECT_EQ(wrong(out.data(), 0, total * p, t,
                  [&](uint64_t k) {
                    return as_stored(
                        value(static_cast<int>(k / total), k % total, t, ReduceOp::sum), t);
                  }),
            0u)
      << label(algo, t, "list outputs") << ", root " << root;
}

// The root's send is every rank's block cut into `sizes`; rank r's recv, cut the same way,
// receives the root's elements [r * total, (r + 1) * total).
void check_scatter(Communicator& c, const algorithms::AlgorithmInfo& algo,
                   const std::vector<size_t>& sizes, DataType t, int root) {
  const int p = c.size(), r = c.rank();
  const uint64_t es = size_of(t);
  const uint64_t total = std::accumulate(sizes.begin(), sizes.end(), uint64_t{0});
  std::vector<uint8_t> in = bytes_for(total * p, t), out = bytes_for(total, t);
  std::vector<ConstSegment> send;
  std::vector<Segment> recv;
  if (r == root) {
    for (uint64_t k = 0; k < total * p; ++k) store(in.data(), k, t, value(r, k, t, ReduceOp::sum));
    uint64_t at = 0;
    for (int q = 0; q < p; ++q)
      for (size_t n : sizes) {
        send.push_back({in.data() + at * es, n});
        at += n;
      }
  }
  uint64_t at = 0;
  for (size_t n : sizes) {
    recv.push_back({out.data() + at * es, n});
    at += n;
  }
  c.scatter_async(send, recv, t, root).wait();
  EXPECT_EQ(
      wrong(out.data(), 0, total, t,
            [&](uint64_t j) { return as_stored(value(root, r * total + j, t, ReduceOp::sum), t); }),
      0u)
      << label(algo, t, "list inputs") << ", root " << root;
}

struct VectoredCase {
  const char* transport;
  int ranks;
};

class Vectored : public ::testing::TestWithParam<VectoredCase> {
 protected:
  ScopedEnv transport_{"SHOAL_TRANSPORT", std::string(GetParam().transport)};
};

TEST_P(Vectored, EveryAlgorithmMatchesThePlainCallsReference) {
  std::string err = run_ranks(GetParam().ranks, [&](Communicator& c) {
    for (const auto& algo : algorithms::registry()) {
      const Collective coll = algo.collective;
      if (coll != Collective::all_reduce && coll != Collective::all_gather &&
          coll != Collective::reduce_scatter && coll != Collective::gather &&
          coll != Collective::scatter)
        continue;
      algorithms::detail::set_thread_algorithm_override(std::string(to_string(algo.collective)) +
                                                        ":" + std::string(algo.name));
      for (const auto& sizes : kSizeLists)
        for (DataType t : {DataType::float32, DataType::int64, DataType::bfloat16}) {
          if (coll == Collective::gather || coll == Collective::scatter) {
            for (int root = 0; root < c.size(); ++root)
              coll == Collective::gather ? check_gather(c, algo, sizes, t, root)
                                         : check_scatter(c, algo, sizes, t, root);
            continue;
          }
          if (algo.collective == Collective::all_gather) {
            check_all_gather(c, algo, sizes, t);
            continue;
          }
          for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
            if (algo.collective == Collective::all_reduce)
              check_all_reduce(c, algo, sizes, t, op);
            else
              check_reduce_scatter(c, algo, sizes, t, op);
          }
        }
      algorithms::detail::set_thread_algorithm_override("");
    }
  });
  EXPECT_EQ(err, "");
}

INSTANTIATE_TEST_SUITE_P(Transports, Vectored,
                         ::testing::Values(VectoredCase{"tcp", 3}, VectoredCase{"shm", 4}),
                         [](const auto& info) {
                           return std::string(info.param.transport) + "_ranks" +
                                  std::to_string(info.param.ranks);
                         });

TEST(VectoredCalls, TotalsThatDoNotFitAreRefusedBeforeAnythingIsSent) {
  std::string err = run_ranks(2, [](Communicator& c) {
    std::vector<float> a(10), b(10);
    std::vector<ConstSegment> send = {{a.data(), 4}, {a.data() + 4, 6}};
    std::vector<Segment> short_recv = {{b.data(), 4}, {b.data() + 4, 5}};
    EXPECT_THROW(c.all_reduce_async(send, short_recv, DataType::float32, ReduceOp::sum),
                 InvalidArgumentError);
    std::vector<Segment> gathered = {{b.data(), 10}};  // 2 ranks need 20
    EXPECT_THROW(c.all_gather_async(send, gathered, DataType::float32), InvalidArgumentError);
    std::vector<Segment> null_segment = {{nullptr, 4}, {b.data(), 6}};
    EXPECT_THROW(c.all_reduce_async(send, null_segment, DataType::float32, ReduceOp::sum),
                 InvalidArgumentError);
    // The root's gathered and scattered sides hold size() blocks of the other side's count.
    std::vector<Segment> one_block = {{b.data(), 4}, {b.data() + 4, 6}};
    if (c.rank() == 0) {
      EXPECT_THROW(c.gather_async(send, one_block, DataType::float32, 0), InvalidArgumentError);
      EXPECT_THROW(c.scatter_async(send, one_block, DataType::float32, 0), InvalidArgumentError);
    }
    c.barrier();  // still usable
  });
  EXPECT_EQ(err, "");
}

}  // namespace
}  // namespace shoal::testing
