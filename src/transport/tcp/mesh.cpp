#include "transport/tcp/mesh.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "core/check.hpp"
#include "transport/frame.hpp"

namespace shoal::transport::tcp {

std::vector<int> connect_mesh(Store& store, const std::string& key_prefix, int rank, int size,
                              uint64_t comm_id, const std::string& listen_ip,
                              Clock::time_point deadline) {
  std::vector<int> fds(size, -1);
  if (size == 1) return fds;
  uint16_t port = 0;
  int listener = listen_on(listen_ip, port);
  auto cleanup = [&] {
    close(listener);
    for (int& fd : fds)
      if (fd >= 0) { close(fd); fd = -1; }
  };
  try {
    store.set(key_prefix + "/addr/" + std::to_string(rank), listen_ip + ":" + std::to_string(port));
    Hello hello;
    hello.comm_id = comm_id;
    hello.rank = rank;
    hello.size = size;
    // Connect to every lower rank; the handshake needs no answer (a rejected connection is
    // closed by the acceptor and shows up as a broken connection at the first frame).
    for (int peer = 0; peer < rank; ++peer) {
      std::string addr = store.get_string(key_prefix + "/addr/" + std::to_string(peer));
      auto colon = addr.rfind(':');
      SHOAL_CHECK(colon != std::string::npos, Internal, "malformed address '" << addr << "' of rank " << peer);
      int fd = connect_with_retry(addr.substr(0, colon),
                                  static_cast<uint16_t>(std::stoi(addr.substr(colon + 1))), deadline,
                                  "rank " + std::to_string(peer));
      std::string err;
      if (!write_all(fd, &hello, sizeof hello, deadline, err)) {
        close(fd);
        SHOAL_THROW(PeerFailure, "handshake with rank " << peer << " failed: " << err, peer);
      }
      configure_data_socket(fd);
      fds[peer] = fd;
    }
    // Accept every higher rank.
    int expected = size - 1 - rank;
    while (expected > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        std::ostringstream missing;
        for (int p = rank + 1; p < size; ++p)
          if (fds[p] < 0) missing << " " << p;
        SHOAL_THROW(Timeout, "rank " << rank << " waited for connections from ranks" << missing.str()
                                     << " until the timeout: did they start, and can they reach "
                                     << listen_ip << "? (SHOAL_TIMEOUT, SHOAL_SOCKET_IFNAME)");
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
      if (auto bad = validate(h, comm_id, size); bad || h.rank <= rank || fds[h.rank] >= 0) {
        SHOAL_WARN("dropped a connection with an invalid handshake: "
                   << (bad ? *bad : "unexpected or duplicate rank " + std::to_string(h.rank)));
        close(fd);
        continue;
      }
      configure_data_socket(fd);
      fds[h.rank] = fd;
      --expected;
    }
  } catch (...) {
    cleanup();
    throw;
  }
  close(listener);
  return fds;
}

}  // namespace shoal::transport::tcp
