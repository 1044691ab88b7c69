#include "swarm/train/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shoal/error.hpp"
#include "swarm/net/router.hpp"
#include "swarm/net/rpc.hpp"
#include "swarm/train/keys.hpp"
#include "swarm/train/tensors.hpp"

namespace shoal::swarm {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
}  // namespace

struct Trainer::Impl {
  TrainerOptions opt;
  std::shared_ptr<Registry> registry;
  std::shared_ptr<Store> store;
  ByteCorpus corpus;
  int stages;

  std::mutex route_mu;    // routers, pipelines, refresh time
  std::mutex refresh_mu;  // one registry read at a time, outside route_mu
  std::vector<Router> forward_routers, backward_routers;
  Router& router(int k, bool backward) {
    return (backward ? backward_routers : forward_routers)[k];
  }
  std::vector<std::vector<Router::Replica>> pipelines;  // static: [pipeline][stage]
  Clock::time_point refreshed{};

  std::mutex stats_mu;
  TrainerStats counters;
  std::atomic<bool> failed{false};
  std::string error_text;
  ErrorCode error_code = ErrorCode::Internal;

  Impl(TrainerOptions o, std::shared_ptr<Registry> r)
      : opt(std::move(o)),
        registry(std::move(r)),
        store(registry->rendezvous()),
        corpus(opt.corpus),
        stages(opt.model.stages),
        forward_routers(stages),
        backward_routers(stages) {
    if (opt.id.empty()) opt.id = "trainer-" + std::to_string(::getpid());
  }

  std::vector<Router::Replica> replicas_of(const std::vector<PeerRecord>& peers, int k) {
    std::vector<Router::Replica> out;
    for (auto& p : peers)
      if (p.stage == k) out.push_back({p.id, p.address(), p.throughput});
    std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.id < b.id; });
    return out;
  }

  /// Re-reads the registry every 300 ms, or now when `force`d (after a failure). The read is a
  /// few round trips to the registry: the other workers keep routing on the replicas they have
  /// meanwhile, and only one reads at a time (a forced read waits for it).
  void refresh(bool force) {
    std::unique_lock<std::mutex> reading(refresh_mu, std::defer_lock);
    if (force) {
      reading.lock();
    } else {
      if (!reading.try_lock()) return;
      std::lock_guard<std::mutex> lock(route_mu);
      if (Clock::now() - refreshed < std::chrono::milliseconds(300)) return;
    }
    auto peers = registry->peers();
    std::lock_guard<std::mutex> lock(route_mu);
    for (int k = 0; k < stages; ++k) {
      auto replicas = replicas_of(peers, k);
      forward_routers[k].set_replicas(replicas);
      backward_routers[k].set_replicas(replicas);
    }
    refreshed = Clock::now();
  }

  /// Waits until every stage has a replica; the static baseline then fixes its pipelines.
  void wait_for_swarm(const std::atomic<bool>& stop) {
    auto deadline = Clock::now() + opt.give_up;
    while (!stop) {
      auto peers = registry->peers();
      size_t fewest = SIZE_MAX;
      for (int k = 0; k < stages; ++k) fewest = std::min(fewest, replicas_of(peers, k).size());
      if (fewest > 0) {
        if (opt.routing == Routing::static_pipeline) {
          for (size_t i = 0; i < fewest; ++i) {
            pipelines.emplace_back();
            for (int k = 0; k < stages; ++k) pipelines.back().push_back(replicas_of(peers, k)[i]);
          }
        }
        refresh(true);
        return;
      }
      if (Clock::now() > deadline)
        throw TimeoutError(
            "swarm trainer: no replica of some stage registered within the give-up time");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  struct Worker {
    // Its own connection to the rendezvous store: claims and completions are round trips that
    // would otherwise queue behind every other worker's.
    std::shared_ptr<Store> store;
    std::map<std::string, std::unique_ptr<RpcClient>> clients;
  };

  RpcClient& client_for(Worker& w, const Router::Replica& r) {
    auto& c = w.clients[r.address];
    if (!c || !c->usable()) {
      auto [host, port] = split_address(r.address);
      c = std::make_unique<RpcClient>(host, port, std::chrono::milliseconds(2000));
    }
    return *c;
  }

  static size_t payload_bytes(const Message& m) {
    size_t n = 0;
    for (auto& t : m.tensors) n += t.bytes;
    return n;
  }

  /// One request to some replica of stage `k`, retried elsewhere until it succeeds (swarm) or
  /// failing at once (static pipeline).
  Message call_stage(Worker& w, int k, bool backward, const Message& request, uint64_t mb) {
    double task = static_cast<double>(opt.micro_batch);
    auto start = Clock::now();
    for (int attempt = 0;; ++attempt) {
      if (failed) throw AbortedError("swarm trainer: stopping after another micro-batch failed");
      std::optional<Router::Replica> replica;
      if (opt.routing == Routing::static_pipeline) {
        replica = pipelines[mb % pipelines.size()][k];
      } else {
        refresh(attempt > 0);
        std::lock_guard<std::mutex> lock(route_mu);
        replica = router(k, backward).choose(task);
      }
      if (!replica) {
        if (seconds_since(start) > std::chrono::duration<double>(opt.give_up).count())
          throw TimeoutError(
              "swarm trainer: no live replica of stage " + std::to_string(k) + " for " +
              std::to_string(
                  std::chrono::duration_cast<std::chrono::seconds>(opt.give_up).count()) +
              " s");
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      auto t0 = Clock::now();
      try {
        Message reply = client_for(w, *replica).call(request, opt.request_timeout);
        {
          std::lock_guard<std::mutex> lock(route_mu);
          router(k, backward).report_success(replica->id, task, seconds_since(t0));
        }
        std::lock_guard<std::mutex> lock(stats_mu);
        ++counters.requests;
        counters.bytes_sent += payload_bytes(request);
        counters.bytes_received += payload_bytes(reply);
        return reply;
      } catch (const Error& e) {
        w.clients.erase(replica->address);
        {
          std::lock_guard<std::mutex> lock(stats_mu);
          ++counters.failures;
        }
        if (opt.routing == Routing::static_pipeline)
          throw PeerFailureError("static pipeline: stage " + std::to_string(k) + " replica " +
                                 replica->id + " failed (" + e.what() +
                                 "); a fixed pipeline cannot re-route");
        std::fprintf(stderr, "[%s] stage %d %s on %s failed (%s): retrying elsewhere\n",
                     opt.id.c_str(), k, backward ? "backward" : "forward", replica->id.c_str(),
                     e.what());
        {
          std::lock_guard<std::mutex> lock(route_mu);
          router(k, backward).report_failure(replica->id, task);
        }
        std::lock_guard<std::mutex> lock(stats_mu);
        ++counters.retries;
      }
    }
  }

  Message request(MsgType type, int k, uint32_t round, uint64_t mb) {
    Message m;
    m.type = type;
    m.stage = static_cast<uint32_t>(k);
    m.round = round;
    m.microbatch = mb;
    return m;
  }

  /// Drives micro-batch mb through every stage, forward then backward; returns its loss.
  double process(Worker& w, uint64_t mb, uint32_t round) {
    auto batch = corpus.micro_batch(mb, opt.micro_batch, opt.model.seq_len, opt.data_seed);
    std::vector<torch::Tensor> inputs(stages);
    inputs[0] = batch.tokens;
    for (int k = 0; k + 1 < stages; ++k) {
      auto m = request(MsgType::Forward, k, round, mb);
      m.tensors.push_back(to_wire(inputs[k], opt.codec));
      auto reply = call_stage(w, k, false, m, mb);
      if (reply.tensors.size() != 1) throw InternalError("swarm: forward reply without an output");
      inputs[k + 1] = from_wire(reply.tensors[0]);
    }
    torch::Tensor grad;
    double loss = 0;
    for (int k = stages - 1; k >= 0; --k) {
      auto m = request(MsgType::Backward, k, round, mb);
      m.tensors.push_back(to_wire(inputs[k], opt.codec));
      m.tensors.push_back(k == stages - 1 ? to_wire(batch.targets) : to_wire(grad, opt.codec));
      auto reply = call_stage(w, k, true, m, mb);
      if (k == stages - 1) loss = std::stod(reply.text);
      if (k > 0) {
        if (reply.tensors.size() != 1)
          throw InternalError("swarm: backward reply without an input gradient");
        grad = from_wire(reply.tensors[0]);
      }
    }
    std::lock_guard<std::mutex> lock(stats_mu);
    ++counters.microbatches;
    return loss;
  }

  /// Posts micro-batch mb of round r as finished (its loss, its samples) and, given a round,
  /// claims the next index of that round: one round trip to the store for all of it, as every
  /// micro-batch pays it. A micro-batch is counted once however often it was driven
  /// (recover_round): the second posting takes its figures back. Returns the claimed index.
  std::optional<int64_t> finish(Worker& w, uint32_t r, uint64_t mb, double loss,
                                std::optional<uint32_t> claim_round) {
    const int64_t loss_micro = std::llround(loss * 1e6);
    std::vector<std::pair<std::string, int64_t>> adds{{keys::finished(r, mb), 1},
                                                      {keys::loss_sum(r), loss_micro},
                                                      {keys::loss_count(r), 1},
                                                      {keys::kSamplesDone, opt.micro_batch}};
    if (claim_round) adds.emplace_back(keys::claimed(*claim_round), 1);
    const auto values = w.store->add_all(adds);
    if (values[0] != 1)
      w.store->add_all({{keys::loss_sum(r), -loss_micro},
                        {keys::loss_count(r), -1},
                        {keys::kSamplesDone, -opt.micro_batch}});
    if (!claim_round) return std::nullopt;
    return values.back() - 1;
  }

  /// Blocks until every stage has stepped round r (its first replica to step says so). A round
  /// that makes no progress for stall_timeout lost micro-batches with a trainer that died
  /// holding them: this trainer drives every unfinished one again (servers count each
  /// micro-batch once per stage, so one that was merely slow is not counted twice).
  void wait_for_step(uint32_t r, const std::atomic<bool>& stop, Worker& w) {
    std::vector<std::string> stepped;
    for (int k = 0; k < stages; ++k) stepped.push_back(keys::stepped(k, r));
    auto deadline = Clock::now() + opt.give_up;
    auto stall_check = Clock::now() + opt.stall_timeout;
    int64_t progress = w.store->add(keys::loss_count(r), 0);
    int epoch = 0;
    while (!stop && !failed && !w.store->check(stepped)) {
      if (Clock::now() > deadline)
        throw TimeoutError("swarm trainer: round " + std::to_string(r) +
                           " was not stepped by every stage within " + "the give-up time");
      if (Clock::now() > stall_check) {
        int64_t now = w.store->add(keys::loss_count(r), 0);
        if (now == progress) recover_round(w, r, ++epoch);
        progress = now;
        stall_check = Clock::now() + opt.stall_timeout;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  void recover_round(Worker& w, uint32_t r, int epoch) {
    for (int j = 0; j < opt.round_microbatches; ++j) {
      uint64_t mb = static_cast<uint64_t>(r) * opt.round_microbatches + j;
      if (w.store->check({keys::finished(r, mb)})) continue;
      // One trainer per stalled micro-batch and stall epoch.
      if (w.store->add(keys::reclaim(r, mb, epoch), 1) != 1) continue;
      std::fprintf(stderr, "[%s] round %u stalled: driving micro-batch %lu again\n", opt.id.c_str(),
                   r, static_cast<unsigned long>(mb));
      {
        std::lock_guard<std::mutex> lock(stats_mu);
        ++counters.recovered;
      }
      finish(w, r, mb, process(w, mb, r), std::nullopt);
    }
  }

  /// Claims micro-batches round by round: index j < round_microbatches of round r is micro-batch
  /// r * round_microbatches + j. A claim past the end of a round means "go on to the next", so
  /// no index is ever claimed and then abandoned, however many trainers come and go.
  void work(const std::atomic<bool>& stop) {
    Worker w;
    try {
      w.store = registry->connect_rendezvous();
      uint32_t round = 0;
      std::optional<int64_t> claimed;  // an index of `round` the last posting claimed
      while (!stop && !failed && round < static_cast<uint32_t>(opt.rounds)) {
        int64_t j = claimed ? *claimed : w.store->add(keys::claimed(round), 1) - 1;
        claimed.reset();
        if (j >= opt.round_microbatches) {
          ++round;
          continue;
        }
        uint32_t staleness = opt.delayed_updates ? 1 : 0;
        if (round > staleness) wait_for_step(round - 1 - staleness, stop, w);
        if (stop || failed) break;
        const uint64_t mb = static_cast<uint64_t>(round) * opt.round_microbatches + j;
        claimed = finish(w, round, mb, process(w, mb, round), round);
      }
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(stats_mu);
      if (!failed.exchange(true)) {
        error_text = e.what();
        error_code = e.code();
      }
    }
  }
};

Trainer::Trainer(TrainerOptions options, std::shared_ptr<Registry> registry)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(registry))) {}

Trainer::~Trainer() = default;

void Trainer::run(const std::atomic<bool>& stop) {
  auto& im = *impl_;
  im.wait_for_swarm(stop);
  std::vector<std::thread> workers;
  for (int i = 0; i < std::max(1, im.opt.inflight); ++i)
    workers.emplace_back([&] { im.work(stop); });
  for (auto& t : workers) t.join();
  im.store->add(keys::kBytesSent,
                static_cast<int64_t>(im.counters.bytes_sent + im.counters.bytes_received));
  if (im.failed) throw_error(im.error_code, im.error_text);
  // The swarm is done once the last round is stepped everywhere. With delayed updates the
  // round before it may still be unstepped: waiting on it first lets a stall there be redone.
  if (!stop && !im.failed) {
    Impl::Worker w;
    w.store = im.store;
    int last = im.opt.rounds - 1;
    for (int r = std::max(0, last - (im.opt.delayed_updates ? 1 : 0)); r <= last; ++r)
      im.wait_for_step(static_cast<uint32_t>(r), stop, w);
  }
}

TrainerStats Trainer::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mu);
  return impl_->counters;
}

}  // namespace shoal::swarm
