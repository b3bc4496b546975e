// braid's own generator of MSCCL XML in the style msccl-tools writes it, for
// tests: the same attribute conventions (minBytes="0" maxBytes="0" unless a
// range is asked for, inplace/outofplace with one placement, nop steps with
// srcoff="-1" dstoff="-1" cnt="0" carrying all but the last of a step's
// dependencies, hasdep on every step something waits for, one thread block
// per (send peer, receive peer, channel), chan="-1" on local thread blocks)
// and the algorithm shapes of its example programs: allpairs AllReduce and
// ReduceScatter (multi-chunk steps into scratch, local reductions spread
// over thread blocks), ring AllReduce and AllGather, allpairs AlltoAll.
// Header-only; no braid code: what braid reads is tested against it.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace msccl_style {

struct Step {
  std::string type;  // s r rcs rrs rrc rrcs cpy re nop
  char srcbuf = 'i';
  int srcoff = -1;
  char dstbuf = 'o';
  int dstoff = -1;
  int cnt = 0;
  std::vector<std::pair<int, int>> deps;  // (tb, step index) this step waits for
};

struct Tb {
  int send = -1, recv = -1, chan = 0;
  std::vector<Step> steps;
};

struct Gpu {
  int i_chunks = 0, o_chunks = 0, s_chunks = 0;
  std::vector<Tb> tbs;
  // The thread block for (send, recv, chan), made on first use.
  int tb(int send, int recv, int chan = 0) {
    for (size_t t = 0; t < tbs.size(); ++t)
      if (tbs[t].send == send && tbs[t].recv == recv && tbs[t].chan == chan) return int(t);
    tbs.push_back(Tb{send, recv, chan, {}});
    return int(tbs.size()) - 1;
  }
  // Appends a step; returns its (tb, index) as later steps name it.  Each
  // dependency but the last becomes a nop in front, as msccl-tools writes.
  std::pair<int, int> add(int t, Step step) {
    std::vector<Step>& steps = tbs[t].steps;
    for (size_t d = 0; d + 1 < step.deps.size(); ++d) {
      Step nop;
      nop.type = "nop";
      nop.deps = {step.deps[d]};
      steps.push_back(nop);
    }
    if (step.deps.size() > 1) step.deps = {step.deps.back()};
    steps.push_back(std::move(step));
    return {t, int(steps.size()) - 1};
  }
};

struct Algo {
  std::string name, coll, proto = "Simple";
  int ngpus = 0, nchunksperloop = 0;
  bool inplace = false;
  long long min_bytes = 0, max_bytes = 0;  // 0: unbounded, as msccl-tools writes
  bool legacy = false;                     // older dialect: no outofplace, minBytes, maxBytes
  std::vector<Gpu> gpus;

  std::string xml() const {
    std::set<std::tuple<int, int, int>> waited;  // (gpu, tb, step)
    int nchannels = 1;
    for (size_t g = 0; g < gpus.size(); ++g)
      for (const Tb& tb : gpus[g].tbs) {
        nchannels = std::max(nchannels, tb.chan + 1);
        for (const Step& s : tb.steps)
          for (auto [t, i] : s.deps) waited.insert({int(g), t, i});
      }
    std::string x = fmt::format(
        "<algo name=\"{}\" proto=\"{}\" nchannels=\"{}\" nchunksperloop=\"{}\" ngpus=\"{}\" coll=\"{}\" inplace=\"{}\"",
        name, proto, nchannels, nchunksperloop, ngpus, coll, inplace ? 1 : 0);
    if (!legacy)
      x += fmt::format(" outofplace=\"{}\" minBytes=\"{}\" maxBytes=\"{}\"", inplace ? 0 : 1, min_bytes, max_bytes);
    x += ">\n";
    for (size_t g = 0; g < gpus.size(); ++g) {
      const Gpu& gpu = gpus[g];
      x += fmt::format("  <gpu id=\"{}\" i_chunks=\"{}\" o_chunks=\"{}\" s_chunks=\"{}\">\n", g, gpu.i_chunks,
                       gpu.o_chunks, gpu.s_chunks);
      for (size_t t = 0; t < gpu.tbs.size(); ++t) {
        const Tb& tb = gpu.tbs[t];
        const bool local = tb.send < 0 && tb.recv < 0;
        x += fmt::format("    <tb id=\"{}\" send=\"{}\" recv=\"{}\" chan=\"{}\">\n", t, tb.send, tb.recv,
                         local ? -1 : tb.chan);
        for (size_t i = 0; i < tb.steps.size(); ++i) {
          const Step& s = tb.steps[i];
          const bool nop = s.type == "nop";
          x += fmt::format(
              "      <step s=\"{}\" type=\"{}\" srcbuf=\"{}\" srcoff=\"{}\" dstbuf=\"{}\" dstoff=\"{}\" cnt=\"{}\" "
              "depid=\"{}\" deps=\"{}\" hasdep=\"{}\"/>\n",
              i, s.type, nop ? 'i' : s.srcbuf, nop ? -1 : s.srcoff, nop ? 'o' : s.dstbuf, nop ? -1 : s.dstoff,
              nop ? 0 : s.cnt, s.deps.empty() ? -1 : s.deps[0].first, s.deps.empty() ? -1 : s.deps[0].second,
              waited.count({int(g), int(t), int(i)}) ? 1 : 0);
        }
        x += "    </tb>\n";
      }
      x += "  </gpu>\n";
    }
    return x + "</algo>\n";
  }
};

inline Step step(const char* type, char srcbuf, int srcoff, char dstbuf, int dstoff, int cnt = 1,
                 std::vector<std::pair<int, int>> deps = {}) {
  return Step{type, srcbuf, srcoff, dstbuf, dstoff, cnt, std::move(deps)};
}

// Allpairs, as msccl-tools' allreduce_a100_allpairs.py (in place) and
// reducescatter_allpairs.py: rank r sends block p (n chunks, one step of
// cnt=n) to rank p's scratch, reduces the n-1 blocks it gets into its own
// block r with one local thread block per chunk (each waiting for every
// receive: nops), and for AllReduce sends the reduced block to every peer.
inline Algo allpairs(int n, bool allreduce, const std::string& proto = "LL") {
  Algo a;
  a.name = allreduce ? "allreduce_pairs" : "reducescatter_pairs";
  a.coll = allreduce ? "allreduce" : "reducescatter";
  a.proto = proto;
  a.ngpus = n;
  a.nchunksperloop = n * n;
  a.inplace = true;
  for (int r = 0; r < n; ++r) {
    Gpu g;
    g.i_chunks = n * n;
    g.s_chunks = n * (n - 1);
    std::vector<std::pair<int, int>> received;
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      const int slot = p < r ? p : p - 1;  // this peer's block in my scratch
      const int mine_there = r < p ? r : r - 1;
      const int t = g.tb(p, p);
      g.add(t, step("s", 'i', p * n, 's', mine_there * n, n));
      received.push_back(g.add(t, step("r", 'i', p * n, 's', slot * n, n)));
    }
    std::vector<std::pair<int, int>> reduced;
    for (int j = 0; j < n; ++j) {
      const int t = g.tb(-1, -1, 0x100 + j);  // one local thread block per chunk
      std::pair<int, int> last{};
      for (int k = 0; k + 1 < n; ++k)
        last = g.add(t, step("re", 's', k * n + j, 'i', r * n + j, 1, k == 0 ? received : std::vector<std::pair<int, int>>{}));
      reduced.push_back(last);
    }
    if (allreduce)
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        const int t = g.tb(p, p);
        g.add(t, step("s", 'i', r * n, 'i', r * n, n, reduced));
        g.add(t, step("r", 'i', p * n, 'i', p * n, n));
      }
    for (Tb& tb : g.tbs)
      if (tb.chan >= 0x100) tb.chan = 0;
    a.gpus.push_back(std::move(g));
  }
  return a;
}

// Ring AllReduce in place, as allreduce_a100_ring.py with one channel: chunk
// c is reduced around the ring ending at rank c, then passed on.
inline Algo ring_allreduce(int n, int channels = 1) {
  Algo a;
  a.name = fmt::format("allreduce_ring_{}channelsperring", channels);
  a.coll = "allreduce";
  a.ngpus = n;
  a.nchunksperloop = n * channels;
  a.inplace = true;
  for (int r = 0; r < n; ++r) {
    Gpu g;
    g.i_chunks = n * channels;
    for (int ch = 0; ch < channels; ++ch) {
      const int t = g.tb((r + 1) % n, (r + n - 1) % n, ch);
      auto at = [&](int c) { return ch * n + (c % n + n) % n; };
      // Reduce-scatter: send chunk r+... ; then all-gather.
      g.add(t, step("s", 'i', at(r + n - 1), 'i', at(r + n - 1)));
      for (int k = 1; k + 1 < n; ++k) g.add(t, step("rrs", 'i', at(r + n - 1 - k), 'i', at(r + n - 1 - k)));
      g.add(t, step("rrcs", 'i', at(r), 'i', at(r)));
      for (int k = 1; k + 1 < n; ++k) g.add(t, step("rcs", 'i', at(r - k), 'i', at(r - k)));
      g.add(t, step("r", 'i', at(r - n + 1), 'i', at(r - n + 1)));
    }
    a.gpus.push_back(std::move(g));
  }
  return a;
}

// Ring AllGather in place (the file names only the output, which holds each
// rank's input as its block), as allgather_ring.py.
inline Algo ring_allgather(int n) {
  Algo a;
  a.name = "allgather_ring";
  a.coll = "allgather";
  a.ngpus = n;
  a.nchunksperloop = n;
  a.inplace = true;
  for (int r = 0; r < n; ++r) {
    Gpu g;
    g.o_chunks = n;
    const int t = g.tb((r + 1) % n, (r + n - 1) % n);
    g.add(t, step("s", 'o', r, 'o', r));
    for (int k = 1; k + 1 < n; ++k) g.add(t, step("rcs", 'o', (r + n - k) % n, 'o', (r + n - k) % n));
    g.add(t, step("r", 'o', (r + 1) % n, 'o', (r + 1) % n));
    a.gpus.push_back(std::move(g));
  }
  return a;
}

// Allpairs AlltoAll out of place, `factor` chunks per peer sent as one step
// (cnt=factor), as alltoall_allpairs.py with a chunk factor.
inline Algo allpairs_alltoall(int n, int factor) {
  Algo a;
  a.name = "alltoall_allpairs";
  a.coll = "alltoall";
  a.ngpus = n;
  a.nchunksperloop = n * factor;
  a.inplace = false;
  for (int r = 0; r < n; ++r) {
    Gpu g;
    g.i_chunks = g.o_chunks = n * factor;
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      const int t = g.tb(p, p);
      g.add(t, step("s", 'i', p * factor, 'o', r * factor, factor));
      g.add(t, step("r", 'i', r * factor, 'o', p * factor, factor));
    }
    g.add(g.tb(-1, -1), step("cpy", 'i', r * factor, 'o', r * factor, factor));
    a.gpus.push_back(std::move(g));
  }
  return a;
}

}  // namespace msccl_style
