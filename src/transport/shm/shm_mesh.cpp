#include "transport/shm/shm_mesh.hpp"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <bit>

#include "core/check.hpp"
#include "core/config.hpp"

namespace shoal::transport::shm {

namespace {
// What peers read from this process to learn whether cross-memory attach works between us.
const volatile uint64_t kProbe = 0x73686f616c2d636dull;

bool can_read_probe(const SegmentHeader& peer) {
  uint64_t value = 0;
  iovec local{&value, sizeof value};
  iovec remote{reinterpret_cast<void*>(peer.probe_address), sizeof value};
  return process_vm_readv(peer.pid, &local, 1, &remote, 1, 0) ==
             static_cast<ssize_t>(sizeof value) &&
         value == kProbe;
}
}  // namespace

Mode transport_mode() {
  const std::string v = config::get("SHOAL_TRANSPORT");
  if (v == "auto") return Mode::automatic;
  if (v == "tcp") return Mode::tcp_only;
  if (v == "shm") return Mode::shm_only;
  SHOAL_THROW(InvalidArgument, "SHOAL_TRANSPORT='" << v << "': use tcp, shm or auto");
}

ShmMesh::ShmMesh(Store& store, const std::string& prefix, int rank, const std::vector<int>& host_of,
                 uint64_t comm_id, const RegionSpec& region)
    : rank_(rank) {
  const int size = static_cast<int>(host_of.size());
  use_.assign(size, false);
  peers_.resize(size);
  local_index_.assign(size, -1);
  int nlocal = 0;
  for (int r = 0; r < size; ++r)
    if (host_of[r] == host_of[rank]) local_index_[r] = nlocal++;
  const Mode mode = transport_mode();
  if (mode == Mode::tcp_only || nlocal == 1) return;

  ring_bytes_ = std::bit_ceil(std::max<uint64_t>(4096, config::get_bytes("SHOAL_SHM_RING_BYTES")));
  const size_t bytes = Segment::bytes_for(static_cast<uint32_t>(nlocal), ring_bytes_, region.bytes);
  sweep_orphans();
  try {
    std::string my_name;
    try {
      mine_ = Segment::create(segment_name(comm_id, rank), bytes);
      auto* h = new (mine_->base()) SegmentHeader();
      h->rank = rank;
      h->comm_id = comm_id;
      h->ring_bytes = ring_bytes_;
      h->rings = static_cast<uint32_t>(nlocal);
      h->region_bytes = region.bytes;
      h->region_check = region.check;
      h->pid = getpid();
      h->pid_namespace = own_pid_namespace();
      h->probe_address = reinterpret_cast<uint64_t>(&kProbe);
      for (uint32_t s = 0; s < static_cast<uint32_t>(nlocal); ++s)
        new (&mine_->ring(s)) RingHeader();
      my_name = mine_->name();
    } catch (const Error& e) {
      if (mode == Mode::shm_only) throw;
      SHOAL_WARN("no shared memory for this rank, using TCP: " << e.what());
    }
    store.set(prefix + "/shm/" + std::to_string(rank), my_name);
    std::string mapped(size, '0');
    for (int q = 0; q < size; ++q) {
      if (q == rank || local_index_[q] < 0) continue;
      std::string name = store.get_string(prefix + "/shm/" + std::to_string(q));
      if (name.empty() || !mine_) continue;
      try {
        auto seg = Segment::open(name, bytes);
        const auto& h = seg->header();
        if (h.magic != kSegmentMagic || h.comm_id != comm_id || h.rank != q ||
            h.ring_bytes != ring_bytes_)
          SHOAL_THROW(Internal, "shared memory "
                                    << name << " does not belong to rank " << q
                                    << " (or SHOAL_SHM_RING_BYTES differs between ranks)");
        if (h.region_bytes != region.bytes || h.region_check != region.check)
          SHOAL_THROW(Internal, region.what << " differs between this rank and rank " << q);
        // Before our map is published: a peer reads can_pull only after it sees the map.
        if (local_index_[q] < 256 && can_read_probe(seg->header()))
          mine_->header().can_pull[local_index_[q]] = 1;
        peers_[q] = std::move(seg);
        mapped[q] = '1';
      } catch (const Error& e) {
        if (mode == Mode::shm_only) throw;
        SHOAL_WARN("cannot map rank " << q << "'s shared memory, using TCP with it: " << e.what());
      }
    }
    store.set(prefix + "/shmmap/" + std::to_string(rank), mapped);
    all_shared_ = nlocal == size && mine_ != nullptr;
    std::vector<std::string> maps(size);
    maps[rank] = mapped;
    for (int q = 0; q < size; ++q)
      if (q != rank && local_index_[q] >= 0)
        maps[q] = store.get_string(prefix + "/shmmap/" + std::to_string(q));
    // Every rank sees the same maps, so every rank reaches the same all_shared_.
    for (int i = 0; i < size && all_shared_; ++i)
      for (int j = 0; j < size && all_shared_; ++j)
        if (i != j) all_shared_ = static_cast<int>(maps[i].size()) > j && maps[i][j] == '1';
    // Each rank wrote its can_pull row before its map, and every map is read: all agree.
    all_pull_ = all_shared_ && size <= 256;
    for (int r = 0; r < size && all_pull_; ++r)
      for (int q = 0; q < size && all_pull_; ++q)
        if (q != r) all_pull_ = segment_of(r).header().can_pull[q] != 0;
    for (int q = 0; q < size; ++q) {
      if (q == rank || local_index_[q] < 0) continue;
      const std::string& theirs = maps[q];
      use_[q] = mapped[q] == '1' && static_cast<int>(theirs.size()) > rank && theirs[rank] == '1';
      if (!use_[q]) peers_[q].reset();
      if (!use_[q] && mode == Mode::shm_only)
        SHOAL_THROW(InvalidArgument, "SHOAL_TRANSPORT=shm, but ranks "
                                         << rank << " and " << q << " share no working mapping");
    }
    // Every local peer has mapped our segment (it published its map after mapping): the name
    // can go, and nothing is left behind whatever happens to this process later.
    if (mine_) mine_->unlink();
  } catch (...) {
    // Set-up failed here, so it fails on every rank of this host: remove every local rank's
    // name, which covers a peer killed before it published (or unlinked) its segment.
    for (int q = 0; q < size; ++q)
      if (local_index_[q] >= 0) shm_unlink(segment_name(comm_id, q).c_str());
    throw;
  }
}

ShmMesh::~ShmMesh() = default;

int ShmMesh::shm_peers() const {
  int n = 0;
  for (bool u : use_) n += u;
  return n;
}

RingView ShmMesh::view(const Segment& seg, uint32_t slot) const {
  return RingView{&seg.ring(slot), seg.ring_data(slot), ring_bytes_};
}

std::unique_ptr<RingStream> ShmMesh::stream_to(int peer, int socket_fd) {
  SHOAL_CHECK(uses_shm(peer), Internal, "no shared memory with rank " << peer);
  // The ring from a to b lives in a's segment, in the slot of b's local index.
  RingView out = view(*mine_, static_cast<uint32_t>(local_index_[peer]));
  RingView in = view(*peers_[peer], static_cast<uint32_t>(local_index_[rank_]));
  // By reference only where the peer can pull from us (it probed us at set-up).
  const uint64_t threshold = config::get_bytes("SHOAL_SHM_DIRECT_BYTES");
  const bool peer_pulls =
      local_index_[rank_] < 256 && peers_[peer]->header().can_pull[local_index_[rank_]] != 0;
  return std::make_unique<RingStream>(out, in, &mine_->header(), &peers_[peer]->header(), socket_fd,
                                      threshold > 0 && peer_pulls ? threshold : UINT64_MAX);
}

}  // namespace shoal::transport::shm
