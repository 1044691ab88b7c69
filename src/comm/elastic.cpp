// Elastic communicators: abort (fail everything at once on request), shrink (continue with the
// survivors after a failure) and grow/join (admit new processes).
//
// Shrink agrees on the survivors through the store, which outlives any rank (torchrun's agent,
// shoal-run, a file): under key scope shoal/shrink/<communicator id>/<epoch>, each survivor
// marks itself alive and bumps a counter; the first to arrive (the counter says who) waits
// until every rank it does not know to be dead has joined, or the wait has passed, then
// publishes the sorted list of those that joined. Everyone reads the list and forms a new
// communicator of it under a scope of its own. One decision, made by one rank and read by all,
// is what makes the survivors agree even when they saw different failures.
#include <algorithm>
#include <sstream>
#include <thread>

#include "comm/comm_impl.hpp"
#include "core/check.hpp"
#include "core/config.hpp"
#include "store/scoped_timeout.hpp"

namespace shoal {

void Communicator::abort() {
  impl_->engine->break_from_caller(
      ErrorCode::Aborted,
      "rank " + std::to_string(rank()) + " aborted the communicator (Communicator::abort)", rank());
}

Communicator Communicator::shrink(std::chrono::milliseconds wait) { return shrink({}, wait); }

Communicator Communicator::shrink(const std::vector<int>& exclude, std::chrono::milliseconds wait) {
  auto& c = *impl_;
  std::vector<bool> excluded(static_cast<size_t>(c.size), false);
  for (int q : exclude) {
    SHOAL_CHECK(q >= 0 && q < c.size, InvalidArgument,
                "shrink: excluded rank " << q << " is outside [0, " << c.size << ")");
    SHOAL_CHECK(
        q != c.rank, InvalidArgument,
        "shrink: rank " << c.rank
                        << " is in its own exclusion list (excluded ranks do not call shrink)");
    excluded[static_cast<size_t>(q)] = true;
  }
  if (wait.count() <= 0) wait = config::get_duration("SHOAL_SHRINK_WAIT");
  std::ostringstream scope;
  scope << "shoal/shrink/" << std::hex << c.comm_id << std::dec << "/" << ++c.shrinks;
  const std::string base = scope.str();
  Store& store = *c.store;
  shoal::store::ScopedTimeout store_timeout(store, c.timeout);
  store.set(base + "/alive/" + std::to_string(c.rank), "1");
  const int64_t arrival = store.add(base + "/count", 1);
  if (arrival == 1) {
    // The coordinator: wait for every rank not known dead, then decide.
    // Each rank not known dead, by name: a count would let a rank wrongly thought dead (the
    // other end of a cut connection) stand in for a live one that is still on its way.
    std::vector<std::string> expected;
    for (int q = 0; q < c.size; ++q)
      if (q != c.rank && !excluded[static_cast<size_t>(q)] &&
          !(c.engine->peer_closed(q) || c.engine->peer_failed(q)))
        expected.push_back(base + "/alive/" + std::to_string(q));
    const auto deadline = comm::Clock::now() + wait;
    while (!store.check(expected) && comm::Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::string members;
    for (int q = 0; q < c.size; ++q)
      if (!excluded[static_cast<size_t>(q)] &&
          store.check({base + "/alive/" + std::to_string(q)})) {
        if (!members.empty()) members += ',';
        members += std::to_string(q);
      }
    store.set(base + "/members", members);
  }
  std::vector<int> members;
  {
    std::stringstream ss(store.get_string(base + "/members"));  // waits (bounded by the timeout)
    for (std::string item; std::getline(ss, item, ',');) members.push_back(std::stoi(item));
  }
  store_timeout.restore();
  const auto me = std::find(members.begin(), members.end(), c.rank);
  if (me == members.end())
    SHOAL_THROW(PeerFailure,
                "rank " << c.rank << ": shrink #" << c.shrinks
                        << " was decided without this rank (it joined after "
                           "the survivors' list was published): the job continues without it",
                c.rank);
  Options options;
  options.timeout = c.timeout;
  options.calibrate = c.calibrate_option;
  Communicator survivors =
      create(std::make_shared<PrefixStore>(base + "/comm/", c.store),
             static_cast<int>(me - members.begin()), static_cast<int>(members.size()), options);
  detail::Internals::of(survivors).job_store = c.job_store;
  return survivors;
}

Communicator Communicator::grow(int joining, const std::string& name) {
  auto& c = *impl_;
  SHOAL_CHECK(joining >= 0, InvalidArgument, "grow: " << joining << " joining processes");
  SHOAL_CHECK(!name.empty(), InvalidArgument,
              "grow: the name that joining processes pass to join() is empty");
  // Under the job's store (not this communicator's, which a shrink or split scoped): joiners
  // know only that one.
  const std::string base = "shoal/grow/" + name;
  if (c.rank == 0) {
    shoal::store::ScopedTimeout store_timeout(*c.job_store, c.timeout);
    c.job_store->set(base + "/sizes", std::to_string(c.size) + "," + std::to_string(joining));
  }
  Options options;
  options.timeout = c.timeout;
  Communicator grown = create(std::make_shared<PrefixStore>(base + "/comm/", c.job_store), c.rank,
                              c.size + joining, options);
  detail::Internals::of(grown).job_store = c.job_store;
  return grown;
}

Communicator Communicator::join(std::shared_ptr<Store> store, const std::string& name,
                                const Options& options) {
  SHOAL_CHECK(store != nullptr, InvalidArgument, "join: needs the job's store");
  const std::string base = "shoal/grow/" + name;
  const auto timeout =
      options.timeout.count() > 0 ? options.timeout : config::get_duration("SHOAL_TIMEOUT");
  std::string sizes;
  int64_t index = 0;
  {
    shoal::store::ScopedTimeout store_timeout(*store, timeout);
    sizes = store->get_string(base + "/sizes");  // waits for the job's grow()
    index = store->add(base + "/joined", 1) - 1;
  }
  const auto comma = sizes.find(',');
  SHOAL_CHECK(comma != std::string::npos, Internal,
              "join '" << name << "': malformed sizes '" << sizes << "'");
  const int old_size = std::stoi(sizes.substr(0, comma)),
            joining = std::stoi(sizes.substr(comma + 1));
  SHOAL_CHECK(index < joining, InvalidArgument,
              "join '" << name << "': the job admits " << joining << " new process(es) and "
                       << index + 1 << " tried to join: start as many joiners as grow() was told");
  Communicator joined = create(std::make_shared<PrefixStore>(base + "/comm/", store),
                               old_size + static_cast<int>(index), old_size + joining, options);
  detail::Internals::of(joined).job_store = std::move(store);
  return joined;
}

}  // namespace shoal
