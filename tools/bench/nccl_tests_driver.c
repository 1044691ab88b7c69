/* See nccl_tests_driver.h. Plain C99 that also compiles as C++ (the peers' build compiles it
 * with each harness's compiler). */
#include "nccl_tests_driver.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char* const kCollNames[COLL_COUNT_] = {"all_reduce", "all_gather", "reduce_scatter",
                                             "broadcast",  "reduce",     "all_to_all"};

static double pb_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static CollCounts pb_counts(Coll c, size_t bytes, int nranks, size_t elem_size) {
  size_t count = bytes / elem_size, n = (size_t)nranks;
  CollCounts k;
  memset(&k, 0, sizeof k);
  switch (c) {
    case COLL_ALL_REDUCE:
    case COLL_BROADCAST:
    case COLL_REDUCE:
      k.send_count = k.recv_count = k.param_count = count;
      break;
    case COLL_ALL_GATHER:
      k.send_count = count / n;
      k.recv_count = (count / n) * n;
      k.param_count = count / n;
      k.send_inplace_offset = count / n;
      break;
    case COLL_REDUCE_SCATTER:
      k.send_count = (count / n) * n;
      k.recv_count = count / n;
      k.param_count = count / n;
      k.recv_inplace_offset = count / n;
      break;
    case COLL_ALL_TO_ALL:
      k.send_count = k.recv_count = (count / n) * n;
      k.param_count = count / n;
      break;
    default:
      break;
  }
  return k;
}

/* nccl-tests' getBw: algbw from the bytes a rank's buffer holds, busbw scaled to what each
 * link carries in the optimal algorithm. */
static void pb_bw(Coll c, size_t param_count, size_t elem_size, double sec, int nranks, double* alg,
                  double* bus) {
  double n = (double)nranks, bytes = (double)(param_count * elem_size);
  double factor = 1.0;
  switch (c) {
    case COLL_ALL_REDUCE:
      factor = 2.0 * (n - 1) / n;
      break;
    case COLL_ALL_GATHER:
    case COLL_REDUCE_SCATTER:
    case COLL_ALL_TO_ALL:
      bytes *= n;
      factor = (n - 1) / n;
      break;
    default:
      break;
  }
  *alg = sec > 0 ? bytes / 1.0e9 / sec : 0.0;
  *bus = *alg * factor;
}

/* Fill pattern: small integers, so that a sum over up to ~10^5 ranks is exact in float. Value
 * of element j (index into the rank's send buffer) on rank r; rep changes it between checks. */
static float pb_val(int r, size_t j, int rep) {
  return (float)((j * 3u + (size_t)r * 5u + (size_t)rep) % 17u);
}

static void pb_fill(float* p, size_t n, float v) {
  for (size_t i = 0; i < n; i++) p[i] = v;
}

typedef struct {
  const BenchOptions* o;
  const PeerOps* ops;
  void *send, *recv;
  float* expected;  /* the default float check's */
  size_t elem;      /* bytes per element */
  size_t buf_bytes; /* bytes in each of send and recv */
  CollCounts k;
  int errors; /* (size, mode) pairs with wrong elements, like nccl-tests' errors[] */
  double bw_sum;
  int bw_count;
  double* laps;     /* -p 1: this size's iteration times, o->iters of them */
  double pct[2][2]; /* -p 1: [in_place][p50, p99] of this size, seconds; <= 0: N/A */
} PbState;

static void* pb_send_ptr(PbState* s, int in_place, size_t shift_bytes) {
  if (!in_place) return (char*)s->send + shift_bytes;
  return (char*)s->recv + shift_bytes + s->k.send_inplace_offset * (size_t)s->ops->rank * s->elem;
}

static void* pb_recv_ptr(PbState* s, int in_place, size_t shift_bytes) {
  if (!in_place) return (char*)s->recv + shift_bytes;
  return (char*)s->recv + shift_bytes + s->k.recv_inplace_offset * (size_t)s->ops->rank * s->elem;
}

/* nccl-tests' startColl shift: a different offset into the max-size buffers each iteration,
 * so that small sizes do not always run hot in cache. */
static size_t pb_shift(PbState* s, int in_place, int iter) {
  const PeerOps* ops = s->ops;
  size_t total = (s->k.send_count > s->k.recv_count ? s->k.send_count : s->k.recv_count) * s->elem;
  size_t steps = total ? s->o->max_bytes / total : 1;
  if (steps == 0) steps = 1;
  size_t shift = total * ((size_t)iter % steps);
  if (ops->can_shift && !ops->can_shift(ops->ctx, s->o->coll, in_place)) shift = 0;
  return shift;
}

/* nccl-tests' startColl: one call at iteration iter's offset. */
static void pb_start(PbState* s, int in_place, int iter) {
  const PeerOps* ops = s->ops;
  size_t p = s->k.param_count;
  if (p == 0) return; /* as nccl-tests' alltoall: nothing to move */
  size_t shift = pb_shift(s, in_place, iter);
  ops->run(ops->ctx, s->o->coll, pb_send_ptr(s, in_place, shift), pb_recv_ptr(s, in_place, shift),
           p, s->o->root, in_place, iter);
}

static PbData pb_data(PbState* s, int in_place, int rep, size_t shift) {
  PbData d;
  memset(&d, 0, sizeof d);
  d.coll = s->o->coll;
  d.in_place = in_place;
  d.rep = rep;
  d.root = s->o->root;
  d.rank = s->ops->rank;
  d.nranks = s->ops->size;
  d.k = s->k;
  d.send = pb_send_ptr(s, in_place, shift);
  d.recv = pb_recv_ptr(s, in_place, shift);
  return d;
}

/* The peers' fill: writes the input at iteration 0's position, and the expected result of
 * this rank. */
static void pb_init_data(PbState* s, int in_place, int rep) {
  const int rank = s->ops->rank, n = s->ops->size, root = s->o->root;
  const size_t p = s->k.param_count;
  float* send = (float*)pb_send_ptr(s, in_place, 0);
  /* sentinel everywhere a result or an in-place input can land (never a pattern value) */
  pb_fill((float*)s->recv, s->k.send_count > s->k.recv_count ? s->k.send_count : s->k.recv_count,
          -1.0f);
  for (size_t j = 0; j < s->k.send_count; j++) send[j] = pb_val(rank, j, rep);
  float* e = s->expected;
  switch (s->o->coll) {
    case COLL_ALL_REDUCE:
    case COLL_REDUCE:
      for (size_t j = 0; j < p; j++) {
        float v = 0;
        for (int r = 0; r < n; r++) v += pb_val(r, j, rep);
        e[j] = v;
      }
      break;
    case COLL_BROADCAST:
      for (size_t j = 0; j < p; j++) e[j] = pb_val(root, j, rep);
      break;
    case COLL_ALL_GATHER:
      for (int r = 0; r < n; r++)
        for (size_t j = 0; j < p; j++) e[(size_t)r * p + j] = pb_val(r, j, rep);
      break;
    case COLL_REDUCE_SCATTER:
      for (size_t j = 0; j < p; j++) {
        float v = 0;
        for (int r = 0; r < n; r++) v += pb_val(r, (size_t)rank * p + j, rep);
        e[j] = v;
      }
      break;
    case COLL_ALL_TO_ALL:
      for (int r = 0; r < n; r++)
        for (size_t j = 0; j < p; j++) e[(size_t)r * p + j] = pb_val(r, (size_t)rank * p + j, rep);
      break;
    default:
      break;
  }
}

/* The peers' check: counts this rank's wrong elements after one run at iteration 0. */
static long long pb_check(PbState* s, int in_place) {
  const Coll c = s->o->coll;
  const int rank = s->ops->rank;
  size_t n = s->k.recv_count;
  const float* got = (const float*)pb_recv_ptr(s, in_place, 0);
  if (c == COLL_REDUCE && rank != s->o->root) return 0; /* only the root has a result */
  if (c == COLL_BROADCAST && rank == s->o->root && !in_place && n > 0 && got[0] == -1.0f) {
    /* MPI_Bcast has one buffer: an out-of-place root sends from its send buffer and leaves
     * its receive buffer alone (NCCL and Gloo copy it there) */
    got = (const float*)pb_send_ptr(s, 0, 0);
  }
  if (c == COLL_REDUCE_SCATTER && in_place && s->ops->rs_inplace == RS_INPLACE_AT_START)
    got = (const float*)s->recv;
  long long wrong = 0;
  for (size_t j = 0; j < n; j++) wrong += (got[j] != s->expected[j]);
  return wrong;
}

static void pb_format_time(double usec, char* buf, size_t len) {
  if (usec >= 10000.0)
    snprintf(buf, len, "%7.0f", usec);
  else if (usec >= 100.0)
    snprintf(buf, len, "%7.1f", usec);
  else
    snprintf(buf, len, "%7.2f", usec);
}

static int pb_cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* -p 1, after the timed loop: iteration i's time is the slowest rank's (a rank that stalls holds
 * up everyone's next call, so the slowest rank's time is the iteration's), then p50 (the median)
 * and p99 (nearest rank: with fewer than 100 iterations, the slowest) over the iterations.
 * One tiny reduction per iteration, outside the timing. */
static void pb_laps(PbState* s, int in_place) {
  const int n = s->o->iters;
  for (int it = 0; it < n; it++) s->laps[it] = s->ops->reduce_double(s->ops->ctx, s->laps[it], 3);
  qsort(s->laps, (size_t)n, sizeof *s->laps, pb_cmp_double);
  s->pct[in_place][0] = n % 2 ? s->laps[n / 2] : (s->laps[n / 2 - 1] + s->laps[n / 2]) / 2;
  int k = (99 * n + 99) / 100; /* ceil(0.99 n), 1-based */
  s->pct[in_place][1] = s->laps[k - 1];
}

/* nccl-tests' BenchTime for one (size, in_place). */
static void pb_row(PbState* s, int in_place, int available, double sec, double alg, double bus,
                   long long wrong);

/* Fills the data of one checked call at iteration iter's offset. */
static void pb_init_call(PbState* s, int in_place, int rep, int iter) {
  if (s->ops->init_data) {
    PbData d = pb_data(s, in_place, rep, pb_shift(s, in_place, iter));
    s->ops->init_data(s->ops->ctx, &d);
  } else {
    pb_init_data(s, in_place, rep); /* the peers check iteration 0 only */
  }
}

static long long pb_check_call(PbState* s, int in_place, int rep, int iter) {
  if (s->ops->check_data) {
    PbData d = pb_data(s, in_place, rep, pb_shift(s, in_place, iter));
    return s->ops->check_data(s->ops->ctx, &d);
  }
  return pb_check(s, in_place);
}

static void pb_bench_time(PbState* s, int in_place) {
  const PeerOps* ops = s->ops;
  const BenchOptions* o = s->o;
  static int rep = 0;
  s->pct[in_place][0] = s->pct[in_place][1] = 0.0;
  if (!ops->has_inplace(ops->ctx, o->coll) && in_place) {
    if (ops->rank == 0) printf("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
    pb_row(s, in_place, 0, 0.0, 0.0, 0.0, -1);
    return;
  }
  if (ops->prepare) ops->prepare(ops->ctx, o->coll, s->send, s->recv, s->k.param_count, in_place);
  if (o->check) pb_init_call(s, in_place, 99, 0);
  pb_start(s, in_place, 0); /* sync */
  ops->barrier(ops->ctx);
  double t0 = pb_now(), lap_start = t0;
  for (int it = 0; it < o->iters; it++) {
    pb_start(s, in_place, it);
    if (s->laps) {
      double t = pb_now();
      s->laps[it] = t - lap_start;
      lap_start = t;
    }
  }
  double sec = (pb_now() - t0) / o->iters;
  if (s->laps) pb_laps(s, in_place);
  if (o->average == 0) {
    /* rank 0's value: others contribute 0 to a sum */
    sec = ops->reduce_double(ops->ctx, ops->rank == 0 ? sec : 0.0, 1);
  } else {
    sec = ops->reduce_double(ops->ctx, sec, o->average);
    if (o->average == 1) sec /= ops->size;
  }
  double alg, bus;
  pb_bw(o->coll, s->k.param_count, s->elem, sec, ops->size, &alg, &bus);
  ops->barrier(ops->ctx);
  long long wrong = 0;
  rep++;
  if (o->check) {
    /* nccl-tests checks one more call; check_every_iter re-runs each timed call's offset */
    int calls = ops->check_every_iter ? o->iters : 1;
    for (int it = 0; it < calls; it++) {
      if (it > 0) rep++;
      pb_init_call(s, in_place, rep, it);
      pb_start(s, in_place, it);
      wrong += pb_check_call(s, in_place, rep, it);
    }
    wrong = ops->sum_ll(ops->ctx, wrong);
    if (wrong) s->errors++;
  }
  char ts[32];
  pb_format_time(sec * 1e6, ts, sizeof ts);
  if (ops->rank == 0) {
    if (o->check)
      printf("  %7s  %6.2f  %6.2f  %5lld", ts, alg, bus, wrong);
    else
      printf("  %7s  %6.2f  %6.2f  %5s", ts, alg, bus, "N/A");
  }
  s->bw_sum += bus;
  s->bw_count++;
  pb_row(s, in_place, 1, sec, alg, bus, o->check ? wrong : -1);
}

/* Prints the -p 1 columns of the line: p50 and p99, out of place then in place, in us. */
static void pb_print_percentiles(PbState* s) {
  for (int in_place = 0; in_place < 2; in_place++) {
    for (int q = 0; q < 2; q++) {
      char ts[32] = "N/A";
      if (s->pct[in_place][q] > 0) pb_format_time(s->pct[in_place][q] * 1e6, ts, sizeof ts);
      printf("  %7s", ts);
    }
  }
}

static const char* pb_redop_name(const PeerOps* ops, Coll c) {
  if (c != COLL_ALL_REDUCE && c != COLL_REDUCE_SCATTER && c != COLL_REDUCE) return "none";
  return ops->op_name ? ops->op_name : "sum";
}

static const char* pb_type_name(const PeerOps* ops) {
  return ops->type_name ? ops->type_name : "float";
}

static int pb_root_shown(const BenchOptions* o) {
  return (o->coll == COLL_BROADCAST || o->coll == COLL_REDUCE) ? o->root : -1;
}

static size_t pb_shown_bytes(PbState* s) {
  return (s->k.send_count > s->k.recv_count ? s->k.send_count : s->k.recv_count) * s->elem;
}

static void pb_row(PbState* s, int in_place, int available, double sec, double alg, double bus,
                   long long wrong) {
  PbRow r;
  if (!s->ops->report) return;
  memset(&r, 0, sizeof r);
  r.bytes = pb_shown_bytes(s);
  r.count = s->k.param_count;
  r.type = pb_type_name(s->ops);
  r.redop = pb_redop_name(s->ops, s->o->coll);
  r.root = pb_root_shown(s->o);
  r.in_place = in_place;
  r.available = available;
  r.sec = sec;
  r.algbw = alg;
  r.busbw = bus;
  r.wrong = available ? wrong : -1;
  if (available && s->laps) {
    r.p50_sec = s->pct[in_place][0];
    r.p99_sec = s->pct[in_place][1];
  }
  s->ops->report(s->ops->ctx, &r);
}

/* Runs the whole sweep; returns the process exit status (nonzero on wrong results). */
int peer_bench_main(const BenchOptions* o, const PeerOps* ops) {
  PbState st;
  memset(&st, 0, sizeof st);
  st.o = o;
  st.ops = ops;
  st.elem = ops->elem_size ? ops->elem_size : sizeof(float);
  if (o->root < 0 || o->root >= ops->size) {
    /* every rank says it: the launcher may stop the others as soon as the first one exits */
    fprintf(stderr, "%s: rank %d: root %d out of range for %d ranks\n", ops->name, ops->rank,
            o->root, ops->size);
    return 2;
  }
  /* nccl-tests allocates max_bytes for each of send and recv; offsets stay inside */
  st.buf_bytes = (o->max_bytes + 63) / 64 * 64;
  if (st.buf_bytes == 0) st.buf_bytes = 64;
  void *a = NULL, *b = NULL, *e = NULL;
  if (posix_memalign(&a, 64, st.buf_bytes) || posix_memalign(&b, 64, st.buf_bytes) ||
      posix_memalign(&e, 64, st.buf_bytes)) {
    fprintf(stderr, "%s: rank %d: cannot allocate 3 x %zu bytes\n", ops->name, ops->rank,
            st.buf_bytes);
    return 2;
  }
  st.send = a;
  st.recv = b;
  st.expected = (float*)e;
  if (o->percentiles && !(st.laps = (double*)malloc((size_t)o->iters * sizeof(double)))) {
    fprintf(stderr, "%s: rank %d: cannot allocate %d iteration times\n", ops->name, ops->rank,
            o->iters);
    free(a);
    free(b);
    free(e);
    return 2;
  }
  /* touch every page now, outside any timing */
  memset(a, 0, st.buf_bytes);
  memset(b, 0, st.buf_bytes);
  memset(e, 0, st.buf_bytes);

  if (ops->rank == 0) {
    char host[256] = "?";
    gethostname(host, sizeof host);
    if (ops->header)
      printf("# %s\n", ops->header);
    else
      printf("# %s %s: %d ranks on %s, %s\n", ops->name, kCollNames[o->coll], ops->size, host,
             ops->library);
    if (ops->details) printf("# %s\n", ops->details);
    printf(
        "# minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d validation: %d "
        "time: %s over ranks of the per-rank average%s\n",
        o->min_bytes, o->max_bytes, o->step_factor > 1 ? o->step_factor : o->step_bytes,
        o->step_factor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->check,
        o->average == 0   ? "rank 0"
        : o->average == 1 ? "mean"
        : o->average == 2 ? "min"
                          : "max",
        o->percentiles ? "; p50/p99: over the iterations, each the slowest rank's time" : "");
    printf("#\n");
    printf(
        "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place         "
        " %s\n",
        "", "", "", "", "", o->percentiles ? "   out-of-place        in-place" : "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s%s\n", "size", "count",
           "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
           "#wrong", o->percentiles ? "      p50      p99      p50      p99" : "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s%s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "",
           o->percentiles ? "     (us)     (us)     (us)     (us)" : "");
    fflush(stdout);
  }

  ops->barrier(ops->ctx);
  /* warmup at the largest and the smallest size, out of place, like nccl-tests' TimeTest */
  size_t warm_sizes[2] = {o->max_bytes, o->min_bytes};
  for (int w = 0; w < 2; w++) {
    st.k = pb_counts(o->coll, warm_sizes[w], ops->size, st.elem);
    if (o->warmup > 0 && ops->prepare)
      ops->prepare(ops->ctx, o->coll, st.send, st.recv, st.k.param_count, 0);
    for (int it = 0; it < o->warmup; it++) pb_start(&st, 0, it);
  }

  for (size_t size = o->min_bytes; size <= o->max_bytes;
       size = o->step_factor > 1 ? size * o->step_factor : size + o->step_bytes) {
    st.k = pb_counts(o->coll, size, ops->size, st.elem);
    if (o->warmup_each > 0) {
      if (ops->prepare) ops->prepare(ops->ctx, o->coll, st.send, st.recv, st.k.param_count, 0);
      for (int it = 0; it < o->warmup_each; it++) pb_start(&st, 0, it);
      ops->barrier(ops->ctx);
    }
    if (ops->rank == 0)
      printf("%12zu  %12zu  %8s  %6s  %6i", pb_shown_bytes(&st), st.k.param_count,
             pb_type_name(ops), pb_redop_name(ops, o->coll), pb_root_shown(o));
    pb_bench_time(&st, 0);
    pb_bench_time(&st, 1);
    if (ops->rank == 0) {
      if (st.laps) pb_print_percentiles(&st);
      printf("\n");
      fflush(stdout);
    }
    if (size == 0) break; /* -b 0 with a factor would loop forever */
  }

  int errors = st.errors; /* the same on every rank: it counts globally summed results */
  if (ops->rank == 0) {
    printf("# Out of bounds values : %d %s\n", errors, errors ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n", st.bw_count ? st.bw_sum / st.bw_count : 0.0);
    printf("#\n");
    fflush(stdout);
  }
  free(a);
  free(b);
  free(e);
  free(st.laps);
  return errors ? 1 : 0;
}
