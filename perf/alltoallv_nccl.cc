// alltoallv_perf without --ab: nccl-tests' alltoallv_perf (v2.19.6), its
// flags, table and environment.  Each rank sends every peer a different
// amount, ncclSend/ncclRecv in one group:
//   generated (default): a size S of the sweep is what each rank sends in
//     all; to the peer at distance d (in rank order) it sends
//     (1 - spread) * S / n + spread * d * S / (n (n - 1) / 2) bytes, rounded
//     down to 16; NCCL_TESTS_ALLTOALLV_SPREAD (0..1, default 1) sets spread;
//   matrix: NCCL_TESTS_ALLTOALLV_MATRIX_FILE names a square matrix of
//     bytes (row: sender, column: receiver; at least n x n, rounded down to
//     16 after NCCL_TESTS_ALLTOALLV_MATRIX_SCALE), with -b equal to -e and -e
//     at least the largest rank's total.
// The size column is the largest rank's send or receive total, the count
// column the per-peer block of the generated pattern (0 with a matrix), the
// bus bandwidth (n - 1) / n of size over time; the in-place column is not
// checked (N/A), as in nccl-tests.  NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY=1
// prints each rank's totals and bandwidth before every row.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "perf/harness.h"
#include "perf/values.h"

namespace perf {
namespace {

struct Pattern {
  bool generated = true;
  double spread = 1.0;   // NCCL_TESTS_ALLTOALLV_SPREAD
  double scale = 1.0;    // NCCL_TESTS_ALLTOALLV_MATRIX_SCALE
  bool summary = false;  // NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY
  std::string file;      // NCCL_TESTS_ALLTOALLV_MATRIX_FILE
  std::vector<size_t> matrix;  // bytes, dim x dim
  size_t dim = 0;
  std::string error;  // the matrix file could not be used
};

// A number that is the whole of `text` (else `fallback`), as nccl-tests reads these variables.
double env_number(const char* name, double fallback) {
  const char* text = std::getenv(name);
  if (!text) return fallback;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  return errno != ERANGE && end != text && *end == '\0' ? v : fallback;
}

void read_matrix(Pattern* p) {
  std::ifstream in(p->file);
  if (!in) {
    p->error = fmt::format("Unable to open alltoallv traffic matrix file {}.", p->file);
    return;
  }
  std::string line;
  size_t row = 0;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string word;
    size_t cols = 0;
    while (words >> word) {
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(word.c_str(), &end);
      if (end == word.c_str() || *end || errno == ERANGE || v < 0 ||
          (long double)v * p->scale > (long double)SIZE_MAX) {
        p->error = fmt::format("Invalid alltoallv traffic matrix value at row {} col {} in file {}.", row, cols,
                               p->file);
        return;
      }
      p->matrix.push_back(size_t((long double)v * p->scale) & ~size_t(15));  // 16-byte blocks, as the others
      ++cols;
    }
    if (cols == 0) continue;
    if (row == 0) p->dim = cols;
    if (cols != p->dim) {
      p->error = fmt::format("Invalid alltoallv traffic matrix column count in file {} row {}. Expected {} columns, "
                             "got {}.", p->file, row, p->dim, cols);
      return;
    }
    ++row;
  }
  if (row == 0) p->error = fmt::format("Invalid alltoallv traffic matrix, file {} is empty.", p->file);
  else if (row != p->dim)
    p->error = fmt::format("Invalid alltoallv traffic matrix, file {} must be square (got {}x{}).", p->file, row,
                           p->dim);
}

const Pattern& pattern() {
  static const Pattern p = [] {
    Pattern q;
    if (const char* s = std::getenv("NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY")) q.summary = std::atoi(s) != 0;
    q.spread = std::clamp(env_number("NCCL_TESTS_ALLTOALLV_SPREAD", 1.0), 0.0, 1.0);
    q.scale = std::max(env_number("NCCL_TESTS_ALLTOALLV_MATRIX_SCALE", 1.0), 0.0);
    if (const char* f = std::getenv("NCCL_TESTS_ALLTOALLV_MATRIX_FILE")) {
      q.generated = false;
      q.file = f;
      read_matrix(&q);
    }
    return q;
  }();
  return p;
}

// Bytes rank `from` sends rank `to`; `total`: what each rank sends in all (generated).
size_t peer_bytes(int from, int to, int n, size_t total) {
  const Pattern& p = pattern();
  if (!p.generated) return p.matrix[size_t(from) * p.dim + size_t(to)];
  if (n == 1) return total & ~size_t(15);
  const int distance = (to - from + n) % n;
  const double pairs = double(n) * (n - 1) / 2;
  const double bytes = (1.0 - p.spread) * double(total) / n + p.spread * distance * double(total) / pairs;
  return size_t(bytes) & ~size_t(15);
}

// Elements rank `from` sends before its block for `to`, and `to` receives before `from`'s.
size_t send_offset(int from, int to, int n, size_t total, size_t es) {
  size_t at = 0;
  for (int k = 0; k < to; ++k) at += peer_bytes(from, k, n, total) / es;
  return at;
}

// The largest send and receive totals of any rank, in elements.
void max_counts(int n, size_t total, size_t es, size_t* send, size_t* recv) {
  *send = *recv = 0;
  for (int i = 0; i < (pattern().generated ? 1 : n); ++i) {  // generated: every rank alike
    size_t s = 0, r = 0;
    for (int j = 0; j < n; ++j) {
      s += peer_bytes(i, j, n, total) / es;
      r += peer_bytes(j, i, n, total) / es;
    }
    *send = std::max(*send, s);
    *recv = std::max(*recv, r);
  }
}

size_t block(size_t count, size_t es, int n) { return (count / size_t(n)) & ~(16 / es - 1); }

Counts counts(size_t count, size_t es, int n) {
  const size_t param = pattern().generated ? block(count, es, n) : 0;
  Counts c;
  max_counts(n, param * size_t(n) * es, es, &c.send, &c.recv);
  c.param = param;
  return c;
}

double bus_factor(int n) { return double(n - 1) / n; }

ncclResult_t run(const Call& c) {
  const size_t es = type_size(c.type);
  const size_t total = c.count * size_t(c.nranks) * es;
  const char* send = static_cast<const char*>(c.send);
  char* recv = static_cast<char*>(c.recv);
  ncclResult_t r = ncclGroupStart();
  for (int peer = 0; r == ncclSuccess && peer < c.nranks; ++peer) {
    const size_t out = peer_bytes(c.rank, peer, c.nranks, total) / es;
    const size_t in = peer_bytes(peer, c.rank, c.nranks, total) / es;
    if (out > 0) r = ncclSend(send, out, c.type, peer, c.comm, c.stream);
    if (r == ncclSuccess && in > 0) r = ncclRecv(recv, in, c.type, peer, c.comm, c.stream);
    send += out * es;
    recv += in * es;
  }
  const ncclResult_t end = ncclGroupEnd();
  return r != ncclSuccess ? r : end;
}

// Element i of `rank`'s receive buffer: from the sender whose block holds
// it, that sender's element at its block for `rank`.  Past what `rank`
// receives (the buffer holds the largest rank's total): not defined.
bool expected(int rank, int n, int, size_t param, size_t i, const Data& d, uint64_t* bits) {
  const size_t es = type_size(d.type());
  const size_t total = param * size_t(n) * es;
  for (int from = 0; from < n; ++from) {
    const size_t in = peer_bytes(from, rank, n, total) / es;
    if (i < in) {
      *bits = d.input(from, send_offset(from, rank, n, total, es) + i);
      return true;
    }
    i -= in;
  }
  return false;
}

bool validate(size_t min_bytes, size_t max_bytes, int n, std::string* error) {
  const Pattern& p = pattern();
  if (p.generated) return true;
  if (!p.error.empty()) return *error = p.error, false;
  if (size_t(n) > p.dim)
    return *error = fmt::format("Invalid alltoallv traffic matrix, requested nranks ({}) is larger than matrix size "
                                "({}) in file {}.", n, p.dim, p.file),
           false;
  size_t send = 0, recv = 0;
  max_counts(n, 0, 1, &send, &recv);
  if (max_bytes < std::max(send, recv))
    return *error = fmt::format("maxBytes (-e) must be at least {} bytes as required by traffic matrix file {} (got "
                                "{}). Increase -e.", std::max(send, recv), p.file, max_bytes),
           false;
  if (min_bytes != max_bytes)
    return *error = "-b and -e options must be set to the same value (e.g., -b 32M -e 32M) when using alltoallv "
                    "traffic matrix mode.",
           false;
  return true;
}

// NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: every rank's totals and bandwidth.
std::string summary(int n, size_t es, size_t param, double sec) {
  const Pattern& p = pattern();
  if (!p.summary) return {};
  const size_t total = param * size_t(n) * es;
  std::string s = p.generated ? fmt::format("# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=generated nranks={} "
                                            "total_bytes={} spread={:.3f} time_usec={:.2f}\n",
                                            n, total, p.spread, sec * 1e6)
                              : fmt::format("# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=matrix nranks={} "
                                            "matrix_dim={} scale={:.3f} time_usec={:.2f}\n",
                                            n, p.dim, p.scale, sec * 1e6);
  for (int rank = 0; rank < n; ++rank) {
    size_t sent = 0, received = 0;
    for (int peer = 0; peer < n; ++peer) {
      sent += peer_bytes(rank, peer, n, total);
      received += peer_bytes(peer, rank, n, total);
    }
    const double alg = double(std::max(sent, received)) / 1e9 / sec;
    s += fmt::format("#   rank={} send_bytes={} recv_bytes={} alg_bw={:.2f} bus_bw={:.2f}\n", rank, sent, received,
                     alg, alg * bus_factor(n));
  }
  return s;
}

}  // namespace

int alltoallv_nccl_tests_main(int argc, char** argv) {
  Benchmark b{"AlltoAllv", false, false, bus_factor, counts, run, expected};
  b.checks_in_place = false;
  b.validate = validate;
  b.row_note = summary;
  return perf_main(argc, argv, b);
}

}  // namespace perf
