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
#include "transport/tcp/auth.hpp"

namespace shoal::transport::tcp {

namespace {

// A rank's published addresses: "ip1,ip2,...:port", the primary first.
struct Published {
  std::vector<std::string> ips;
  uint16_t port = 0;
};

Published parse_published(const std::string& text, int peer) {
  const auto colon = text.rfind(':');
  SHOAL_CHECK(colon != std::string::npos && colon > 0, Internal,
              "malformed address '" << text << "' of rank " << peer);
  Published p;
  p.port = static_cast<uint16_t>(std::stoi(text.substr(colon + 1)));
  std::stringstream ss(text.substr(0, colon));
  for (std::string ip; std::getline(ss, ip, ',');) p.ips.push_back(ip);
  return p;
}

// Sends the handshake on the connected socket `fd` (and authenticates, with a job key), then
// configures it for data; closes it and throws on failure. `deadline` bounds the handshake (an
// acceptor answers the authentication only once it has connected to the ranks below it).
int introduce(int fd, const std::string& ip, uint16_t port, Hello hello, Clock::time_point deadline,
              int peer) {
  const std::string& key = auth::job_key();
  if (!key.empty()) hello.reserved |= kHelloAuth;
  std::string err;
  if (!write_all(fd, &hello, sizeof hello, deadline, err)) {
    close(fd);
    SHOAL_THROW(PeerFailure, "handshake with rank " << peer << " at " << ip << " failed: " << err,
                peer);
  }
  try {
    if (!key.empty())
      authenticate_to(fd, hello, peer, ip + ":" + std::to_string(port), key, deadline);
    configure_data_socket(fd);
  } catch (...) {
    close(fd);
    throw;
  }
  return fd;
}

int connect_rail(const std::string& ip, uint16_t port, const Hello& hello,
                 Clock::time_point connect_by, Clock::time_point deadline, int peer) {
  const int fd =
      connect_with_retry(ip, port, connect_by, "rank " + std::to_string(peer) + " at " + ip);
  return introduce(fd, ip, port, hello, deadline, peer);
}

bool own_address(const std::vector<InterfaceAddress>& rails, uint32_t address) {
  return std::any_of(rails.begin(), rails.end(),
                     [&](const InterfaceAddress& r) { return r.address == address; });
}

}  // namespace

std::optional<std::string> HelloBook::admit(const Hello& h, int fd,
                                            std::vector<std::vector<int>>& fds) {
  if (auto bad = validate(h, comm_id_, size_)) return bad;
  if (h.rails > kMaxRails) return "peer announced " + std::to_string(h.rails) + " rails";
  if (h.rank <= rank_ || !fds[h.rank].empty())
    return "unexpected or duplicate rank " + std::to_string(h.rank);
  Pending& pd = pending_[h.rank];
  // A rail twice is a stranger or a confused peer: it would give the pair a connection too many.
  if ((h.rail == 0 && pd.primary >= 0) || (h.rail != 0 && pd.extras.count(h.rail)))
    return "duplicate rail " + std::to_string(h.rail) + " of rank " + std::to_string(h.rank);
  if (h.rail == 0) {
    // Rails announced before rail 0 must fit what it announces.
    if (!pd.extras.empty() && pd.extras.rbegin()->first >= h.rails)
      return "rank " + std::to_string(h.rank) + " announced " + std::to_string(h.rails) +
             " rails after connecting rail " + std::to_string(pd.extras.rbegin()->first);
    pd.primary = fd;
    pd.announced = h.rails;
  } else {
    if (pd.primary >= 0 && h.rail >= pd.announced)
      return "rail " + std::to_string(h.rail) + " of rank " + std::to_string(h.rank) +
             ", which announced " + std::to_string(pd.announced);
    pd.extras[h.rail] = fd;
  }
  if (pd.primary >= 0 && pd.extras.size() + 1 == pd.announced) {
    fds[h.rank].push_back(pd.primary);
    for (const auto& [rail, extra] : pd.extras) fds[h.rank].push_back(extra);
    pending_.erase(h.rank);
  }
  return std::nullopt;
}

std::vector<int> HelloBook::pending_fds() const {
  std::vector<int> out;
  for (const auto& [peer, pd] : pending_) {
    if (pd.primary >= 0) out.push_back(pd.primary);
    for (const auto& [rail, fd] : pd.extras) out.push_back(fd);
  }
  return out;
}

std::vector<std::vector<int>> connect_mesh(Store& store, const std::string& key_prefix, int rank,
                                           int size, uint64_t comm_id,
                                           const std::vector<InterfaceAddress>& rails,
                                           const std::vector<int>& host_of,
                                           Clock::time_point deadline) {
  std::vector<std::vector<int>> fds(size);
  if (size == 1) return fds;
  const std::string& key = auth::job_key();  // read (and, without one, warned about) once
  uint16_t port = 0;
  int listener = listen_on(rails.size() > 1 ? "0.0.0.0" : rails.front().ip, port);
  HelloBook book(rank, size, comm_id);  // higher ranks with some of their connections in
  auto cleanup = [&] {
    close(listener);
    for (auto& peer : fds)
      for (int fd : peer) close(fd);
    for (int fd : book.pending_fds()) close(fd);
  };
  try {
    streams_for(std::chrono::microseconds::zero());  // a bad SHOAL_SOCKET_STREAMS fails first
    std::string published;
    for (const auto& r : rails) published += (published.empty() ? "" : ",") + r.ip;
    store.set(key_prefix + "/addr/" + std::to_string(rank), published + ":" + std::to_string(port));
    Hello hello;
    hello.comm_id = comm_id;
    hello.rank = rank;
    hello.size = size;
    // Connect to every lower rank. The primary connection goes first: its handshake measured
    // the pair's round trip, which decides how many connections each rail gets (streams_for;
    // one on a LAN), and its hello announces them all. Then the extra NICs the pair shares and
    // the further streams; an extra NIC that cannot connect is replaced by the primary address
    // (with a warning), so that the count announced arrives. No handshake needs an answer (a
    // rejected connection is closed by the acceptor and shows up as a broken connection at the
    // first frame).
    for (int peer = 0; peer < rank; ++peer) {
      const Published theirs =
          parse_published(store.get_string(key_prefix + "/addr/" + std::to_string(peer)), peer);
      const std::string& primary_ip = theirs.ips.front();
      std::vector<std::string> extra_ips;  // their addresses reachable over our extra NICs
      for (size_t mine = 1; mine < rails.size(); ++mine) {
        for (size_t j = 1; j < theirs.ips.size(); ++j) {
          in_addr a{};
          if (inet_pton(AF_INET, theirs.ips[j].c_str(), &a) != 1 ||
              !rails[mine].same_subnet(a.s_addr))
            continue;
          if (std::find(extra_ips.begin(), extra_ips.end(), theirs.ips[j]) != extra_ips.end())
            continue;
          if (own_address(rails, a.s_addr))
            continue;  // our own address: the same network on both hosts is no rail between them
          extra_ips.push_back(theirs.ips[j]);
          break;
        }
      }
      const int primary = connect_with_retry(primary_ip, theirs.port, deadline,
                                             "rank " + std::to_string(peer) + " at " + primary_ip);
      // A pair on one host moves its data through shared memory: one socket does.
      const bool same_host =
          host_of[static_cast<size_t>(peer)] == host_of[static_cast<size_t>(rank)];
      const auto streams = static_cast<size_t>(
          same_host ? 1 : streams_for(measured_rtt(primary), data_congestion_control(primary)));
      // Streams beyond what the handshake can announce are dropped, rails kept.
      const size_t total = std::min<size_t>(streams * (1 + extra_ips.size()), kMaxRails);
      hello.rails = static_cast<uint16_t>(total);
      hello.rail = 0;
      fds[peer].push_back(introduce(primary, primary_ip, theirs.port, hello, deadline, peer));
      std::vector<std::string> targets;  // every further connection's address
      for (const auto& ip : extra_ips) targets.insert(targets.end(), streams, ip);
      targets.insert(targets.end(), streams - 1, primary_ip);
      targets.resize(total - 1);
      for (const auto& ip : targets) {
        hello.rail = static_cast<uint16_t>(fds[peer].size());
        int fd = -1;
        if (ip != primary_ip) {
          try {
            fd = connect_rail(ip, theirs.port, hello,
                              std::min(deadline, Clock::now() + std::chrono::seconds(2)), deadline,
                              peer);
          } catch (const Error& e) {
            SHOAL_WARN("rank " << rank << ": no connection to rank " << peer << " over " << ip
                               << " (" << e.what() << "); using " << primary_ip << " instead");
          }
        }
        if (fd < 0) fd = connect_rail(primary_ip, theirs.port, hello, deadline, deadline, peer);
        fds[peer].push_back(fd);
      }
    }
    // Accept every connection of every higher rank; a rank is connected once its rail 0 and
    // the extra rails that rail 0 announced are all in (in any order).
    int expected = size - 1 - rank;
    while (expected > 0) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        std::ostringstream missing;
        for (int p = rank + 1; p < size; ++p)
          if (fds[p].empty()) missing << " " << p;
        SHOAL_THROW(Timeout, "rank " << rank << " waited for connections from ranks"
                                     << missing.str()
                                     << " until the timeout: did they start, and can they reach "
                                     << published << "? (SHOAL_TIMEOUT, SHOAL_SOCKET_IFNAME)");
      }
      pollfd p{listener, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000))) <= 0) continue;
      sockaddr_in from{};
      socklen_t from_len = sizeof from;
      int fd = accept4(listener, reinterpret_cast<sockaddr*>(&from), &from_len, SOCK_CLOEXEC);
      if (fd < 0) continue;
      char from_ip[INET_ADDRSTRLEN] = "?";
      inet_ntop(AF_INET, &from.sin_addr, from_ip, sizeof from_ip);
      const std::string who = std::string(from_ip) + ":" + std::to_string(ntohs(from.sin_port));
      Hello h;
      std::string err;
      const auto handshake_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
      if (!read_all(fd, &h, sizeof h, handshake_deadline, err)) {
        SHOAL_WARN("dropped a connection from " << who << " that sent no handshake: " << err);
        close(fd);
        continue;
      }
      // Authentication before the handshake counts: a stranger never takes a rank's place.
      std::optional<std::string> refused;
      if (auto bad = validate(h, comm_id, size))
        refused = "invalid handshake: " + *bad;
      else if (key.empty() && (h.reserved & kHelloAuth))
        refused =
            "it authenticates, but this rank has no SHOAL_AUTH_KEY: set the same key on every rank";
      else if (!key.empty() && !(h.reserved & kHelloAuth))
        refused =
            "it does not authenticate (no SHOAL_AUTH_KEY there?): set the same key on every rank";
      else if (!key.empty() && !authenticate_from(fd, h, rank, key, handshake_deadline, err))
        refused = "Unauthorized: " + err;
      if (refused) {
        SHOAL_WARN("rank " << rank << ": dropped a connection from " << who
                           << " claiming to be rank " << h.rank << ": " << *refused);
        close(fd);
        continue;
      }
      if (auto bad = book.admit(h, fd, fds)) {
        SHOAL_WARN("dropped a connection with an invalid handshake: " << *bad);
        close(fd);
        continue;
      }
      configure_data_socket(fd);
      if (!fds[h.rank].empty()) --expected;  // this connection completed rank h.rank
    }
  } catch (...) {
    cleanup();
    throw;
  }
  close(listener);
  return fds;
}

}  // namespace shoal::transport::tcp
