// How long a waiting thread polls before it sleeps (SHOAL_SPIN_US): fixed, or (auto) derived
// from what a sleep has cost this process, so that a wait is never cheaper asleep than polling.
#pragma once

#include <chrono>
#include <cstdint>

namespace shoal::comm {

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process of a host, so a time stamped
/// by one rank in shared memory is comparable by another.
int64_t monotonic_ns();

/// The current spin budget. A number in SHOAL_SPIN_US is used as it is (0: sleep at once); auto
/// (the default) is twice the measured wake-up cost, between kMinSpin and kMaxSpin, and kMinSpin
/// where ranks share cores (note_host) or while the calling thread queues for a CPU
/// (thread_queues_for_cpu: polling longer would hold a core that another rank or the process's
/// own compute threads wait for).
std::chrono::nanoseconds spin_budget();

/// Whether the calling thread spent more than a tenth of its runnable time queued for a CPU
/// (/proc/thread-self/schedstat, over windows of at least 10 ms of runnable time, read at most
/// every 10 ms); where schedstat is missing, whether more tasks are runnable than CPUs
/// (/proc/loadavg).
bool thread_queues_for_cpu();

/// A communicator of this process has `ranks` ranks on this host and `cores` CPUs for them
/// (Topology::local_cores): with more ranks than cores, the auto budget stays kMinSpin.
void note_host(int ranks, int cores);

/// A thread that slept until a peer woke it ran again `latency_ns` after the peer's wake call:
/// one sample of the wake-up cost (smoothed; what the scheduler makes a sleeper pay here, on an
/// idle core of a virtual machine or behind a busy process).
void note_wake_latency(int64_t latency_ns);

/// The auto budget for a wake-up cost, on cores nobody else waits for: twice the cost, between
/// kMinSpin and kMaxSpin.
std::chrono::nanoseconds budget_for_wake_cost(std::chrono::nanoseconds cost);

/// The smoothed wake-up cost so far (0 before any sample), for shoal-info and tests.
std::chrono::nanoseconds measured_wake_cost();

constexpr std::chrono::microseconds kMinSpin{50}, kMaxSpin{2000};

}  // namespace shoal::comm
