// Folding several sources into a destination, 16 bytes at a time, written
// once for CUDA thread blocks (kernels.cu) and the host tests (BRAID_HD).
//
//   dst[i] (and dst2[i]) = srcs[0][i] (op) srcs[1][i] (op) ... (op) srcs[n-1][i]
//
// folded left to right, rounded to the storage type after every step: the
// bits a chain of pairwise reductions gives, so fusing a two-shot's
// GetReduces into one pass changes no result.
//
// Why a fold of many sources: a chain of n-1 pairwise reductions into one
// destination reads and writes the destination n-1 times; one pass reads
// each source once and writes once (n + 1 block transfers, not 3(n-1)).
// Why kFoldUnroll: a memory-bound kernel is as fast as the loads it keeps in
// flight.  A worker takes kFoldUnroll 16-byte vectors of each source at a
// time, kFoldUnroll x `workers` apart, and loads all of them before folding
// any, so a block of 512 threads has 32 KiB of every source in flight, not
// the 8 of one vector per thread (on an H200, the two-shot schedule on that
// version reached 45% of the bandwidth limit where its traffic allows 80%:
// perf/results/cuda_h200/20261204).
//
// Worker `w` of `workers` (a thread of a block; a loop in the host tests)
// handles its own elements only, and reads all sources of an element
// before it writes it: dst may be one of the sources (in place).  The 16-
// byte path needs every pointer 16-byte aligned, else elements go one by
// one (each pointer aligned to its element, as NCCL requires).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "braid/hd.h"
#include "src/ops/reduce_ops.h"

namespace braid {

// Vectors per worker and pass: four, except for the fp8 formats, whose
// software conversions make a fold compute-bound (and unrolled, four times
// the device code to compile).
template <typename S>
constexpr int kFoldUnroll = std::is_same_v<S, e4m3_bits> || std::is_same_v<S, e5m2_bits> ? 1 : 4;

// Loops over the unrolled vectors, unrolled on the device: their arrays
// then live in registers, not in local memory.
#if defined(__CUDACC__)
#define BRAID_FOLD_UNROLL _Pragma("unroll")
#else
#define BRAID_FOLD_UNROLL
#endif

struct alignas(16) Bytes16 {
  uint64_t lo, hi;
};

// Vector i of p (16-byte aligned): one 128-bit load or store on the device.
BRAID_HD Bytes16 load16(const char* p, uint64_t i) {
#if defined(__CUDA_ARCH__)
  return reinterpret_cast<const Bytes16*>(p)[i];
#else
  Bytes16 v;
  memcpy(&v, p + 16 * i, 16);
  return v;
#endif
}
BRAID_HD void store16(char* p, uint64_t i, Bytes16 v) {
#if defined(__CUDA_ARCH__)
  reinterpret_cast<Bytes16*>(p)[i] = v;
#else
  memcpy(p + 16 * i, &v, 16);
#endif
}

// a (op) b over one word W (4 or 8 bytes) of elements of storage type S:
// word by word, so that the elements stay in registers.
template <ReduceKind K, typename S, typename W>
BRAID_HD W fold_word(W a, W b) {
  constexpr int kPer = sizeof(W) / sizeof(S);
  S x[kPer], y[kPer];
  memcpy(x, &a, sizeof(W));
  memcpy(y, &b, sizeof(W));
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int k = 0; k < kPer; ++k) x[k] = reduce_elem<K>(x[k], y[k]);
  memcpy(&a, x, sizeof(W));
  return a;
}

// acc = acc (op) x, element by element over 16 bytes of storage type S.
template <ReduceKind K, typename S>
BRAID_HD void fold16(Bytes16& acc, const Bytes16& x) {
  if constexpr (sizeof(S) == 8) {
    acc.lo = fold_word<K, S>(acc.lo, x.lo);
    acc.hi = fold_word<K, S>(acc.hi, x.hi);
  } else {
    const uint32_t a0 = fold_word<K, S>(uint32_t(acc.lo), uint32_t(x.lo));
    const uint32_t a1 = fold_word<K, S>(uint32_t(acc.lo >> 32), uint32_t(x.lo >> 32));
    const uint32_t a2 = fold_word<K, S>(uint32_t(acc.hi), uint32_t(x.hi));
    const uint32_t a3 = fold_word<K, S>(uint32_t(acc.hi >> 32), uint32_t(x.hi >> 32));
    acc.lo = uint64_t(a0) | uint64_t(a1) << 32;
    acc.hi = uint64_t(a2) | uint64_t(a3) << 32;
  }
}

// Worker w's elements of n (storage type S, reduction K); nsrc >= 1.
template <ReduceKind K, typename S>
BRAID_HD void fold_sources(char* dst, char* dst2, const char* const* srcs, int nsrc, uint64_t n, uint64_t w,
                           uint64_t workers) {
  uintptr_t align = uintptr_t(dst) | uintptr_t(dst2);
  for (int s = 0; s < nsrc; ++s) align |= uintptr_t(srcs[s]);
  uint64_t done = 0;
  if ((align & 15) == 0) {
    constexpr uint64_t kPer = 16 / sizeof(S);
    constexpr int U = kFoldUnroll<S>;
    const uint64_t nv = n / kPer;
    uint64_t i = w;
    if constexpr (U > 1) {
      for (; i + (U - 1) * workers < nv; i += U * workers) {
        Bytes16 acc[U], x[U];
        BRAID_FOLD_UNROLL
        for (int u = 0; u < U; ++u) acc[u] = load16(srcs[0], i + u * workers);
        for (int s = 1; s < nsrc; ++s) {
          BRAID_FOLD_UNROLL
          for (int u = 0; u < U; ++u) x[u] = load16(srcs[s], i + u * workers);
          BRAID_FOLD_UNROLL
          for (int u = 0; u < U; ++u) fold16<K, S>(acc[u], x[u]);
        }
        BRAID_FOLD_UNROLL
        for (int u = 0; u < U; ++u) {
          store16(dst, i + u * workers, acc[u]);
          if (dst2) store16(dst2, i + u * workers, acc[u]);
        }
      }
    }
    for (; i < nv; i += workers) {
      Bytes16 acc = load16(srcs[0], i);
      for (int s = 1; s < nsrc; ++s) fold16<K, S>(acc, load16(srcs[s], i));
      store16(dst, i, acc);
      if (dst2) store16(dst2, i, acc);
    }
    done = nv * kPer;
  }
  for (uint64_t i = done + w; i < n; i += workers) {
    S acc = reinterpret_cast<const S*>(srcs[0])[i];
    for (int s = 1; s < nsrc; ++s) acc = reduce_elem<K>(acc, reinterpret_cast<const S*>(srcs[s])[i]);
    reinterpret_cast<S*>(dst)[i] = acc;
    if (dst2) reinterpret_cast<S*>(dst2)[i] = acc;
  }
}

}  // namespace braid
