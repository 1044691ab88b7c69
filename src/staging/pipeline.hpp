// Collectives on device memory, staged through pinned host buffers in chunks (docs/torch.md,
// "CUDA tensors"). Chunk k+1's input is copied to the host while chunk k's collective runs, and
// chunk k's result is copied back while the next chunks run: the copies hide behind the network.
//
// Every rank cuts the same chunks (they depend on the call's arguments only), so chunk k is the
// same collective on every rank. A failed copy aborts the communicator (a GPU that failed a copy
// will not do the next one; the peers learn at once rather than at their timeout); a failed
// collective is rethrown. Either way no copy is in flight when the call returns, and the device
// output is undefined, as after any failed collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "shoal/communicator.hpp"
#include "staging/copy_engine.hpp"

namespace shoal::staging {

/// A run of bytes a chunk moves between the device buffer and its host slot.
struct Piece {
  uint64_t device_offset;
  uint64_t host_offset;
  uint64_t bytes;
};

/// One step of the pipeline: what to download into the host slot, what the collective then
/// produces in it, and where that goes back.
struct Chunk {
  std::vector<Piece> in;   // device input -> host input slot
  std::vector<Piece> out;  // host output slot -> device output
  uint64_t in_bytes = 0;   // the collective's host input and output sizes
  uint64_t out_bytes = 0;
  uint64_t elements = 0;  // the collective's count argument for this chunk
};

/// all_reduce and broadcast: element ranges [k*c, (k+1)*c) of a buffer of `count` elements.
std::vector<Chunk> elementwise_chunks(uint64_t count, size_t element_bytes, uint64_t chunk_bytes);
/// all_gather of `count` elements per rank: chunk k gathers every rank's k-th range into the
/// ranks' blocks of the output.
std::vector<Chunk> all_gather_chunks(uint64_t count, size_t element_bytes, int ranks,
                                     uint64_t chunk_bytes);
/// reduce_scatter to `count` elements per rank: chunk k reduces the k-th range of every rank's
/// block of the input.
std::vector<Chunk> reduce_scatter_chunks(uint64_t count, size_t element_bytes, int ranks,
                                         uint64_t chunk_bytes);

/// The collective of one chunk, on host memory: (host input, host output, chunk). The two
/// pointers are the same where the chunk's in and out pieces coincide (in place).
using ChunkCollective = std::function<void(const void*, void*, const Chunk&)>;

/// Runs `chunks` through `engine`: three host slots in rotation, so that chunk k+1 downloads and
/// chunk k-1 uploads while chunk k's collective runs. `in_place`: input and output are one
/// device buffer and each chunk's result replaces its input (one host buffer per slot).
/// `comm` is aborted when a copy fails.
void run_staged(CopyEngine& engine, Communicator& comm, const void* device_in, void* device_out,
                const std::vector<Chunk>& chunks, bool in_place, const ChunkCollective& collective);

/// The collectives, staged; `chunk_bytes` 0: SHOAL_STAGING_CHUNK_BYTES. Arguments as
/// Communicator's, the buffers device memory the engine copies from and to.
void staged_all_reduce(CopyEngine& engine, Communicator& comm, const void* device_in,
                       void* device_out, size_t count, DataType dtype, ReduceOp op,
                       uint64_t chunk_bytes = 0);
void staged_broadcast(CopyEngine& engine, Communicator& comm, void* device_buffer, size_t count,
                      DataType dtype, int root, uint64_t chunk_bytes = 0);
void staged_all_gather(CopyEngine& engine, Communicator& comm, const void* device_in,
                       void* device_out, size_t count, DataType dtype, uint64_t chunk_bytes = 0);
void staged_reduce_scatter(CopyEngine& engine, Communicator& comm, const void* device_in,
                           void* device_out, size_t count, DataType dtype, ReduceOp op,
                           uint64_t chunk_bytes = 0);

}  // namespace shoal::staging
