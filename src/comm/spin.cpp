#include "comm/spin.hpp"

#include <fcntl.h>
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

// Exponentially smoothed wake-up cost (weight 1/8 per sample), shared by the process's threads.
std::atomic<int64_t> wake_cost_ns{0};

// Per thread: its time on a CPU and queued for one (/proc/thread-self/schedstat, in ns), as last
// read, and what they said.
struct QueueWatch {
  int fd = -2;  // -2: not opened yet; -1: no schedstat here
  int64_t next_read_ns = 0, ran_ns = 0, queued_ns = 0;
  bool contended = false;
  ~QueueWatch() {
    if (fd >= 0) close(fd);
  }
};

bool read_schedstat(int fd, int64_t& ran, int64_t& queued) {
  char text[96];
  const ssize_t n = pread(fd, text, sizeof text - 1, 0);
  if (n <= 0) return false;
  text[n] = '\0';
  long long r = 0, q = 0;
  if (std::sscanf(text, "%lld %lld", &r, &q) != 2) return false;
  ran = r;
  queued = q;
  return true;
}

// Without schedstat: more tasks runnable than CPUs (the fourth field of /proc/loadavg,
// "running/total"). It counts the polling threads themselves, so at one rank per core any other
// runnable task trips it.
bool more_runnable_than_cpus() {
  long running = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    double l1, l5, l15;
    if (std::fscanf(f, "%lf %lf %lf %ld/", &l1, &l5, &l15, &running) != 4) running = 0;
    std::fclose(f);
  }
  return running > cpus;
}

}  // namespace

bool thread_queues_for_cpu() {
  thread_local QueueWatch w;
  const int64_t now = monotonic_ns();
  if (now < w.next_read_ns) return w.contended;
  w.next_read_ns = now + 10'000'000;  // read at most every 10 ms
  if (w.fd == -2) w.fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  int64_t ran = 0, queued = 0;
  if (w.fd < 0 || !read_schedstat(w.fd, ran, queued))
    return w.contended = more_runnable_than_cpus();
  // Over at least 10 ms of runnable time (a thread that slept meanwhile keeps its verdict):
  // queued more than a tenth of it. Alone on its core a thread queues for next to nothing;
  // beside one other runnable task, about half the time.
  const int64_t d_ran = ran - w.ran_ns, d_queued = queued - w.queued_ns;
  if (d_ran + d_queued >= 10'000'000) {
    w.contended = d_queued * 10 > d_ran + d_queued;
    w.ran_ns = ran;
    w.queued_ns = queued;
  }
  return w.contended;
}

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
  // More ranks on this host than cores for them, or this thread waits for a CPU when it wants
  // one: polling would hold a core that another rank, or the process's own compute, waits for.
  if (ranks_share_cores.load(std::memory_order_relaxed) || thread_queues_for_cpu()) return kMinSpin;
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
