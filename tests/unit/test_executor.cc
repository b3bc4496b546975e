// The host executor on every built-in schedule, with all ranks driven by one
// thread through an in-memory transport (no shm, no sockets): isolates the
// interpreter (tiling, fused ops, lengths, deps) from the transports.
#include <catch2/catch.hpp>

#include <deque>
#include <map>
#include <numeric>

#include "braid/algorithms.h"
#include "braid/chunking.h"
#include "braid/msccl_xml.h"
#include "braid/verify.h"
#include "msccl_style.h"
#include "src/exec/host/collective_task.h"

using namespace braid;

namespace {

// A FIFO per (sender, receiver, channel) with a bounded number of slots.
struct MemoryPipe : SendPipe, RecvPipe {
  explicit MemoryPipe(size_t slot_bytes, size_t slots) : slot_bytes(slot_bytes), slots(slots) {}
  Status try_acquire(void** slot, size_t) override {
    if (queue.size() >= slots) { *slot = nullptr; return Status::ok(); }
    staging.assign(slot_bytes, 0);
    *slot = staging.data();
    return Status::ok();
  }
  Status commit(size_t bytes) override {
    queue.emplace_back(staging.begin(), staging.begin() + bytes);
    return Status::ok();
  }
  Status try_acquire(const void** data, size_t* bytes) override {
    if (queue.empty()) { *data = nullptr; return Status::ok(); }
    *data = queue.front().data() ? queue.front().data() : reinterpret_cast<const void*>(this);
    *bytes = queue.front().size();
    return Status::ok();
  }
  Status release() override {
    queue.pop_front();
    return Status::ok();
  }
  size_t slot_bytes, slots;
  std::vector<char> staging;
  std::deque<std::vector<char>> queue;
};

struct MemoryFabric {
  MemoryFabric(size_t slot_bytes, size_t slots) : slot_bytes(slot_bytes), slots(slots) {}
  MemoryPipe* pipe(int from, int to, int channel) {
    auto& p = pipes[{from, to, channel}];
    if (!p) p = std::make_unique<MemoryPipe>(slot_bytes, slots);
    return p.get();
  }
  size_t slot_bytes, slots;
  std::map<std::tuple<int, int, int>, std::unique_ptr<MemoryPipe>> pipes;
};

struct MemoryTransport : Transport {
  MemoryTransport(MemoryFabric& f, int rank) : fabric(f), rank(rank) {}
  const char* name() const override { return "memory"; }
  Status send_pipe(int peer, int channel, SendPipe** out) override {
    *out = fabric.pipe(rank, peer, channel);
    return Status::ok();
  }
  Status recv_pipe(int peer, int channel, RecvPipe** out) override {
    *out = fabric.pipe(peer, rank, channel);
    return Status::ok();
  }
  size_t slot_bytes() const override { return fabric.slot_bytes; }
  int slots() const override { return int(fabric.slots); }
  void abort() override {}
  MemoryFabric& fabric;
  int rank;
};

// Runs `schedule` on n ranks with int64 data, in `slices` slices as the
// CUDA kernel does (src/ops/op_step.h); returns per-rank outputs.  Slots
// hold `slot_bytes` (default: one tile).
std::vector<std::vector<int64_t>> run(const Schedule& schedule, uint64_t count, bool in_place, size_t tile_bytes,
                                      uint32_t slices = 1, size_t slot_bytes = 0) {
  int n = schedule.nranks;
  Collective c = schedule.collective;
  MemoryFabric fabric(slot_bytes ? slot_bytes : tile_bytes, kMinSlots);  // the tightest buffering the verifier allows
  auto shared = std::make_shared<const Schedule>(schedule);
  std::vector<std::unique_ptr<MemoryTransport>> transports;
  std::vector<std::vector<int64_t>> inputs(n), outputs(n), scratch(n);
  std::vector<TaskQueue> queues(n);
  for (int r = 0; r < n; ++r) {
    const RankProgram& p = schedule.ranks[r];
    BufferShape in = input_shape(c, n, count, p.input_chunks), out = output_shape(c, n, count, p.output_chunks);
    inputs[r].resize(in.elems());
    std::iota(inputs[r].begin(), inputs[r].end(), int64_t(r) * 1000000);
    outputs[r].assign(out.elems(), -7);
    scratch[r].assign(scratch_elems(schedule, r, scratch_chunk_capacity(in, out), slices), 0);
    if (in_place) {  // build the aliasing the placement defines
      if (c == Collective::AllGather || c == Collective::Gather)
        std::copy(inputs[r].begin(), inputs[r].end(), outputs[r].begin() + r * count);
      else if (c == Collective::ReduceScatter || c == Collective::Scatter)
        outputs[r].assign(inputs[r].begin() + r * count, inputs[r].begin() + (r + 1) * count);
      else
        outputs[r] = inputs[r];
    }
    transports.push_back(std::make_unique<MemoryTransport>(fabric, r));
    CollectiveArgs a;
    a.schedule = shared;
    a.records = std::make_shared<const RankRecords>(build_rank_records(schedule, r));
    a.slices = slices;
    a.rank = r;
    a.input_shape = in;
    a.output_shape = out;
    a.scratch_capacity = scratch_chunk_capacity(in, out);
    a.scratch = scratch[r].data();
    a.type = ncclInt64;
    a.op = ncclSum;
    a.tile_bytes = tile_bytes;
    a.transport = transports.back().get();
    a.label = "test";
    if (in_place) {
      // Input aliases output: point the input at the aliased output bytes.
      bool gathered = c == Collective::AllGather || c == Collective::Gather;
      bool scattered = c == Collective::ReduceScatter || c == Collective::Scatter;
      a.output = outputs[r].data();
      a.input = gathered ? outputs[r].data() + r * count : outputs[r].data();
      if (scattered) {
        // Output is a block of the input: keep a full-size input and alias output into it.
        a.input = inputs[r].data();
        a.output = inputs[r].data() + r * count;
      }
    } else {
      a.input = inputs[r].data();
      a.output = outputs[r].data();
    }
    std::unique_ptr<Task> task;
    REQUIRE(make_collective_task(a, &task).is_ok());
    queues[r].tasks.push_back(std::move(task));
  }
  Status s = run_task_queues(queues, 10000);
  INFO(s.to_string());
  REQUIRE(s.is_ok());
  if (in_place && (c == Collective::ReduceScatter || c == Collective::Scatter))
    for (int r = 0; r < n; ++r) outputs[r].assign(inputs[r].begin() + r * count, inputs[r].begin() + (r + 1) * count);
  return outputs;
}

// Slots for a schedule: a signal's message (where the sender's buffers are)
// needs more than a 64-byte tile, as every real transport's slot holds; 0:
// one tile.
size_t signal_slot_bytes(const Schedule& s) { return has_one_sided_ops(s) ? sizeof(HostSignal) : 0; }

int64_t input_at(int rank, uint64_t i) { return int64_t(rank) * 1000000 + int64_t(i); }

void check(const Schedule& s, uint64_t count, const std::vector<std::vector<int64_t>>& out) {
  int n = s.nranks, root = s.root < 0 ? 0 : s.root;
  for (int r = 0; r < n; ++r) {
    for (uint64_t i = 0; i < out[r].size(); ++i) {
      uint64_t b = i / count, j = i % count;
      int64_t want = 0;
      switch (s.collective) {
        case Collective::AllReduce:
        case Collective::Reduce:
          if (s.collective == Collective::Reduce && r != root) continue;
          for (int k = 0; k < n; ++k) want += input_at(k, i);
          break;
        case Collective::ReduceScatter:
          for (int k = 0; k < n; ++k) want += input_at(k, uint64_t(r) * count + i);
          break;
        case Collective::AllGather: want = input_at(int(b), j); break;
        case Collective::Gather:
          if (r != root) continue;
          want = input_at(int(b), j);
          break;
        case Collective::Broadcast: want = input_at(root, i); break;
        case Collective::AlltoAll: want = input_at(int(b), uint64_t(r) * count + j); break;
        case Collective::Scatter: want = input_at(root, uint64_t(r) * count + i); break;
        default: break;
      }
      INFO(s.name << " rank " << r << " element " << i << " count " << count);
      REQUIRE(out[r][i] == want);
    }
  }
}

}  // namespace

TEST_CASE("executor runs every built-in schedule exactly (in-memory transport)", "[executor]") {
  for (const AlgorithmInfo& algo : algorithm_registry())
    for (int n : {1, 2, 3, 4, 5, 7, 8})
      for (uint64_t count : {1, 5, 33, 1000})
        for (bool in_place : {false, true}) {
          Schedule s = algo.make(n, algo.rooted ? n - 1 : 0);
          INFO(s.name << " n=" << n << " count=" << count << (in_place ? " in place" : " out of place"));
          // 64-byte tiles: 8 int64 per fragment, so counts above span many tiles.
          check(s, count, run(s, count, in_place, 64, 1, signal_slot_bytes(s)));
        }
}

TEST_CASE("executor runs every built-in schedule in several slices, as the CUDA kernel does", "[executor]") {
  // Slices cut every buffer block into disjoint parts with their own
  // channels, tiles and scratch (src/ops/op_step.h); counts below the slice
  // count leave some slices empty, which must still meet their peers.
  for (const AlgorithmInfo& algo : algorithm_registry())
    for (int n : {2, 3, 4, 5})
      for (uint32_t slices : {2u, 3u, 7u})
        for (uint64_t count : {1, 6, 100, 1001})
          for (bool in_place : {false, true}) {
            Schedule s = algo.make(n, algo.rooted ? n - 1 : 0);
            INFO(s.name << " n=" << n << " slices=" << slices << " count=" << count
                        << (in_place ? " in place" : " out of place"));
            check(s, count, run(s, count, in_place, 64, slices, signal_slot_bytes(s)));
          }
}

TEST_CASE("executor frames multi-chunk steps: msccl-tools-style files with two slots", "[executor]") {
  // Allpairs sends each peer an n-chunk block in one step before receiving
  // theirs: with two slots per connection it runs only if the block travels
  // as one message.  512-byte slots (256-byte tiles where nothing is
  // framed): frames of up to 8 chunks, tiles of a few elements, so counts
  // span many tiles and trailing chunks are short.
  for (int n : {2, 3, 5, 8}) {
    std::vector<msccl_style::Algo> files = {msccl_style::allpairs(n, true), msccl_style::allpairs(n, false),
                                            msccl_style::allpairs_alltoall(n, 3), msccl_style::ring_allgather(n)};
    for (const msccl_style::Algo& file : files) {
      Schedule s;
      std::string error;
      REQUIRE(schedule_from_msccl_xml(file.xml(), &s, &error));
      REQUIRE(verify(s).ok);
      for (uint64_t count : {1, 7, 100, 1000})
        for (uint32_t slices : {1u, 3u}) {
          INFO(s.name << " n=" << n << " count=" << count << " slices=" << slices);
          check(s, count, run(s, count, s.in_place, 256, slices, 512));
        }
    }
  }
}

TEST_CASE("executor refuses a frame that cannot fit a slot", "[executor]") {
  Schedule s;
  std::string error;
  REQUIRE(schedule_from_msccl_xml(msccl_style::allpairs(8, true).xml(), &s, &error));
  MemoryFabric fabric(64, kMinSlots);  // not even the header of an 8-chunk frame
  MemoryTransport transport(fabric, 0);
  std::vector<int64_t> data(64), scratch(64);
  CollectiveArgs a;
  a.schedule = std::make_shared<const Schedule>(s);
  a.records = std::make_shared<const RankRecords>(build_rank_records(s, 0));
  a.input_shape = input_shape(s.collective, 8, 8, s.ranks[0].input_chunks);
  a.output_shape = output_shape(s.collective, 8, 8, s.ranks[0].output_chunks);
  a.scratch_capacity = 1;
  a.input = a.output = data.data();
  a.scratch = scratch.data();
  a.type = ncclInt64;
  a.tile_bytes = 64;
  a.transport = &transport;
  std::unique_ptr<Task> task;
  Status st = make_collective_task(a, &task);
  REQUIRE_FALSE(st.is_ok());
  CHECK(st.to_string().find("does not fit a 64-byte slot") != std::string::npos);
}

TEST_CASE("executor refuses a one-sided schedule whose signal does not fit a slot", "[executor][one_sided]") {
  const Schedule s = oneshot_allreduce(2);
  MemoryFabric fabric(64, kMinSlots);
  MemoryTransport transport(fabric, 0);
  std::vector<int64_t> in(8), out(8), scratch(64);
  CollectiveArgs a;
  a.schedule = std::make_shared<const Schedule>(s);
  a.records = std::make_shared<const RankRecords>(build_rank_records(s, 0));
  a.input_shape = input_shape(s.collective, 2, 8, s.ranks[0].input_chunks);
  a.output_shape = output_shape(s.collective, 2, 8, s.ranks[0].output_chunks);
  a.scratch_capacity = scratch_chunk_capacity(a.input_shape, a.output_shape);
  a.input = in.data();
  a.output = out.data();
  a.scratch = scratch.data();
  a.type = ncclInt64;
  a.tile_bytes = 64;
  a.transport = &transport;
  std::unique_ptr<Task> task;
  const Status st = make_collective_task(a, &task);
  CHECK(st.code() == ncclInvalidUsage);
  CHECK(st.message().find("does not fit a 64-byte slot") != std::string::npos);
}
