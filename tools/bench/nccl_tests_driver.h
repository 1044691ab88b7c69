/* The nccl-tests driver (nccl_tests_driver.c) shared by shoal-bench (tools/shoal_bench.cpp) and the
 * peer harnesses (bench/peers/mpi_bench.c, gloo_bench.cpp): everything that is not about the
 * library under test -- flags, sizes, per-rank counts, the per-iteration buffer shift, warmup,
 * timing, the bandwidth formulas and the output -- written once, following nccl-tests
 * (src/common.cu and the per-collective files), so that every harness measures alike and their
 * tables compare line by line.
 *
 * A harness (a "peer": the library under test) provides a PeerOps table (barrier, two tiny
 * reductions over ranks, "run this collective once") and calls peer_bench_main(). Left at
 * zero, the optional fields give the peers' behaviour: float elements, sum, the small-integer
 * float fill and one checked call. shoal-bench fills them in for its data types and
 * operators, its own fill and check, every-iteration checking and its JSON rows.
 * Plain C99 that also compiles as C++. */
#ifndef SHOAL_TOOLS_BENCH_NCCL_TESTS_DRIVER_H
#define SHOAL_TOOLS_BENCH_NCCL_TESTS_DRIVER_H

#include <getopt.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  COLL_ALL_REDUCE,
  COLL_ALL_GATHER,
  COLL_REDUCE_SCATTER,
  COLL_BROADCAST,
  COLL_REDUCE,
  COLL_ALL_TO_ALL,
  COLL_COUNT_
} Coll;

/* The collectives' names, as the command lines take them. */
extern const char* const kCollNames[COLL_COUNT_];

typedef struct {
  Coll coll;
  size_t min_bytes, max_bytes, step_bytes, step_factor;
  int iters, warmup, check, root, average; /* average: 0=rank0 1=avg 2=min 3=max over ranks */
  int warmup_each;      /* -W: warmup iterations at every size, before it is timed */
  int percentiles;      /* -p 1: also each iteration timed, p50 and p99 over them (see pb_laps) */
  const char* datatype; /* -d as given (default "float"); the harness interprets it */
  const char* op;       /* -o as given (default "sum") */
} BenchOptions;

/* What a harness adds to the flags (pb_parse_args_ex); NULL fields keep the peers' flags. */
typedef struct {
  int (*accept_datatype)(const char* name); /* NULL: float only */
  int (*accept_op)(const char* name);       /* NULL: sum only */
  const char* usage_datatype_op;            /* replaces the usage's -d and -o lines */
  const char* usage_extra;                  /* appended to the usage */
  /* extra long options (up to 8, ended by a zeroed entry), their val >= 256, and handle()
   * called for each: returns 0, or -1 after printing why (on rank 0) */
  const struct option* longopts;
  int (*handle)(void* ctx, int val, const char* arg, int rank);
  void* ctx;
} PbParseExt;

/* What one size needs, in elements (nccl-tests' getCollByteCount, no 16-byte alignment). */
typedef struct {
  size_t send_count, recv_count, param_count, send_inplace_offset, recv_inplace_offset;
} CollCounts;

/* Where a peer's in-place reduce_scatter leaves this rank's block: nccl-tests expects it at
 * recvbuf + rank*count, MPI_Reduce_scatter_block(MPI_IN_PLACE) and Gloo's halving-doubling
 * leave it at the start of the buffer. */
typedef enum { RS_INPLACE_AT_RANK_OFFSET, RS_INPLACE_AT_START } RsInplaceLayout;

/* One line of the table, for PeerOps.report (called on every rank; wrong is the global sum,
 * -1 when not checked; available is 0 for an N/A in-place column). */
typedef struct {
  size_t bytes, count;
  const char* type;
  const char* redop;
  int root, in_place, available;
  double sec, algbw, busbw;
  long long wrong;
  double p50_sec, p99_sec; /* with -p 1 (else 0): over the iterations, each the slowest rank's */
} PbRow;

/* Where one checked call's data lives, for PeerOps.init_data/check_data: send and recv are the
 * pointers the call gets (in place: both inside the receive buffer), at this call's shift. */
typedef struct {
  Coll coll;
  int in_place, rep, root, rank, nranks;
  CollCounts k;
  void* send;
  void* recv;
} PbData;

typedef struct {
  const char* name;    /* "mpi_bench" */
  const char* library; /* "Open MPI v4.1.4, ..." */
  const char* details; /* transport, algorithm: one line, or NULL */
  int rank, size;
  RsInplaceLayout rs_inplace;
  void* ctx;
  void (*barrier)(void* ctx);
  double (*reduce_double)(void* ctx, double v, int op); /* op: 1=sum 2=min 3=max */
  long long (*sum_ll)(void* ctx, long long v);
  int (*has_inplace)(void* ctx, Coll c); /* 0: in-place columns print N/A */
  /* Runs the collective once on count = param_count elements. For in_place, send/recv are
   * the nccl-tests in-place pointers into the receive buffer. iter lets a peer vary tags. */
  void (*run)(void* ctx, Coll c, const void* send, void* recv, size_t count, int root, int in_place,
              int iter);
  /* Called once per (size, in_place) before timing, e.g. to build a persistent algorithm;
   * may be NULL. send_base/recv_base are the unshifted buffers. */
  void (*prepare)(void* ctx, Coll c, void* send_base, void* recv_base, size_t count, int in_place);
  /* Whether run() honours a shifted buffer; 0 keeps the pointers at offset 0 (a peer whose
   * algorithm is bound to its buffers at construction). */
  int (*can_shift)(void* ctx, Coll c, int in_place);

  /* ---- optional; zero gives the peers' behaviour ---- */
  size_t elem_size;      /* bytes per element; 0: sizeof(float) */
  const char* type_name; /* type column (nccl-tests' names); NULL: "float" */
  const char* op_name;   /* redop column of reductions; NULL: "sum" */
  const char*
      header; /* first header line after "# "; NULL: "NAME COLL: N ranks on HOST, LIBRARY" */
  /* With -c 1: 0 checks one extra call at offset 0 (nccl-tests); 1 re-runs, after timing, every
   * timed iteration's call at that iteration's offset, each on fresh data, and checks each. */
  int check_every_iter;
  /* Fill the call's inputs (and mark where its result lands) / count this rank's wrong
   * elements after it; rep differs between checked calls. NULL: the float fill below. */
  void (*init_data)(void* ctx, const PbData* d);
  long long (*check_data)(void* ctx, const PbData* d);
  void (*report)(void* ctx, const PbRow* row); /* each line's numbers; may be NULL */
} PeerOps;

/* Parses the nccl-tests flags into `o` (the peers' set: -d float, -o sum), printing the usage or
 * the error on `rank` 0; returns 0, 1 after --help, or -1 on a bad flag. */
int pb_parse_args(int argc, char** argv, int rank, BenchOptions* o);
/* The same with what a harness adds (ext: its data types, operators and long options). */
int pb_parse_args_ex(int argc, char** argv, int rank, BenchOptions* o, const PbParseExt* ext);
/* Runs the sweep of `o` over the peer `ops` and prints the table; returns 0, or 1 when a check
 * found wrong values. */
int peer_bench_main(const BenchOptions* o, const PeerOps* ops);

#ifdef __cplusplus
}
#endif

#endif /* SHOAL_TOOLS_BENCH_NCCL_TESTS_DRIVER_H */
