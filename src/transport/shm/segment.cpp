#include "transport/shm/segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>

#include "core/check.hpp"

namespace shoal::transport::shm {

namespace {
// Copies `len` bytes between `local` in this process and `remote_addr` in process `pid` with
// `copy` (process_vm_readv or process_vm_writev), resuming after partial copies.
template <typename Copy>
bool cross_copy(Copy copy, const char* name, int pid, uint64_t remote_addr, uint8_t* local,
                uint64_t len, std::string& error) {
  while (len > 0) {
    iovec here{local, len};
    iovec there{reinterpret_cast<void*>(remote_addr), len};
    const ssize_t n = copy(pid, &here, 1, &there, 1, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      error = std::string(name) +
              (n < 0 ? std::string(": ") + strerror(errno) : std::string(" copied nothing"));
      return false;
    }
    local += n;
    remote_addr += static_cast<uint64_t>(n);
    len -= static_cast<uint64_t>(n);
  }
  return true;
}
}  // namespace

bool pull_from(int pid, uint64_t remote_addr, void* dst, uint64_t len, std::string& error) {
  return cross_copy(process_vm_readv, "process_vm_readv", pid, remote_addr,
                    static_cast<uint8_t*>(dst), len, error);
}

bool push_to(int pid, uint64_t remote_addr, const void* src, uint64_t len, std::string& error) {
  return cross_copy(process_vm_writev, "process_vm_writev", pid, remote_addr,
                    const_cast<uint8_t*>(static_cast<const uint8_t*>(src)), len, error);
}

std::string segment_name(uint64_t comm_id, int rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "/shoal-%016llx-%d", static_cast<unsigned long long>(comm_id),
                rank);
  return buf;
}

size_t Segment::bytes_for(uint32_t rings, uint64_t ring_bytes, uint64_t region_bytes) {
  return sizeof(SegmentHeader) + static_cast<size_t>(rings) * (sizeof(RingHeader) + ring_bytes) +
         region_bytes;
}

uint8_t* Segment::region() const {
  const auto& h = header();
  return base_ + sizeof(SegmentHeader) +
         static_cast<size_t>(h.rings) * (sizeof(RingHeader) + h.ring_bytes);
}

RingHeader& Segment::ring(uint32_t slot) const {
  const auto& h = header();
  return *reinterpret_cast<RingHeader*>(base_ + sizeof(SegmentHeader) +
                                        static_cast<size_t>(slot) *
                                            (sizeof(RingHeader) + h.ring_bytes));
}

uint8_t* Segment::ring_data(uint32_t slot) const {
  return reinterpret_cast<uint8_t*>(&ring(slot)) + sizeof(RingHeader);
}

std::unique_ptr<Segment> Segment::create(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  SHOAL_CHECK(fd >= 0, Internal, "shm_open(" << name << "): " << strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(name.c_str());
    SHOAL_THROW(Internal, "cannot size shared memory " << name << " to " << bytes
                                                       << " bytes: " << strerror(e)
                                                       << " (is /dev/shm large enough?)");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    int e = errno;
    shm_unlink(name.c_str());
    SHOAL_THROW(Internal, "cannot map shared memory " << name << ": " << strerror(e));
  }
  return std::unique_ptr<Segment>(new Segment(name, static_cast<uint8_t*>(p), bytes));
}

std::unique_ptr<Segment> Segment::open(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  SHOAL_CHECK(fd >= 0, Internal, "shm_open(" << name << "): " << strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    close(fd);
    SHOAL_THROW(Internal, "shared memory " << name << " is smaller than expected");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  SHOAL_CHECK(p != MAP_FAILED, Internal,
              "cannot map shared memory " << name << ": " << strerror(errno));
  auto seg = std::unique_ptr<Segment>(new Segment(name, static_cast<uint8_t*>(p), bytes));
  seg->linked_ = false;  // the owner unlinks it
  return seg;
}

Segment::~Segment() {
  munmap(base_, size_);
  if (linked_) shm_unlink(name_.c_str());
}

void Segment::unlink() {
  if (linked_) shm_unlink(name_.c_str());
  linked_ = false;
}

uint64_t own_pid_namespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

std::optional<SegmentOwner> segment_owner(const std::string& name) {
  const std::string path = "/dev/shm/" + (name.rfind('/', 0) == 0 ? name.substr(1) : name);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  // The header's plain fields, from the file's bytes (its atomics are not touched).
  unsigned char raw[sizeof(SegmentHeader)];
  const bool whole = ::pread(fd, raw, sizeof raw, 0) == static_cast<ssize_t>(sizeof raw);
  ::close(fd);
  if (!whole) return std::nullopt;
  auto field = [&](auto& out, size_t offset) { std::memcpy(&out, raw + offset, sizeof out); };
  uint32_t magic = 0;
  SegmentOwner owner;
  field(magic, offsetof(SegmentHeader, magic));
  if (magic != kSegmentMagic) return std::nullopt;
  field(owner.rank, offsetof(SegmentHeader, rank));
  field(owner.pid, offsetof(SegmentHeader, pid));
  field(owner.pid_namespace, offsetof(SegmentHeader, pid_namespace));
  return owner;
}

int sweep_orphans() {
  const uint64_t ns = own_pid_namespace();
  if (ns == 0) return 0;  // no way to tell whose pids the headers hold
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return 0;
  int removed = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (std::strncmp(e->d_name, "shoal-", 6) != 0) continue;
    const auto owner = segment_owner(e->d_name);
    if (!owner || owner->pid <= 0 || owner->pid_namespace != ns) continue;
    if (::kill(owner->pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    if (shm_unlink((std::string("/") + e->d_name).c_str()) == 0) {
      ++removed;
      SHOAL_WARN("removed /dev/shm/" << e->d_name << ", left by rank " << owner->rank << " (pid "
                                     << owner->pid
                                     << "), which died while its communicator was being created");
    }
  }
  ::closedir(dir);
  return removed;
}

}  // namespace shoal::transport::shm
