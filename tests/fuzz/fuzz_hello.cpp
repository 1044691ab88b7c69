// libFuzzer target: arbitrary handshakes arriving at a rank that accepts connections
// (transport::tcp::HelloBook, what connect_mesh does with each Hello). Whatever strangers
// send, a peer completes at most once, with exactly the rails its rail 0 announced, each rail
// once, every socket in one place only, and no rank at or below the acceptor's. The judge is
// wire_rules.hpp and a model of the pairing kept here, not the book's own validate().
//
// Input: u8 rank, u8 size (of the acceptor), then 32-byte Hellos (a short tail is padded).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "transport/tcp/mesh.hpp"
#include "wire_rules.hpp"

using namespace shoal::transport;
namespace rules = shoal::fuzz_rules;

namespace {

// What the acceptor knows of one peer rank, by the rules: rail 0's socket and announcement,
// the other rails' sockets.
struct PeerModel {
  int primary = -1;
  uint64_t announced = 0;
  std::map<uint64_t, int> extras;  // rail -> socket
  bool complete = false;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static_assert(sizeof(Hello) == rules::kHelloBytes);
  if (size < 2) return 0;
  constexpr uint64_t kCommId = 0x1122334455667788ull;
  const int world = 1 + data[1] % 16;
  const int rank = data[0] % world;
  tcp::HelloBook book(rank, world, kCommId);
  std::vector<std::vector<int>> fds(world);
  std::vector<PeerModel> model(world);
  std::set<int> admitted;
  int next_fd = 1000;  // stand-ins: the book never touches a socket
  for (size_t i = 2; i < size; i += sizeof(Hello)) {
    uint8_t raw[rules::kHelloBytes] = {};
    std::memcpy(raw, data + i, std::min(sizeof raw, size - i));
    Hello h;
    std::memcpy(&h, raw, sizeof h);
    const int fd = next_fd++;
    std::vector<size_t> before(world);
    for (int p = 0; p < world; ++p) before[p] = fds[p].size();
    if (book.admit(h, fd, fds)) {
      for (int p = 0; p < world; ++p)
        if (fds[p].size() != before[p]) std::abort();  // refused, yet something changed
      continue;
    }
    admitted.insert(fd);
    // Admitted: it must be admissible by the rules, and new to a peer that is not complete.
    if (!rules::hello_admissible(raw, kCommId, world, rank)) std::abort();
    const int peer = rules::hello_rank(raw);
    const uint64_t rail = rules::hello_rail(raw), rails = rules::hello_rails(raw);
    PeerModel& m = model[peer];
    if (m.complete) std::abort();  // a peer completes once
    if (rail == 0) {
      if (m.primary >= 0) std::abort();  // rail 0 twice
      for (const auto& [r, s] : m.extras)
        if (r >= rails) std::abort();  // an earlier rail beyond what rail 0 announces
      m.primary = fd;
      m.announced = rails;
    } else {
      if (m.extras.count(rail)) std::abort();                   // a rail twice
      if (m.primary >= 0 && rail >= m.announced) std::abort();  // beyond the announcement
      m.extras[rail] = fd;
    }
    // Complete exactly when rail 0 and every rail it announced are in, with those sockets in
    // rail order; nothing else changes.
    const bool completes = m.primary >= 0 && m.extras.size() + 1 == m.announced;
    for (int p = 0; p < world; ++p) {
      if (p == peer && completes) continue;
      if (fds[p].size() != before[p]) std::abort();
    }
    if (completes) {
      std::vector<int> want{m.primary};
      for (const auto& [r, s] : m.extras) want.push_back(s);
      if (before[peer] != 0 || fds[peer] != want) std::abort();
      m.complete = true;
    }
  }
  // Every socket is in exactly one place: a complete peer or the pending list.
  std::multiset<int> seen;
  for (const auto& peer : fds) seen.insert(peer.begin(), peer.end());
  for (int fd : book.pending_fds()) seen.insert(fd);
  if (seen.size() != admitted.size() || std::set<int>(seen.begin(), seen.end()) != admitted)
    std::abort();
  return 0;
}
