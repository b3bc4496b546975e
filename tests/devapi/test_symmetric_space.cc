// The symmetric offset space (src/devapi/symmetric_space.h): alignment,
// reuse after free, coalescing, exhaustion, bad input, and the property the
// device needs: ranks running the same collective sequence in separate
// processes get the same offsets.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <vector>

#include "src/devapi/symmetric_space.h"

using namespace braid::devapi;

namespace {

constexpr uint64_t kG = 2 << 20;  // a cuMem-like 2 MiB granularity

SymmetricSpace make(uint64_t capacity, uint64_t granularity = kG) {
  SymmetricSpace s;
  REQUIRE(SymmetricSpace::create(capacity, granularity, &s).is_ok());
  return s;
}

uint64_t must_alloc(SymmetricSpace& s, uint64_t bytes, uint64_t align = 0) {
  uint64_t off = ~uint64_t(0);
  braid::Status st = s.alloc({bytes, align}, &off);
  INFO(st.to_string());
  REQUIRE(st.is_ok());
  return off;
}

// One rank's collective sequence: allocations of varied size and alignment,
// frees in between, allocations that must reuse the holes.  No Catch2 here:
// forked ranks run it too.  Empty on any error.
std::vector<uint64_t> sequence(SymmetricSpace& s) {
  std::vector<uint64_t> offs;
  auto alloc = [&](uint64_t bytes, uint64_t align) {
    uint64_t off = 0;
    if (!s.alloc({bytes, align}, &off).is_ok()) return false;
    offs.push_back(off);
    return true;
  };
  bool ok = alloc(1, 0) && alloc(3 * kG + 5, 0) && alloc(kG, 8 * kG) && s.free(offs[1]).is_ok() &&
            alloc(kG, 0) &&  // into b's hole
            alloc(2 * kG, 4 * kG) && s.free(offs[0]).is_ok() && alloc(7 * kG, 0);
  if (!ok) offs.clear();
  return offs;
}

}  // namespace

TEST_CASE("symmetric space: first fit, aligned, rounded to the granularity", "[devapi][symmetric]") {
  SymmetricSpace s = make(64 * kG);
  CHECK(must_alloc(s, 1) == 0);
  CHECK(must_alloc(s, kG + 1) == kG);           // rounded up to 2 granules
  CHECK(must_alloc(s, kG, 8 * kG) == 8 * kG);   // alignment skips [3G, 8G)
  CHECK(must_alloc(s, 5 * kG) == 3 * kG);       // exactly fills the gap the alignment left
  CHECK(s.used() == 9 * kG);
  CHECK(s.allocations() == 4);
}

TEST_CASE("symmetric space: a freed range is reused and neighbours coalesce", "[devapi][symmetric]") {
  SymmetricSpace s = make(8 * kG);
  uint64_t a = must_alloc(s, kG), b = must_alloc(s, kG), c = must_alloc(s, kG);
  CHECK((a == 0 && b == kG && c == 2 * kG));
  REQUIRE(s.free(b).is_ok());
  CHECK(must_alloc(s, kG) == kG);  // the hole, not the end
  REQUIRE(s.free(kG).is_ok());
  REQUIRE(s.free(a).is_ok());
  CHECK(must_alloc(s, 2 * kG) == 0);  // a and b merged into one 2G range
  REQUIRE(s.free(0).is_ok());
  REQUIRE(s.free(c).is_ok());
  CHECK(s.used() == 0);
  CHECK(must_alloc(s, 8 * kG) == 0);  // everything merged back
}

TEST_CASE("symmetric space: exhaustion is an error that leaves the space intact", "[devapi][symmetric]") {
  SymmetricSpace s = make(4 * kG);
  must_alloc(s, 3 * kG);
  uint64_t off = 77;
  braid::Status st = s.alloc({2 * kG, 0}, &off);
  CHECK(st.code() == ncclSystemError);
  CHECK_THAT(st.message(), Catch::Contains("exhausted"));
  CHECK(off == 77);
  CHECK(must_alloc(s, kG) == 3 * kG);  // the last granule is still there
  // Fragmented: 2 free granules, not adjacent, cannot hold 2.
  SymmetricSpace f = make(4 * kG);
  for (int i = 0; i < 4; ++i) must_alloc(f, kG);
  REQUIRE(f.free(0).is_ok());
  REQUIRE(f.free(2 * kG).is_ok());
  CHECK(f.alloc({2 * kG, 0}, &off).code() == ncclSystemError);
}

TEST_CASE("symmetric space: bad input is refused with a clear error", "[devapi][symmetric]") {
  SymmetricSpace bad;
  CHECK(SymmetricSpace::create(4 * kG, 3, &bad).code() == ncclInvalidArgument);
  CHECK(SymmetricSpace::create(0, kG, &bad).code() == ncclInvalidArgument);
  CHECK(SymmetricSpace::create(kG + 1, kG, &bad).code() == ncclInvalidArgument);
  uint64_t off = 0;
  CHECK(bad.alloc({kG, 0}, &off).code() == ncclInvalidUsage);  // never created
  SymmetricSpace s = make(4 * kG);
  CHECK(s.alloc({0, 0}, &off).code() == ncclInvalidArgument);
  CHECK(s.alloc({kG, 3 * kG}, &off).code() == ncclInvalidArgument);
  CHECK(s.alloc({5 * kG, 0}, &off).code() == ncclInvalidArgument);
  CHECK(s.alloc({UINT64_MAX, 0}, &off).code() == ncclInvalidArgument);
  uint64_t a = must_alloc(s, kG);
  CHECK(s.free(a + 1).code() == ncclInvalidArgument);  // not an allocation's start
  REQUIRE(s.free(a).is_ok());
  braid::Status twice = s.free(a);
  CHECK(twice.code() == ncclInvalidArgument);
  CHECK_THAT(twice.message(), Catch::Contains("not a live symmetric allocation"));
}

TEST_CASE("symmetric space: the flat stride and the ranks' agreed request", "[devapi][symmetric]") {
  uint64_t stride = 0;
  REQUIRE(flat_stride(1, &stride).is_ok());
  CHECK(stride == k4GiB);
  REQUIRE(flat_stride(k4GiB, &stride).is_ok());
  CHECK(stride == k4GiB);
  REQUIRE(flat_stride(k4GiB + 1, &stride).is_ok());
  CHECK(stride == 2 * k4GiB);
  CHECK(flat_stride(0, &stride).code() == ncclInvalidArgument);
  CHECK(flat_stride(UINT64_MAX, &stride).code() == ncclInvalidArgument);

  SymmetricRequest agreed;
  REQUIRE(agreed_request({{kG, 0}, {3 * kG, 4096}, {2 * kG, 8 * kG}}, &agreed).is_ok());
  CHECK(agreed.bytes == 3 * kG);
  CHECK(agreed.align == 8 * kG);
  braid::Status mismatch = agreed_request({{kG, 0}, {0, 0}}, &agreed);
  CHECK(mismatch.code() == ncclInvalidUsage);
  CHECK_THAT(mismatch.message(), Catch::Contains("rank 1 asks for 0 bytes"));
  CHECK(agreed_request({{0, 0}, {0, 0}}, &agreed).code() == ncclInvalidArgument);
  CHECK(agreed_request({{kG, 6}}, &agreed).code() == ncclInvalidArgument);
  CHECK(agreed_request({}, &agreed).code() == ncclInvalidArgument);
}

TEST_CASE("symmetric space: ranks as processes get the same offsets", "[devapi][symmetric][mp]") {
  constexpr int kRanks = 3, kMax = 16;
  // Each child writes its offsets here; the parent compares them.
  auto* board = static_cast<uint64_t*>(
      mmap(nullptr, kRanks * kMax * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(board != MAP_FAILED);
  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(30);
      // Each rank's own heap state differs (as real ranks' do): the offsets must not depend on it.
      std::vector<char> noise(size_t(r + 1) * 4099);
      SymmetricSpace s;
      if (!SymmetricSpace::create(64 * kG, kG, &s).is_ok()) _exit(2);
      std::vector<uint64_t> offs = sequence(s);
      board[r * kMax] = offs.size();
      for (size_t i = 0; i < offs.size(); ++i) board[r * kMax + 1 + i] = offs[i];
      _exit(noise.empty() ? 4 : 0);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  SymmetricSpace mine = make(64 * kG);
  std::vector<uint64_t> expected = sequence(mine);
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(board[r * kMax] == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) CHECK(board[r * kMax + 1 + i] == expected[i]);
  }
  // And what they are: b's hole reused, alignment honoured.
  CHECK(expected == std::vector<uint64_t>{0, kG, 8 * kG, kG, 4 * kG, 9 * kG});
  munmap(board, kRanks * kMax * sizeof(uint64_t));
}

// First fit against a model: a bitmap of granules.  Random allocations of
// random sizes and alignments, random frees; every offset must be the
// model's lowest fit, every refusal the model's, and used() the model's
// count.  Freeing everything must leave one hole: a full-capacity
// allocation then fits at 0 (the neighbours coalesced).
TEST_CASE("symmetric space: random allocations and frees match a first-fit model", "[devapi][symmetric]") {
  constexpr uint64_t kUnits = 256;
  SymmetricSpace s = make(kUnits * kG);
  std::vector<bool> taken(kUnits, false);
  std::vector<std::pair<uint64_t, uint64_t>> live;  // offset, units
  std::mt19937_64 rng(20261128);
  const uint64_t aligns[] = {0, kG, 2 * kG, 4 * kG, 8 * kG, 32 * kG};
  uint64_t model_used = 0, refusals = 0;
  for (int op = 0; op < 4000; ++op) {
    INFO("op " << op);
    if (live.empty() || rng() % 5 < 3) {
      const uint64_t bytes = 1 + rng() % (24 * kG);
      const uint64_t align = aligns[rng() % 6];
      const uint64_t units = (bytes + kG - 1) / kG, step = std::max(align, kG) / kG;
      uint64_t want = kUnits;  // the model's first fit; kUnits: none
      for (uint64_t u = 0; u + units <= kUnits && want == kUnits; u += step) {
        bool fits = true;
        for (uint64_t k = u; k < u + units && fits; ++k) fits = !taken[k];
        if (fits) want = u;
      }
      uint64_t off = ~uint64_t(0);
      braid::Status st = s.alloc({bytes, align}, &off);
      if (want == kUnits) {
        CHECK(!st.is_ok());
        ++refusals;
      } else {
        REQUIRE(st.is_ok());
        REQUIRE(off == want * kG);
        for (uint64_t k = want; k < want + units; ++k) taken[k] = true;
        live.push_back({off, units});
        model_used += units * kG;
      }
    } else {
      const size_t i = rng() % live.size();
      REQUIRE(s.free(live[i].first).is_ok());
      for (uint64_t k = live[i].first / kG; k < live[i].first / kG + live[i].second; ++k) taken[k] = false;
      model_used -= live[i].second * kG;
      live.erase(live.begin() + std::ptrdiff_t(i));
    }
    REQUIRE(s.used() == model_used);
    REQUIRE(s.allocations() == live.size());
  }
  CHECK(refusals > 0);  // the sequence did fill the space at times
  for (auto& [off, units] : live) REQUIRE(s.free(off).is_ok());
  CHECK(s.used() == 0);
  CHECK(s.free(0).code() != ncclSuccess);  // nothing left to free
  CHECK(must_alloc(s, kUnits * kG) == 0);
}
