// Fitting a ClusterModel to measurements: shoal-bench output files (its nccl-tests table or
// its --json) give (collective, algorithm, ranks, transport, size, time) points; the fit
// finds, per transport, the latency, the seconds per byte moved, reduced and copied
// that make the simulator's times closest to the measured ones (least squares of the
// relative error; docs/scale.md).
#pragma once

#include <string>
#include <vector>

#include "algorithms/schedule.hpp"
#include "sim/model.hpp"

namespace shoal::sim {

struct Measurement {
  std::string file;
  algorithms::Collective collective = algorithms::Collective::all_reduce;
  std::string algorithm;  // a registry row of the collective
  std::string transport;  // "shm" (one host, shared memory), "tcp" (loopback) or "net" (hosts > 1)
  int ranks = 0, hosts = 1;
  uint64_t size = 0;  // nccl-tests size (bytes)
  uint64_t chunk_bytes = 512 << 10;
  DataType dtype = DataType::float32;
  double seconds = 0;    // measured: the lesser of out of place and in place
  double predicted = 0;  // filled by calibrate()
};

/// Reads a shoal-bench table or --json file. `algorithm` names the row that ran (shoal-bench
/// --algo), "" for the first row. Throws InvalidArgumentError naming the file and line.
std::vector<Measurement> read_bench_file(const std::string& path, const std::string& algorithm);

/// Keeps one point per (collective, algorithm, transport, ranks, hosts, chunk, dtype, size): the
/// least time of the repeated runs (on a shared machine noise only ever adds time; several
/// files of the same sweep give the best of their rounds, as shoal-tune's --rounds do).
std::vector<Measurement> best_of_repeats(const std::vector<Measurement>& points);

/// The model of a measurement's job: one host of `ranks` ranks on shared memory; with tcp
/// (loopback: no wire, the kernel's copies), one host too, its transfers at the nic_* latency
/// and rate, all sharing that rate (no token bucket); with net, `hosts` hosts of one NIC
/// (the base model's bucket, if any: the emulated cluster's tbf).
ClusterModel job_model(const Measurement& m, const ClusterModel& base);

struct Fit {
  std::string transport;
  double latency = 0, seconds_per_byte = 0, reduce_cost = 0, copy_cost = 0;
  double median_error = 0, max_error = 0;  // |predicted - measured| / measured
  int points = 0;
  int outliers = 0;  // points the final fit left out (error above max(25%, 3 x the first median))
};

/// Fits every transport present in `points` (predictions written back into them) and returns
/// the fits; `model` gets intra_* from shm, nic_* from net (else tcp), reduce and copy cost from
/// the last fit (shm preferred). `cores`: the CPU cores the measured ranks shared (all on one
/// machine, as here, the emulated cluster included; 0: a core per rank). On one host a point of
/// p > cores ranks takes its time on a core per rank plus every rank's CPU work in the call
/// (latencies, per-byte copy and reduction, shared memory's transfers: the ranks' own copies)
/// over the cores, Brent's bound; loopback TCP's one rate, shared by every transfer (job_model),
/// is already the cores' total and adds no work. Across hosts ("net") its CPU work is stretched
/// max(1, p / cores) instead, the network's bandwidth excepted.
std::vector<Fit> calibrate(std::vector<Measurement>& points, ClusterModel& model,
                           int iterations = 8, int cores = 0);

/// Predicted seconds of one measurement's call on `model` (through job_model), on `cores`
/// shared cores as calibrate() counts them.
double predict(const Measurement& m, const ClusterModel& model, int cores = 0);

}  // namespace shoal::sim
