// Measured links (SHOAL_LINKS=measure at creation, Communicator::measure_links on demand): the
// rate of every directed pair of ranks, timed one pair at a time so that no pair shares a link
// with another while it is timed, and agreed by every rank (tune/links.hpp derives the rest).
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "comm/comm_impl.hpp"
#include "core/check.hpp"
#include "core/config.hpp"

namespace shoal::detail {

using algorithms::Collective;

namespace {

// Point-to-point frames of the measurement: a tag no caller's send can use (negative tags are
// the library's: Communicator::kAllToAllVTag is the other).
constexpr int kLinksTag = -0x5a110001;

comm::Request point_to_point(Collective collective, const void* in, void* out, uint64_t bytes,
                             int peer) {
  comm::Request r = comm::request_of(collective, in, out, bytes, DataType::uint8);
  r.peer = peer;
  r.tag = kLinksTag;
  r.blocking = true;
  return r;
}

}  // namespace

bool CommImpl::links_wanted() const {
  const std::string mode = config::get("SHOAL_LINKS");
  SHOAL_CHECK(mode == "measure" || mode == "off", InvalidArgument,
              "SHOAL_LINKS='" << mode << "' is not measure or off");
  return mode == "measure" && size >= 2;
}

tune::Links CommImpl::measure_links() {
  const uint64_t bytes = config::get_bytes("SHOAL_LINKS_BYTES");
  SHOAL_CHECK(bytes >= 1, InvalidArgument, "SHOAL_LINKS_BYTES must be at least 1 byte");
  std::vector<uint8_t> payload(bytes, static_cast<uint8_t>(rank)), ack(1);
  // Bytes/s from this rank to each, then one-way seconds (half the round trip of one byte).
  std::vector<double> mine(2 * static_cast<size_t>(size), 0);
  auto send = [&](const void* data, uint64_t n, int peer) {
    call(point_to_point(Collective::send, data, nullptr, n, peer)).wait();
  };
  auto recv = [&](void* data, uint64_t n, int peer) {
    call(point_to_point(Collective::recv, nullptr, data, n, peer)).wait();
  };
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  const auto* barrier = algorithms::find_algorithm(Collective::barrier, "dissemination");
  for (int i = 0; i < size; ++i)
    for (int j = i + 1; j < size; ++j) {
      if (rank == i || rank == j) {
        const int other = rank == i ? j : i;
        // Each way in turn: the sender times the payload out and one byte back, less a round
        // trip of one byte each way timed just before (the least of two: the first also waits
        // for the peer to leave the barrier). A long link's window opens over several round
        // trips, so one probe of SHOAL_LINKS_BYTES sees its latency more than its rate: the
        // probe grows fourfold while the rate it finds still grows by a quarter and either the
        // probe lasted under ten round trips or the next one is due within kRoundSeconds. The
        // receiver learns each probe's size first (0: no more).
        constexpr double kRoundSeconds = 2.0;
        constexpr uint64_t kGrowth = 64;  // the largest probe: 64 x SHOAL_LINKS_BYTES
        for (int way = 0; way < 2; ++way) {
          uint64_t n = 0;
          if ((way == 0) == (rank == i)) {
            double round_trip = 1e30;
            for (int k = 0; k < 2; ++k) {
              const auto t0 = Clock::now();
              send(ack.data(), 1, other);
              recv(ack.data(), 1, other);
              round_trip = std::min(round_trip, seconds(t0, Clock::now()));
            }
            double best = 0, last = 0;
            for (n = bytes;;) {
              send(&n, sizeof n, other);
              if (payload.size() < n) payload.resize(n, static_cast<uint8_t>(rank));
              const auto t1 = Clock::now();
              send(payload.data(), n, other);
              recv(ack.data(), 1, other);
              const double total = seconds(t1, Clock::now());
              // A transfer can take no less than a hundredth of its round trip (loopback,
              // shared memory): the rate stays finite.
              const double rate = static_cast<double>(n) /
                                  std::max(total - round_trip, std::max(total, 1e-9) / 100);
              best = std::max(best, rate);
              const bool growing = last == 0 || rate > 1.25 * last;
              last = rate;
              n *= 4;
              // A probe of a few round trips measured the window, not the rate: it gets its
              // next one whatever that costs.
              const bool latency_bound = total < 10 * round_trip;
              if (!growing || n > kGrowth * bytes ||
                  (!latency_bound && static_cast<double>(n) / rate + round_trip > kRoundSeconds))
                break;
            }
            n = 0;
            send(&n, sizeof n, other);
            mine[other] = best;
            mine[size + other] = round_trip / 2;
          } else {
            for (int k = 0; k < 2; ++k) {
              recv(ack.data(), 1, other);
              send(ack.data(), 1, other);
            }
            for (;;) {
              recv(&n, sizeof n, other);
              if (n == 0) break;
              SHOAL_CHECK(n <= kGrowth * bytes, Internal,
                          "links: rank " << other << " announced a probe of " << n << " bytes");
              if (payload.size() < n) payload.resize(n);
              recv(payload.data(), n, other);
              send(ack.data(), 1, other);
            }
          }
        }
      }
      // One pair at a time.
      call(comm::forced_call(Collective::barrier, nullptr, nullptr, 0, DataType::uint8,
                             ReduceOp::sum, barrier))
          .wait();
    }
  const auto P = static_cast<size_t>(size);
  std::vector<double> all(2 * P * P);
  call(comm::forced_call(Collective::all_gather, mine.data(), all.data(), 2 * P, DataType::float64,
                         ReduceOp::sum,
                         algorithms::find_algorithm(Collective::all_gather, "bruck")))
      .wait();
  tune::Links measured{size, std::vector<double>(P * P), std::vector<double>(P * P)};
  for (size_t from = 0; from < P; ++from)
    for (size_t to = 0; to < P; ++to) {
      measured.bandwidth[from * P + to] = all[from * 2 * P + to];
      measured.latency[from * P + to] = all[from * 2 * P + P + to];
    }
  use_links(measured);
  return measured;
}

void CommImpl::use_links(tune::Links measured) {
  SHOAL_CHECK(measured.world == size, InvalidArgument,
              "links of " << measured.world << " ranks for a communicator of " << size);
  // ring_order checks the rates (InvalidArgumentError) before anything here changes.
  auto order = std::make_shared<const std::vector<int>>(tune::ring_order(measured));
  links = std::make_shared<const tune::Links>(std::move(measured));
  ring_order = order;
  ring_orders_.push_back(std::move(order));
  if (planner) planner->remake_dispatcher();
  std::string text;
  for (int r : *ring_order) (text += ' ') += std::to_string(r);
  const std::vector<int> regions = tune::regions_of(*links);
  const double longest =
      links->latency.empty() ? 0 : *std::max_element(links->latency.begin(), links->latency.end());
  SHOAL_INFO("links in use: " << *std::max_element(regions.begin(), regions.end()) + 1
                              << " region(s), ring order" << text << ", longest latency "
                              << longest * 1e3 << " ms");
}

}  // namespace shoal::detail

namespace shoal {

std::vector<double> Communicator::measure_links() { return impl_->measure_links().bandwidth; }

void Communicator::use_links(std::span<const double> bytes_per_s) {
  impl_->use_links({size(), std::vector<double>(bytes_per_s.begin(), bytes_per_s.end())});
}

std::vector<int> Communicator::ring_order() const {
  if (impl_->ring_order) return *impl_->ring_order;
  std::vector<int> ranks(static_cast<size_t>(size()));
  for (int r = 0; r < size(); ++r) ranks[r] = r;
  return ranks;
}

}  // namespace shoal
