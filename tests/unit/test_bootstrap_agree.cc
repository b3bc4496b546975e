// Bootstrap::agree: a barrier that agrees on an outcome, with real ranks
// (threads, each with its own bootstrap): every rank ok gives ok; a failed
// rank keeps its own error and every other rank gets one naming it.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "src/bootstrap/bootstrap.h"

using namespace braid;

namespace {

// Each rank's verdict when `failing` (-1: none) passes an error to agree().
std::vector<Status> agree_on(int n, int failing) {
  ncclUniqueId id;
  REQUIRE(bootstrap_create_root(&id).is_ok());
  std::vector<Status> verdicts(size_t(n), Status::ok());
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> bs;
      Status s = Bootstrap::connect(id, r, n, Deadline::after(std::chrono::seconds(30)), &bs);
      if (s.is_ok()) {
        Status local = r == failing ? BRAID_ERROR(ncclSystemError, "rank {} ran out of something", r) : Status::ok();
        s = bs->agree(std::move(local), "the test's step");
      }
      verdicts[size_t(r)] = std::move(s);
    });
  for (auto& t : ranks) t.join();
  return verdicts;
}

}  // namespace

TEST_CASE("Bootstrap::agree gives every rank the same verdict", "[bootstrap]") {
  for (const Status& s : agree_on(4, -1)) CHECK(s.is_ok());

  const std::vector<Status> verdicts = agree_on(4, 2);
  for (int r = 0; r < 4; ++r) {
    const Status& s = verdicts[size_t(r)];
    CAPTURE(r, s.message());
    REQUIRE_FALSE(s.is_ok());
    if (r == 2) {
      CHECK(s.code() == ncclSystemError);
      CHECK(s.message().find("ran out of something") != std::string::npos);
    } else {
      CHECK(s.code() == ncclInvalidUsage);
      CHECK(s.message().find("the test's step failed on rank 2") != std::string::npos);
    }
  }
}
