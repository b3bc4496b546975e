// StragglAR phase 1: the rounds after the straggler arrives.
//
// Labels are logical: the straggler is rank s = n-1, the fast ranks 0..m-1
// (m = n-1) each hold the partial sum of "their" chunk after phase 0.  A
// round lets every rank send one chunk and receive one chunk (full duplex,
// one port), as in the paper's model.  Two things happen in every round t:
//  - the pipeline: for t < m, rank t and the straggler swap chunk t and both
//    reduce, so both hold the final chunk F_t; the straggler ends round m-1
//    holding every final chunk and is then a free sender;
//  - the spread: every other rank that needs a final chunk may get one from a
//    rank that has it.  Rank t cannot receive from a peer in round t (its port
//    is taken by the swap), so ranks about to meet the straggler must be fed
//    early: the paper's "critical window".
//
// The spread is planned round by round as a bipartite matching (senders on
// one side, receivers on the other, an edge where the sender has a final
// chunk the receiver lacks).  Receivers are offered in order of slack (free
// receive slots left before a target round count minus chunks still needed),
// and Kuhn's augmenting paths keep every matched receiver matched, so the
// matched set is the best the priority order allows (greedy on a transversal
// matroid).  Each matched pair then carries the rarest chunk it can, which
// keeps the number of useful senders growing.  The plan is tried for a few
// target round counts from the lower bound up and with a few tie-breaking
// orders, and the shortest result is kept; the unit tests pin the counts.
//
// Lower bound: F_{m-1} is final at the end of round m-1 with two holders and
// copies at most double each round, so R >= m-1 + ceil(log2 n) = n-2+ceil(log2 n).
// Powers of two do not come here: stragglar_rounds_pow2.cc builds them at the
// bound (the paper's n-2+log2 n; the bound leaves no slack at all there, and
// this greedy used to miss it by one from n = 16 on).  For the other n up to
// 64 the plan meets the bound except at 15, 27, 29-31 and 51-63, one round
// over.  Odd n, which the paper leaves open, work the same way: nothing here
// depends on parity.  tests/unit/test_stragglar.cc prints and pins the counts.
// Up to n = 420 every plan is at the bound or one round over (290 and 121 of
// the n that are not powers of two).  An attempt costs about n^3 steps; once
// a plan exists the search stops after kSearchWork of them, so a large n
// costs seconds (12 s at 1000 here) where a full search took minutes
// (perf/results/stragglar_planning_20261207.txt).
#include <algorithm>
#include <cstdint>
#include <numeric>

#include "braid/stragglar.h"

namespace braid {
namespace {

// Variants below kOrderVariants are fixed tie-break orders (bits of the
// variant number); those up to kSeededVariantEnd add seeded shuffles.
constexpr int kOrderVariants = 32;
constexpr int kSeededVariantEnd = 64;
// The work (RoundPlanner::work()) a search may spend once it has a plan,
// about 7 s here.  Every n up to 420 found its best plan within it (n = 380
// took the most, 279M: perf/results/stragglar_planning_20261207.txt); a
// larger n keeps the best found by then instead of searching for minutes.
constexpr uint64_t kSearchWork = uint64_t(5) << 26;

int ceil_log2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

class RoundPlanner {
 public:
  RoundPlanner(int n, int target, int variant)
      : n_(n), m_(n - 1), s_(n - 1), target_(target), variant_(variant),
        words_((n + 62) / 64), rank_words_((n + 63) / 64), has_(size_t(n) * words_, 0),
        holder_bits_(size_t(n) * rank_words_, 0), holders_(n - 1, 0), need_(n, n - 2) {
    need_[s_] = 0;  // the straggler gets every chunk through its swaps
  }

  // False once the plan cannot end within `cap` rounds (a rank needs more
  // chunks than it has receive slots left: one a round, less its swap's), or
  // once it has spent more than `work_limit` (work()).
  bool run(int cap, uint64_t work_limit, StragglarRounds* out) {
    out->nranks = n_;
    out->rounds.clear();
    for (int t = 0; t < m_ || remaining() > 0; ++t) {
      if (work_ > work_limit) return false;
      for (int r = 0; r < m_; ++r)
        if (need_[r] > cap - t - (r >= t && r < cap ? 1 : 0)) return false;
      out->rounds.push_back(round(t));
    }
    return true;
  }
  // What the plan has cost: option words worked out and senders searched
  // through, the two steps whose count grows as n^3 a plan.  Deterministic,
  // unlike a clock, so every rank stops its search at the same plan.
  uint64_t work() const { return work_; }

 private:
  bool has(int r, int c) const { return (has_[size_t(r) * words_ + c / 64] >> (c % 64)) & 1; }
  void give(int r, int c) {
    if (!has(r, c)) {
      has_[size_t(r) * words_ + c / 64] |= uint64_t(1) << (c % 64);
      holder_bits_[size_t(c) * rank_words_ + r / 64] |= uint64_t(1) << (r % 64);
      ++holders_[c];
    }
  }
  // The final chunks (those below round t's) that b lacks and will not get
  // from its own swap, as final_words_ words in `lack`; returns how many.
  int lacking(int b, int t, uint64_t* lack) const {
    const int finals = std::min(t, m_);
    int count = 0;
    for (int w = 0; w < final_words_; ++w) {
      uint64_t bits = ~has_[size_t(b) * words_ + w];
      if (finals < (w + 1) * 64) bits &= (uint64_t(1) << (finals % 64)) - 1;
      if (b / 64 == w) bits &= ~(uint64_t(1) << (b % 64));
      lack[w] = bits;
      count += __builtin_popcountll(bits);
    }
    return count;
  }
  // Whether a has one of the chunks in `lack`.
  bool has_any(int a, const uint64_t* lack) const {
    for (int w = 0; w < final_words_; ++w)
      if (has_[size_t(a) * words_ + w] & lack[w]) return true;
    return false;
  }
  bool holds_any(int r) const {
    for (int w = 0; w < words_; ++w)
      if (has_[size_t(r) * words_ + w]) return true;
    return false;
  }
  int remaining() const { return std::accumulate(need_.begin(), need_.end(), 0); }

  // The chunk a sends b, or -1 if a has nothing b can use.
  int best_chunk(int a, int b, const std::vector<int>& pending) const {
    int best = -1;
    for (int c = 0; c < m_; ++c) {
      if (c == b || !has(a, c) || has(b, c)) continue;
      if (best < 0) {
        best = c;
        continue;
      }
      int hc = holders_[c] + pending[c], hb = holders_[best] + pending[best];
      // Rarest first; ties toward the newest chunk (it has the least time left).
      if (hc < hb || (hc == hb && (variant_ & 1 ? c < best : c > best))) best = c;
    }
    return best;
  }

  // Receive slots rank r has from round t up to the target, minus what it needs.
  int slack(int r, int t) const {
    int slots = std::max(0, target_ - t);
    if (r >= t && r < target_) --slots;  // its swap round
    return slots - need_[r];
  }

  std::vector<StragglarTransfer> round(int t) {
    std::vector<StragglarTransfer> moves;
    const bool swapping = t < m_;
    if (swapping) {
      moves.push_back({t, s_, t, true});
      moves.push_back({s_, t, t, true});
    }
    std::vector<int> senders, receivers;
    for (int r = 0; r < n_; ++r) {
      if (swapping && (r == t || r == s_)) continue;
      if (holds_any(r)) senders.push_back(r);
      if (r != s_ && need_[r] > 0) receivers.push_back(r);
    }
    if (variant_ >= kOrderVariants) {
      uint64_t x = rng_ ^ 0x9e3779b97f4a7c15ULL * uint64_t(t + 1);
      for (size_t i = receivers.size(); i > 1; --i) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        std::swap(receivers[i - 1], receivers[(x >> 33) % i]);
      }
    }
    std::stable_sort(receivers.begin(), receivers.end(), [&](int a, int b) {
      int sa = slack(a, t), sb = slack(b, t);
      if (sa != sb) return sa < sb;
      // Rank t+1 cannot forward what it gets now (its port is the
      // straggler's next round); while senders are scarce that copy is lost.
      if ((a == t + 1) != (b == t + 1)) return b == t + 1;
      // Ranks whose swap is still ahead lose a slot soon: serve them first.
      int da = a >= t ? a - t : n_ + a, db = b >= t ? b - t : n_ + b;
      // While copies are still doubling (the first ~log2 n rounds), a rank
      // whose swap is far off forwards for longer: serve those first then.
      bool far_first = (variant_ & 2) != 0;
      if (t <= early_rounds_) far_first = !far_first;
      if (far_first) return da > db;
      return da < db;
    });
    if (variant_ & 4) std::reverse(senders.begin(), senders.end());
    if (variant_ >= kOrderVariants) {
      // Seeded shuffles: other tie-breaks among equally urgent ranks.
      rng_ = rng_ * 6364136223846793005ULL + 1442695040888963407ULL;
      uint64_t x = rng_;
      for (size_t i = senders.size(); i > 1; --i) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        std::swap(senders[i - 1], senders[(x >> 33) % i]);
      }
    }
    if (variant_ & 8) {
      // Holders of rare chunks first, so receivers take from them when they can.
      std::vector<int> rarest(n_, n_ + 1);
      for (int a : senders)
        for (int c = 0; c < m_; ++c)
          if (has(a, c)) rarest[a] = std::min(rarest[a], holders_[c]);
      std::stable_sort(senders.begin(), senders.end(), [&](int a, int b) { return rarest[a] < rarest[b]; });
    }

    std::vector<int> sender_of(n_, -1), receiver_of(n_, -1);
    std::vector<int> pending(m_, 0);
    std::vector<std::pair<int, int>> gets;
    std::vector<StragglarTransfer> spread;
    if (variant_ & 16) {
      // Chunks whose doubling cannot afford a missed round go first: each of
      // their idle holders feeds the most urgent receiver that lacks them.
      std::vector<int> chunks;
      for (int c = 0; c < std::min(t, m_); ++c)
        if (holders_[c] < n_) chunks.push_back(c);
      auto chunk_slack = [&](int c) { return (target_ - t) - ceil_log2((n_ + holders_[c] - 1) / holders_[c]); };
      std::stable_sort(chunks.begin(), chunks.end(), [&](int a, int b) {
        int sa = chunk_slack(a), sb = chunk_slack(b);
        return sa != sb ? sa < sb : holders_[a] < holders_[b];
      });
      for (int c : chunks) {
        if (chunk_slack(c) > 0) break;
        size_t next = 0;
        for (int a : senders) {
          if (receiver_of[a] >= 0 || !has(a, c)) continue;
          while (next < receivers.size() &&
                 (sender_of[receivers[next]] >= 0 || has(receivers[next], c) || receivers[next] == c))
            ++next;
          if (next == receivers.size()) break;
          int b = receivers[next];
          sender_of[b] = a;
          receiver_of[a] = b;
          ++pending[c];
          gets.push_back({b, c});
          spread.push_back({a, b, c, false});
        }
      }
    }
    // Kuhn's algorithm, receivers in priority order.  Senders a search
    // visited and failed through stay marked until a search succeeds: the
    // matching is unchanged, so they still lead to no free sender, and the
    // next search finds the path it would have found without the marks.
    std::vector<int> fixed = sender_of;
    senders_ = std::move(senders);
    start_options(receivers, t, receiver_of);
    std::vector<uint64_t> seen(sender_words_, 0);
    for (int b : receivers) {
      if (fixed[b] >= 0) continue;
      if (augment(b, seen, sender_of, receiver_of)) std::fill(seen.begin(), seen.end(), 0);
    }
    // Chunks: most urgent receivers pick first, each the rarest it can get.
    moves.insert(moves.end(), spread.begin(), spread.end());
    for (int b : receivers) {
      int a = sender_of[b];
      if (a < 0 || fixed[b] >= 0) continue;
      int c = best_chunk(a, b, pending);
      ++pending[c];
      gets.push_back({b, c});
      moves.push_back({a, b, c, false});
    }
    if (swapping) {
      give(t, t);
      give(s_, t);
    }
    for (auto [b, c] : gets) {
      give(b, c);
      --need_[b];
    }
    return moves;
  }

  // Receiver b's usable senders are bits of senders_ (bit p: senders_[p]):
  // those with a final chunk b lacks, less those paired for a critical
  // chunk (in receiver_of, before any search).  A search reads them in the
  // senders' order a word at a time (a list of senders each search skipped
  // through, mostly seen ones, was most of the planner's time), and a word
  // is worked out when a search first reaches it, so words no search
  // reaches cost nothing.
  void start_options(const std::vector<int>& receivers, int t, const std::vector<int>& receiver_of) {
    sender_words_ = (int(senders_.size()) + 63) / 64;
    final_words_ = (std::min(t, m_) + 63) / 64;
    options_.assign(size_t(n_) * sender_words_, 0);
    options_known_.assign(n_, 0);
    paired_.resize(senders_.size());
    for (size_t p = 0; p < senders_.size(); ++p) paired_[p] = receiver_of[senders_[p]] >= 0;
    for (int b : receivers) {
      // Few chunks lacking (late rounds): the union of their holders says who
      // is useful; else each sender's chunks are tested against them.
      uint64_t* lack = &lack_[size_t(b) * words_];
      const int count = lacking(b, t, lack);
      by_holders_[b] = size_t(count) * rank_words_ < senders_.size();
      if (!by_holders_[b]) continue;
      uint64_t* holding = &holding_[size_t(b) * rank_words_];
      std::fill(holding, holding + rank_words_, 0);
      for (int w = 0; w < final_words_; ++w)
        for (uint64_t bits = lack[w]; bits; bits &= bits - 1) {
          const uint64_t* of_chunk = &holder_bits_[size_t(w * 64 + __builtin_ctzll(bits)) * rank_words_];
          for (int v = 0; v < rank_words_; ++v) holding[v] |= of_chunk[v];
        }
    }
  }
  uint64_t option_word(int b, int w) {
    uint64_t& word = options_[size_t(b) * sender_words_ + w];
    if (w < options_known_[b]) return word;
    const uint64_t* lack = &lack_[size_t(b) * words_];
    const uint64_t* holding = &holding_[size_t(b) * rank_words_];
    const size_t end = std::min(senders_.size(), size_t(w + 1) * 64);
    for (size_t p = size_t(w) * 64; p < end; ++p) {
      const int a = senders_[p];
      const bool useful = by_holders_[b] ? (holding[a / 64] >> (a % 64)) & 1 : has_any(a, lack);
      if (useful && !paired_[p]) word |= uint64_t(1) << (p % 64);
    }
    options_known_[b] = w + 1;
    ++work_;
    return word;
  }

  bool augment(int b, std::vector<uint64_t>& seen, std::vector<int>& sender_of, std::vector<int>& receiver_of) {
    for (int w = 0; w < sender_words_; ++w)
      // Unseen options in this word, read again after each deeper search,
      // which may have marked more of them.
      for (uint64_t left; (left = option_word(b, w) & ~seen[w]) != 0;) {
        const int bit = __builtin_ctzll(left);
        seen[w] |= uint64_t(1) << bit;
        ++work_;
        const int a = senders_[size_t(w) * 64 + bit];
        if (receiver_of[a] < 0 || augment(receiver_of[a], seen, sender_of, receiver_of)) {
          receiver_of[a] = b;
          sender_of[b] = a;
          return true;
        }
      }
    return false;
  }

  int n_, m_, s_, target_, variant_;
  int words_;
  int early_rounds_ = ceil_log2(n_) + 1;
  uint64_t rng_ = uint64_t(variant_) * 0x2545F4914F6CDD1DULL;
  int rank_words_;
  std::vector<uint64_t> has_;  // bit c of rank r: r holds final chunk c
  std::vector<uint64_t> holder_bits_;  // bit r of chunk c: the same, by chunk
  std::vector<int> holders_;
  std::vector<int> need_;
  // This round's senders, in the order searches try them, and what
  // start_options() keeps for option_word().
  std::vector<int> senders_;
  std::vector<char> paired_;
  int sender_words_ = 0, final_words_ = 0;
  std::vector<uint64_t> options_;  // receiver b's: sender_words_ words from b's, the first options_known_[b] made
  std::vector<int> options_known_;
  std::vector<uint64_t> lack_ = std::vector<uint64_t>(size_t(n_) * words_);  // lacking(), words_ from b's
  std::vector<uint64_t> holding_ = std::vector<uint64_t>(size_t(n_) * rank_words_);  // holders of b's lack
  std::vector<char> by_holders_ = std::vector<char>(n_);
  uint64_t work_ = 0;
};

}  // namespace

int stragglar_round_lower_bound(int n) {
  if (n <= 1) return 0;
  return n - 2 + ceil_log2(n);
}

StragglarRounds stragglar_rounds(int n) {
  if (n >= 2 && (n & (n - 1)) == 0) return stragglar_rounds_power_of_two(n);
  StragglarRounds best;
  best.nranks = n;
  if (n <= 1) return best;
  const int lower = stragglar_round_lower_bound(n);
  // The deterministic orders first, then seeded shuffles at the lower bound
  // (which find it for most n), then the next target up.  Once a plan is
  // found, the next ones stop as soon as they cannot be shorter, and the
  // search ends when it is at the bound or has spent kSearchWork.
  uint64_t spent = 0;
  auto attempt = [&](int target, int variant) {
    StragglarRounds plan;
    const bool first = best.rounds.empty();
    const int cap = first ? 2 * n + 8 : int(best.rounds.size()) - 1;  // the first: a guard
    RoundPlanner planner(n, target, variant);
    const bool planned = planner.run(cap, first ? UINT64_MAX : kSearchWork - spent, &plan);
    spent += planner.work();
    if (planned && (first || plan.rounds.size() < best.rounds.size())) best = std::move(plan);
    return !best.rounds.empty() && (int(best.rounds.size()) == lower || spent >= kSearchWork);
  };
  for (int variant = 0; variant < kSeededVariantEnd; ++variant)
    if (attempt(lower, variant)) return best;
  for (int variant = 0; variant < kOrderVariants; ++variant)
    if (attempt(lower + 1, variant)) return best;
  return best;
}

}  // namespace braid
