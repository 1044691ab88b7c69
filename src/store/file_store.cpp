// FileStore: a store in one file, shared by processes through flock(2).
//
// The file is an append-only log: an 8-byte magic, then records
//   u8 kind ('S' set, 'D' delete), u64 key length, key, u64 value length, value
// (native-endian). Every operation opens the file, takes flock (shared to read, exclusive to
// write), replays the log and, to write, appends one record. Opening per operation makes the
// class thread-safe without a mutex (flock excludes separate open file descriptions, even in
// one process) and lets the file be deleted once the job is done. A record cut short by a
// crash is ignored by readers and truncated by the next writer.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "core/check.hpp"
#include "shoal/store.hpp"

namespace shoal {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kMagic[8] = {'S', 'H', 'O', 'A', 'L', 'F', 'S', '1'};
constexpr uint8_t kSet = 'S';
constexpr uint8_t kDelete = 'D';

struct Log {
  std::unordered_map<std::string, Bytes> data;
  uint64_t valid_end = 0;  // end of the last complete record
  uint64_t size = 0;
};

class LockedFile {
 public:
  LockedFile(const std::string& path, bool exclusive) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      int err = errno;
      SHOAL_THROW(
          InvalidArgument,
          "cannot open the file store '"
              << path << "': " << std::strerror(err)
              << ". The directory must exist and be writable on every host (for several hosts, use "
                 "a "
              << "shared file system), or use a TCP store instead (unset SHOAL_STORE_PATH)");
    }
    while (::flock(fd_, exclusive ? LOCK_EX : LOCK_SH) != 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd_);
      SHOAL_THROW(Internal,
                  "flock on the file store '"
                      << path << "' failed: " << std::strerror(err)
                      << " (does this file system support flock? NFS needs lock support enabled)");
    }
  }
  ~LockedFile() { ::close(fd_); }  // also releases the lock
  LockedFile(const LockedFile&) = delete;
  LockedFile& operator=(const LockedFile&) = delete;

  Log read() const {
    struct stat st {};
    SHOAL_CHECK(::fstat(fd_, &st) == 0, Internal,
                "fstat of the file store '" << path_ << "' failed: " << std::strerror(errno));
    std::string buf(static_cast<size_t>(st.st_size), '\0');
    size_t off = 0;
    while (off < buf.size()) {
      ssize_t n = ::pread(fd_, buf.data() + off, buf.size() - off, static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      SHOAL_CHECK(n >= 0, Internal,
                  "reading the file store '" << path_ << "' failed: " << std::strerror(errno));
      if (n == 0) break;
      off += static_cast<size_t>(n);
    }
    buf.resize(off);
    Log log;
    log.size = buf.size();
    if (buf.empty()) return log;
    if (buf.size() < sizeof kMagic) return log;  // a writer died before finishing the magic
    SHOAL_CHECK(std::memcmp(buf.data(), kMagic, sizeof kMagic) == 0, InvalidArgument,
                "'" << path_
                    << "' is not a shoal file store (it holds other data); point SHOAL_STORE_PATH "
                    << "at a new file, or delete this one if it is a leftover");
    size_t pos = sizeof kMagic;
    log.valid_end = pos;
    auto u64 = [&](uint64_t& v) {
      if (buf.size() - pos < 8) return false;
      std::memcpy(&v, buf.data() + pos, 8);
      pos += 8;
      return true;
    };
    while (pos < buf.size()) {
      const uint8_t kind = static_cast<uint8_t>(buf[pos++]);
      uint64_t klen, vlen;
      if (!u64(klen) || buf.size() - pos < klen) break;
      std::string key(buf.data() + pos, klen);
      pos += klen;
      if (!u64(vlen) || buf.size() - pos < vlen) break;
      if (kind == kSet) {
        log.data[key] = Bytes(buf.begin() + static_cast<std::ptrdiff_t>(pos),
                              buf.begin() + static_cast<std::ptrdiff_t>(pos + vlen));
      } else if (kind == kDelete) {
        log.data.erase(key);
      } else {
        SHOAL_THROW(InvalidArgument, "the file store '" << path_ << "' is corrupt (record kind "
                                                        << int(kind) << " at offset " << pos
                                                        << "); delete it and restart the job");
      }
      pos += vlen;
      log.valid_end = pos;
    }
    return log;
  }

  void append(const Log& log, uint8_t kind, const std::string& key, const Bytes& value) {
    std::string rec;
    if (log.valid_end == 0) rec.append(kMagic, sizeof kMagic);
    // Drop a record a crashed writer left half-written.
    if (log.size != log.valid_end)
      SHOAL_CHECK(::ftruncate(fd_, static_cast<off_t>(log.valid_end)) == 0, Internal,
                  "truncating the file store '" << path_ << "' failed: " << std::strerror(errno));
    rec.push_back(static_cast<char>(kind));
    uint64_t n = key.size();
    rec.append(reinterpret_cast<const char*>(&n), 8);
    rec += key;
    n = value.size();
    rec.append(reinterpret_cast<const char*>(&n), 8);
    rec.append(reinterpret_cast<const char*>(value.data()), value.size());
    size_t off = 0;
    while (off < rec.size()) {
      ssize_t w = ::pwrite(fd_, rec.data() + off, rec.size() - off,
                           static_cast<off_t>(log.valid_end + off));
      if (w < 0 && errno == EINTR) continue;
      SHOAL_CHECK(w > 0, Internal,
                  "writing the file store '" << path_ << "' failed: " << std::strerror(errno)
                                             << " (is the disk full?)");
      off += static_cast<size_t>(w);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
};

std::string keys_text(const std::vector<std::string>& keys) {
  std::string out;
  const size_t shown = std::min<size_t>(keys.size(), 5);
  for (size_t i = 0; i < shown; ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > shown) out += " and " + std::to_string(keys.size() - shown) + " more";
  return out;
}

// Polls `ready` under a shared lock with a short, growing sleep until it holds or time is up.
template <class Ready>
void poll_until(const std::string& path, const std::vector<std::string>& keys, Milliseconds timeout,
                const char* op, Ready ready) {
  const auto start = Clock::now();
  Milliseconds sleep(1);
  for (;;) {
    {
      LockedFile f(path, false);
      if (ready(f.read())) return;
    }
    const auto waited = std::chrono::duration_cast<Milliseconds>(Clock::now() - start);
    if (waited >= timeout) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.1f s", static_cast<double>(timeout.count()) / 1000.0);
      SHOAL_THROW(
          Timeout,
          "store "
              << op << " timed out after " << secs << " waiting for key(s) " << keys_text(keys)
              << " in the file store '" << path << "': no process has set them. Check "
              << "that every rank uses the same path (on a file system every host shares), reached "
                 "this "
              << "point and runs the same program; if ranks start slowly, raise SHOAL_TIMEOUT");
    }
    std::this_thread::sleep_for(std::min(sleep, timeout - waited));
    sleep = std::min(sleep * 2, Milliseconds(20));
  }
}

}  // namespace

FileStore::FileStore(std::string path, Milliseconds timeout) : path_(std::move(path)) {
  SHOAL_CHECK(!path_.empty(), InvalidArgument, "FileStore needs a file path, got an empty one");
  timeout_ = timeout;
  LockedFile probe(path_, false);  // fails now, with a clear message, if the path is unusable
  probe.read();
}

FileStore::~FileStore() = default;

void FileStore::set(const std::string& key, const Bytes& value) {
  LockedFile f(path_, true);
  f.append(f.read(), kSet, key, value);
}

Bytes FileStore::get(const std::string& key) {
  Bytes out;
  poll_until(path_, {key}, timeout_, "get", [&](const Log& log) {
    auto it = log.data.find(key);
    if (it == log.data.end()) return false;
    out = it->second;
    return true;
  });
  return out;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  LockedFile f(path_, true);
  Log log = f.read();
  int64_t value = 0;
  if (auto it = log.data.find(key); it != log.data.end()) {
    const char* b = reinterpret_cast<const char*>(it->second.data());
    auto r = std::from_chars(b, b + it->second.size(), value);
    SHOAL_CHECK(
        r.ec == std::errc() && r.ptr == b + it->second.size() && !it->second.empty(),
        InvalidArgument,
        "store add on key '" << key << "' whose value is not an integer (it was set with set())");
  }
  value = static_cast<int64_t>(static_cast<uint64_t>(value) + static_cast<uint64_t>(delta));
  std::string text = std::to_string(value);
  f.append(log, kSet, key, Bytes(text.begin(), text.end()));
  return value;
}

void FileStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  poll_until(path_, keys, timeout, "wait", [&](const Log& log) {
    for (const auto& k : keys)
      if (!log.data.count(k)) return false;
    return true;
  });
}

bool FileStore::check(const std::vector<std::string>& keys) {
  LockedFile f(path_, false);
  Log log = f.read();
  for (const auto& k : keys)
    if (!log.data.count(k)) return false;
  return true;
}

bool FileStore::remove(const std::string& key) {
  LockedFile f(path_, true);
  Log log = f.read();
  if (!log.data.count(key)) return false;
  f.append(log, kDelete, key, {});
  return true;
}

}  // namespace shoal
