// A bootstrap message to a rank that has gone, over a connection not yet
// made: the peer's published listener refuses, and that must fail at once,
// not retry until BRAID_TIMEOUT as a not-yet-started root would deserve.
// Real ranks (threads, each with its own bootstrap); the peer goes away by
// destroying its bootstrap (as a process exit closes its sockets) or by
// aborting it (as a broken communicator does).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "src/bootstrap/bootstrap.h"
#include "scoped_env.h"

using namespace braid;

namespace {

enum class Gone { Destroyed, Aborted };

// Rank 0's first send to rank 2 (4 ranks: not a ring neighbour, so no
// connection exists yet) after rank 2 has gone; its status and how long it took.
Status send_to_gone_rank(Gone how, std::chrono::milliseconds* took) {
  ScopedEnv timeout("BRAID_TIMEOUT", "60");
  ncclUniqueId id;
  REQUIRE(bootstrap_create_root(&id).is_ok());
  const int n = 4, sender = 0, gone = 2;
  std::vector<std::unique_ptr<Bootstrap>> ranks(n);
  std::vector<Status> connected(n, Status::ok());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      connected[size_t(r)] = Bootstrap::connect(id, r, n, Deadline::after(std::chrono::seconds(30)), &ranks[size_t(r)]);
      if (connected[size_t(r)].is_ok()) connected[size_t(r)] = ranks[size_t(r)]->barrier();
    });
  for (auto& t : threads) t.join();
  for (const Status& s : connected) REQUIRE(s.is_ok());

  if (how == Gone::Destroyed) ranks[gone].reset();
  else ranks[gone]->abort();
  const int word = 7;
  auto start = std::chrono::steady_clock::now();
  Status s = ranks[sender]->send(gone, 1, &word, sizeof(word));
  *took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  return s;
}

}  // namespace

TEST_CASE("a bootstrap send to a rank that has gone fails at once", "[bootstrap][faults]") {
  for (Gone how : {Gone::Destroyed, Gone::Aborted}) {
    CAPTURE(how == Gone::Destroyed ? "destroyed" : "aborted");
    std::chrono::milliseconds took{};
    Status s = send_to_gone_rank(how, &took);
    CAPTURE(s.message());
    REQUIRE_FALSE(s.is_ok());
    CHECK(s.code() == ncclRemoteError);
    CHECK(s.message().find("closed its listener") != std::string::npos);
    CHECK(s.message().find("rank 0 -> 2") != std::string::npos);
    CHECK(took < std::chrono::seconds(2));
  }
}
