// Communicator::all_to_all_v: the pairs' counts checked first (an all_to_all of them and an
// all_reduce of the verdict), then one send and one receive per peer, posted together, and a
// Work that completes when all of them have (the first failure among them is its error).
#include <cstring>
#include <mutex>

#include "comm/comm_impl.hpp"
#include "comm/work_state.hpp"
#include "core/check.hpp"

namespace shoal {

Work Communicator::all_to_all_v_async(const void* send, std::span<const size_t> send_counts,
                                      std::span<const size_t> send_displs, void* recv,
                                      std::span<const size_t> recv_counts,
                                      std::span<const size_t> recv_displs, DataType dtype) {
  const int p = size(), me = rank();
  SHOAL_CHECK(static_cast<int>(dtype) < kNumDataTypes, InvalidArgument,
              "all_to_all_v: invalid data type " << static_cast<int>(dtype));
  for (auto span : {send_counts, send_displs, recv_counts, recv_displs})
    SHOAL_CHECK(span.size() == static_cast<size_t>(p), InvalidArgument,
                "all_to_all_v: counts and displacements need one entry per rank (" << p << "), got "
                                                                                   << span.size());
  SHOAL_CHECK(send_counts[me] == recv_counts[me], InvalidArgument,
              "all_to_all_v: this rank sends itself "
                  << send_counts[me] << " elements but receives " << recv_counts[me]);
  // Every pair agrees on its counts before any data moves: each rank sends each peer what it
  // will send it and what it expects from it, and one all_reduce tells every rank whether some
  // pair disagreed, so that all fail together instead of waiting on a rank that gave up.
  std::vector<uint64_t> mine(2 * static_cast<size_t>(p)), theirs(2 * static_cast<size_t>(p));
  for (int j = 0; j < p; ++j) mine[2 * j] = send_counts[j], mine[2 * j + 1] = recv_counts[j];
  all_to_all(mine.data(), theirs.data(), 2, DataType::int64);
  int64_t bad = -1;  // the first peer this rank disagrees with
  for (int j = 0; j < p && bad < 0; ++j)
    if (theirs[2 * j] != recv_counts[j] || theirs[2 * j + 1] != send_counts[j]) bad = j;
  int64_t any = bad;
  all_reduce(&any, &any, 1, DataType::int64, ReduceOp::max);
  if (bad >= 0)
    SHOAL_THROW(Mismatch,
                "all_to_all_v: rank " << me << " sends rank " << bad << " " << send_counts[bad]
                                      << " and expects " << recv_counts[bad] << " elements; rank "
                                      << bad << " sends " << theirs[2 * bad] << " and expects "
                                      << theirs[2 * bad + 1],
                static_cast<int>(bad));
  if (any >= 0)
    SHOAL_THROW(
        Mismatch,
        "all_to_all_v: the counts of another pair of ranks differ (rank " << any << " named them)",
        static_cast<int>(any));
  const size_t es = size_of(dtype);
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  struct Join {
    std::mutex mutex;
    int left = 0;
    std::exception_ptr first;
  };
  auto state = std::make_shared<detail::WorkState>();
  auto join = std::make_shared<Join>();
  std::vector<Work> parts;
  parts.reserve(2 * static_cast<size_t>(p));
  // Peers in the order of a pairwise exchange: step k receives from me-k and sends to me+k.
  for (int k = 1; k < p; ++k) {
    const int from = (me - k + p) % p, to = (me + k) % p;
    parts.push_back(
        recv_async(out + recv_displs[from] * es, recv_counts[from], dtype, from, kAllToAllVTag));
    parts.push_back(
        send_async(in + send_displs[to] * es, send_counts[to], dtype, to, kAllToAllVTag));
  }
  if (send_counts[me] > 0)
    std::memmove(out + recv_displs[me] * es, in + send_displs[me] * es, send_counts[me] * es);
  if (parts.empty()) {
    state->complete();
    return Work(state);
  }
  join->left = static_cast<int>(parts.size());
  for (auto& w : parts)
    w.on_complete([state, join](std::exception_ptr e) {
      std::exception_ptr done_with;
      {
        std::lock_guard<std::mutex> lock(join->mutex);
        if (e && !join->first) join->first = e;
        if (--join->left > 0) return;
        done_with = join->first;
      }
      state->complete(done_with);
    });
  return Work(state);
}

}  // namespace shoal
