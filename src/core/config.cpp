#include "core/config.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include "core/check.hpp"

namespace shoal::config {

const std::vector<Setting>& settings() {
  // One setting per entry, its doc line in whole phrases (clang-format would cut them anywhere).
  // clang-format off
  static const std::vector<Setting> table = {
      {"SHOAL_TIMEOUT", "seconds", "300",
       "bound on every wait: rendezvous, connection set-up and each collective"},
      {"SHOAL_DEBUG", "enum", "WARN", "log level: WARN, INFO or TRACE (to stderr)"},
      {"SHOAL_SOCKET_IFNAME", "string", "",
       "network interfaces to use, comma-separated, one TCP connection per peer on each (rails); "
       "default: the one routing to the store, then the other up interfaces"},
      {"SHOAL_HEARTBEAT", "seconds or auto", "auto",
       "a peer that sends nothing (no frame, no heartbeat) for this long is declared failed "
       "(PeerFailure naming it): frozen, overloaded or cut off; auto: SHOAL_TIMEOUT/2, at most 30 s; "
       "0: off. Heartbeats go every sixth of it (at most every second) on quiet links"},
      {"SHOAL_SHRINK_WAIT", "seconds", "5",
       "Communicator::shrink: how long the first survivor waits for the others to join"},
      {"SHOAL_SOCKET_RAILS", "int", "4",
       "most NICs (rails) a rank uses towards each peer on another host; 1 turns striping off"},
      {"SHOAL_HOST_ID", "string", "",
       "overrides the host identity used to find ranks on the same host"},
      {"SHOAL_STORE_ADDR", "string", "",
       "host:port of the rendezvous store; overrides MASTER_ADDR/MASTER_PORT"},
      {"SHOAL_STORE_PATH", "string", "",
       "path of a file store to rendezvous through instead of TCP (shared file system)"},
      {"SHOAL_TRANSPORT", "enum", "auto",
       "tcp: sockets only; shm: shared memory between ranks of a host (error if impossible); "
       "auto: shared memory where it works, TCP otherwise"},
      {"SHOAL_SHM_RING_BYTES", "bytes", "1M",
       "capacity of each shared-memory ring (one per direction and pair of ranks on a host)"},
      {"SHOAL_SHM_DIRECT_BYTES", "bytes", "64K",
       "on shared memory, frames from this size on are pulled by the receiver straight from the "
       "sender's memory (process_vm_readv, one copy) where the kernel allows it; 0: never"},
      {"SHOAL_FLAT_DIRECT_BYTES", "bytes", "32K",
       "among ranks that all share one host's memory, an all_gather, broadcast or reduce_scatter "
       "with this many bytes of input per rank or more (an all_reduce: and above SHOAL_FLAT_MAX_BYTES) "
       "publishes its buffers' addresses and the peers read them straight from its memory "
       "(process_vm_readv, one copy; an all_reduce's reduced slices are written into the peers' "
       "outputs with process_vm_writev), at any size; with more ranks than cores only above "
       "SHOAL_FLAT_MAX_BYTES. 0: never (then only up to SHOAL_FLAT_MAX_BYTES, through the slots). "
       "Equal on all ranks", Agreement::value},
      {"SHOAL_FLAT_MAX_BYTES", "bytes", "256K",
       "all_reduce, all_gather, reduce_scatter, broadcast and reduce publishing up to this many bytes "
       "per rank, among ranks that all share one host's memory, run through shared slots, on the "
       "calling thread when they block (0: never). Equal on all ranks", Agreement::value},
      {"SHOAL_FLAT_ROUNDS", "enum", "on",
       "among ranks that all share one host's memory, an all_reduce or reduce_scatter with more "
       "input per rank than SHOAL_FLAT_MAX_BYTES runs through the shared slots in rounds of that "
       "size (on), or else direct (SHOAL_FLAT_DIRECT_BYTES) or, where direct is impossible, as a "
       "schedule (off). Equal on all ranks", Agreement::value},
      {"SHOAL_ALGO", "string", "",
       "forces algorithms: collective:name or collective:min-max:name, ';'-separated, first match "
       "wins (all_reduce:rabenseifner;all_gather:0-64K:bruck); shoal-info --algorithms lists them. "
       "Equal on all ranks", Agreement::value},
      {"SHOAL_DISPATCH", "enum", "on",
       "on: pick each call's algorithm from the tuning file (SHOAL_TUNE_FILE) or the cost model; "
       "off: the first row of each collective. SHOAL_ALGO wins over both. Equal on all ranks", Agreement::value},
      {"SHOAL_TUNE_FILE", "string", "",
       "tuning file written by shoal-tune: measured times per collective, world, ranks per host, "
       "transport and size, from which the dispatcher picks (and, from shoal-sim tune, predicted "
       "times for worlds larger than any measured). Same contents on all ranks", Agreement::file_contents},
      {"SHOAL_TUNE_SIM", "enum", "on",
       "on: for a world larger than every measured one, the dispatcher reads the tuning file's "
       "simulated tables (shoal-sim tune); off: it ignores them (cost model there). Equal on all ranks", Agreement::value},
      {"SHOAL_TUNE_SMOOTHING", "string", "2",
       "octaves: how the dispatcher reads a tuning file's measured times between and at its sizes: a "
       "local-linear fit of log time over log size through every size, Gaussian weights of this "
       "width; 0: time linear in log(size) between the two measured neighbours. Equal on all ranks", Agreement::value},
      {"SHOAL_LINKS", "enum", "off",
       "measure: a new communicator times every directed pair of ranks, one pair at a time "
       "(SHOAL_LINKS_BYTES each way), and from then on the planner prices all_reduce, all_gather and "
       "reduce_scatter on those links and the link_ring rows follow the ring order they give "
       "(Communicator::measure_links does it on demand); off: no measurement. Equal on all ranks",
       Agreement::value},
      {"SHOAL_LINKS_BYTES", "bytes", "1M",
       "the first probe each way of a pair's timing when links are measured; grown fourfold (up "
       "to 64 times) while the rate it finds still grows by a quarter and the next probe is due "
       "within 2 s, so a long link's window opens. Equal on all ranks",
       Agreement::value},
      {"SHOAL_TUNE_CALIBRATE", "enum", "on",
       "on: a new communicator times a few ring all_gathers and a reduction (milliseconds; across "
       "hosts of several ranks also a Swing all_gather of about 16 MiB) and the cost model uses the "
       "measured constants, the slowest rank's, instead of the defaults; latency: no timed calls, "
       "the defaults with alpha raised to the connections' longest flight (half the longest "
       "handshake round trip); off: the defaults. Options::calibrate wins over it. Ranks that "
       "differ fail the new communicator's first call with a MismatchError"},
      {"SHOAL_TUNE_LEARN", "enum", "on",
       "on: across hosts over TCP, where the cost model (on measured links too) picks a row other "
       "than the ring for an all_reduce, all_gather or reduce_scatter of at least "
       "SHOAL_TUNE_LEARN_MIN_BYTES, the first calls of each size bucket (a factor of 2) run the "
       "pick, the ring (link_ring on measured links) and the row the model prices cheapest after "
       "them if within 1.5x of its pick, in turn, twice each, timed, and the next takes the fastest "
       "(the slowest rank's times); off: the cost model's pick. Equal on all ranks", Agreement::value},
      {"SHOAL_TUNE_LEARN_MIN_BYTES", "bytes", "256K",
       "the smallest call SHOAL_TUNE_LEARN explores. Equal on all ranks", Agreement::value},
      {"SHOAL_TUNE_SAVE", "string", "",
       "a file of what SHOAL_TUNE_LEARN settled, kept across jobs: read when a communicator first "
       "learns (a bucket every rank's file settles alike is not explored again) and merged into by "
       "rank 0 of each communicator when it goes. Equal on all ranks", Agreement::value},
      {"SHOAL_TUNE_ALPHA", "string", "",
       "cost model: seconds per message (replaces the calibrated or default value: shm 5e-6, tcp 3e-5). "
       "Equal on all ranks", Agreement::value},
      {"SHOAL_TUNE_BETA", "string", "",
       "cost model: seconds per byte moved (replaces the calibrated or default value: shm 2e-10, tcp "
       "8e-10). Equal on all ranks", Agreement::value},
      {"SHOAL_TUNE_GAMMA", "string", "",
       "cost model: seconds per byte reduced (replaces the calibrated or default value, 2e-10). Equal "
       "on all ranks", Agreement::value},
      {"SHOAL_TUNE_BUSY_GAMMA", "string", "",
       "cost model across hosts: seconds per byte of memory work (reducing, moving within the host) "
       "while every rank of the machine works at once (replaces the calibrated or default value, "
       "2e-10). Equal on all ranks", Agreement::value},
      {"SHOAL_HIERARCHICAL", "enum", "auto",
       "all_reduce, all_gather, reduce_scatter across hosts in an intra-host and an inter-host phase "
       "on sub-communicators (rank-aligned groups at once). auto: when every host has the same number "
       ">1 of ranks, >1 host, SHOAL_ALGO is unset and the tuning file's \"hierarchical\" times say it is "
       "faster (at the nearest measured size; without such times: the cost model, within "
       "SHOAL_HIERARCHICAL_MIN_BYTES and SHOAL_HIERARCHICAL_MAX_BYTES); "
       "on: whenever that layout holds; off: never. Equal on all ranks", Agreement::value},
      {"SHOAL_HIERARCHICAL_MIN_BYTES", "bytes", "0",
       "smallest message SHOAL_HIERARCHICAL=auto may run hierarchically where no tuning file times the "
       "hierarchy (the cost model decides within the bounds): the all_reduce vector, the all_gather "
       "output, the reduce_scatter input. Equal on all ranks", Agreement::value},
      {"SHOAL_HIERARCHICAL_MAX_BYTES", "bytes", "0",
       "the message (as SHOAL_HIERARCHICAL_MIN_BYTES counts it) from which SHOAL_HIERARCHICAL=auto stays "
       "flat where no tuning file times the hierarchy; 0: no bound. Equal on all ranks", Agreement::value},
      {"SHOAL_CHUNK_BYTES", "bytes", "512K",
       "pipeline chunk of ring algorithms: reduction of one chunk overlaps the transfer of the next"},
      {"SHOAL_STAGING_CHUNK_BYTES", "bytes", "4M",
       "device (CUDA) tensors travel through pinned host buffers in chunks of this many bytes (an "
       "all_gather's or reduce_scatter's: of the whole host buffer), three in flight: one copied to "
       "the host, one on the wire, one copied back. Equal on all ranks", Agreement::value},
      {"SHOAL_SOCKET_BUFFER", "bytes or auto", "auto",
       "SO_SNDBUF/SO_RCVBUF of data connections; a value turns the kernel's autotuning off. auto: 4M "
       "where the connection's round trip is under 2 ms, else the kernel's autotuning, which grows "
       "each buffer to the path's bandwidth-delay product (up to net.ipv4.tcp_rmem/tcp_wmem's maximum)"},
      {"SHOAL_SOCKET_STREAMS", "int or auto", "auto",
       "TCP connections per NIC (rail) to a peer on another host, the frames striped across them; "
       "decided by the connecting rank. auto: 1 where the round trip its handshake measured is under "
       "2 ms, else 2 under BBR (SHOAL_TCP_CC or the kernel's default), else one per 25 ms of it, 2 "
       "to 8 (one window- or loss-bound stream fills little of a long path)"},
      {"SHOAL_TCP_CC", "string", "",
       "congestion control of data connections (cubic, bbr, ...: net.ipv4.tcp_available_congestion_control; "
       "empty: the kernel's default)"},
      {"SHOAL_MAX_FRAME", "bytes", "16G", "largest frame a peer may announce; larger ones are rejected"},
      {"SHOAL_UNEXPECTED_LIMIT", "bytes", "16M",
       "bytes buffered per peer for frames that arrive before their receive is posted"},
      {"SHOAL_CONNECT_RETRY_MS", "int", "5000", "upper bound of the back-off between connection attempts"},
      {"SHOAL_SPIN_US", "int or auto", "auto",
       "microseconds a waiting thread polls before it sleeps; auto: twice the wake-up cost this "
       "process measured on its sleeps, between 50 and 2000, and 50 on a host of more ranks or "
       "runnable tasks than CPUs; 0: sleep at once"},
      {"SHOAL_BIND", "enum", "auto",
       "auto: a rank nobody bound (every rank on its machine has the same CPU affinity: torchrun, "
       "mpirun --bind-to none) binds its process, every thread, to the i-th of "
       "those CPUs, i its index among the machine's ranks (emulated hosts count together), when the "
       "communicator holds every rank the launcher started on the node (LOCAL_WORLD_SIZE, "
       "OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS), there are at least as many CPUs as ranks and "
       "each rank is its own process; none: the affinity stays as the launcher left it"},
      {"SHOAL_STORE_EXTERNAL", "int", "0",
       "1: the store at SHOAL_STORE_ADDR is hosted by another process; every rank connects, none binds"},
      {"SHOAL_STORE_MAX_VALUE", "bytes", "256M",
       "largest value the TCP store server accepts (keys: 64K); a larger request closes that client"},
      {"SHOAL_AUTH_KEY", "string", "",
       "shared secret of the job: every transport and store connection proves it knows it (HMAC-SHA256 "
       "challenge-response) before any frame or request; empty: the job is open (one warning). Same on all ranks"},
      {"SHOAL_STORE_AUTH", "int", "1",
       "with SHOAL_AUTH_KEY: 1 (default): every TCP store connection authenticates too; 0: the store "
       "stays open (for torch's TCPStore, which cannot authenticate), with a warning"},
      {"SHOAL_AUTH_KEY_FILE", "string", "",
       "file holding the shared secret instead (SHOAL_AUTH_KEY shows in the environment of the "
       "processes and in shoal-info)"},
      {"SHOAL_SIM_MODEL", "string", "",
       "shoal-sim: a cluster model (JSON, as shoal-sim calibrate writes it) to start from instead of the "
       "built-in defaults; --model wins"},
      {"SHOAL_SWARM_MAX_MESSAGE", "bytes", "1G",
       "largest SWARM message body (activations, gradients, state) a stage server or trainer "
       "accepts; a larger frame is refused before anything is allocated for it"},
      {"SHOAL_SWARM_TRACE", "int", "0",
       "1: stage servers log the timing of every averaging round (group formed, reduced, stepped)"},
      {"SHOAL_CHAOS_TRACE", "int", "0",
       "1: shoal-chaos workers write every operation to stderr (each worker's .log)"},
  };
  // clang-format on
  return table;
}

static const Setting* find(const char* name) {
  for (const auto& s : settings())
    if (std::strcmp(s.name, name) == 0) return &s;
  return nullptr;
}

std::vector<const Setting*> agreed_settings() {
  std::vector<const Setting*> out;
  for (const auto& s : settings())
    if (s.agreed != Agreement::none) out.push_back(&s);
  return out;
}

std::vector<uint64_t> agreed_fingerprints() {
  auto fnv1a = [](std::string_view bytes) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
    return h;
  };
  std::vector<uint64_t> out;
  for (const Setting* s : agreed_settings()) {
    std::string what = get(s->name);
    if (s->agreed == Agreement::file_contents && !what.empty()) {
      std::ifstream in(what, std::ios::binary);
      std::ostringstream bytes;
      bytes << in.rdbuf();
      what = in ? "contents:" + bytes.str() : "unreadable";
    }
    out.push_back(fnv1a(what));
  }
  return out;
}

// The table's entry of `name`; a name missing from it is a bug in shoal.
static const Setting& declared(const char* name) {
  const Setting* s = find(name);
  SHOAL_CHECK(s != nullptr, Internal, "setting " << name << " is not declared in config.cpp");
  return *s;
}

bool is_set(const char* name) {
  declared(name);
  const char* v = std::getenv(name);
  return v && *v;
}

std::string get(const char* name) {
  const Setting& s = declared(name);
  return is_set(name) ? std::string(std::getenv(name)) : std::string(s.default_value);
}

int64_t get_int(const char* name) {
  std::string v = get(name);
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  SHOAL_CHECK(end && *end == '\0' && !v.empty() && errno != ERANGE, InvalidArgument,
              name << "='" << v << "' is not an integer in range");
  return x;
}

std::optional<double> parse_number(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(text.c_str(), &end);
  if (text.empty() || !end || *end != '\0' || errno == ERANGE || !std::isfinite(x))
    return std::nullopt;
  return x;
}

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"", "K", "M", "G"};
  int unit = 0;
  while (unit < 3 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + kUnits[unit];
}

uint64_t parse_bytes(const std::string& text, const char* what) {
  char* end = nullptr;
  double x = std::strtod(text.c_str(), &end);
  SHOAL_CHECK(end != text.c_str() && x >= 0, InvalidArgument,
              what << "='" << text << "' is not a size (examples: 4096, 512K, 16M, 2G)");
  uint64_t mult = 1;
  std::string suffix(end);
  if (suffix == "K" || suffix == "k" || suffix == "KB" || suffix == "KiB")
    mult = 1ull << 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MB" || suffix == "MiB")
    mult = 1ull << 20;
  else if (suffix == "G" || suffix == "g" || suffix == "GB" || suffix == "GiB")
    mult = 1ull << 30;
  else
    SHOAL_CHECK(suffix.empty(), InvalidArgument,
                what << "='" << text << "' has an unknown suffix (use K, M or G)");
  const double bytes = x * static_cast<double>(mult);
  SHOAL_CHECK(bytes < 0x1p63, InvalidArgument,
              what << "='" << text << "' is larger than any size shoal can use");
  return static_cast<uint64_t>(bytes);
}

uint64_t get_bytes(const char* name) { return parse_bytes(get(name), name); }

std::chrono::milliseconds get_duration(const char* name) {
  std::string v = get(name);
  char* end = nullptr;
  double s = std::strtod(v.c_str(), &end);
  SHOAL_CHECK(end && *end == '\0' && !v.empty() && s >= 0 && s < 1e9, InvalidArgument,
              name << "='" << v << "' is not a number of seconds");
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
}

std::optional<std::chrono::milliseconds> get_duration_or_auto(const char* name) {
  if (get(name) == "auto") return std::nullopt;
  return get_duration(name);
}

std::optional<uint64_t> get_bytes_or_auto(const char* name) {
  if (get(name) == "auto") return std::nullopt;
  return get_bytes(name);
}

std::optional<int64_t> get_int_or_auto(const char* name) {
  if (get(name) == "auto") return std::nullopt;
  return get_int(name);
}

}  // namespace shoal::config
