#include "swarm/train/stage_server.hpp"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <random>
#include <thread>

#include "core/config.hpp"
#include "shoal/communicator.hpp"
#include "shoal/error.hpp"
#include "swarm/net/averaging.hpp"
#include "swarm/net/rebalance.hpp"
#include "swarm/net/rpc.hpp"
#include "swarm/train/keys.hpp"
#include "swarm/train/tensors.hpp"

namespace shoal::swarm {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string default_id() {
  std::random_device rd;
  return "peer-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 100000);
}

void log(const std::string& id, const std::string& text) {
  std::fprintf(stderr, "[%s] %s\n", id.c_str(), text.c_str());
}
}  // namespace

struct StageServer::Impl {
  ServerOptions opt;
  std::shared_ptr<Registry> registry;
  std::shared_ptr<Store> store;  // the run loop's: leases, rounds, averaging, moves
  // The request threads' own connections: each backward's claim and count are round trips,
  // made after its reply and side by side with the other requests'.
  std::unique_ptr<RendezvousPool> pool;
  // Backwards between claiming a micro-batch and adding its gradient: the claims alone must
  // not call the round full before the gradients are in (round_full).
  std::atomic<int> claims_in_flight{0};
  std::string address;

  // The stage: module, optimizer, gradient accumulators. model_mu serialises compute (one
  // request at a time, like one device) and the step. `round` counts the steps taken; with
  // delayed updates `previous` holds the parameters before the last step, and two rounds
  // accumulate at once, each in the slot of its parity.
  mutable std::mutex model_mu;
  StageModule module{nullptr}, previous{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::vector<torch::Tensor> params;
  struct Accumulator {
    std::vector<torch::Tensor> sums;
    int64_t count = 0;
    void zero() {
      for (auto& a : sums) a.zero_();
      count = 0;
    }
  };
  Accumulator accum[2];
  Accumulator& accum_of(uint32_t r) { return accum[r & 1]; }
  uint32_t staleness() const { return opt.delayed_updates ? 1 : 0; }
  /// The steps round r's micro-batches are computed after.
  uint32_t version_of(uint32_t r) const { return r > staleness() ? r - staleness() : 0; }
  /// Rounds whose gradients this replica still adds up: the next to step and, with delayed
  /// updates, the one after it.
  bool accumulates(uint32_t r) const { return r >= round && r <= round + staleness(); }
  /// The module that serves round r: the newest parameters, or the ones before the last step.
  /// A round older than both (a retry after its step) gets the oldest kept; it counts nothing.
  StageModule& module_of(uint32_t r) {
    return opt.delayed_updates && version_of(r) < round ? previous : module;
  }

  // The averaging group's communicator, kept while the group's members stay the same: forming
  // one costs a rendezvous (~0.1 s here), an all_reduce of a stage's gradients far less.
  std::string group_key;
  std::unique_ptr<Communicator> group;
  std::unique_ptr<CompressedAverager> averager;  // with a compressing averaging codec

  std::atomic<int> stage{-1};
  std::atomic<uint32_t> round{0};
  std::atomic<bool> moving{false};
  std::mutex round_mu;
  std::condition_variable round_cv;

  // Throughput: samples per busy second, over announce windows, smoothed. Its own mutex: the
  // lease must be renewed while a slow request holds the stage.
  std::atomic<int> load{0};
  mutable std::mutex rate_mu;
  double window_busy = 0, window_samples = 0, throughput = 0;
  void add_busy(double seconds, double samples) {
    std::lock_guard<std::mutex> lock(rate_mu);
    window_busy += seconds;
    window_samples += samples;
  }
  ServerStats counters;

  std::unique_ptr<RpcServer> rpc;
  std::atomic<bool> stopping{false};

  Impl(ServerOptions o, std::shared_ptr<Registry> r) : opt(std::move(o)), registry(std::move(r)) {
    if (opt.id.empty()) opt.id = default_id();
    store = registry->rendezvous();
    pool = std::make_unique<RendezvousPool>(registry);
    registry->set_lease(opt.lease);
  }

  // Probes per second (PeerRecord::speed), measured once at start: what the rebalancer divides
  // by this peer's throughput to learn what its stage costs.
  double speed = 0;
  int stage_block_count = 1;  // blocks of the stage served (device_per_block)
  void measure_speed() {
    // The probe: a fixed matrix product, then one unit of the emulated device; the best of 3.
    auto a = torch::full({96, 96}, 0.5f);
    double best = 0;
    for (int i = 0; i < 3; ++i) {
      auto start = Clock::now();
      auto b = a;
      for (int k = 0; k < 4; ++k) b = torch::mm(b, a) * 0.01f;
      (void)b.sum().item<float>();
      emulate_device(seconds_since(start), 1, false);
      const double s = seconds_since(start);
      best = i == 0 ? s : std::min(best, s);
    }
    speed = best > 0 ? 1 / best : 0;
  }

  PeerRecord record() {
    PeerRecord r;
    r.id = opt.id;
    r.speed = speed;
    r.stage = moving ? -1 : stage.load();
    r.host = opt.host;
    r.port = rpc->port();
    {
      std::lock_guard<std::mutex> lock(rate_mu);
      r.throughput = throughput;
    }
    r.load = load;
    r.round = round;
    return r;
  }
  std::mutex announce_mu;  // one announcement at a time, each of the state as it is made
  void announce() {
    std::lock_guard<std::mutex> serial(announce_mu);
    // Fold the window into the throughput first, so the record carries the newest figure.
    {
      std::lock_guard<std::mutex> lock(rate_mu);
      // Windows of at least a second of work, smoothed: the figure steers routing and moves.
      if (window_busy > 1.0) {
        double rate = window_samples / window_busy;
        throughput = throughput > 0 ? 0.7 * throughput + 0.3 * rate : rate;
        window_busy = window_samples = 0;
      }
    }
    registry->announce(record());
  }

  // ---- the stage's state ----
  void build_stage(int k) {
    module = StageModule(opt.model, k);
    optimizer = make_optimizer(module, opt.optim);
    params = module->parameters();
    if (opt.delayed_updates) previous = StageModule(opt.model, k);  // the same initial parameters
    for (auto& a : accum) {
      a.sums.clear();
      for (auto& p : params) a.sums.push_back(torch::zeros_like(p));
      a.count = 0;
    }
    const auto [first, last] = stage_blocks(opt.model, k);
    stage_block_count = last - first;
    stage = k;
  }

  /// Takes stage k's parameters and optimizer state from a live replica at round >= min_round;
  /// false when there is none (the caller keeps its freshly initialised stage).
  bool load_state_from_peer(int k, uint32_t min_round, Milliseconds patience) {
    auto deadline = Clock::now() + patience;
    do {
      for (auto& peer : registry->peers(k)) {
        if (peer.id == opt.id || peer.round < min_round) continue;
        try {
          RpcClient client(peer.host, peer.port, Milliseconds(2000));
          Message request;
          request.type = MsgType::GetState;
          request.stage = static_cast<uint32_t>(k);
          Message reply = client.call(request, opt.averaging_timeout);
          if (reply.tensors.size() != 1u + opt.delayed_updates ||
              reply.stage != static_cast<uint32_t>(k)) {
            log(opt.id, "state from " + peer.id + ": " + std::to_string(reply.tensors.size()) +
                            " tensors, does it run the same --delayed-updates?");
            continue;
          }
          std::lock_guard<std::mutex> lock(model_mu);
          load_stage_state(module, *optimizer, wire_to_bytes(reply.tensors[0]));
          if (opt.delayed_updates) unflatten_into(previous, from_wire(reply.tensors[1]));
          // Gradients of rounds the peer has stepped are dropped; with delayed updates the next
          // round's, computed on the parameters just taken as `previous`, still count.
          uint32_t before = round;
          round = reply.round;
          for (uint32_t r : {before, before + 1})
            if (!accumulates(r)) accum_of(r).zero();
          ++counters.state_loads;
          log(opt.id, "stage " + std::to_string(k) + ": took state of round " +
                          std::to_string(reply.round) + " from " + peer.id);
          return true;
        } catch (const Error& e) {
          log(opt.id, "state from " + peer.id + " failed: " + e.what());
        }
      }
      if (Clock::now() >= deadline) break;
      std::this_thread::sleep_for(Milliseconds(50));
    } while (!stopping);
    return false;
  }

  void adopt_stage(int k) {
    group.reset();  // another stage, other peers
    group_key.clear();
    if (averager) averager->reset();  // errors carried for another stage's parameters
    {
      std::lock_guard<std::mutex> lock(model_mu);
      build_stage(k);
    }
    if (!registry->peers(k).empty() && load_state_from_peer(k, 0, opt.averaging_timeout)) return;
    // Nobody serves the stage: start from its initial parameters at the stage's latest round
    // (its state is lost with its last replica, as in SWARM).
    if (store->check({keys::stage_round(k)}))
      round = static_cast<uint32_t>(std::stoul(store->get_string(keys::stage_round(k))));
    round_cv.notify_all();
  }

  // ---- requests ----
  /// `device_units` of device_ms each (per block of the stage with device_per_block, unless
  /// `per_block` is false: the probe).
  void emulate_device(double compute_s, double device_units, bool per_block = true) {
    if (per_block && opt.device_per_block) device_units *= stage_block_count;
    double extra =
        (opt.slowdown - 1) * compute_s + opt.slowdown * opt.device_ms * 1e-3 * device_units;
    if (extra > 0) std::this_thread::sleep_for(std::chrono::duration<double>(extra));
  }

  void check_stage(const Message& request) {
    if (moving || static_cast<int>(request.stage) != stage)
      throw InvalidArgumentError(
          "peer " + opt.id + " serves stage " + std::to_string(moving ? -1 : stage.load()) +
          ", not stage " + std::to_string(request.stage) + " (it moved): ask the registry again");
  }

  /// Blocks until this replica holds the parameters round `wanted` is computed on.
  void wait_for_round(uint32_t wanted) {
    std::unique_lock<std::mutex> lock(round_mu);
    uint32_t steps = version_of(wanted);
    if (!round_cv.wait_for(lock, opt.averaging_timeout, [&] { return round >= steps || stopping; }))
      throw TimeoutError("peer " + opt.id + " is still at round " + std::to_string(round.load()) +
                         ", asked for " + std::to_string(wanted));
  }

  static torch::Tensor flatten(StageModule& m) {
    std::vector<torch::Tensor> pieces;
    for (auto& p : m->parameters()) pieces.push_back(p.detach().flatten());
    return torch::cat(pieces);
  }
  static void unflatten_into(StageModule& m, const torch::Tensor& flat) {
    torch::NoGradGuard no_grad;
    int64_t offset = 0;
    for (auto& p : m->parameters()) {
      if (offset + p.numel() > flat.numel())
        throw InvalidArgumentError("swarm: a stage's parameters of " +
                                   std::to_string(flat.numel()) +
                                   " values, fewer than the model has");
      p.copy_(flat.narrow(0, offset, p.numel()).view_as(p));
      offset += p.numel();
    }
    if (offset != flat.numel())
      throw InvalidArgumentError("swarm: a stage's parameters of " + std::to_string(flat.numel()) +
                                 " values, more than the model has");
  }

  torch::Tensor input_of(const Message& request, size_t index) {
    if (request.tensors.size() <= index)
      throw InvalidArgumentError("swarm request without tensor " + std::to_string(index));
    return from_wire(request.tensors[index]);
  }

  Message forward(const Message& request) {
    auto x = input_of(request, 0);
    Message reply;
    reply.type = MsgType::Reply;
    std::lock_guard<std::mutex> lock(model_mu);
    check_stage(request);
    auto start = Clock::now();
    torch::NoGradGuard no_grad;
    auto y = module_of(request.round)->forward(x);
    emulate_device(seconds_since(start), 1);
    add_busy(seconds_since(start), 0);
    ++counters.forwards;
    reply.tensors.push_back(to_wire(y, opt.codec));
    return reply;
  }

  Message backward(const Message& request) {
    auto x = input_of(request, 0);
    auto second = input_of(request, 1);  // output gradient, or the targets on the last stage
    Message reply;
    reply.type = MsgType::Reply;
    std::lock_guard<std::mutex> lock(model_mu);
    check_stage(request);
    auto start = Clock::now();
    bool last = module->is_last();
    auto& serving = module_of(request.round);
    if (x.is_floating_point()) x = x.detach().requires_grad_(true);
    auto out = serving->forward(x);
    std::vector<torch::Tensor> inputs = serving->parameters();
    size_t n_params = inputs.size();
    if (x.requires_grad()) inputs.push_back(x);
    std::vector<torch::Tensor> grads;
    if (last) {
      auto loss = lm_loss(out, second);
      char text[64];
      std::snprintf(text, sizeof text, "%.17g", loss.item<double>());
      reply.text = text;
      grads = torch::autograd::grad({loss}, inputs);
    } else {
      if (second.sizes() != out.sizes())
        throw InvalidArgumentError("swarm backward: output gradient of shape " +
                                   c10::str(second.sizes()) + " for an output of shape " +
                                   c10::str(out.sizes()));
      grads = torch::autograd::grad({out}, inputs, {second});
    }
    // The emulated device finishes before the gradient exists: a slow replica must not report
    // the round full and then keep the stage busy while its peers wait to average.
    emulate_device(seconds_since(start), 2);
    add_busy(seconds_since(start), static_cast<double>(x.size(0)));
    ++counters.backwards;
    if (x.requires_grad()) reply.tensors.push_back(to_wire(grads.back(), opt.codec));
    grads.resize(n_params);
    if (!accumulates(request.round)) {
      ++counters.duplicates;  // a round that already stepped counts nothing
      return reply;
    }
    ++claims_in_flight;
    after_reply([this, grads = std::move(grads), k = stage.load(), r = request.round,
                 mb = request.microbatch] {
      struct Done {
        std::atomic<int>& n;
        ~Done() { --n; }
      } done{claims_in_flight};
      count_gradient(grads, k, r, mb);
    });
    return reply;
  }

  /// A backward's gradient into round r's sum, if this replica is the first to finish micro-batch
  /// mb of stage k: a retry after a lost reply must not add its gradient twice. A round that
  /// stepped meanwhile counts nothing.
  void count_gradient(const std::vector<torch::Tensor>& grads, int k, uint32_t r, uint64_t mb) {
    auto store = pool->borrow();
    if (store->add(keys::claim(k, r, mb), 1) != 1) {
      std::lock_guard<std::mutex> lock(model_mu);
      ++counters.duplicates;
      return;
    }
    if (opt.exit_after_claim >= 0 && mb >= static_cast<uint64_t>(opt.exit_after_claim)) {
      log(opt.id, "fault injection: dying between claiming micro-batch " + std::to_string(mb) +
                      " and counting it");
      std::_Exit(3);
    }
    {
      std::lock_guard<std::mutex> lock(model_mu);
      if (stage != k || !accumulates(r)) return;
      auto& a = accum_of(r);
      for (size_t i = 0; i < grads.size(); ++i) a.sums[i].add_(grads[i]);
      ++a.count;
    }
    if (store->add(keys::done_count(k, r), 1) == opt.round_microbatches)
      store->set(keys::full(k, r), "1");
  }

  Message get_state(const Message& request) {
    Message reply;
    reply.type = MsgType::Reply;
    std::lock_guard<std::mutex> lock(model_mu);
    check_stage(request);
    auto bytes = std::make_shared<const std::string>(save_stage_state(module, *optimizer));
    reply.stage = static_cast<uint32_t>(stage.load());
    reply.round = round;
    reply.tensors.push_back(bytes_to_wire(bytes));
    if (opt.delayed_updates) reply.tensors.push_back(to_wire(flatten(previous), Codec::None));
    return reply;
  }

  Message handle(Message&& request) {
    struct LoadCount {
      std::atomic<int>& n;
      explicit LoadCount(std::atomic<int>& c) : n(c) { ++n; }
      ~LoadCount() { --n; }
    } counted(load);
    switch (request.type) {
      case MsgType::Forward:
        check_stage(request);
        wait_for_round(request.round);
        return forward(request);
      case MsgType::Backward:
        check_stage(request);
        wait_for_round(request.round);
        return backward(request);
      case MsgType::GetState:
        return get_state(request);
      case MsgType::Info: {
        Message reply;
        reply.type = MsgType::Reply;
        reply.stage = static_cast<uint32_t>(stage.load());
        reply.round = round;
        reply.text = StoreRegistry::encode(record());
        return reply;
      }
      default:
        throw InvalidArgumentError("swarm: a stage server does not answer message type " +
                                   std::to_string(static_cast<int>(request.type)));
    }
  }

  // ---- averaging inside the stage ----
  /// Forms the group of live replicas for round r: the first to arrive leads, waits for the
  /// replicas the registry lists (or join_window), and closes the group. Returns (rank, size);
  /// rank >= size means this replica came late and must take the result from a member.
  std::pair<int, int> form_group(int k, uint32_t r) {
    std::string base = keys::averaging(k, r);
    int idx = static_cast<int>(store->add(base + "/joined", 1) - 1);
    auto size_key = base + "/size";
    if (idx == 0) {
      // The replicas to wait for, read once: a lease outlives the join window, so re-reading the
      // registry while waiting would not drop a dead replica any sooner.
      int64_t expected = 1;
      for (auto& p : registry->peers(k)) expected += p.id != opt.id;
      auto deadline = Clock::now() + opt.join_window;
      while (Clock::now() < deadline && store->add(base + "/joined", 0) < expected)
        std::this_thread::sleep_for(Milliseconds(2));
      store->set(size_key, std::to_string(store->add(base + "/joined", 0)));
    } else {
      // If the leader dies before closing the group, the first member to notice closes it.
      auto deadline = Clock::now() + opt.join_window * 2;
      while (!store->check({size_key})) {
        if (Clock::now() > deadline && store->add(base + "/close_claim", 1) == 1)
          store->set(size_key, std::to_string(store->add(base + "/joined", 0)));
        std::this_thread::sleep_for(Milliseconds(2));
      }
    }
    // Before the member key: whoever sees every member also finds every bandwidth.
    store->set(base + "/bandwidth/" + opt.id, std::to_string(opt.bandwidth));
    store->set(base + "/member/" + std::to_string(idx), opt.id);
    return {idx, std::stoi(store->get_string(size_key))};
  }

  /// The members' ids (closed group of `size`), sorted: ranks in the communicator follow it.
  std::vector<std::string> group_members(int k, uint32_t r, int size) {
    std::string base = keys::averaging(k, r);
    std::vector<std::string> keys_, ids;
    for (int i = 0; i < size; ++i) keys_.push_back(base + "/member/" + std::to_string(i));
    // Poll: a blocking wait would hold this process's store connection, which the request
    // threads need for their claims.
    auto deadline = Clock::now() + opt.averaging_timeout;
    while (!store->check(keys_)) {
      if (Clock::now() > deadline)
        throw TimeoutError("swarm: members of the averaging group of stage " + std::to_string(k) +
                           " round " + std::to_string(r) + " did not all register");
      std::this_thread::sleep_for(Milliseconds(1));
    }
    for (auto& key : keys_) ids.push_back(store->get_string(key));
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  /// The members' bandwidths in rank order, or none (equal parts) if one did not say.
  std::vector<double> group_bandwidths(int k, uint32_t r, const std::vector<std::string>& members) {
    std::vector<double> out;
    for (auto& id : members) {
      double b = std::stod(store->get_string(keys::averaging(k, r) + "/bandwidth/" + id));
      if (!(b > 0)) return {};
      out.push_back(b);
    }
    return out;
  }

  /// Sums the flattened accumulators (and their micro-batch count, the last value) over the
  /// group; returns the bytes this member sent.
  uint64_t reduce(Communicator& comm, torch::Tensor& buffer, std::span<const double> weights) {
    float* data = buffer.data_ptr<float>();
    auto n = static_cast<size_t>(buffer.numel());
    if (!averager) {
      comm.all_reduce(data, n, DataType::float32, ReduceOp::sum);
      // What a bandwidth-optimal all_reduce sends (the communicator picks its algorithm).
      return comm.size() > 1 ? 2 * (comm.size() - 1) * n * 4 / comm.size() : 0;
    }
    uint64_t before = averager->bytes_sent();
    averager->all_reduce(comm, data, n - 1, weights);
    comm.all_reduce(data + n - 1, 1, DataType::float32, ReduceOp::sum);  // the count, exact
    return averager->bytes_sent() - before;
  }

  void average() {
    int k = stage;
    uint32_t r = round;
    auto started = Clock::now();
    auto [rank, size] = form_group(k, r);
    double formed_ms = seconds_since(started) * 1e3, t_group = 0, t_reduce = 0;
    bool stepped = false;
    if (rank < size) {
      auto mine = flat_accumulators(r);
      auto sum = mine.clone();
      try {
        auto members = group_members(k, r, size);
        std::string key;
        for (auto& m : members) key += m + ",";
        if (!group || key != group_key) {
          group.reset();
          Options copts;
          copts.timeout = opt.averaging_timeout;
          // A group lives a few rounds and averages one vector a round: calls timed at its
          // creation would cost more across a WAN than they save; the round trips are free.
          if (!config::is_set("SHOAL_TUNE_CALIBRATE")) copts.calibrate = "latency";
          int my_rank =
              static_cast<int>(std::find(members.begin(), members.end(), opt.id) - members.begin());
          auto group_store = std::make_shared<PrefixStore>(keys::averaging(k, r) + "/comm", store);
          group = std::make_unique<Communicator>(
              Communicator::create(group_store, my_rank, size, copts));
          group_key = key;
        }
        auto weights = averager ? group_bandwidths(k, r, members) : std::vector<double>{};
        t_group = seconds_since(started) * 1e3;
        if (opt.exit_in_averaging == static_cast<int>(r)) {
          log(opt.id, "fault injection: dying inside the averaging of round " + std::to_string(r));
          std::_Exit(3);
        }
        uint64_t sent = 0;
        try {
          sent = reduce(*group, sum, weights);
          t_reduce = seconds_since(started) * 1e3;
        } catch (const Error& e) {
          // A member died mid-round: the survivors shrink and average what they hold.
          log(opt.id, std::string("averaging group lost a member (") + e.what() + "), shrinking");
          ++counters.group_failures;
          group_key.clear();
          auto survivors = std::make_unique<Communicator>(group->shrink());
          group = std::move(survivors);
          sum.copy_(mine);
          sent = reduce(*group, sum, {});  // the survivors' ranks: equal parts
        }
        counters.averaging_bytes += sent;
        store->add(keys::kAveragingBytes, static_cast<int64_t>(sent));
        store->add(keys::kAveragingMemberRounds, 1);
        step_with(sum, r);
        stepped = true;
      } catch (const Error& e) {
        log(opt.id,
            std::string("averaging of round ") + std::to_string(r) + " failed: " + e.what());
        ++counters.group_failures;
        group.reset();
        group_key.clear();
      }
    }
    if (!stepped) {
      // Late or failed: take the stepped state from a replica that made it, else step alone.
      if (!load_state_from_peer(k, r + 1, opt.averaging_timeout))
        step_with(flat_accumulators(r), r);
    }
    store->set(keys::stepped(k, r), "1");
    store->set(keys::stage_round(k), std::to_string(round.load()));
    if (config::get_int("SHOAL_SWARM_TRACE"))
      log(opt.id, "round " + std::to_string(r) + ": group " + std::to_string(rank) + "/" +
                      std::to_string(size) + " formed in " + std::to_string(formed_ms) +
                      " ms, communicator at " + std::to_string(t_group) + " ms, reduced at " +
                      std::to_string(t_reduce) + " ms, stepped after " +
                      std::to_string(seconds_since(started) * 1e3) + " ms");
    round_cv.notify_all();
    announce();
  }

  /// Round r's gradient sums, flattened, followed by the number of micro-batches they cover:
  /// the buffer the replicas of a stage all_reduce.
  torch::Tensor flat_accumulators(uint32_t r) {
    std::vector<torch::Tensor> pieces;
    std::lock_guard<std::mutex> lock(model_mu);
    auto& a = accum_of(r);
    for (auto& sum : a.sums) pieces.push_back(sum.flatten());
    pieces.push_back(torch::full({1}, static_cast<float>(a.count)));
    return torch::cat(pieces);
  }

  /// Gradients = summed accumulators / summed micro-batch count, then one optimizer step.
  void step_with(const torch::Tensor& sum, uint32_t r) {
    std::lock_guard<std::mutex> lock(model_mu);
    if (opt.delayed_updates) {
      torch::NoGradGuard no_grad;
      auto before = previous->parameters();
      for (size_t i = 0; i < params.size(); ++i) before[i].copy_(params[i]);
    }
    double count = sum[sum.numel() - 1].item<double>();
    if (count > 0) {
      int64_t offset = 0;
      for (auto& p : params) {
        auto n = p.numel();
        p.mutable_grad() = sum.narrow(0, offset, n).view_as(p) / count;
        offset += n;
      }
      optimizer->step();
      optimizer->zero_grad();
    }
    accum_of(r).zero();
    ++counters.rounds_averaged;
    round = r + 1;
  }

  // ---- rebalancing ----
  Clock::time_point next_rebalance = Clock::now();
  int pending_move = -1;

  void schedule_rebalance() {
    static thread_local std::mt19937 rng(std::random_device{}());
    std::uniform_real_distribution<double> jitter(0.75, 1.25);
    next_rebalance = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        opt.rebalance_period * jitter(rng));
  }

  /// Every rebalancing period: if the rule names this peer, it stops serving at once. Gradients
  /// it accumulated for the current round are dropped, as a failed peer's would be: the round
  /// still fills (the micro-batches were counted) and its average is over what the remaining
  /// replicas hold. Waiting for the round's end instead would tie reaction time to round time,
  /// which is long exactly when the swarm is badly placed.
  void plan_rebalance() {
    schedule_rebalance();
    int stages = opt.model.stages;
    int64_t moves_done = store->add(keys::kMovesDone, 0);
    auto move = plan_move(registry->peers(), stages, opt.rebalance_threshold);
    if (!move || move->peer != opt.id) return;
    if (store->add(keys::move_claim(moves_done), 1) != 1)
      return;  // someone acted on this placement
    log(opt.id, "rebalancing: stage " + std::to_string(move->from) + " -> " +
                    std::to_string(move->to) + " (bottleneck " +
                    std::to_string(move->bottleneck_before) + " -> " +
                    std::to_string(move->bottleneck_after) + " samples/s)");
    moving = true;
    pending_move = move->to;
  }

  void finish_move() {
    int to = pending_move;
    pending_move = -1;
    announce();  // stage -1 while moving: trainers stop routing here
    adopt_stage(to);
    moving = false;
    ++counters.moves;
    announce();
    store->add(keys::kMovesDone, 1);
  }

  /// Round r of stage k is full once its flag is set, or once every micro-batch of it is
  /// claimed: a replica can die between claiming a micro-batch and counting it, and the count
  /// would then never reach the global batch. The claims are read every 100 ms.
  Clock::time_point next_claims_check{};
  bool round_full(int k, uint32_t r) {
    if (store->check({keys::full(k, r)})) return true;
    if (Clock::now() < next_claims_check || claims_in_flight > 0) return false;
    next_claims_check = Clock::now() + Milliseconds(100);
    std::vector<std::string> claims;
    uint64_t first = static_cast<uint64_t>(r) * opt.round_microbatches;
    for (int j = 0; j < opt.round_microbatches; ++j) claims.push_back(keys::claim(k, r, first + j));
    if (!store->check(claims)) return false;
    store->set(keys::full(k, r), "1");
    return true;
  }

  void run(const std::atomic<bool>& stop) {
    // The lease is renewed on a thread of its own: averaging across a WAN can outlast a lease,
    // and a replica that stopped announcing while it averaged would drop out of every view.
    std::atomic<bool> done{false};
    std::exception_ptr lease_error;
    std::thread keeper([&] {
      try {
        while (!done) {
          announce();
          for (auto next = Clock::now() + opt.announce_every; !done && Clock::now() < next;)
            std::this_thread::sleep_for(Milliseconds(10));
        }
      } catch (...) {
        lease_error = std::current_exception();
        done = true;
      }
    });
    {
      struct Join {
        std::atomic<bool>& done;
        std::thread& keeper;
        ~Join() {  // at the end of the loop, also when it throws
          done = true;
          keeper.join();
        }
      } join{done, keeper};
      schedule_rebalance();
      while (!stop && !stopping && !done) {
        if (!moving && round_full(stage, round)) average();
        if (opt.rebalance && !moving && Clock::now() >= next_rebalance) plan_rebalance();
        if (pending_move >= 0) finish_move();
        std::this_thread::sleep_for(Milliseconds(2));
      }
    }
    if (lease_error) std::rethrow_exception(lease_error);
  }
};

StageServer::StageServer(ServerOptions options, std::shared_ptr<Registry> registry)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(registry))) {
  auto& im = *impl_;
  if (im.opt.stage < 0 || im.opt.stage >= im.opt.model.stages)
    throw InvalidArgumentError("swarm: stage " + std::to_string(im.opt.stage) + " of a " +
                               std::to_string(im.opt.model.stages) + "-stage model");
  if (im.opt.averaging_codec != Codec::None)
    im.averager = std::make_unique<CompressedAverager>(im.opt.averaging_codec);
  im.rpc = std::make_unique<RpcServer>(
      im.opt.host, im.opt.port, [&im](Message&& request) { return im.handle(std::move(request)); });
  im.address = im.opt.host + ":" + std::to_string(im.rpc->port());
  im.measure_speed();
  im.adopt_stage(im.opt.stage);
  im.announce();
  log(im.opt.id, "serving stage " + std::to_string(im.stage.load()) + " at " + im.address +
                     " from round " + std::to_string(im.round.load()));
}

StageServer::~StageServer() { stop(); }

void StageServer::run(const std::atomic<bool>& stop) { impl_->run(stop); }

void StageServer::stop() {
  if (impl_->stopping.exchange(true)) return;
  impl_->round_cv.notify_all();
  try {
    impl_->registry->withdraw(impl_->opt.id);
  } catch (const Error&) {
  }
  impl_->rpc->stop();
}

uint16_t StageServer::port() const { return impl_->rpc->port(); }

ServerStats StageServer::stats() const {
  std::lock_guard<std::mutex> lock(impl_->model_mu);
  ServerStats s = impl_->counters;
  s.stage = impl_->stage;
  s.round = impl_->round;
  {
    std::lock_guard<std::mutex> rate_lock(impl_->rate_mu);
    s.throughput = impl_->throughput;
  }
  return s;
}

}  // namespace shoal::swarm
