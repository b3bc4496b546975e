// Schedule files, the search path (BRAID_SCHEDULES, the MSCCL variables) and
// the lookup the planner does for each call.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "braid/algorithms.h"
#include "braid/schedule_library.h"
#include "braid/verify.h"
#include "msccl_style.h"

using namespace braid;

TEST_CASE("schedule library: loads JSON and XML, rejects bad files, matches calls", "[synth][library]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("braid_lib_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string error;
  Schedule small = ring_allreduce(4);
  small.name = "a_small";
  small.max_bytes = 4096;
  Schedule big = ring_allgather(4);
  big.name = "b_big";
  big.min_bytes = 1024;
  REQUIRE(save_schedule_file((dir / "a.json").string(), small, &error));
  REQUIRE(save_schedule_file((dir / "b.xml").string(), big, &error));
  Schedule broken = ring_allreduce(4);
  broken.ranks[1].lanes[0].ops.pop_back();  // a recv short: does not verify
  REQUIRE(save_schedule_file((dir / "c.json").string(), broken, &error));
  std::ofstream(dir / "d.xml") << "<algo";
  std::ofstream(dir / "notes.txt") << "ignored";

  ScheduleLibrary lib;
  lib.add(dir.string());
  REQUIRE(lib.schedules.size() == 2);
  CHECK(lib.rejected.size() == 2);
  CHECK(lib.find(Collective::AllReduce, 4, Placement::InPlace, 4096)->name == "a_small");
  CHECK(lib.find(Collective::AllReduce, 4, Placement::Unknown, 100)->name == "a_small");
  CHECK(lib.find(Collective::AllReduce, 4, Placement::OutOfPlace, 4097) == nullptr);
  CHECK(lib.find(Collective::AllReduce, 8, Placement::InPlace, 100) == nullptr);
  CHECK(lib.find(Collective::AllGather, 4, Placement::OutOfPlace, 1 << 30)->name == "b_big");
  CHECK(lib.find(Collective::AllGather, 4, Placement::OutOfPlace, 1000) == nullptr);
  Schedule back;
  REQUIRE(load_schedule_file((dir / "a.json").string(), &back, &error));
  CHECK(back == small);
  CHECK_FALSE(load_schedule_file((dir / "missing.json").string(), &back, &error));
  ScheduleLibrary missing;
  missing.add((dir / "nope").string());
  CHECK(missing.rejected.size() == 1);
  fs::remove_all(dir);
}

namespace {

namespace fs = std::filesystem;

// A scratch directory, removed at the end of the test.
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("braid_lib_" + std::to_string(::getpid()) + "_" + std::to_string(++serial));
  TempDir() { fs::remove_all(path), fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    fs::create_directories((path / name).parent_path());
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
  static inline int serial = 0;
};

// An AllGather on 2 ranks whose each rank sends its `k` input chunks one by
// one before it receives any: a connection must hold k messages.
Schedule eager_pairs(uint32_t k) {
  Schedule s;
  s.name = "eager_pairs";
  s.collective = Collective::AllGather;
  s.nranks = 2;
  s.in_place = false;
  s.ranks.resize(2);
  for (int r = 0; r < 2; ++r) {
    RankProgram& p = s.ranks[r];
    p.input_chunks = k;
    p.output_chunks = 2 * k;
    Lane talk, local;
    for (uint32_t j = 0; j < k; ++j) talk.ops.push_back(make_op(OpType::Send, 1 - r, -1, {BufferKind::Input, j}));
    for (uint32_t j = 0; j < k; ++j)
      talk.ops.push_back(make_op(OpType::Recv, -1, 1 - r, {}, {BufferKind::Output, uint32_t(1 - r) * k + j}));
    Op copy = make_op(OpType::Copy, -1, -1, {BufferKind::Input, 0}, {BufferKind::Output, uint32_t(r) * k});
    copy.count = k;
    local.ops.push_back(copy);
    p.lanes = {talk, local};
  }
  return s;
}

}  // namespace

TEST_CASE("schedule library: files, directories searched recursively, colon lists", "[synth][library]") {
  TempDir d;
  std::string error;
  Schedule small = ring_allreduce(4);
  small.name = "small";
  small.max_bytes = 4096;
  Schedule any = ring_allreduce(4);
  any.name = "any";
  REQUIRE(save_schedule_file((d.path / "sku_b/z.json").string(), any, &error) == false);  // no directory yet
  fs::create_directories(d.path / "sku_a/deeper");
  fs::create_directories(d.path / "sku_b");
  REQUIRE(save_schedule_file((d.path / "sku_b/a.json").string(), any, &error));
  REQUIRE(save_schedule_file((d.path / "sku_a/deeper/x.xml").string(), small, &error));

  // Path order over the whole tree: sku_a/deeper/x.xml before sku_b/a.json.
  ScheduleLibrary lib;
  lib.add(d.path.string());
  REQUIRE(lib.schedules.size() == 2);
  std::string file;
  CHECK(lib.find(Collective::AllReduce, 4, Placement::InPlace, 100, &file)->name == "small");
  CHECK(file == (d.path / "sku_a/deeper/x.xml").string());
  CHECK(lib.find(Collective::AllReduce, 4, Placement::InPlace, 8192, &file)->name == "any");
  CHECK(file == (d.path / "sku_b/a.json").string());

  // Not recursive (MSCCL_ALGO_DIR): only the directory's own files.
  ScheduleLibrary flat;
  flat.add((d.path / "sku_a").string(), false);
  CHECK(flat.schedules.empty());

  // One file, and a colon list whose order decides.
  ScheduleLibrary one;
  one.add((d.path / "sku_b/a.json").string());
  CHECK(one.schedules.size() == 1);
  ScheduleLibrary list;
  list.add_list((d.path / "sku_b/a.json").string() + "::" + (d.path / "sku_a").string() + ":" + (d.path / "nope").string());
  REQUIRE(list.schedules.size() == 2);
  CHECK(list.find(Collective::AllReduce, 4, Placement::InPlace, 100)->name == "any");
  REQUIRE(list.rejected.size() == 1);
  CHECK(list.rejected[0].find("nope: no such file or directory") != std::string::npos);
}

TEST_CASE("schedule library: sizes are whole messages, as MSCCL selects", "[synth][library]") {
  TempDir d;
  // An in-place AllGather for 8 KiB..16 KiB messages on 4 ranks: per rank 2..4 KiB.
  msccl_style::Algo ag = msccl_style::ring_allgather(4);
  ag.min_bytes = 8192;
  ag.max_bytes = 16384;
  ScheduleLibrary lib;
  lib.add(d.write("ag.xml", ag.xml()));
  REQUIRE(lib.schedules.size() == 1);
  const int n = 4;
  CHECK(lib.find(Collective::AllGather, n, Placement::InPlace, message_bytes(Collective::AllGather, n, 512, 4)));
  CHECK(lib.find(Collective::AllGather, n, Placement::InPlace, message_bytes(Collective::AllGather, n, 1024, 4)));
  CHECK_FALSE(lib.find(Collective::AllGather, n, Placement::InPlace, message_bytes(Collective::AllGather, n, 1025, 4)));
  CHECK_FALSE(lib.find(Collective::AllGather, n, Placement::InPlace, message_bytes(Collective::AllGather, n, 511, 4)));
  // One placement: the file names only the output; out of place it is not chosen.
  CHECK_FALSE(lib.find(Collective::AllGather, n, Placement::OutOfPlace, 8192));
  CHECK_FALSE(lib.find(Collective::AllGather, n, Placement::Unknown, 8192));
}

TEST_CASE("schedule library: MSCCL files get the slots they need, or are refused", "[synth][library]") {
  TempDir d;
  std::string error;
  REQUIRE(save_schedule_file(d.write("three.xml", ""), eager_pairs(3), &error));
  REQUIRE(save_schedule_file(d.write("nine.xml", ""), eager_pairs(9), &error));
  Schedule s;
  REQUIRE(load_schedule_file((d.path / "three.xml").string(), &s, &error));
  CHECK(s.slots == 3);
  CHECK(verify(s).ok);
  ScheduleLibrary lib;
  lib.add(d.path.string());
  REQUIRE(lib.schedules.size() == 1);
  REQUIRE(lib.rejected.size() == 1);
  CHECK(lib.rejected[0].find("nine.xml: does not verify: deadlock") != std::string::npos);
  CHECK(lib.rejected[0].find("even with 8 slots per connection") != std::string::npos);
  // A multi-chunk step is one message: allpairs needs no more than two slots.
  REQUIRE(load_schedule_file(d.write("ap.xml", msccl_style::allpairs(8, true).xml()), &s, &error));
  CHECK(s.slots == kMinSlots);
}

TEST_CASE("schedule library: registration files and the MSCCL variables", "[synth][library]") {
  TempDir d;
  d.write("algos/ring.xml", msccl_style::ring_allreduce(4).xml());
  d.write("algos/pairs.xml", msccl_style::allpairs(4, true).xml());
  d.write("msccl.conf", R"(<msccl_algos>
  <load path="algos/pairs.xml" minbytes="0" maxbytes="65536" proto="Simple"/>
  <load path="algos/ring.xml" minbytes="65536"/>
  <load path="algos/missing.xml"/>
  <load path="msccl.conf"/>
  <load path="other.conf"/>
</msccl_algos>)");
  // Registrations that load themselves, or each other, are refused (they recursed without end).
  d.write("other.conf", R"(<msccl_algos><load path="msccl.conf"/></msccl_algos>)");
  ScheduleLibrary reg = load_schedule_sources({"", "", (d.path / "msccl.conf").string(), ""});
  REQUIRE(reg.schedules.size() == 2);
  REQUIRE(reg.rejected.size() == 3);
  CHECK(reg.rejected[0].find("missing.xml") != std::string::npos);
  CHECK(reg.rejected[1].find("msccl.conf (registered in") != std::string::npos);
  CHECK(reg.rejected[1].find("loads schedules, not other registration files") != std::string::npos);
  CHECK(reg.rejected[2].find("other.conf (registered in") != std::string::npos);
  // Whatever is not a regular file is refused by name, not read (a device would be read without end).
  ScheduleLibrary odd;
  odd.add("/dev/zero");
  REQUIRE(odd.rejected.size() == 1);
  CHECK(odd.rejected[0] == "/dev/zero is not a regular file (a directory, device or FIFO)");
  std::string file;
  auto small = reg.find(Collective::AllReduce, 4, Placement::InPlace, 65535, &file);
  REQUIRE(small);
  CHECK(small->name == "allreduce_pairs");
  CHECK(small->protocol == "Simple");  // the registration's, not the file's LL
  CHECK(small->max_bytes == 65535);    // maxbytes is exclusive there
  CHECK(file.find("registered in") != std::string::npos);
  CHECK(reg.find(Collective::AllReduce, 4, Placement::InPlace, 65536)->name == "allreduce_ring_1channelsperring");

  // Precedence: BRAID_SCHEDULES, MSCCL_XML_FILES, MSCCL_CONFIG, MSCCL_ALGO_DIR.
  Schedule braid_own = ring_allreduce(4);
  braid_own.name = "braid_own";
  std::string error;
  REQUIRE(save_schedule_file((d.path / "own.json").string(), braid_own, &error));
  auto first = [&](const ScheduleSources& sources) {
    auto s = load_schedule_sources(sources).find(Collective::AllReduce, 4, Placement::InPlace, 1024);
    return s ? s->name : std::string("none");
  };
  const std::string own = (d.path / "own.json").string(), ring = (d.path / "algos/ring.xml").string(),
                    conf = (d.path / "msccl.conf").string(), algos = (d.path / "algos").string();
  CHECK(first({own, ring, conf, algos}) == "braid_own");
  CHECK(first({"", ring, conf, algos}) == "allreduce_ring_1channelsperring");
  CHECK(first({"", "", conf, algos}) == "allreduce_pairs");
  CHECK(first({"", "", "", algos}) == "allreduce_pairs");  // path order: pairs.xml before ring.xml
  CHECK(first({"", "", "", ""}) == "none");
}
