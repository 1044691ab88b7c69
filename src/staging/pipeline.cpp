#include "staging/pipeline.hpp"

#include <algorithm>
#include <exception>
#include <string>

#include "core/check.hpp"
#include "core/config.hpp"

namespace shoal::staging {

namespace {

uint64_t chunk_or_default(uint64_t chunk_bytes) {
  if (chunk_bytes == 0) chunk_bytes = config::get_bytes("SHOAL_STAGING_CHUNK_BYTES");
  SHOAL_CHECK(chunk_bytes > 0, InvalidArgument, "SHOAL_STAGING_CHUNK_BYTES must be positive");
  return chunk_bytes;
}

// Elements per chunk when a chunk carries `ranks` ranges of them.
uint64_t elements_per_chunk(uint64_t chunk_bytes, size_t element_bytes, int ranks) {
  return std::max<uint64_t>(1, chunk_bytes / (element_bytes * static_cast<uint64_t>(ranks)));
}

// The slots' host memory, released on every path (after the copies that use it are done).
class Slots {
 public:
  Slots(CopyEngine& engine, int count, uint64_t in_bytes, uint64_t out_bytes, bool in_place)
      : engine_(engine) {
    for (int s = 0; s < count; ++s) {
      void* in = engine.allocate_host(
          std::max<uint64_t>(1, in_place ? std::max(in_bytes, out_bytes) : in_bytes));
      buffers_.push_back(in);
      void* out = in;
      if (!in_place) {
        out = engine.allocate_host(std::max<uint64_t>(1, out_bytes));
        buffers_.push_back(out);
      }
      slots_.push_back({static_cast<char*>(in), static_cast<char*>(out)});
    }
  }
  ~Slots() {
    for (void* b : buffers_) engine_.release_host(b);
  }
  struct Slot {
    char* in;
    char* out;
  };
  const Slot& operator[](size_t k) const { return slots_[k % slots_.size()]; }

 private:
  CopyEngine& engine_;
  std::vector<void*> buffers_;
  std::vector<Slot> slots_;
};

}  // namespace

std::vector<Chunk> elementwise_chunks(uint64_t count, size_t element_bytes, uint64_t chunk_bytes) {
  const uint64_t e = elements_per_chunk(chunk_or_default(chunk_bytes), element_bytes, 1);
  std::vector<Chunk> chunks;
  for (uint64_t start = 0; start < count; start += e) {
    const uint64_t n = std::min(e, count - start), bytes = n * element_bytes;
    chunks.push_back({{{start * element_bytes, 0, bytes}},
                      {{start * element_bytes, 0, bytes}},
                      bytes,
                      bytes,
                      n});
  }
  return chunks;
}

namespace {
// all_gather (the ranks' blocks on the output) and reduce_scatter (on the input): chunk k carries
// the k-th range of the rank's own buffer on one side and of every rank's block on the other.
std::vector<Chunk> block_chunks(uint64_t count, size_t element_bytes, int ranks,
                                uint64_t chunk_bytes, bool blocks_out) {
  const uint64_t e = elements_per_chunk(chunk_or_default(chunk_bytes), element_bytes, ranks);
  std::vector<Chunk> chunks;
  for (uint64_t start = 0; start < count; start += e) {
    const uint64_t n = std::min(e, count - start), bytes = n * element_bytes;
    std::vector<Piece> own{{start * element_bytes, 0, bytes}}, blocks;
    for (int r = 0; r < ranks; ++r)
      blocks.push_back({(r * count + start) * element_bytes, r * bytes, bytes});
    Chunk c;
    c.elements = n;
    c.in_bytes = blocks_out ? bytes : bytes * ranks;
    c.out_bytes = blocks_out ? bytes * ranks : bytes;
    c.in = blocks_out ? std::move(own) : std::move(blocks);
    c.out = blocks_out ? std::move(blocks) : std::move(own);
    chunks.push_back(std::move(c));
  }
  return chunks;
}
}  // namespace

std::vector<Chunk> all_gather_chunks(uint64_t count, size_t element_bytes, int ranks,
                                     uint64_t chunk_bytes) {
  return block_chunks(count, element_bytes, ranks, chunk_bytes, true);
}

std::vector<Chunk> reduce_scatter_chunks(uint64_t count, size_t element_bytes, int ranks,
                                         uint64_t chunk_bytes) {
  return block_chunks(count, element_bytes, ranks, chunk_bytes, false);
}

void run_staged(CopyEngine& engine, Communicator& comm, const void* device_in, void* device_out,
                const std::vector<Chunk>& chunks, bool in_place,
                const ChunkCollective& collective) {
  if (chunks.empty()) return;
  // Three slots: chunk k+1 downloads into one while chunk k runs in another and chunk k-1's
  // result uploads from the third.
  const int depth = static_cast<int>(std::min<size_t>(3, chunks.size()));
  uint64_t in_bytes = 0, out_bytes = 0;
  for (const auto& c : chunks) {
    in_bytes = std::max(in_bytes, c.in_bytes);
    out_bytes = std::max(out_bytes, c.out_bytes);
  }
  Slots slots(engine, depth, in_bytes, out_bytes, in_place);
  const auto* din = static_cast<const char*>(device_in);
  auto* dout = static_cast<char*>(device_out);
  std::vector<uint64_t> downloaded(chunks.size(), 0), uploaded(chunks.size(), 0);
  uint64_t last_upload = 0;
  auto download = [&](size_t k) {
    for (const Piece& p : chunks[k].in)
      downloaded[k] = engine.copy(Direction::to_host, slots[k].in + p.host_offset,
                                  din + p.device_offset, p.bytes);
  };
  auto upload = [&](size_t k) {
    for (const Piece& p : chunks[k].out)
      uploaded[k] = last_upload = engine.copy(Direction::to_device, dout + p.device_offset,
                                              slots[k].out + p.host_offset, p.bytes);
  };
  bool copy_failed = false;
  auto wait_copy = [&](Direction d, uint64_t ticket) {
    if (ticket == 0) return;
    try {
      engine.wait(d, ticket);
    } catch (...) {
      copy_failed = true;
      throw;
    }
  };
  try {
    engine.after_caller();
    download(0);
    for (size_t k = 0; k < chunks.size(); ++k) {
      if (k + 1 < chunks.size()) {
        // The slot chunk k+1 reuses is free once the upload of the chunk before is done.
        if (k + 1 >= static_cast<size_t>(depth))
          wait_copy(Direction::to_device, uploaded[k + 1 - depth]);
        download(k + 1);
      }
      wait_copy(Direction::to_host, downloaded[k]);
      collective(slots[k].in, slots[k].out, chunks[k]);
      upload(k);
    }
    // The result is on the device when this returns (the host slots go away); the caller's
    // stream is ordered after the copies for what it queues next.
    wait_copy(Direction::to_device, last_upload);
    engine.before_caller();
  } catch (...) {
    // The peers are inside chunk k's collective or about to be: a copy that failed leaves this
    // rank unable to take part, so they learn now instead of at their timeout.
    if (copy_failed) comm.abort();
    engine.drain();
    engine.before_caller();
    throw;
  }
}

void staged_all_reduce(CopyEngine& engine, Communicator& comm, const void* device_in,
                       void* device_out, size_t count, DataType dtype, ReduceOp op,
                       uint64_t chunk_bytes) {
  run_staged(engine, comm, device_in, device_out,
             elementwise_chunks(count, size_of(dtype), chunk_bytes), device_in == device_out,
             [&](const void* in, void* out, const Chunk& c) {
               comm.all_reduce(in, out, c.elements, dtype, op);
             });
}

void staged_broadcast(CopyEngine& engine, Communicator& comm, void* device_buffer, size_t count,
                      DataType dtype, int root, uint64_t chunk_bytes) {
  auto chunks = elementwise_chunks(count, size_of(dtype), chunk_bytes);
  // The root only sends (nothing comes back), the others only receive (nothing goes out).
  for (auto& c : chunks) (comm.rank() == root ? c.out : c.in).clear();
  run_staged(engine, comm, device_buffer, device_buffer, chunks, true,
             [&](const void*, void* buf, const Chunk& c) {
               comm.broadcast(buf, c.elements, dtype, root);
             });
}

void staged_all_gather(CopyEngine& engine, Communicator& comm, const void* device_in,
                       void* device_out, size_t count, DataType dtype, uint64_t chunk_bytes) {
  run_staged(engine, comm, device_in, device_out,
             all_gather_chunks(count, size_of(dtype), comm.size(), chunk_bytes), false,
             [&](const void* in, void* out, const Chunk& c) {
               comm.all_gather(in, out, c.elements, dtype);
             });
}

void staged_reduce_scatter(CopyEngine& engine, Communicator& comm, const void* device_in,
                           void* device_out, size_t count, DataType dtype, ReduceOp op,
                           uint64_t chunk_bytes) {
  run_staged(engine, comm, device_in, device_out,
             reduce_scatter_chunks(count, size_of(dtype), comm.size(), chunk_bytes), false,
             [&](const void* in, void* out, const Chunk& c) {
               comm.reduce_scatter(in, out, c.elements, dtype, op);
             });
}

}  // namespace shoal::staging
