// libFuzzer target: arbitrary handshakes arriving at a rank that accepts connections
// (transport::tcp::HelloBook, what connect_mesh does with each Hello). Whatever strangers
// send, a peer completes at most once, with exactly the rails its rail 0 announced, each rail
// once, every socket in one place only, and no rank at or below the acceptor's.
//
// Input: u8 rank, u8 size (of the acceptor), then 32-byte Hellos (a short tail is padded).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "transport/tcp/mesh.hpp"

using namespace shoal::transport;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  constexpr uint64_t kCommId = 0x1122334455667788ull;
  const int world = 1 + data[1] % 16;
  const int rank = data[0] % world;
  tcp::HelloBook book(rank, world, kCommId);
  std::vector<std::vector<int>> fds(world);
  std::vector<int> completions(world, 0);
  std::set<int> admitted;
  int next_fd = 1000;  // stand-ins: the book never touches a socket
  for (size_t i = 2; i < size; i += sizeof(Hello)) {
    Hello h;
    std::memset(&h, 0, sizeof h);
    std::memcpy(&h, data + i, std::min(sizeof h, size - i));
    const int fd = next_fd++;
    std::vector<size_t> before(world);
    for (int p = 0; p < world; ++p) before[p] = fds[p].size();
    if (book.admit(h, fd, fds)) {
      for (int p = 0; p < world; ++p)
        if (fds[p].size() != before[p]) std::abort();  // refused, yet something changed
      continue;
    }
    admitted.insert(fd);
    if (validate(h, kCommId, world)) std::abort();  // admitted an invalid handshake
    for (int p = 0; p < world; ++p) {
      if (fds[p].size() == before[p]) continue;
      if (p != h.rank || before[p] != 0 || p <= rank) std::abort();
      if (++completions[p] > 1) std::abort();
      if (fds[p].front() != fd && h.rail == 0) std::abort();  // rail 0 comes first
    }
  }
  // Every socket is in exactly one place: a complete peer or the pending list.
  std::multiset<int> seen;
  for (const auto& peer : fds) seen.insert(peer.begin(), peer.end());
  for (int fd : book.pending_fds()) seen.insert(fd);
  if (seen.size() != admitted.size() || std::set<int>(seen.begin(), seen.end()) != admitted) std::abort();
  return 0;
}
