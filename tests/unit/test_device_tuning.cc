// The CUDA tuning table (src/plan/device_tuning.h): its format and checks,
// first-match lookups, the built-in table's measured rows, the variables
// that override it, the key every rank computes alike, and the planner
// taking its algorithms.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "src/exec/cuda_arena.h"
#include "src/plan/alg_selection.h"
#include "src/plan/device_tuning.h"
#include "src/plan/planner.h"

using namespace braid;

namespace {

std::string table_of(const std::string& rows) { return R"({"format": "braid-cuda-tuning-1", "rows": [)" + rows + "]}"; }

TuningTable parsed(const std::string& rows) {
  TuningTable t;
  Status s = TuningTable::parse(table_of(rows), "test", &t);
  INFO(s.message());
  REQUIRE(s.is_ok());
  return t;
}

// The error parsing `rows` gives (fails the test if it parses).
std::string refusal(const std::string& rows) {
  TuningTable t;
  Status s = TuningTable::parse(table_of(rows), "test", &t);
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.code() == ncclInvalidArgument);
  return s.message();
}

TuningKey key(const std::string& device, int nranks, int per_device) { return TuningKey{device, nranks, per_device}; }

}  // namespace

TEST_CASE("tuning table: the first row covering a case and setting a value wins", "[tuning]") {
  TuningTable t = parsed(R"(
    {"device": "H200", "ranks": [2, 4], "per_device": [2, 4], "channels": 64, "measured": "a"},
    {"ranks": 8, "channels": 16, "slots": 8, "measured": "b"},
    {"device": "H", "slot_bytes": 1048576, "ll_max_bytes": 0, "measured": "c"},
    {"collective": "allreduce", "bytes": [0, 4096], "path": "ll", "algorithm": "rd", "measured": "d"},
    {"collective": "allreduce", "bytes": [4097, null], "path": "schedule", "slice_bytes": 1048576, "measured": "e"},
    {"bytes": [null, 65536], "slice_bytes": 65536, "measured": "f"})");
  REQUIRE(t.rows().size() == 6);

  CommTuning h200 = t.comm(key("NVIDIA H200", 2, 2));
  CHECK(h200.channels == 64);
  CHECK(h200.channels_from.row == 0);
  CHECK(std::string(h200.channels_from.measured) == "a");
  CHECK(h200.slots == 4);  // no row sets it for this case: braid's default
  CHECK(h200.slots_from.row == TuningSource::kDefault);
  CHECK(h200.slot_bytes == 1048576);  // "H" is a substring of the name
  CHECK(h200.ll_max_bytes == 0);
  CHECK(h200.ll_max_bytes_from.row == 2);

  // One rank per device: row 0 does not cover it; row 1 needs 8 ranks.
  CommTuning apart = t.comm(key("NVIDIA H200", 2, 1));
  CHECK(apart.channels == 32);
  CHECK(t.comm(key("NVIDIA H200", 8, 8)).channels == 16);
  CHECK(t.comm(key("NVIDIA H200", 8, 8)).slots == 8);
  // Devices that differ (key.device "") match only rows naming none.
  CommTuning mixed = t.comm(key("", 2, 2));
  CHECK(mixed.channels == 32);
  CHECK(mixed.slot_bytes == 256 << 10);
  CHECK(mixed.ll_max_bytes == 64 << 10);

  CallTuning small = t.call(key("x", 2, 1), Collective::AllReduce, 4096);
  CHECK(small.path == TunedPath::LL);
  CHECK(small.algorithm == "rd");
  CHECK(small.slice_bytes == 65536);  // from row 5: rows 3 and 4 do not set it here
  CHECK(small.slice_bytes_from.row == 5);
  CallTuning large = t.call(key("x", 2, 1), Collective::AllReduce, 4097);
  CHECK(large.path == TunedPath::Schedule);
  CHECK(large.algorithm.empty());
  CHECK(large.slice_bytes == 1048576);
  CallTuning gather = t.call(key("x", 2, 1), Collective::AllGather, 4096);
  CHECK(gather.path == TunedPath::Auto);
  CHECK(gather.algorithm.empty());
  CHECK(gather.slice_bytes == 65536);
  CHECK(t.call(key("x", 2, 1), Collective::AllGather, 65537).slice_bytes == 256 << 10);
}

TEST_CASE("tuning table: bad tables are refused with the row and the reason", "[tuning]") {
  TuningTable t;
  CHECK_FALSE(TuningTable::parse("{not json", "f.json", &t).is_ok());
  CHECK_FALSE(TuningTable::parse(R"({"format": 1, "rows": []})", "f.json", &t).is_ok());
  CHECK_FALSE(TuningTable::parse(R"([1, 2])", "f.json", &t).is_ok());
  CHECK_FALSE(TuningTable::parse(R"({"format": "braid-cuda-tuning-1", "rows": {}})", "f.json", &t).is_ok());
  CHECK(TuningTable::parse(R"({"format": "other", "rows": []})", "f.json", &t).message().find("braid-cuda-tuning-1") !=
        std::string::npos);
  CHECK(TuningTable::parse(R"({"format": "braid-cuda-tuning-1", "rows": [], "extra": 1})", "f.json", &t)
            .message()
            .find("unknown key 'extra'") != std::string::npos);
  CHECK(refusal(R"({"channels": 65, "measured": "m"})").find("row 0: 'channels' = 65 is outside 1..64") !=
        std::string::npos);
  CHECK(refusal(R"({"channels": 0, "measured": "m"})").find("'channels' = 0") != std::string::npos);
  CHECK(refusal(R"({"slots": 9, "measured": "m"})").find("'slots'") != std::string::npos);
  CHECK(refusal(R"({"slots": 1, "measured": "m"})").find("'slots'") != std::string::npos);
  CHECK(refusal(R"({"slot_bytes": 4097, "measured": "m"})").find("multiple of 256") != std::string::npos);
  CHECK(refusal(R"({"slot_bytes": 1024, "measured": "m"})").find("'slot_bytes'") != std::string::npos);
  CHECK(refusal(R"({"ll_max_bytes": 2097152, "measured": "m"})").find("'ll_max_bytes'") != std::string::npos);
  CHECK(refusal(R"({"channels": -1, "measured": "m"})").find("whole numbers") != std::string::npos);
  CHECK(refusal(R"({"channels": "8", "measured": "m"})").find("whole numbers") != std::string::npos);
  CHECK(refusal(R"({"channels": 8.5, "measured": "m"})").find("whole numbers") != std::string::npos);
  CHECK(refusal(R"({"path": "fast", "measured": "m"})").find("path 'fast'") != std::string::npos);
  CHECK(refusal(R"({"collective": "allsum", "path": "ll", "measured": "m"})").find("no collective 'allsum'") !=
        std::string::npos);
  CHECK(refusal(R"({"algorithm": "ring", "measured": "m"})").find("needs the row's collective") != std::string::npos);
  CHECK(refusal(R"({"collective": "broadcast", "path": "ll", "measured": "m"})").find("LL path") != std::string::npos);
  CHECK(refusal(R"({"collective": "allreduce", "algorithm": "pairwise", "measured": "m"})")
            .find("no allreduce algorithm 'pairwise'") != std::string::npos);
  CHECK(refusal(R"({"ranks": [5, 2], "channels": 8, "measured": "m"})").find("empty range") != std::string::npos);
  CHECK(refusal(R"({"ranks": [1, 2, 3], "channels": 8, "measured": "m"})").find("[low, high]") != std::string::npos);
  CHECK(refusal(R"({"collective": "allreduce", "channels": 8, "measured": "m"})").find("communicator's") !=
        std::string::npos);
  CHECK(refusal(R"({"bytes": [0, 10], "slots": 4, "measured": "m"})").find("communicator's") != std::string::npos);
  CHECK(refusal(R"({"ranks": 2, "measured": "m"})").find("sets nothing") != std::string::npos);
  CHECK(refusal(R"({"channels": 8})").find("'measured'") != std::string::npos);
  CHECK(refusal(R"({"channels": 8, "measured": "m", "chanels": 8})").find("unknown key 'chanels'") !=
        std::string::npos);
  CHECK(refusal(R"({"channels": 8, "measured": "m"}, 3)").find("row 1: a row is a JSON object") != std::string::npos);
}

TEST_CASE("tuning table: the built-in table parses and gives the measured settings", "[tuning]") {
  const TuningTable& t = TuningTable::builtin();
  REQUIRE_FALSE(t.rows().empty());
  for (const TuningTable::Row& r : t.rows()) CHECK_FALSE(r.measured.empty());
  // Ranks sharing one H200: 64 channels at 2 and 4 ranks, 32 at 8
  // (perf/results/cuda_h200/README.md).
  CommTuning two = t.comm(key("NVIDIA H200", 2, 2));
  CHECK(two.channels == 64);
  CHECK(two.channels_from.row >= 0);
  CHECK(t.comm(key("NVIDIA H200", 4, 4)).channels == 64);
  CHECK(t.comm(key("NVIDIA H200", 8, 8)).channels == 32);
  // Nothing measured elsewhere: braid's defaults.
  CommTuning h100 = t.comm(key("NVIDIA H100 80GB HBM3", 2, 2));
  CHECK(h100.channels == 32);
  CHECK(h100.channels_from.row == TuningSource::kDefault);
  CHECK(t.comm(key("NVIDIA H200", 2, 1)).channels == 32);
  CHECK(t.comm(key("", 2, 2)).channels == 32);
  CHECK(t.call(key("NVIDIA H200", 2, 2), Collective::AllReduce, 8).path == TunedPath::Auto);
}

TEST_CASE("tuning table: BRAID_CUDA_* override the table, naming themselves", "[tuning]") {
  TuningTable t =
      parsed(R"({"channels": 48, "slots": 6, "slot_bytes": 524288, "ll_max_bytes": 4096, "measured": "m"})");
  CommTuning none = resolve_comm_tuning(t, key("d", 2, 1), CudaRequests{});
  CHECK(none.channels == 48);
  CHECK(none.slots == 6);
  CHECK(none.slot_bytes == 524288);
  CHECK(none.ll_max_bytes == 4096);
  CommTuning all = resolve_comm_tuning(t, key("d", 2, 1), CudaRequests{8, 2, 8192, 0});
  CHECK(all.channels == 8);
  CHECK(all.slots == 2);
  CHECK(all.slot_bytes == 8192);
  CHECK(all.ll_max_bytes == 0);  // 0 is "never LL", not "unset"
  CHECK(all.ll_max_bytes_from.row == TuningSource::kVariable);
  CHECK(describe(all.channels_from) == "BRAID_CUDA_CHANNELS");
  CHECK(describe(none.channels_from) == "tuning row 0 (m)");
  CHECK(describe(TuningSource{}) == "braid's default");
}

TEST_CASE("tuning table: every rank computes the same key", "[tuning]") {
  // Ranks 0-2 on one GPU, rank 3 on another.
  TuningKey k = tuning_key({7, 7, 7, 9}, {"NVIDIA H200", "NVIDIA H200", "NVIDIA H200", "NVIDIA H200"});
  CHECK(k.nranks == 4);
  CHECK(k.per_device == 3);
  CHECK(k.device == "NVIDIA H200");
  TuningKey mixed = tuning_key({1, 2}, {"NVIDIA H200", "NVIDIA H100 80GB HBM3"});
  CHECK(mixed.device.empty());
  CHECK(mixed.per_device == 1);
}

TEST_CASE("tuning table: a file's rows go before the built-in ones", "[tuning]") {
  const std::string path = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/braid_tuning_test_" +
                           std::to_string(::getpid()) + ".json";
  {
    std::ofstream out(path);
    out << table_of(R"({"device": "H200", "channels": 8, "measured": "this test"})");
  }
  setenv("BRAID_TUNING_FILE", path.c_str(), 1);
  std::shared_ptr<const TuningTable> t;
  REQUIRE(TuningTable::current(&t).is_ok());
  CHECK(t->comm(key("NVIDIA H200", 2, 2)).channels == 8);
  CHECK(std::string(t->comm(key("NVIDIA H200", 2, 2)).channels_from.measured) == "this test");
  CHECK(t->rows().size() == TuningTable::builtin().rows().size() + 1);
  CHECK(t->hash() != TuningTable::builtin().hash());
  std::remove(path.c_str());

  setenv("BRAID_TUNING_FILE", (path + ".missing").c_str(), 1);
  Status missing = TuningTable::current(&t);
  CHECK(missing.code() == ncclInvalidArgument);
  CHECK(missing.message().find("cannot read it") != std::string::npos);
  unsetenv("BRAID_TUNING_FILE");
  REQUIRE(TuningTable::current(&t).is_ok());
  CHECK(t->hash() == TuningTable::builtin().hash());
}

TEST_CASE("tuning table: the planner takes the table's algorithm, BRAID_ALGO still wins", "[tuning]") {
  auto table = std::make_shared<TuningTable>(
      parsed(R"({"collective": "allreduce", "bytes": [0, 1048576], "algorithm": "ring", "measured": "m"},
               {"collective": "allreduce", "algorithm": "rd", "measured": "m"})"));
  PlanCache plans;
  plans.set_device_tuning(std::make_shared<DeviceTuning>(table, key("d", 4, 1)));
  std::shared_ptr<const Schedule> s;
  REQUIRE(plans.schedule_for(Collective::AllReduce, 4, -1, 8, &s).is_ok());
  CHECK(s->name == "ring_allreduce");  // the host model would say rd at 8 B
  REQUIRE(plans.schedule_for(Collective::AllReduce, 4, -1, 64 << 20, &s).is_ok());
  CHECK(s->name == "rd_allreduce");
  REQUIRE(plans.schedule_for(Collective::AllGather, 4, -1, 8, &s).is_ok());  // no row: the size rule
  CHECK(s->name == "ring_allgather");
  // A known straggler still turns ring into StragglAR.
  REQUIRE(plans.schedule_for(Collective::AllReduce, 4, -1, 8, &s, /*straggler=*/2).is_ok());
  CHECK(s->name.find("stragglar") != std::string::npos);

  setenv("BRAID_ALGO", "allreduce=rd", 1);  // read when a cache is made
  PlanCache forced;
  unsetenv("BRAID_ALGO");
  forced.set_device_tuning(std::make_shared<DeviceTuning>(table, key("d", 4, 1)));
  REQUIRE(forced.schedule_for(Collective::AllReduce, 4, -1, 8, &s).is_ok());
  CHECK(s->name == "rd_allreduce");
}

TEST_CASE("tuning table: which calls the LL protocol takes", "[tuning]") {
  // AllReduce's message is its buffer; AllGather's is a rank's block to every peer.
  CHECK(ll_path(Collective::AllReduce, 2, 65536, 65536, TunedPath::Auto));
  CHECK_FALSE(ll_path(Collective::AllReduce, 2, 65537, 65536, TunedPath::Auto));
  CHECK_FALSE(ll_path(Collective::AllReduce, 2, 8, 65536, TunedPath::Schedule));
  CHECK(ll_path(Collective::AllGather, 4, 16384, 65536, TunedPath::LL));
  CHECK_FALSE(ll_path(Collective::AllGather, 4, 16385, 65536, TunedPath::LL));  // the region could not hold it
  CHECK_FALSE(ll_path(Collective::Broadcast, 2, 8, 65536, TunedPath::LL));
  CHECK_FALSE(ll_path(Collective::AllReduce, 1, 8, 65536, TunedPath::Auto));
  CHECK_FALSE(ll_path(Collective::AllReduce, 2, 8, 0, TunedPath::Auto));
  CHECK_FALSE(ll_path(Collective::AllReduce, 2, 0, 0, TunedPath::LL));  // no LL region at all
}

TEST_CASE("tuning table: what a communicator's settings cost in device memory", "[tuning]") {
  // 2 ranks, 64 channels of 4 x 256 KiB slots, LL up to 64 KiB: 2 x 65
  // FIFOs, then 2 ranks x 2 parities x 8192 words of 16-byte lines, then
  // one-sided signals (arrived, consumed and sent, 2 peers x 1 pair, in
  // 256 bytes), then the counter.
  CommTuning t;
  t.channels = 64;
  const CudaArenaLayout a(2, t);
  CHECK(a.conn_stride == 256 + 4 * (256 << 10));
  CHECK(a.ll_offset == 2 * 65 * a.conn_stride);
  CHECK(a.rma_offset == a.ll_offset + 2 * 2 * 8192 * 16);
  CHECK(a.bytes == a.rma_offset + 256 + 256);
  // numRmaCtx x numRmaSig = 3 x 20 pairs: 3 x 2 x 60 words (2880 bytes in 3072); past the cap, the cap.
  CHECK(CudaArenaLayout(2, t, 60).bytes == a.rma_offset + 3072 + 256);
  CHECK(CudaArenaLayout(2, t, 1 << 20).rma_pairs == CudaArenaLayout::kMaxRmaPairs);
  t.ll_max_bytes = 0;  // no LL region
  CHECK(CudaArenaLayout(2, t).bytes == a.ll_offset + 256 + 256);
}

TEST_CASE("planner: BRAID_DETERMINISTIC runs only schedules that fold in rank order", "[tuning][deterministic]") {
  auto table = std::make_shared<TuningTable>(
      parsed(R"({"collective": "allreduce", "bytes": [0, 1048576], "algorithm": "oneshot", "measured": "m"},
               {"collective": "allreduce", "algorithm": "ring", "measured": "m"})"));
  PlanCache plans;
  plans.set_rank_order(true);
  plans.set_peer_access(true);
  plans.set_device_tuning(std::make_shared<DeviceTuning>(table, key("d", 4, 1)));
  std::shared_ptr<const Schedule> s;
  // A tuned choice stays where it folds in rank order (one-shot), else
  // direct for small messages and chain for large ones.
  REQUIRE(plans.schedule_for(Collective::AllReduce, 4, -1, 8, &s).is_ok());
  CHECK(s->name == "oneshot_allreduce");
  REQUIRE(plans.schedule_for(Collective::AllReduce, 4, -1, 64 << 20, &s).is_ok());
  CHECK(s->name == "chain_allreduce");
  REQUIRE(plans.schedule_for(Collective::ReduceScatter, 4, -1, 64 << 10, &s).is_ok());  // 256 KiB message
  CHECK(s->name == "direct_reducescatter");
  // A late rank does not turn it into StragglAR.
  REQUIRE(plans.schedule_for(Collective::AllReduce, 4, -1, 64 << 20, &s, /*straggler=*/2).is_ok());
  CHECK(s->name == "chain_allreduce");
  REQUIRE(plans.schedule_for(Collective::ReduceScatter, 4, -1, 64 << 20, &s).is_ok());
  CHECK(s->name == "chain_reducescatter");
  HostTuning hosts;  // ranks on several hosts: ReduceScatter direct at every size
  hosts.several_hosts = true;
  PlanCache across;
  across.set_rank_order(true);
  across.set_tuning(hosts);
  REQUIRE(across.schedule_for(Collective::ReduceScatter, 4, -1, 64 << 20, &s).is_ok());
  CHECK(s->name == "direct_reducescatter");
  REQUIRE(across.schedule_for(Collective::AllReduce, 4, -1, 64 << 20, &s).is_ok());
  CHECK(s->name == "chain_allreduce");
  REQUIRE(plans.schedule_for(Collective::Reduce, 4, 1, 8, &s).is_ok());
  CHECK((s->name == "chain_reduce" && s->root == 1));
  REQUIRE(plans.schedule_for(Collective::AllGather, 4, -1, 8, &s).is_ok());  // nothing to fold
  CHECK(s->name == "ring_allgather");
  // A call's selection and BRAID_ALGO give way where what they name does not fold in order.
  uint32_t ring_only = 0, oneshot_only = 0;
  REQUIRE(parse_alg_selection("ring", Collective::AllReduce, &ring_only).is_ok());
  REQUIRE(parse_alg_selection("oneshot", Collective::AllReduce, &oneshot_only).is_ok());
  REQUIRE(plans.schedule_for(Collective::AllReduce, 4, -1, 8, &s, -1, Placement::Unknown, ring_only).is_ok());
  CHECK(s->name == "allgather_fold_allreduce");
  REQUIRE(plans.schedule_for(Collective::AllReduce, 4, -1, 8, &s, -1, Placement::Unknown, oneshot_only).is_ok());
  CHECK(s->name == "oneshot_allreduce");
  setenv("BRAID_ALGO", "allreduce=rd,reduce=binomial", 1);  // read when a cache is made
  PlanCache forced;
  unsetenv("BRAID_ALGO");
  forced.set_rank_order(true);
  REQUIRE(forced.schedule_for(Collective::AllReduce, 4, -1, 8, &s).is_ok());
  CHECK(s->name == "allgather_fold_allreduce");
  // Small AllReduce: one hop (allgather_fold) up to 4 KiB, 32 KiB between hosts; then direct.
  REQUIRE(forced.schedule_for(Collective::AllReduce, 4, -1, 4 << 10, &s).is_ok());
  CHECK(s->name == "allgather_fold_allreduce");
  REQUIRE(forced.schedule_for(Collective::AllReduce, 4, -1, (4 << 10) + 4, &s).is_ok());
  CHECK(s->name == "direct_allreduce");
  REQUIRE(across.schedule_for(Collective::AllReduce, 4, -1, 32 << 10, &s).is_ok());
  CHECK(s->name == "allgather_fold_allreduce");
  REQUIRE(across.schedule_for(Collective::AllReduce, 4, -1, (32 << 10) + 4, &s).is_ok());
  CHECK(s->name == "direct_allreduce");
  REQUIRE(forced.schedule_for(Collective::AllReduce, 4, -1, (256 << 10) + 4, &s).is_ok());
  CHECK(s->name == "chain_allreduce");
  REQUIRE(forced.schedule_for(Collective::Reduce, 4, 0, 8, &s).is_ok());
  CHECK(s->name == "chain_reduce");
  // Without the mode, the same cache settings pick as before.
  PlanCache fast;
  REQUIRE(fast.schedule_for(Collective::AllReduce, 4, -1, 64 << 20, &s).is_ok());
  CHECK(s->name == "ring_allreduce");
}

TEST_CASE("planner: BRAID_DETERMINISTIC folds mid-sized messages one-sided where the host's ranks reach each other",
          "[tuning][deterministic]") {
  PlanCache host;  // the host backend: no device tuning table
  host.set_rank_order(true);
  host.set_peer_access(true);
  auto planned = [&](PlanCache& plans, Collective c, int n, uint64_t bytes) {
    std::shared_ptr<const Schedule> s;
    REQUIRE(plans.schedule_for(c, n, 0, bytes, &s).is_ok());
    return s->name;
  };
  // AllReduce: above 128 KiB and up to 1 MiB a rank (8 MiB in all on 2 ranks), twoshot_ordered.
  CHECK(planned(host, Collective::AllReduce, 4, 128 << 10) == "direct_allreduce");
  CHECK(planned(host, Collective::AllReduce, 4, (128 << 10) + 4) == "twoshot_ordered_allreduce");
  CHECK(planned(host, Collective::AllReduce, 4, 4 << 20) == "twoshot_ordered_allreduce");
  CHECK(planned(host, Collective::AllReduce, 4, (4 << 20) + 4) == "chain_allreduce");
  CHECK(planned(host, Collective::AllReduce, 2, 8 << 20) == "twoshot_ordered_allreduce");
  CHECK(planned(host, Collective::AllReduce, 2, (8 << 20) + 4) == "chain_allreduce");
  // ReduceScatter (the message is n blocks): oneshot_ordered up to 1 MiB (16 MiB on 2 ranks).
  CHECK(planned(host, Collective::ReduceScatter, 4, 32 << 10) == "direct_reducescatter");
  CHECK(planned(host, Collective::ReduceScatter, 4, 64 << 10) == "oneshot_ordered_reducescatter");
  CHECK(planned(host, Collective::ReduceScatter, 4, 256 << 10) == "oneshot_ordered_reducescatter");
  CHECK(planned(host, Collective::ReduceScatter, 4, (256 << 10) + 4) == "chain_reducescatter");
  CHECK(planned(host, Collective::ReduceScatter, 2, 8 << 20) == "oneshot_ordered_reducescatter");
  CHECK(planned(host, Collective::ReduceScatter, 2, (8 << 20) + 4) == "chain_reducescatter");
  CHECK(planned(host, Collective::Reduce, 4, 1 << 20) == "chain_reduce");
  // A plain two-shot named by BRAID_ALGO gives way to the ordered one.
  setenv("BRAID_ALGO", "allreduce=twoshot", 1);
  PlanCache forced;
  unsetenv("BRAID_ALGO");
  forced.set_rank_order(true);
  forced.set_peer_access(true);
  CHECK(planned(forced, Collective::AllReduce, 4, 1 << 20) == "twoshot_ordered_allreduce");
  // Ranks that cannot reach each other's buffers, and the CUDA backend, keep direct and chain.
  PlanCache apart;
  apart.set_rank_order(true);
  CHECK(planned(apart, Collective::AllReduce, 4, 1 << 20) == "chain_allreduce");
  CHECK(planned(apart, Collective::ReduceScatter, 4, 64 << 10) == "direct_reducescatter");
  PlanCache cuda;
  cuda.set_rank_order(true);
  cuda.set_peer_access(true);
  cuda.set_device_tuning(std::make_shared<DeviceTuning>(std::make_shared<TuningTable>(parsed("")), key("d", 4, 1)));
  CHECK(planned(cuda, Collective::AllReduce, 4, 1 << 20) == "chain_allreduce");
}

TEST_CASE("planner: the plain two-shot (AllReduce) and one-shot (ReduceScatter, 2 ranks) where the host's ranks "
          "reach each other",
          "[tuning][one_sided]") {
  PlanCache host;
  host.set_peer_access(true);
  auto planned = [&](PlanCache& plans, uint64_t bytes, int n = 4, int straggler = -1) {
    std::shared_ptr<const Schedule> s;
    REQUIRE(plans.schedule_for(Collective::AllReduce, n, -1, bytes, &s, straggler).is_ok());
    return s->name;
  };
  CHECK(planned(host, 128 << 10) == "ring_allreduce");
  CHECK(planned(host, (128 << 10) + 4) == "twoshot_allreduce");
  CHECK(planned(host, 4 << 20) == "twoshot_allreduce");
  CHECK(planned(host, (4 << 20) + 4) == "ring_allreduce");
  CHECK(planned(host, 8 << 20, 2) == "twoshot_allreduce");
  CHECK(planned(host, (8 << 20) + 4, 2) == "ring_allreduce");
  // A known straggler still turns the size rule's ring into StragglAR.
  CHECK(planned(host, 1 << 20, 4, 2) == "stragglar_allreduce");
  // ReduceScatter: the one-shot on 2 ranks, for messages (nranks x count) above 128 KiB up to 4 MiB.
  auto scattered = [&](int n, uint64_t bytes) {
    std::shared_ptr<const Schedule> s;
    REQUIRE(host.schedule_for(Collective::ReduceScatter, n, -1, bytes, &s).is_ok());
    return s->name;
  };
  CHECK(scattered(2, 64 << 10) == "ring_reducescatter");
  CHECK(scattered(2, (64 << 10) + 4) == "oneshot_reducescatter");
  CHECK(scattered(2, 2 << 20) == "oneshot_reducescatter");
  CHECK(scattered(2, (2 << 20) + 4) == "ring_reducescatter");
  CHECK(scattered(3, 512 << 10) == "ring_reducescatter");
  // Other collectives, ranks apart and the CUDA backend keep their rules.
  std::shared_ptr<const Schedule> s;
  REQUIRE(host.schedule_for(Collective::ReduceScatter, 4, -1, 64 << 10, &s).is_ok());
  CHECK(s->name == "ring_reducescatter");
  PlanCache apart;
  CHECK(planned(apart, 1 << 20) == "ring_allreduce");
  PlanCache cuda;
  cuda.set_peer_access(true);
  cuda.set_device_tuning(std::make_shared<DeviceTuning>(std::make_shared<TuningTable>(parsed("")), key("d", 4, 1)));
  CHECK(planned(cuda, 1 << 20) == "ring_allreduce");
}

TEST_CASE("planner: a tuning row's one-sided schedule runs where the ranks reach each other, else the default",
          "[tuning][one_sided]") {
  const auto table = std::make_shared<TuningTable>(parsed(
      R"({"ranks": 2, "per_device": 2, "collective": "allreduce", "bytes": [1048576, null], "algorithm": "twoshot",
          "measured": "a test"})"));
  auto planned = [&](bool peer_access, uint64_t bytes) {
    PlanCache cuda;
    cuda.set_peer_access(peer_access);  // thread ranks of one device, or processes
    cuda.set_device_tuning(std::make_shared<DeviceTuning>(table, key("d", 2, 2)));
    std::shared_ptr<const Schedule> s;
    REQUIRE(cuda.schedule_for(Collective::AllReduce, 2, -1, bytes, &s).is_ok());
    return s->name;
  };
  CHECK(planned(true, 1 << 20) == "twoshot_allreduce");
  CHECK(planned(true, (1 << 20) - 4) == "ring_allreduce");  // below the row
  CHECK(planned(false, 1 << 20) == "ring_allreduce");       // processes cannot run it
  // The compiled table's row (tuning/cuda.json): 2 thread ranks on one H200 from 256 MB.
  PlanCache h200;
  h200.set_peer_access(true);
  const auto builtin = std::make_shared<TuningTable>(TuningTable::builtin());
  h200.set_device_tuning(std::make_shared<DeviceTuning>(builtin, key("NVIDIA H200", 2, 2)));
  std::shared_ptr<const Schedule> s;
  REQUIRE(h200.schedule_for(Collective::AllReduce, 2, -1, 256 << 20, &s).is_ok());
  CHECK(s->name == "twoshot_allreduce");
}
