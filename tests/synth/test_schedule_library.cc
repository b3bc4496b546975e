// Schedule files and the BRAID_SCHEDULES directory lookup.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "braid/algorithms.h"
#include "braid/schedule_library.h"

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

  ScheduleLibrary lib = ScheduleLibrary::load_directory(dir.string());
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
  CHECK(ScheduleLibrary::load_directory((dir / "nope").string()).rejected.size() == 1);
  fs::remove_all(dir);
}
