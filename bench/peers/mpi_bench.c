/* mpi_bench: shoal-bench's measurement (nccl-tests' method and output) over plain MPI-3
 * collectives, so that Open MPI or MPICH can be compared with shoal line by line.
 *
 *   mpirun -np 2 build/peers/mpi_bench all_reduce -b 8 -e 64M -f 2 -n 20 -w 5 -c 1
 *
 * Which transport Open MPI uses is chosen on the mpirun line (bench/compare.sh passes
 * --mca pml ob1 --mca btl vader,self for shared memory, --mca btl tcp,self for TCP). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_tests_driver.h" /* tools/bench/: the measurement shared with shoal-bench */

static void mpi_barrier(void* ctx) {
  (void)ctx;
  MPI_Barrier(MPI_COMM_WORLD);
}

static double mpi_reduce_double(void* ctx, double v, int op) {
  (void)ctx;
  double out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE,
                op == 1   ? MPI_SUM
                : op == 2 ? MPI_MIN
                          : MPI_MAX,
                MPI_COMM_WORLD);
  return out;
}

static long long mpi_sum_ll(void* ctx, long long v) {
  (void)ctx;
  long long out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return out;
}

static int mpi_has_inplace(void* ctx, Coll c) {
  (void)ctx;
  (void)c;
  return 1; /* MPI_IN_PLACE exists for all six; MPI_Bcast is in place by nature */
}

static int g_rank;

/* MPI counts are int: sizes up to 8 GiB of floats fit. */
static void mpi_run(void* ctx, Coll c, const void* send, void* recv, size_t count, int root,
                    int in_place, int iter) {
  (void)ctx;
  (void)iter;
  const int n = (int)count;
  const void* sbuf = in_place ? MPI_IN_PLACE : (const void*)send;
  switch (c) {
    case COLL_ALL_REDUCE:
      MPI_Allreduce(sbuf, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case COLL_ALL_GATHER:
      /* in place: this rank's block already sits at recv + rank*count */
      if (in_place)
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, MPI_FLOAT, MPI_COMM_WORLD);
      else
        MPI_Allgather(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case COLL_REDUCE_SCATTER:
      /* in place: the input is the whole buffer at send (== start of the receive buffer) and
       * MPI leaves the result at its start */
      if (in_place)
        MPI_Reduce_scatter_block(MPI_IN_PLACE, (void*)send, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else
        MPI_Reduce_scatter_block(send, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case COLL_BROADCAST:
      /* out of place: the root sends straight from its send buffer */
      MPI_Bcast(!in_place && g_rank == root ? (void*)send : (void*)recv, n, MPI_FLOAT, root,
                MPI_COMM_WORLD);
      break;
    case COLL_REDUCE:
      if (in_place && g_rank != root)
        MPI_Reduce(recv, NULL, n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
      else
        MPI_Reduce(sbuf, recv, n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
      break;
    case COLL_ALL_TO_ALL:
      if (in_place)
        MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, MPI_FLOAT, MPI_COMM_WORLD);
      else
        MPI_Alltoall(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    default:
      break;
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  g_rank = rank;
  /* errors abort the job with MPI's message: a benchmark has nothing to recover */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

  BenchOptions o;
  int rc = pb_parse_args(argc, argv, rank, &o);
  if (rc != 0) {
    MPI_Finalize();
    return rc < 0 ? 2 : 0;
  }
  if ((double)(o.max_bytes / sizeof(float)) > 2147483647.0) {
    if (rank == 0) fprintf(stderr, "mpi_bench: -e above 8 GiB exceeds MPI's int counts\n");
    MPI_Finalize();
    return 2;
  }

  char version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int len = 0;
  MPI_Get_library_version(version, &len);
  /* first line only: Open MPI's is "Open MPI v4.1.4, package: ..., ident: ..., repo rev: ..." */
  for (int i = 0; i < len; i++)
    if (version[i] == '\n' || version[i] == ',') {
      version[i] = '\0';
      break;
    }
  char details[128];
  snprintf(details, sizeof details, "MPI %d.%d collectives; transport as chosen by the launcher",
           MPI_VERSION, MPI_SUBVERSION);

  PeerOps ops;
  memset(&ops, 0, sizeof ops);
  ops.name = "mpi_bench";
  ops.library = version;
  ops.details = details;
  ops.rank = rank;
  ops.size = size;
  ops.rs_inplace = RS_INPLACE_AT_START;
  ops.barrier = mpi_barrier;
  ops.reduce_double = mpi_reduce_double;
  ops.sum_ll = mpi_sum_ll;
  ops.has_inplace = mpi_has_inplace;
  ops.run = mpi_run;
  rc = peer_bench_main(&o, &ops);
  MPI_Finalize();
  return rc;
}
