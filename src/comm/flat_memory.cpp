#include "comm/flat_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string>

#include "core/check.hpp"
#include "core/config.hpp"

namespace shoal::comm {

namespace {
// A slot or queue entry: its header, then `bytes` of data, rounded up to whole cache lines.
uint64_t stride(uint64_t bytes) { return (FlatRegion::kSlotHeader + bytes + 63) / 64 * 64; }

// Maps every page of a region into this process now, allocating the owner's: a page first
// touched inside a collective costs a fault there (6 us a page measured on a VM, every first
// call of a size; 16 processes faulting pages of the same tmpfs at once queue on its locks).
// Writable pages for the own region, read-only ones for the peers'; where the kernel predates
// MADV_POPULATE_* (5.14), one touch a page: an atomic add of 0 changes nothing a peer sees.
// Any other failure (a full /dev/shm: ENOMEM) leaves the pages to be faulted in later, as before,
// rather than touching them here into a SIGBUS.
void prefault(uint8_t* base, uint64_t bytes, bool own) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  auto first = reinterpret_cast<uintptr_t>(base) / page * page;
  const auto end = reinterpret_cast<uintptr_t>(base) + bytes;
  if (madvise(reinterpret_cast<void*>(first), end - first,
              own ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0 ||
      errno != EINVAL)
    return;
  for (uintptr_t p = std::max<uintptr_t>(first, reinterpret_cast<uintptr_t>(base)); p < end;
       p = (p / page + 1) * page) {
    auto* word = reinterpret_cast<uint8_t*>(p);
    if (own)
      __atomic_fetch_add(word, uint8_t{0}, __ATOMIC_RELAXED);
    else
      (void)__atomic_load_n(word, __ATOMIC_RELAXED);
  }
}
}  // namespace

uint64_t FlatRegion::bytes_for(uint64_t slot_bytes) {
  return sizeof(FlatWords) + 2 * stride(slot_bytes) + 2 * slot_bytes +
         kQueueEntries * stride(kQueuedBytes);
}

FlatSlotHeader& FlatRegion::slot(uint32_t parity) const {
  return *reinterpret_cast<FlatSlotHeader*>(base_ + sizeof(FlatWords) +
                                            (parity & 1) * stride(slot_bytes_));
}

uint8_t* FlatRegion::result(uint32_t parity) const {
  return base_ + sizeof(FlatWords) + 2 * stride(slot_bytes_) + (parity & 1) * slot_bytes_;
}

FlatSlotHeader& FlatRegion::entry(uint32_t seq) const {
  return *reinterpret_cast<FlatSlotHeader*>(result(0) + 2 * slot_bytes_ +
                                            (seq % kQueueEntries) * stride(kQueuedBytes));
}

transport::shm::RegionSpec FlatMemory::Layout::region() const {
  transport::shm::RegionSpec r;
  r.bytes = FlatRegion::bytes_for(slot_bytes);
  r.check = (slot_bytes * 0x9e3779b97f4a7c15ull ^ direct_bytes) * 2 + (rounds ? 1 : 0);
  r.what =
      "SHOAL_FLAT_MAX_BYTES, SHOAL_FLAT_DIRECT_BYTES or SHOAL_FLAT_ROUNDS (or the number of cores)";
  return r;
}

FlatMemory::Layout FlatMemory::layout_from_settings(int local_ranks, int host_cores) {
  Layout l;
  l.slot_bytes = (config::get_bytes("SHOAL_FLAT_MAX_BYTES") + 63) / 64 * 64;
  const uint64_t direct = config::get_bytes("SHOAL_FLAT_DIRECT_BYTES");
  const long cores = host_cores > 0 ? host_cores : sysconf(_SC_NPROCESSORS_ONLN);
  l.oversubscribed = local_ranks > cores;
  l.direct_bytes = l.slot_bytes == 0 || direct == 0 ? 0
                   : l.oversubscribed               ? std::max(direct, l.slot_bytes + 1)
                                                    : direct;
  const std::string rounds = config::get("SHOAL_FLAT_ROUNDS");
  SHOAL_CHECK(rounds == "on" || rounds == "off", InvalidArgument,
              "SHOAL_FLAT_ROUNDS='" << rounds << "' is not on or off");
  l.rounds = rounds == "on";
  return l;
}

FlatLimits FlatMemory::Layout::limits(bool all_can_pull) const {
  return {slot_bytes, all_can_pull && direct_bytes > 0 ? direct_bytes : UINT64_MAX, rounds};
}

FlatMemory::FlatMemory(const transport::shm::ShmMesh& mesh, const Layout& layout)
    : mesh_(mesh), layout_(layout), limits_(layout.limits(mesh.all_can_pull())) {
  const int size = mesh.size();
  for (int r = 0; r < size; ++r) {
    regions_.emplace_back(mesh.segment_of(r).region(), layout.slot_bytes);
    pids_.push_back(mesh.segment_of(r).header().pid);
    prefault(mesh.segment_of(r).region(), FlatRegion::bytes_for(layout.slot_bytes),
             r == mesh.rank());
  }
}

}  // namespace shoal::comm
