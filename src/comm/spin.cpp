#include "comm/spin.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "core/config.hpp"

namespace shoal::comm {

namespace {

// Fixed budget in ns, or -1 for auto.
int64_t fixed_budget_ns() {
  static const int64_t fixed = [] {
    const auto us = config::get_int_or_auto("SHOAL_SPIN_US");
    return us ? std::max<int64_t>(0, *us) * 1000 : int64_t{-1};
  }();
  return fixed;
}

const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
std::atomic<bool> ranks_share_cores{false};  // in any of this process's communicators (note_host)

// Whether a communicator has more ranks on this host than cores for them, or more tasks are
// runnable than it has CPUs (the fourth field of /proc/loadavg, "running/total", read at most every
// 10 ms by whichever thread asks first): then a thread that polls holds a core that another rank,
// or the process's own compute, is waiting for.
bool cores_contended() {
  if (ranks_share_cores.load(std::memory_order_relaxed)) return true;
  static std::atomic<int64_t> next_read_ns{0};
  static std::atomic<bool> contended{false};
  const int64_t now = monotonic_ns();
  int64_t due = next_read_ns.load(std::memory_order_relaxed);
  if (now >= due &&
      next_read_ns.compare_exchange_strong(due, now + 10'000'000, std::memory_order_relaxed)) {
    long running = 0;
    if (FILE* f = std::fopen("/proc/loadavg", "r")) {
      double l1, l5, l15;
      if (std::fscanf(f, "%lf %lf %lf %ld/", &l1, &l5, &l15, &running) != 4) running = 0;
      std::fclose(f);
    }
    contended.store(running > cpus, std::memory_order_relaxed);
  }
  return contended.load(std::memory_order_relaxed);
}

// Exponentially smoothed wake-up cost (weight 1/8 per sample), shared by the process's threads.
std::atomic<int64_t> wake_cost_ns{0};

}  // namespace

void note_host(int ranks, int cores) {
  if (ranks > cores) ranks_share_cores.store(true, std::memory_order_relaxed);
}

int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

std::chrono::nanoseconds spin_budget() {
  const int64_t fixed = fixed_budget_ns();
  if (fixed >= 0) return std::chrono::nanoseconds(fixed);
  if (cores_contended()) return kMinSpin;
  return budget_for_wake_cost(measured_wake_cost());
}

std::chrono::nanoseconds budget_for_wake_cost(std::chrono::nanoseconds cost) {
  // Twice the wake-up cost: a peer that slept is back (and publishes) before we give up, so two
  // ranks that wait on each other do not sleep in turn at every call.
  return std::clamp<std::chrono::nanoseconds>(2 * cost, kMinSpin, kMaxSpin);
}

void note_wake_latency(int64_t latency_ns) {
  // A wake-up later than the cap says the sleeper waited for a core, not for the wake itself:
  // counted as the cap, so that one long preemption does not hold the budget up for long.
  const int64_t sample = std::clamp<int64_t>(latency_ns, 0, kMaxSpin.count() * 1000);
  int64_t old = wake_cost_ns.load(std::memory_order_relaxed);
  const int64_t next = old == 0 ? sample : old + (sample - old) / 8;
  wake_cost_ns.compare_exchange_strong(old, next, std::memory_order_relaxed);
}

std::chrono::nanoseconds measured_wake_cost() {
  return std::chrono::nanoseconds(wake_cost_ns.load(std::memory_order_relaxed));
}

}  // namespace shoal::comm
