// Shared-memory streams and segments: ring wrap-around and partial writes, the end of a
// stream after the peer goes, the out-of-band abort note, and nothing left in /dev/shm (not
// even by a rank killed during set-up).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <vector>

#include "shoal/error.hpp"
#include "shoal/store.hpp"
#include "transport/shm/ring_stream.hpp"
#include "transport/shm/segment.hpp"
#include "transport/shm/shm_mesh.hpp"

namespace shoal::transport::shm {
namespace {

int count_shoal_segments() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    n += e.path().filename().string().rfind("shoal-", 0) == 0;
  return n;
}

// Two ranks' segments in this process, with one ring each way, and a socket pair between them.
struct Pair {
  static constexpr uint64_t kRing = 4096;
  std::unique_ptr<Segment> a, b;
  std::unique_ptr<RingStream> ab, ba;  // a's view, b's view
  Pair() {
    const size_t bytes = Segment::bytes_for(2, kRing, 0);
    a = Segment::create(segment_name(0x1234, 0), bytes);
    b = Segment::create(segment_name(0x1234, 1), bytes);
    for (auto* s : {a.get(), b.get()}) {
      auto* h = new (s->base()) SegmentHeader();
      h->ring_bytes = kRing;
      h->rings = 2;
      new (&s->ring(0)) RingHeader();
      new (&s->ring(1)) RingHeader();
    }
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
    // a writes to b in a's slot 1; b writes to a in b's slot 0
    ab = std::make_unique<RingStream>(RingView{&a->ring(1), a->ring_data(1), kRing},
                                      RingView{&b->ring(0), b->ring_data(0), kRing}, &a->header(),
                                      &b->header(), sv[0]);
    ba = std::make_unique<RingStream>(RingView{&b->ring(0), b->ring_data(0), kRing},
                                      RingView{&a->ring(1), a->ring_data(1), kRing}, &b->header(),
                                      &a->header(), sv[1]);
  }
};

TEST(ShmRing, BytesArriveInOrderAcrossWrapAroundAndPartialWrites) {
  Pair p;
  std::vector<uint8_t> src(100000), dst(100000);
  std::iota(src.begin(), src.end(), 0);
  size_t written = 0, got = 0;
  std::mt19937 rng(7);
  while (got < src.size()) {
    if (written < src.size()) {
      // two iovecs of random sizes, like a header and a payload
      size_t n1 = std::min<size_t>(rng() % 700, src.size() - written);
      size_t n2 = std::min<size_t>(rng() % 3000, src.size() - written - n1);
      iovec iov[2] = {{src.data() + written, n1}, {src.data() + written + n1, n2}};
      ssize_t n = p.ab->writev(iov, 2);
      if (n > 0)
        written += static_cast<size_t>(n);
      else
        ASSERT_EQ(errno, EAGAIN);
      EXPECT_LE(n, static_cast<ssize_t>(Pair::kRing));
    }
    ssize_t r = p.ba->read(dst.data() + got, rng() % 5000 + 1);
    if (r > 0)
      got += static_cast<size_t>(r);
    else
      ASSERT_EQ(errno, EAGAIN);
  }
  EXPECT_EQ(src, dst);
}

TEST(ShmRing, FullRingRefusesThenReportsReady) {
  Pair p;
  std::vector<uint8_t> buf(Pair::kRing);
  iovec iov{buf.data(), buf.size()};
  EXPECT_EQ(p.ab->writev(&iov, 1), static_cast<ssize_t>(Pair::kRing));
  EXPECT_EQ(p.ab->writev(&iov, 1), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_FALSE(p.ab->ready());  // full, nothing to read
  EXPECT_TRUE(p.ba->ready());   // input waiting
  char one;
  EXPECT_EQ(p.ba->read(&one, 1), 1);
  EXPECT_TRUE(p.ab->ready());  // room again for the writer that found the ring full
}

TEST(ShmRing, EndOfStreamOnlyAfterThePeersDataIsRead) {
  Pair p;
  const char msg[] = "last words";
  iovec iov{const_cast<char*>(msg), sizeof msg};
  ASSERT_EQ(p.ab->writev(&iov, 1), static_cast<ssize_t>(sizeof msg));
  p.ab->shutdown_write();   // the peer's socket ends, as when its process exits
  p.ba->notify_readable();  // what epoll would report
  char got[sizeof msg];
  ASSERT_EQ(p.ba->read(got, sizeof got), static_cast<ssize_t>(sizeof msg));
  EXPECT_STREQ(got, msg);
  EXPECT_EQ(p.ba->read(got, sizeof got), 0);  // then the end
}

TEST(ShmRing, AbortNoteTravelsOutOfBand) {
  Pair p;
  EXPECT_FALSE(p.ba->peer_abort().has_value());
  EXPECT_TRUE(p.ab->post_abort(ErrorCode::PeerFailure, 3, "rank 3 died"));
  auto note = p.ba->peer_abort();
  ASSERT_TRUE(note.has_value());
  EXPECT_EQ(note->code, ErrorCode::PeerFailure);
  EXPECT_EQ(note->culprit, 3);
  EXPECT_EQ(note->message, "rank 3 died");
}

TEST(ShmSegment, UnlinkLeavesTheMappingAndNoName) {
  const int before = count_shoal_segments();
  auto seg = Segment::create(segment_name(0xabcdef, 7), 8192);
  EXPECT_EQ(count_shoal_segments(), before + 1);
  auto other = Segment::open(segment_name(0xabcdef, 7), 8192);
  seg->unlink();
  EXPECT_EQ(count_shoal_segments(), before);
  seg->base()[100] = 42;  // both mappings still work and share the memory
  EXPECT_EQ(other->base()[100], 42);
  EXPECT_THROW(Segment::open(segment_name(0xabcdef, 7), 8192), Error);
}

bool segment_exists(uint64_t comm_id, int rank) {
  return std::filesystem::exists("/dev/shm" + segment_name(comm_id, rank));
}

// A segment as a rank leaves it when killed during set-up: created, header written (with its
// pid) when `with_header`, never unlinked. Runs in a child process that exits at once.
void leave_segment_from_a_dead_process(uint64_t comm_id, int rank, bool with_header) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    auto seg = Segment::create(segment_name(comm_id, rank), 8192);
    if (with_header) {
      auto* h = new (seg->base()) SegmentHeader();
      h->rank = rank;
      h->comm_id = comm_id;
      h->pid = ::getpid();
      h->pid_namespace = own_pid_namespace();
    }
    ::_exit(0);  // no destructor: the name stays, as after SIGKILL
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(segment_exists(comm_id, rank));
}

TEST(ShmSegment, SweepRemovesOnlySegmentsWhoseCreatorDied) {
  const uint64_t comm = 0x5eed0000ull + static_cast<uint64_t>(::getpid());
  leave_segment_from_a_dead_process(comm, 1, true);
  leave_segment_from_a_dead_process(comm, 2, false);  // died before writing its header
  auto live = Segment::create(segment_name(comm, 0), 8192);
  auto* h = new (live->base()) SegmentHeader();
  h->pid = ::getpid();
  h->pid_namespace = own_pid_namespace();
  // Not a count: any communicator created meanwhile (ctest runs tests side by side) sweeps too,
  // and may be the one that removes this orphan.
  sweep_orphans();
  EXPECT_FALSE(segment_exists(comm, 1)) << "the dead creator's segment must go";
  EXPECT_TRUE(segment_exists(comm, 0)) << "a live creator's segment must stay";
  EXPECT_TRUE(segment_exists(comm, 2))
      << "a segment without a header says nothing about its creator";
  ::shm_unlink(segment_name(comm, 2).c_str());
}

TEST(ShmMesh, AFailedSetUpRemovesEveryLocalRanksName) {
  // Rank 1 of 2 was killed after creating its segment, before writing its header or publishing
  // its name: rank 0's set-up times out waiting for the name and removes both segments.
  const uint64_t comm = 0xfa11000000ull + static_cast<uint64_t>(::getpid());
  leave_segment_from_a_dead_process(comm, 1, false);
  const auto dir =
      std::filesystem::temp_directory_path() / ("shoal_test_shm_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  FileStore store((dir / "store").string(), std::chrono::milliseconds(300));
  EXPECT_THROW(ShmMesh(store, "job", 0, {0, 0}, comm), TimeoutError);
  EXPECT_FALSE(segment_exists(comm, 0)) << "this rank's own segment";
  EXPECT_FALSE(segment_exists(comm, 1))
      << "the dead peer's segment, whose name was never published";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace shoal::transport::shm
