// Communicator::split: (color, key) of every rank through an all_gather over the parent, then
// Communicator::create of each group over a scope of the parent's store.
#include <algorithm>
#include <array>
#include <cstdio>

#include "comm/comm_impl.hpp"
#include "core/check.hpp"

namespace shoal {

namespace detail {

// Marks a split's all_gather, so that ranks in different splits (or one that gathered four
// integers of its own there) are told apart.
static constexpr int32_t kSplitMagic = 0x53504c54;  // "SPLT"

Communicator CommImpl::split(int color, int key) {
  if (color < 0) color = Communicator::kNoColor;
  const int32_t index = splits++;
  const std::array<int32_t, 4> mine{kSplitMagic, index, color, key};
  std::vector<int32_t> all(4 * static_cast<size_t>(size));
  call(comm::request_of(algorithms::Collective::all_gather, mine.data(), all.data(), mine.size(),
                        DataType::int32))
      .wait();
  std::vector<std::pair<int, int>> members;  // (key, parent rank) of this rank's color
  for (int r = 0; r < size; ++r) {
    const int32_t* v = &all[4 * static_cast<size_t>(r)];
    if (v[0] != kSplitMagic || v[1] != index)
      SHOAL_THROW(Mismatch,
                  "rank " << rank << ": split #" << index << " met rank " << r
                          << ", which is not in the same split (another collective, or split #"
                          << v[1] << "): every rank must call split at the same position",
                  r);
    if (color >= 0 && v[2] == color) members.emplace_back(v[3], r);
  }
  if (color < 0) return Communicator();
  std::sort(members.begin(), members.end());
  const int child_rank =
      static_cast<int>(std::find_if(members.begin(), members.end(),
                                    [&](const auto& m) { return m.second == rank; }) -
                       members.begin());
  // Unique per parent, split and color: the parent's id is drawn at random by its rank 0.
  char scope[96];
  std::snprintf(scope, sizeof scope, "shoal/split/%016llx/%d/%d",
                static_cast<unsigned long long>(comm_id), index, color);
  Options options;
  options.timeout = timeout;
  options.calibrate = calibrate_option;
  Communicator child = Communicator::create(std::make_shared<PrefixStore>(scope, store), child_rank,
                                            static_cast<int>(members.size()), options);
  log::set_rank(rank);  // creation labelled the log with the child's rank
  detail::Internals::of(child).job_store = job_store;
  return child;
}

}  // namespace detail

Communicator Communicator::split(int color, int key) { return impl_->split(color, key); }

HostSplit Communicator::split_by_host() {
  const auto& t = impl_->topology;
  const int host = t.host_of[rank()];
  HostSplit s;
  s.local = impl_->split(host, rank());
  s.rank_aligned = impl_->split(t.local_rank, host);
  return s;
}

}  // namespace shoal
