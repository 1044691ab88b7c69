// Stochastic wiring (SWARM, sec. 3.1): per stage, a trainer keeps every replica's virtual time;
// the next task goes to the replica with the least, which is then charged
// task_size / throughput, throughput being an exponential moving average of the rates measured
// on that replica's replies. Replicas get work in proportion to their speed, a new replica
// enters at the current minimum so it is tried at once, and a failing one is banned for
// ban_base * 2^(failures - 1) (at most ban_max) before it is tried again. Forward and backward
// use one router each, so they are balanced independently. Not thread-safe: the trainer locks.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace shoal::swarm {

using SteadyClock = std::chrono::steady_clock;

struct RouterOptions {
  double ema_alpha = 0.2;  // weight of the newest measured rate
  std::chrono::milliseconds ban_base{500};
  std::chrono::milliseconds ban_max{30000};
};

class Router {
 public:
  struct Replica {
    std::string id, address;
    double announced_throughput = 0;  // the server's own figure, until we measure one
  };
  explicit Router(RouterOptions options = {});

  /// The live replicas (from the registry). New ones enter at the current minimum virtual time;
  /// missing ones are forgotten (a returning one starts afresh).
  void set_replicas(const std::vector<Replica>& replicas);
  /// The replica for a task of `task_size` (samples), charged in advance; nullopt when none is
  /// live and unbanned.
  std::optional<Replica> choose(double task_size, SteadyClock::time_point now = SteadyClock::now());
  /// A reply came after `seconds` for `task_size`: folds the rate into the EMA, clears failures.
  void report_success(const std::string& id, double task_size, double seconds);
  /// The call failed or timed out: bans the replica with exponential back-off and takes back
  /// its charge so its virtual time does not count work it never did.
  void report_failure(const std::string& id, double task_size,
                      SteadyClock::time_point now = SteadyClock::now());

  double throughput(const std::string& id) const;  // current estimate, 0 if unknown
  double virtual_time(const std::string& id) const;
  bool banned(const std::string& id, SteadyClock::time_point now = SteadyClock::now()) const;
  size_t size() const { return replicas_.size(); }

 private:
  struct State {
    Replica replica;
    double vtime = 0;
    double rate = 0;  // measured EMA (samples/s); 0 until the first reply
    int failures = 0;
    SteadyClock::time_point banned_until{};
  };
  double estimate(const State& s) const;
  double min_vtime() const;
  RouterOptions options_;
  std::map<std::string, State> replicas_;
};

}  // namespace shoal::swarm
