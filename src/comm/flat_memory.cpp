#include "comm/flat_memory.hpp"

#include <unistd.h>

#include <algorithm>

#include "core/config.hpp"

namespace shoal::comm {

namespace {
// A slot or queue entry: its header, then `bytes` of data, rounded up to whole cache lines.
uint64_t stride(uint64_t bytes) { return (FlatRegion::kSlotHeader + bytes + 63) / 64 * 64; }
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
  r.check = slot_bytes * 0x9e3779b97f4a7c15ull ^ direct_bytes;
  r.what = "SHOAL_FLAT_MAX_BYTES or SHOAL_FLAT_DIRECT_BYTES (or the number of cores)";
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
  return l;
}

FlatMemory::FlatMemory(const transport::shm::ShmMesh& mesh, const Layout& layout)
    : mesh_(mesh), layout_(layout) {
  const int size = mesh.size();
  for (int r = 0; r < size; ++r) {
    regions_.emplace_back(mesh.segment_of(r).region(), layout.slot_bytes);
    pids_.push_back(mesh.segment_of(r).header().pid);
  }
  if (mesh.all_can_pull() && layout.direct_bytes > 0) direct_bytes_ = layout.direct_bytes;
}

}  // namespace shoal::comm
