#include "transport/tcp/mesh.hpp"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>

#include "core/check.hpp"
#include "transport/frame.hpp"

namespace shoal::transport::tcp {

namespace {

// A rank's published addresses: "ip1,ip2,...:port", the primary first.
struct Published {
  std::vector<std::string> ips;
  uint16_t port = 0;
};

Published parse_published(const std::string& text, int peer) {
  const auto colon = text.rfind(':');
  SHOAL_CHECK(colon != std::string::npos && colon > 0, Internal, "malformed address '" << text << "' of rank " << peer);
  Published p;
  p.port = static_cast<uint16_t>(std::stoi(text.substr(colon + 1)));
  std::stringstream ss(text.substr(0, colon));
  for (std::string ip; std::getline(ss, ip, ',');) p.ips.push_back(ip);
  return p;
}

int connect_rail(const std::string& ip, uint16_t port, const Hello& hello, Clock::time_point deadline, int peer) {
  int fd = connect_with_retry(ip, port, deadline, "rank " + std::to_string(peer) + " at " + ip);
  std::string err;
  if (!write_all(fd, &hello, sizeof hello, deadline, err)) {
    close(fd);
    SHOAL_THROW(PeerFailure, "handshake with rank " << peer << " at " << ip << " failed: " << err, peer);
  }
  configure_data_socket(fd);
  return fd;
}

}  // namespace

std::vector<std::vector<int>> connect_mesh(Store& store, const std::string& key_prefix, int rank, int size,
                                           uint64_t comm_id, const std::vector<InterfaceAddress>& rails,
                                           Clock::time_point deadline) {
  std::vector<std::vector<int>> fds(size);
  if (size == 1) return fds;
  uint16_t port = 0;
  int listener = listen_on(rails.size() > 1 ? "0.0.0.0" : rails.front().ip, port);
  struct PendingRank {
    int primary = -1;
    size_t announced = 0;
    std::vector<int> extras;
  };
  std::map<int, PendingRank> pending;  // higher ranks with some of their connections in
  auto cleanup = [&] {
    close(listener);
    for (auto& peer : fds)
      for (int fd : peer) close(fd);
    for (auto& [peer, pd] : pending) {
      if (pd.primary >= 0) close(pd.primary);
      for (int fd : pd.extras) close(fd);
    }
  };
  try {
    std::string published;
    for (const auto& r : rails) published += (published.empty() ? "" : ",") + r.ip;
    store.set(key_prefix + "/addr/" + std::to_string(rank), published + ":" + std::to_string(port));
    Hello hello;
    hello.comm_id = comm_id;
    hello.rank = rank;
    hello.size = size;
    // Connect to every lower rank: first one connection per extra NIC the pair shares (a NIC
    // whose connection fails is left out, with a warning), then the primary one, which tells
    // the acceptor how many there are. The handshake needs no answer (a rejected connection is
    // closed by the acceptor and shows up as a broken connection at the first frame).
    for (int peer = 0; peer < rank; ++peer) {
      const Published theirs = parse_published(store.get_string(key_prefix + "/addr/" + std::to_string(peer)), peer);
      std::vector<int> extras;
      std::vector<std::string> used;
      for (size_t mine = 1; mine < rails.size(); ++mine) {
        for (size_t j = 1; j < theirs.ips.size(); ++j) {
          in_addr a{};
          if (inet_pton(AF_INET, theirs.ips[j].c_str(), &a) != 1 || !rails[mine].same_subnet(a.s_addr)) continue;
          if (std::find(used.begin(), used.end(), theirs.ips[j]) != used.end()) continue;
          if (std::any_of(rails.begin(), rails.end(), [&](const InterfaceAddress& r) { return r.address == a.s_addr; }))
            continue;  // our own address: the same network on both hosts is no rail between them
          hello.rail = static_cast<uint16_t>(extras.size() + 1);
          hello.rails = static_cast<uint16_t>(rails.size());
          try {
            extras.push_back(connect_rail(theirs.ips[j], theirs.port, hello,
                                          std::min(deadline, Clock::now() + std::chrono::seconds(2)), peer));
            used.push_back(theirs.ips[j]);
          } catch (const Error& e) {
            SHOAL_WARN("rank " << rank << ": no extra connection to rank " << peer << " over " << rails[mine].name
                               << " (" << e.what() << "); using the others");
          }
          break;
        }
      }
      hello.rail = 0;
      hello.rails = static_cast<uint16_t>(extras.size() + 1);
      fds[peer].push_back(connect_rail(theirs.ips.front(), theirs.port, hello, deadline, peer));
      fds[peer].insert(fds[peer].end(), extras.begin(), extras.end());
    }
    // Accept every connection of every higher rank; a rank is connected once its rail 0 and
    // the extra rails that rail 0 announced are all in (in any order).
    int expected = size - 1 - rank;
    while (expected > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        std::ostringstream missing;
        for (int p = rank + 1; p < size; ++p)
          if (fds[p].empty()) missing << " " << p;
        SHOAL_THROW(Timeout, "rank " << rank << " waited for connections from ranks" << missing.str()
                                     << " until the timeout: did they start, and can they reach "
                                     << published << "? (SHOAL_TIMEOUT, SHOAL_SOCKET_IFNAME)");
      }
      pollfd p{listener, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000))) <= 0) continue;
      int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      Hello h;
      std::string err;
      if (!read_all(fd, &h, sizeof h, std::min(deadline, Clock::now() + std::chrono::seconds(10)), err)) {
        SHOAL_WARN("dropped a connection that sent no handshake: " << err);
        close(fd);
        continue;
      }
      auto bad = validate(h, comm_id, size);
      if (!bad && (h.rank <= rank || !fds[h.rank].empty() || (h.rail == 0 && pending[h.rank].primary >= 0)))
        bad = "unexpected or duplicate rank " + std::to_string(h.rank);
      if (bad) {
        SHOAL_WARN("dropped a connection with an invalid handshake: " << *bad);
        close(fd);
        continue;
      }
      configure_data_socket(fd);
      PendingRank& pd = pending[h.rank];
      if (h.rail == 0) {
        pd.primary = fd;
        pd.announced = h.rails;
      } else {
        pd.extras.push_back(fd);
      }
      if (pd.primary >= 0 && pd.extras.size() + 1 >= pd.announced) {
        fds[h.rank].push_back(pd.primary);
        fds[h.rank].insert(fds[h.rank].end(), pd.extras.begin(), pd.extras.end());
        pending.erase(h.rank);
        --expected;
      }
    }
  } catch (...) {
    cleanup();
    throw;
  }
  close(listener);
  return fds;
}

}  // namespace shoal::transport::tcp
