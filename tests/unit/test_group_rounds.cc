// A device backend's group order (src/exec/group_rounds.h): the communicators'
// k-th collectives together, every arrival of a round before its enqueues.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "src/exec/group_rounds.h"

using namespace braid;

TEST_CASE("group rounds: k-th collectives together, arrivals first, each communicator in order", "[unit]") {
  std::vector<CommWork> work(3);
  for (size_t i = 0; i < work.size(); ++i)
    for (size_t k = 0; k < 3 - i; ++k) {  // 3, 2 and 1 collectives
      CollectiveCall c;
      c.count = 10 * i + k;
      work[i].collectives.push_back(c);
    }
  std::vector<std::string> log;
  auto note = [&](const char* what) {
    return [&log, what](size_t i, const CollectiveCall& c) {
      log.push_back(std::string(what) + std::to_string(i) + ":" + std::to_string(c.count));
      return Status::ok();
    };
  };
  REQUIRE(enqueue_in_rounds(work, note("a"), note("e")).is_ok());
  CHECK(log == std::vector<std::string>{"a0:0", "a1:10", "a2:20", "e0:0", "e1:10", "e2:20", "a0:1", "a1:11", "e0:1",
                                        "e1:11", "a0:2", "e0:2"});
  // A failure stops the rounds where it happened.
  log.clear();
  auto fail_second = [&](size_t i, const CollectiveCall&) {
    return i == 1 ? BRAID_ERROR(ncclInternalError, "enqueue failed") : Status::ok();
  };
  CHECK_FALSE(enqueue_in_rounds(work, note("a"), fail_second).is_ok());
  CHECK(log == std::vector<std::string>{"a0:0", "a1:10", "a2:20"});
}
