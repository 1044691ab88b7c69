// StripedStream: one byte stream over several sockets. Bytes arrive whole and in order
// whatever the rails' buffer sizes and the sizes of writes and reads; every rail carries a
// share; the end of the stream comes only after all of it; a corrupt segment is rejected; bytes
// held back for order count as arrived.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "transport/tcp/striped_stream.hpp"

namespace shoal::transport::tcp {
namespace {

// `rails` socket pairs with small kernel buffers, so that writes are often partial.
struct Striped {
  std::unique_ptr<StripedStream> a, b;
  explicit Striped(int rails, int buffer = 32 << 10) {
    std::vector<int> left, right;
    for (int i = 0; i < rails; ++i) {
      int sv[2];
      EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
      for (int fd : sv) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      }
      left.push_back(sv[0]);
      right.push_back(sv[1]);
    }
    a = std::make_unique<StripedStream>(left);
    b = std::make_unique<StripedStream>(right);
  }
};

// `n` non-blocking socket pairs without a StripedStream on the writing side: the test writes
// raw bytes into `left` and reads through a StripedStream over `right`.
struct RawPairs {
  std::vector<int> left, right;
  explicit RawPairs(int n) {
    for (int i = 0; i < n; ++i) {
      int sv[2];
      EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
      left.push_back(sv[0]);
      right.push_back(sv[1]);
    }
  }
};

void wait_for_events(const StripedStream& s, int ms = 10) {
  pollfd p{s.fd(), POLLIN, 0};
  poll(&p, 1, ms);
}

// Sends `data` from a to b with writes of random sizes (random iovec splits) and reads of
// random sizes, interleaved as a progress engine would; returns what b received.
std::vector<uint8_t> transfer(Striped& s, const std::vector<uint8_t>& data, std::mt19937& rng) {
  std::vector<uint8_t> got;
  size_t sent = 0;
  std::uniform_int_distribution<size_t> write_size(1, 700 << 10), read_size(1, 300 << 10);
  std::vector<uint8_t> buffer(300 << 10);
  while (got.size() < data.size()) {
    if (sent < data.size()) {
      const size_t want = std::min(write_size(rng), data.size() - sent);
      const size_t cut = want / 3;  // two iovec pieces, as a frame header and its payload
      iovec iov[2] = {{const_cast<uint8_t*>(data.data() + sent), cut},
                      {const_cast<uint8_t*>(data.data() + sent + cut), want - cut}};
      const ssize_t n = s.a->writev(iov, 2);
      if (n < 0)
        EXPECT_EQ(errno, EAGAIN);
      else
        sent += static_cast<size_t>(n);
    }
    s.a->notify_readable();  // moves what the rails owe
    s.b->notify_readable();
    for (;;) {
      const ssize_t n = s.b->read(buffer.data(), read_size(rng));
      if (n < 0) {
        EXPECT_EQ(errno, EAGAIN);
        break;
      }
      EXPECT_GT(n, 0) << "end of stream before the end of the data";
      if (n <= 0) return got;
      got.insert(got.end(), buffer.begin(), buffer.begin() + n);
    }
    if (sent == data.size()) wait_for_events(*s.b, 1);
  }
  return got;
}

TEST(StripedStream, DeliversEveryByteInOrderOverAnyNumberOfRails) {
  std::mt19937 rng(7);
  for (int rails : {1, 2, 3, 4}) {
    Striped s(rails);
    std::vector<uint8_t> data(9 * 1000 * 1000 + 17);
    for (auto& x : data) x = static_cast<uint8_t>(rng());
    auto got = transfer(s, data, rng);
    ASSERT_EQ(got.size(), data.size()) << rails << " rails";
    EXPECT_TRUE(got == data) << rails << " rails: bytes corrupted or reordered";
    // Every rail carried part of it.
    for (uint64_t bytes : s.a->bytes_per_rail())
      EXPECT_GT(bytes, data.size() / (8 * rails)) << rails << " rails";
  }
}

TEST(StripedStream, EndOfStreamComesAfterAllData) {
  Striped s(3, 1 << 20);
  std::vector<uint8_t> data(2 << 20, 0x5a);
  size_t sent = 0;
  // Send while reading, as the engine would.
  std::vector<uint8_t> got, buffer(1 << 16);
  for (int i = 0; i < 100000 && got.size() < data.size(); ++i) {
    if (sent < data.size()) {
      iovec part{data.data() + sent, data.size() - sent};
      const ssize_t n = s.a->writev(&part, 1);
      if (n > 0) sent += static_cast<size_t>(n);
    }
    s.a->notify_readable();
    s.b->notify_readable();
    const ssize_t n = s.b->read(buffer.data(), buffer.size());
    if (n > 0) got.insert(got.end(), buffer.begin(), buffer.begin() + n);
  }
  s.a->shutdown_write();
  ASSERT_EQ(got.size(), data.size());
  ssize_t n = -1;
  for (int i = 0; i < 100 && n != 0; ++i) {
    n = s.b->read(buffer.data(), buffer.size());
    if (n < 0) wait_for_events(*s.b);
  }
  EXPECT_EQ(n, 0) << "the end of the stream must show once every rail has ended";
}

TEST(StripedStream, RejectsAStreamThatIsNotSegments) {
  RawPairs pairs(2);
  const auto& left = pairs.left;
  StripedStream b(pairs.right);
  const char junk[32] = "this is not a striped segment!!";
  ASSERT_EQ(write(left[1], junk, sizeof junk), static_cast<ssize_t>(sizeof junk));
  char buffer[64];
  b.notify_readable();
  errno = 0;
  EXPECT_EQ(b.read(buffer, sizeof buffer), -1);
  EXPECT_EQ(errno, EPROTO);
  for (int fd : left) close(fd);
}

TEST(StripedStream, APeerThatStopsMidSegmentIsAnError) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  int sv2[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv2), 0);
  StripedStream b({sv[1], sv2[1]});
  // A valid header announcing 100 bytes, then only 10 of them, then the end.
  struct {
    uint32_t magic, length;
    uint64_t seq;
  } h{0x53545250, 100, 0};
  ASSERT_EQ(write(sv[0], &h, sizeof h), static_cast<ssize_t>(sizeof h));
  char ten[10] = {};
  ASSERT_EQ(write(sv[0], ten, sizeof ten), 10);
  close(sv[0]);
  close(sv2[0]);
  char buffer[128];
  errno = 0;
  ssize_t n = b.read(buffer, sizeof buffer);
  EXPECT_EQ(n, -1);
  EXPECT_EQ(errno, ECONNRESET);
}

// A segment that overtook the one before it (on another rail) is not delivered yet, but its
// bytes count as heard from the peer (wire_bytes_in): a rail recovering from a loss must not
// make a live peer look silent.
TEST(StripedStream, BytesHeldForOrderCountAsArrived) {
  RawPairs pairs(2);
  const auto& left = pairs.left;
  StripedStream b(pairs.right);
  struct {
    uint32_t magic, length;
    uint64_t seq;
  } h{0x53545250, 4, 1};
  const char second[4] = {'e', 'f', 'g', 'h'}, first[4] = {'a', 'b', 'c', 'd'};
  ASSERT_EQ(write(left[1], &h, sizeof h), static_cast<ssize_t>(sizeof h));
  ASSERT_EQ(write(left[1], second, 4), 4);
  char buffer[16];
  errno = 0;
  EXPECT_EQ(b.read(buffer, sizeof buffer), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(b.wire_bytes_in(), sizeof h + 4);
  h.seq = 0;
  ASSERT_EQ(write(left[0], &h, sizeof h), static_cast<ssize_t>(sizeof h));
  ASSERT_EQ(write(left[0], first, 4), 4);
  ASSERT_EQ(b.read(buffer, sizeof buffer), 8);
  EXPECT_EQ(std::string(buffer, 8), "abcdefgh");
  EXPECT_EQ(b.wire_bytes_in(), 2 * (sizeof h + 4));
  for (int fd : left) close(fd);
}

}  // namespace
}  // namespace shoal::transport::tcp
