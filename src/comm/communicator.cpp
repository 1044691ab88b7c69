#include "shoal/communicator.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <sstream>
#include <tuple>

#include "comm/agreement.hpp"
#include "comm/comm_impl.hpp"
#include "comm/flat.hpp"
#include "comm/spin.hpp"
#include "comm/work_state.hpp"
#include "core/check.hpp"
#include "core/config.hpp"
#include "store/bootstrap.hpp"
#include "store/scoped_timeout.hpp"
#include "transport/shm/shm_mesh.hpp"
#include "transport/tcp/mesh.hpp"
#include "transport/tcp/socket.hpp"
#include "transport/tcp/socket_stream.hpp"
#include "transport/tcp/striped_stream.hpp"

namespace shoal {

using algorithms::Collective;

namespace detail {

static uint64_t random_id() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ 0x5348'4f4c'0000'0000ull;
}

CommImpl::CommImpl(std::shared_ptr<Store> st, int r, int n, const Options& options)
    : rank(r), size(n), store(std::move(st)), job_store(store) {
  SHOAL_CHECK(store != nullptr, InvalidArgument, "Communicator::create needs a store");
  SHOAL_CHECK(n >= 1, InvalidArgument, "world size must be at least 1, got " << n);
  SHOAL_CHECK(r >= 0 && r < n, InvalidArgument, "rank " << r << " is outside [0, " << n << ")");
  log::set_rank(r);
  timeout = options.timeout.count() > 0 ? options.timeout : config::get_duration("SHOAL_TIMEOUT");
  calibrate_option = options.calibrate;
  chunk_bytes = config::get_bytes("SHOAL_CHUNK_BYTES");
  SHOAL_CHECK(chunk_bytes > 0, InvalidArgument, "SHOAL_CHUNK_BYTES must be positive");
  const auto deadline = comm::Clock::now() + timeout;
  shoal::store::ScopedTimeout store_timeout(*store, timeout);
  const std::string prefix = "shoal/comm" + std::to_string(store->next_communicator_index());
  Transport transport;
  Calibration calibration = Calibration::off;
  bool measure = false;
  try {
    calibration = calibration_mode(options);
    measure = links_wanted();
    transport = set_up(prefix, deadline);
  } catch (const std::exception& e) {
    comm::vote_against_creation(*store, prefix, r, n, e.what());
    throw;
  }
  // Everyone set up: the communicator exists on every rank or on none (comm/agreement.hpp).
  comm::vote_for_creation(*store, prefix, r, n, deadline);
  store_timeout.restore();
  engine =
      std::make_unique<comm::Engine>(r, n, comm_id, std::move(transport.streams),
                                     std::move(transport.shm), std::move(transport.flat), timeout);
  comm::Planner::Layout layout;
  if (const comm::FlatMemory* flat = engine->flat()) layout.flat = flat->limits();
  layout.hierarchy_fits = comm::hierarchy_fits(topology);
  executors_[static_cast<int>(comm::Path::schedule)] =
      std::make_unique<comm::ScheduleExecutor>(*engine);
  executors_[static_cast<int>(comm::Path::flat)] =
      std::make_unique<comm::FlatExecutor>(*engine, timeout);
  executors_[static_cast<int>(comm::Path::hierarchy)] =
      std::make_unique<comm::HierarchyExecutor>(*this);
  planner.emplace(layout, [this] {
    return tune::Dispatcher::from_environment(
        tune_context(), calibrated_params ? &*calibrated_params : nullptr, {links, ring_order});
  });
  // Learning settles a bucket with the slowest rank's times of its explored calls: each
  // completes after recording its time, and collectives complete in issue order.
  planner->set_saves_learned(rank == 0);
  planner->set_agree([this](const std::function<std::vector<double>()>& mine) {
    if (last_explored_.valid()) last_explored_.wait();
    std::vector<double> times = mine();
    call(comm::forced_call(Collective::all_reduce, times.data(), times.data(), times.size(),
                           DataType::float64, ReduceOp::max,
                           algorithms::find_algorithm(Collective::all_reduce, "ring")))
        .wait();
    return times;
  });
  // The settings every rank must hold equal are compared first, then the cost model is
  // calibrated: collectives after the vote, which must not change its outcome. A difference,
  // or a failure (a peer died or was cut off meanwhile), breaks this communicator, as any later
  // call's would, and its next call raises it. Thrown from here instead, it would leave this
  // rank without the communicator that ranks whose step had finished hold: recovering (shrink)
  // from different communicators, they would split the job.
  if (n > 1) {
    try {
      if (const auto differ = compare_agreed_settings(calibration)) {
        engine->break_from_caller(ErrorCode::Mismatch, differ->message, differ->rank);
      } else {
        if (calibration != Calibration::off) calibrate_cost_model(calibration);
        if (measure) measure_links();
      }
    } catch (const Error& e) {
      SHOAL_WARN(
          "a collective at creation failed; the communicator's next call raises it: " << e.what());
      // The failed call's error can reach this thread before the engine has marked itself
      // broken; this makes sure it is (nothing happens if it already was).
      engine->break_from_caller(
          e.code(), std::string("a collective at creation failed: ") + e.what(), e.peer());
    }
  }
  SHOAL_INFO("communicator ready: rank " << r << " of " << n << ", " << topology.num_hosts
                                         << " host(s), listening on " << listen_address);
}

std::optional<comm::Disagreement> CommImpl::compare_agreed_settings(Calibration mode) {
  std::vector<uint64_t> mine = config::agreed_fingerprints();
  const size_t settings = mine.size();
  // Beside the settings, the calibration mode (compared) and the round trip in nanoseconds
  // (the longest is taken): the calibration's latency without another collective.
  mine.push_back(static_cast<uint64_t>(mode));
  mine.push_back(static_cast<uint64_t>(longest_round_trip_s * 1e9));
  const size_t per_rank = mine.size();
  std::vector<uint64_t> all(per_rank * static_cast<size_t>(size));
  // Forced: no dispatcher (whose settings these are), no flat path, no hierarchy; Bruck, so
  // that creation pays ceil(log2 p) latencies for it, not the ring's p - 1.
  call(comm::forced_call(Collective::all_gather, mine.data(), all.data(), per_rank, DataType::int64,
                         ReduceOp::sum,
                         algorithms::find_algorithm(Collective::all_gather, "bruck")))
      .wait();
  std::vector<uint64_t> fingerprints;
  uint64_t round_trip_ns = 0;
  for (int q = 0; q < size; ++q) {
    const uint64_t* of_q = all.data() + static_cast<size_t>(q) * per_rank;
    fingerprints.insert(fingerprints.end(), of_q, of_q + settings);
    round_trip_ns = std::max(round_trip_ns, of_q[settings + 1]);
  }
  longest_round_trip_s = static_cast<double>(round_trip_ns) * 1e-9;
  if (auto differ = comm::first_disagreement(fingerprints, settings)) return differ;
  for (int q = 1; q < size; ++q)
    if (all[static_cast<size_t>(q) * per_rank + settings] != all[settings])
      return comm::Disagreement{
          q, "rank " + std::to_string(q) +
                 "'s calibration at creation (Options::calibrate, else SHOAL_TUNE_CALIBRATE) "
                 "differs from rank 0's: it is collective and must be the same on every rank"};
  return std::nullopt;
}

CommImpl::Transport CommImpl::set_up(const std::string& prefix, comm::Clock::time_point deadline) {
  const int r = rank, n = size;
  if (r == 0) {
    comm_id = random_id();
    store->set(prefix + "/id", std::to_string(comm_id));
  } else {
    comm_id = std::stoull(store->get_string(prefix + "/id"));
  }
  topology = comm::discover_topology(*store, prefix, r, n);
  comm::note_host(topology.local_size, topology.local_cores);
  const auto rails = transport::tcp::choose_rail_addresses(topology.num_hosts == 1, store->host());
  listen_address = rails.front().ip;
  for (size_t i = 1; i < rails.size(); ++i) listen_address += "," + rails[i].ip;
  // Every pair gets a TCP connection, and pairs on different hosts one more per further NIC
  // they share and further streams on long paths (SHOAL_SOCKET_STREAMS), striped; pairs on one
  // host move their data through shared-memory rings and keep the socket for wake-ups and to
  // learn when the peer is gone.
  auto fds = transport::tcp::connect_mesh(*store, prefix, r, n, comm_id, rails, topology.host_of,
                                          deadline);
  std::unique_ptr<transport::shm::ShmMesh> shm;
  const auto flat_layout =
      comm::FlatMemory::layout_from_settings(topology.local_size, topology.local_cores);
  try {
    shm = std::make_unique<transport::shm::ShmMesh>(*store, prefix, r, topology.host_of, comm_id,
                                                    flat_layout.region());
  } catch (...) {
    for (auto& peer : fds)
      for (int fd : peer) close(fd);
    throw;
  }
  std::vector<std::unique_ptr<transport::Stream>> streams(n);
  for (int p = 0; p < n; ++p) {
    if (fds[p].empty()) continue;
    if (shm->uses_shm(p)) {
      for (size_t i = 1; i < fds[p].size(); ++i) close(fds[p][i]);
      streams[p] = shm->stream_to(p, fds[p].front());
      ++shm_peers;
      continue;
    }
    // The handshake's round trip (TCP_INFO): the latency calibration cannot time.
    const double round_trip =
        std::chrono::duration<double>(transport::tcp::measured_rtt(fds[p].front())).count();
    longest_round_trip_s = std::max(longest_round_trip_s, round_trip);
    if (fds[p].size() > 1) {
      max_connections = std::max(max_connections, static_cast<int>(fds[p].size()));
      streams[p] = std::make_unique<transport::tcp::StripedStream>(std::move(fds[p]));
      ++tcp_peers;
    } else {
      streams[p] = std::make_unique<transport::tcp::SocketStream>(fds[p].front());
      ++tcp_peers;
    }
  }
  std::unique_ptr<comm::FlatMemory> flat;
  if (shm->all_ranks_share_memory()) flat = std::make_unique<comm::FlatMemory>(*shm, flat_layout);
  return {std::move(streams), std::move(shm), std::move(flat)};
}

std::string CommImpl::transport_summary() const {
  std::ostringstream os;
  if (shm_peers > 0) os << "shm with " << shm_peers << " peer(s)";
  if (shm_peers > 0 && tcp_peers > 0) os << ", ";
  if (tcp_peers > 0 || shm_peers == 0)
    os << "tcp with " << tcp_peers << " peer(s) on " << listen_address;
  if (max_connections > 1) os << " (striped over up to " << max_connections << " connections)";
  return os.str();
}

algorithms::CollectiveArgs CommImpl::checked_args(const comm::Request& r) const {
  const auto [collective, dtype, op, root, peer] =
      std::tuple(r.collective, r.dtype, r.op, r.root, r.peer);
  const auto name = algorithms::to_string(collective);
  SHOAL_CHECK(static_cast<int>(dtype) < kNumDataTypes, InvalidArgument,
              name << ": invalid data type " << static_cast<int>(dtype));
  SHOAL_CHECK(static_cast<int>(op) < kNumReduceOps, InvalidArgument,
              name << ": invalid reduce op " << static_cast<int>(op));
  const bool reduces = collective == Collective::all_reduce || collective == Collective::reduce ||
                       collective == Collective::reduce_scatter;
  SHOAL_CHECK(!reduces || defined_for(op, dtype), InvalidArgument,
              name << ": " << to_string(op) << " is defined for integer types only, not "
                   << to_string(dtype));
  const bool rooted = collective == Collective::broadcast || collective == Collective::reduce ||
                      collective == Collective::gather || collective == Collective::scatter;
  if (rooted)
    SHOAL_CHECK(root >= 0 && root < size, InvalidArgument,
                name << ": root " << root << " is outside [0, " << size << ")");
  const bool any_source = collective == Collective::recv && peer == Communicator::kAnySource;
  if ((collective == Collective::send || collective == Collective::recv) && !any_source) {
    SHOAL_CHECK(peer >= 0 && peer < size, InvalidArgument,
                name << ": peer " << peer << " is outside [0, " << size << ")");
    SHOAL_CHECK(peer != rank, InvalidArgument,
                name << " to this rank itself (" << rank << ") is not supported: copy the buffer");
  }
  SHOAL_CHECK(r.count <= (uint64_t{1} << 56) / size_of(dtype) / static_cast<uint64_t>(size),
              InvalidArgument, name << ": count " << r.count << " is too large");
  algorithms::CollectiveArgs a;
  a.collective = collective;
  a.dtype = dtype;
  a.op = op;
  a.count = r.count;
  a.root = rooted ? root : -1;
  a.peer = peer;
  a.tag = r.tag;
  a.rank = rank;
  a.size = size;
  a.chunk_bytes = chunk_bytes;
  a.unchecked = unchecked_;
  a.ring_order = ring_order.get();
  return a;
}

Work CommImpl::call(const comm::Request& r) {
  algorithms::CollectiveArgs a = checked_args(r);
  if (r.vectored) {
    a.in_place = r.vectored->in_place;
  } else {
    const auto name = algorithms::to_string(r.collective);
    const uint64_t in_bytes = algorithms::input_bytes(a), out_bytes = algorithms::output_bytes(a);
    SHOAL_CHECK(in_bytes == 0 || r.input != nullptr, InvalidArgument,
                name << ": the input buffer is null but " << in_bytes << " bytes are needed");
    SHOAL_CHECK(out_bytes == 0 || r.output != nullptr, InvalidArgument,
                name << ": the output buffer is null but " << out_bytes << " bytes are needed");
    a.in_place = r.input != nullptr && r.input == r.output;
  }
  const comm::Plan plan = planner->plan(r, a);
  if (plan.path != comm::Path::hierarchy) {
    fence_hierarchical();  // issue order behind hierarchical work
    // A queued broadcast's root checks nobody's call against its own: the next call carries
    // its signature (which carries the ones before) for its ranks to compare. Any other
    // collective compares every rank's, directly or along its schedule.
    if (plan.queued)
      unchecked_ = plan.signature | uint64_t{1} << 32;
    else if (r.collective != Collective::send && r.collective != Collective::recv)
      unchecked_ = 0;
  }
  Work work = executors_[static_cast<int>(plan.path)]->start(plan, r);
  if (plan.timed) last_explored_ = work;
  return work;
}

void CommImpl::apply_call_options(comm::Request& r, const CallOptions* call) const {
  if (!call || call->algorithm.empty()) return;
  r.forced_path = algorithms::named_path(call->algorithm);
  if (r.forced_path != algorithms::NamedPath::none) return;
  r.forced = algorithms::find_algorithm(r.collective, call->algorithm);
  SHOAL_CHECK(r.forced, InvalidArgument,
              algorithms::to_string(r.collective)
                  << ": no algorithm '" << call->algorithm
                  << "' (CallOptions::algorithm: a row shoal-info --algorithms lists, 'flat' or "
                     "'hierarchical')");
}

}  // namespace detail

Communicator::Communicator(std::unique_ptr<detail::CommImpl> impl) : impl_(std::move(impl)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

Communicator Communicator::create(std::shared_ptr<Store> store, int rank, int size,
                                  const Options& options) {
  return Communicator(std::make_unique<detail::CommImpl>(std::move(store), rank, size, options));
}

Communicator Communicator::from_environment(const Options& options) {
  auto info = bootstrap::detect(bootstrap::process_env());
  auto timeout =
      options.timeout.count() > 0 ? options.timeout : config::get_duration("SHOAL_TIMEOUT");
  auto store = bootstrap::open_store(info, timeout);
  return create(std::move(store), info.rank, info.size, options);
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }
int Communicator::local_rank() const { return impl_->topology.local_rank; }
int Communicator::local_size() const { return impl_->topology.local_size; }
int Communicator::num_hosts() const { return impl_->topology.num_hosts; }

namespace {
// A call of the public API, with the buffers as the engine reads them.
comm::Request api_call(Collective collective, const void* input, void* output, size_t count,
                       DataType dtype, ReduceOp op = ReduceOp::sum, int root = -1) {
  comm::Request r = comm::request_of(collective, input, output, count, dtype, op, root);
  r.may_use_hierarchy = true;
  return r;
}
}  // namespace

Work Communicator::all_reduce_call(const void* send, void* recv, size_t count, DataType dtype,
                                   ReduceOp op, bool blocking, const CallOptions* call) {
  auto r = api_call(Collective::all_reduce, send, recv, count, dtype, op);
  r.blocking = blocking;
  impl_->apply_call_options(r, call);
  return impl_->call(r);
}
Work Communicator::all_gather_async(const void* send, void* recv, size_t count, DataType dtype) {
  return all_gather_call(send, recv, count, dtype, false);
}
Work Communicator::all_gather_call(const void* send, void* recv, size_t count, DataType dtype,
                                   bool blocking, const CallOptions* call) {
  auto r = api_call(Collective::all_gather, send, recv, count, dtype);
  r.blocking = blocking;
  impl_->apply_call_options(r, call);
  return impl_->call(r);
}
Work Communicator::reduce_scatter_async(const void* send, void* recv, size_t count, DataType dtype,
                                        ReduceOp op) {
  return reduce_scatter_call(send, recv, count, dtype, op, false);
}
Work Communicator::reduce_scatter_call(const void* send, void* recv, size_t count, DataType dtype,
                                       ReduceOp op, bool blocking, const CallOptions* call) {
  auto r = api_call(Collective::reduce_scatter, send, recv, count, dtype, op);
  r.blocking = blocking;
  impl_->apply_call_options(r, call);
  return impl_->call(r);
}
Work Communicator::broadcast_async(const void* send, void* recv, size_t count, DataType dtype,
                                   int root) {
  return broadcast_call(send, recv, count, dtype, root, false);
}
Work Communicator::broadcast_call(const void* send, void* recv, size_t count, DataType dtype,
                                  int root, bool blocking) {
  // Only the root's input matters; elsewhere the buffer is the output.
  auto r = api_call(Collective::broadcast, rank() == root ? send : nullptr, recv, count, dtype,
                    ReduceOp::sum, root);
  r.blocking = blocking;
  return impl_->call(r);
}
Work Communicator::reduce_async(const void* send, void* recv, size_t count, DataType dtype,
                                ReduceOp op, int root) {
  return reduce_call(send, recv, count, dtype, op, root, false);
}
Work Communicator::reduce_call(const void* send, void* recv, size_t count, DataType dtype,
                               ReduceOp op, int root, bool blocking) {
  auto r =
      api_call(Collective::reduce, send, rank() == root ? recv : nullptr, count, dtype, op, root);
  r.blocking = blocking;
  return impl_->call(r);
}
Work Communicator::all_to_all_async(const void* send, void* recv, size_t count, DataType dtype) {
  return impl_->call(api_call(Collective::all_to_all, send, recv, count, dtype));
}
Work Communicator::gather_async(const void* send, void* recv, size_t count, DataType dtype,
                                int root) {
  return impl_->call(api_call(Collective::gather, send, rank() == root ? recv : nullptr, count,
                              dtype, ReduceOp::sum, root));
}
Work Communicator::scatter_async(const void* send, void* recv, size_t count, DataType dtype,
                                 int root) {
  return impl_->call(api_call(Collective::scatter, rank() == root ? send : nullptr, recv, count,
                              dtype, ReduceOp::sum, root));
}
Work Communicator::barrier_call(bool blocking) {
  auto r = api_call(Collective::barrier, nullptr, nullptr, 0, DataType::uint8);
  r.blocking = blocking;
  return impl_->call(r);
}
Work Communicator::send_async(const void* buf, size_t count, DataType dtype, int peer, int tag) {
  auto r = api_call(Collective::send, buf, nullptr, count, dtype);
  r.peer = peer;
  r.tag = tag;
  return impl_->call(r);
}
Work Communicator::recv_async(void* buf, size_t count, DataType dtype, int peer, int tag) {
  auto r = api_call(Collective::recv, nullptr, buf, count, dtype);
  r.peer = peer;
  r.tag = tag;
  return impl_->call(r);
}

std::string Communicator::describe() const {
  std::ostringstream os;
  os << "rank " << rank() << " of " << size() << " (local " << local_rank() << " of "
     << local_size() << ", " << num_hosts() << " host(s)), transport " << impl_->transport_summary()
     << ", timeout " << std::chrono::duration<double>(impl_->timeout).count() << " s, chunk "
     << impl_->chunk_bytes << " B";
  return os.str();
}

void Communicator::check_equal(size_t a, size_t b, const char* op) const {
  SHOAL_CHECK(a == b, InvalidArgument,
              op << ": buffer sizes do not match (" << a << " vs " << b << " elements)");
}
void Communicator::check_divisible(size_t n, const char* op) const {
  SHOAL_CHECK(
      n % static_cast<size_t>(size()) == 0, InvalidArgument,
      op << ": buffer of " << n << " elements does not divide by the " << size() << " ranks");
}

}  // namespace shoal
