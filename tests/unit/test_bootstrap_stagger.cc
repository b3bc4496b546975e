// NCCL_UID_STAGGER_THRESHOLD / NCCL_UID_STAGGER_RATE: the delay each rank
// takes before it connects to its bootstrap root (root_stagger_us), and
// real ranks (threads) that wait their turn and still meet.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "src/bootstrap/bootstrap.h"

using namespace braid;

TEST_CASE("root_stagger_us: the k-th of more ranks than the threshold waits k / rate seconds", "[bootstrap]") {
  CHECK(root_stagger_us(100, 256, std::nullopt, std::nullopt) == 0);  // NCCL's threshold: 256 ranks are not many
  CHECK(root_stagger_us(0, 257, std::nullopt, std::nullopt) == 0);
  CHECK(root_stagger_us(7, 257, std::nullopt, std::nullopt) == 1000);  // 7000 a second
  CHECK(root_stagger_us(256, 257, std::nullopt, std::nullopt) == 256 * 1000000 / 7000);
  CHECK(root_stagger_us(3, 4, 2, 10) == 300000);
  CHECK(root_stagger_us(3, 2, 2, 10) == 0);
  CHECK(root_stagger_us(3, 300, 0, -5) == 3 * 1000000 / 7000);  // not positive: the defaults
}

TEST_CASE("ranks staggered toward their root still meet, the last one late", "[bootstrap]") {
  setenv("NCCL_UID_STAGGER_THRESHOLD", "2", 1);
  setenv("NCCL_UID_STAGGER_RATE", "20", 1);  // rank 3 connects 150 ms late
  ncclUniqueId id;
  REQUIRE(bootstrap_create_root(&id).is_ok());
  constexpr int n = 4;
  std::vector<int> ok(n, 0);
  std::vector<double> took(n, 0);
  std::vector<std::thread> ranks;
  // One clock for all: a rank's thread may start after rank 3's began its
  // stagger (on a loaded machine), and its own clock then misses part of it.
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> bs;
      Status s = Bootstrap::connect(id, r, n, Deadline::after(std::chrono::seconds(30)), &bs);
      std::vector<int> all(n, -1);
      all[size_t(r)] = r;
      if (s.is_ok()) s = bs->allgather(all.data(), sizeof(int));
      took[size_t(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ok[size_t(r)] = s.is_ok() && all == std::vector<int>{0, 1, 2, 3};
    });
  for (auto& t : ranks) t.join();
  unsetenv("NCCL_UID_STAGGER_THRESHOLD");
  unsetenv("NCCL_UID_STAGGER_RATE");
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(ok[size_t(r)]);
    CHECK(took[size_t(r)] >= 0.15);  // nobody has the table before the last hello
  }
}
