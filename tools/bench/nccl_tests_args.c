/* The nccl-tests flags of the driver (nccl_tests_driver.h): the collective, sizes, iterations,
 * checks, and what a harness adds. Plain C99 that also compiles as C++, like the driver. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_tests_driver.h"

static int pb_parse_coll(const char* s, Coll* out) {
  for (int i = 0; i < COLL_COUNT_; i++) {
    if (strcmp(s, kCollNames[i]) == 0) {
      *out = (Coll)i;
      return 1;
    }
  }
  /* nccl-tests' and torch's spellings */
  if (!strcmp(s, "allreduce")) {
    *out = COLL_ALL_REDUCE;
    return 1;
  }
  if (!strcmp(s, "allgather")) {
    *out = COLL_ALL_GATHER;
    return 1;
  }
  if (!strcmp(s, "reducescatter")) {
    *out = COLL_REDUCE_SCATTER;
    return 1;
  }
  if (!strcmp(s, "alltoall") || !strcmp(s, "all2all")) {
    *out = COLL_ALL_TO_ALL;
    return 1;
  }
  if (!strcmp(s, "bcast")) {
    *out = COLL_BROADCAST;
    return 1;
  }
  return 0;
}

/* nccl-tests' parsesize: a number with an optional K/M/G suffix (powers of 1024). */
static double pb_parse_size(const char* value) {
  double size;
  char lit[2] = {0, 0};
  int n = sscanf(value, "%lf %1s", &size, lit);
  if (n == 1) return size;
  if (n != 2) return -1.0;
  switch (lit[0]) {
    case 'G':
    case 'g':
      return size * 1024.0 * 1024.0 * 1024.0;
    case 'M':
    case 'm':
      return size * 1024.0 * 1024.0;
    case 'K':
    case 'k':
      return size * 1024.0;
    default:
      return -1.0;
  }
}

static void pb_usage(const char* prog, FILE* f, const PbParseExt* ext) {
  const char* dtype_op = ext && ext->usage_datatype_op ? ext->usage_datatype_op
                                                       : "  -d,--datatype float only float\n"
                                                         "  -o,--op sum         only sum\n";
  fprintf(f,
          "usage: %s COLLECTIVE [options]\n"
          "  COLLECTIVE: all_reduce all_gather reduce_scatter broadcast reduce all_to_all\n"
          "  -b,--minbytes N     smallest size (K/M/G suffixes), default 32M\n"
          "  -e,--maxbytes N     largest size, default 32M\n"
          "  -f,--stepfactor N   multiply the size by N each step, default 1 (then -i)\n"
          "  -i,--stepbytes N    add N bytes each step when -f is 1, default 1M\n"
          "  -n,--iters N        timed iterations per size, default 20\n"
          "  -w,--warmup_iters N warmup iterations (at max and min size), default 5\n"
          "  -W,--warmup_each N  also N warmup iterations at every size before timing it (a\n"
          "                      library that learns per size is timed once it has), default 0\n"
          "  -c,--check 0/1      check results (small-integer fill, exact), default 1\n"
          "%s"
          "  -r,--root N         root of broadcast/reduce, default 0\n"
          "  -a,--average 0..3   time over ranks: 0=rank0 1=avg 2=min 3=max, default 3\n"
          "  -p,--percentiles 0/1 also time every iteration (the slowest rank's time) and add\n"
          "                      p50 and p99 over them, out of place and in place, to each\n"
          "                      line; default 0\n"
          "%s",
          prog, dtype_op, ext && ext->usage_extra ? ext->usage_extra : "");
}

/* Parses argv like nccl-tests' all_reduce_perf, with the collective as first argument, plus
 * what ext adds (may be NULL). Returns 0 on success, 1 on --help, -1 on error (message
 * printed by rank 0). */
int pb_parse_args_ex(int argc, char** argv, int rank, BenchOptions* o, const PbParseExt* ext) {
  static const struct option base_longopts[] = {{"minbytes", required_argument, 0, 'b'},
                                                {"maxbytes", required_argument, 0, 'e'},
                                                {"stepbytes", required_argument, 0, 'i'},
                                                {"stepfactor", required_argument, 0, 'f'},
                                                {"iters", required_argument, 0, 'n'},
                                                {"warmup_iters", required_argument, 0, 'w'},
                                                {"warmup_each", required_argument, 0, 'W'},
                                                {"check", required_argument, 0, 'c'},
                                                {"op", required_argument, 0, 'o'},
                                                {"datatype", required_argument, 0, 'd'},
                                                {"root", required_argument, 0, 'r'},
                                                {"average", required_argument, 0, 'a'},
                                                {"percentiles", required_argument, 0, 'p'},
                                                {"help", no_argument, 0, 'h'},
                                                {0, 0, 0, 0}};
  enum { kBase = sizeof base_longopts / sizeof base_longopts[0] - 1, kMaxExtra = 8 };
  struct option longopts[kBase + kMaxExtra + 1];
  int nlong = 0;
  for (int i = 0; i < kBase; i++) longopts[nlong++] = base_longopts[i];
  for (int i = 0; ext && ext->longopts && i < kMaxExtra && ext->longopts[i].name; i++)
    longopts[nlong++] = ext->longopts[i];
  memset(&longopts[nlong], 0, sizeof longopts[nlong]);
  o->coll = COLL_ALL_REDUCE;
  o->min_bytes = o->max_bytes = 32u << 20;
  o->step_bytes = 1u << 20;
  o->step_factor = 1;
  o->iters = 20;
  o->warmup = 5;
  o->warmup_each = 0;
  o->check = 1;
  o->root = 0;
  o->average = 3;
  o->percentiles = 0;
  o->datatype = "float";
  o->op = "sum";
  if (argc < 2 || argv[1][0] == '-') {
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
      if (rank == 0) pb_usage(argv[0], stdout, ext);
      return 1;
    }
    if (rank == 0) pb_usage(argv[0], stderr, ext);
    return -1;
  }
  if (!pb_parse_coll(argv[1], &o->coll)) {
    if (rank == 0)
      fprintf(stderr, "%s: unknown collective '%s'\n", argv[0], argv[1]),
          pb_usage(argv[0], stderr, ext);
    return -1;
  }
  optind = 2;
  for (;;) {
    int c = getopt_long(argc, argv, "b:e:i:f:n:w:W:c:o:d:r:a:p:h", longopts, NULL);
    if (c == -1) break;
    double v;
    switch (c) {
      case 'b':
      case 'e':
        v = pb_parse_size(optarg);
        if (v < 0) {
          if (rank == 0) fprintf(stderr, "invalid size '%s' for -%c\n", optarg, c);
          return -1;
        }
        if (c == 'b')
          o->min_bytes = (size_t)v;
        else
          o->max_bytes = (size_t)v;
        break;
      case 'i':
        o->step_bytes = (size_t)strtoull(optarg, NULL, 0);
        break;
      case 'f':
        o->step_factor = (size_t)strtoull(optarg, NULL, 0);
        break;
      case 'n':
        o->iters = (int)strtol(optarg, NULL, 0);
        break;
      case 'w':
        o->warmup = (int)strtol(optarg, NULL, 0);
        break;
      case 'W':
        o->warmup_each = (int)strtol(optarg, NULL, 0);
        break;
      case 'c':
        o->check = (int)strtol(optarg, NULL, 0);
        break;
      case 'r':
        o->root = (int)strtol(optarg, NULL, 0);
        break;
      case 'a':
        o->average = (int)strtol(optarg, NULL, 0);
        break;
      case 'p':
        o->percentiles = (int)strtol(optarg, NULL, 0);
        break;
      case 'd':
        if (ext && ext->accept_datatype) {
          if (!ext->accept_datatype(optarg)) {
            if (rank == 0)
              fprintf(stderr, "unknown -d data type '%s'\n", optarg),
                  pb_usage(argv[0], stderr, ext);
            return -1;
          }
        } else if (strcmp(optarg, "float") && strcmp(optarg, "float32") && strcmp(optarg, "f32")) {
          if (rank == 0) fprintf(stderr, "only -d float is supported (got '%s')\n", optarg);
          return -1;
        }
        o->datatype = optarg;
        break;
      case 'o':
        if (ext && ext->accept_op) {
          if (!ext->accept_op(optarg)) {
            if (rank == 0)
              fprintf(stderr, "unknown -o operator '%s'\n", optarg), pb_usage(argv[0], stderr, ext);
            return -1;
          }
        } else if (strcmp(optarg, "sum")) {
          if (rank == 0) fprintf(stderr, "only -o sum is supported (got '%s')\n", optarg);
          return -1;
        }
        o->op = optarg;
        break;
      case 'h':
        if (rank == 0) pb_usage(argv[0], stdout, ext);
        return 1;
      default:
        if (c >= 256 && ext && ext->handle) {
          if (ext->handle(ext->ctx, c, optarg, rank) != 0) return -1;
          break;
        }
        if (rank == 0) pb_usage(argv[0], stderr, ext);
        return -1;
    }
  }
  if (optind < argc) {
    if (rank == 0) fprintf(stderr, "unexpected argument '%s'\n", argv[optind]);
    return -1;
  }
  if (o->min_bytes > o->max_bytes) {
    if (rank == 0)
      fprintf(stderr, "invalid sizes: minbytes %zu > maxbytes %zu\n", o->min_bytes, o->max_bytes);
    return -1;
  }
  if (o->iters < 1 || o->warmup < 0 || o->warmup_each < 0 || o->average < 0 || o->average > 3 ||
      (o->percentiles != 0 && o->percentiles != 1) || (o->step_factor <= 1 && o->step_bytes == 0)) {
    if (rank == 0) fprintf(stderr, "invalid -n/-w/-W/-a/-p/-f/-i value\n");
    return -1;
  }
  return 0;
}

/* The peers' flags: -d float and -o sum only. */
int pb_parse_args(int argc, char** argv, int rank, BenchOptions* o) {
  return pb_parse_args_ex(argc, argv, rank, o, NULL);
}
