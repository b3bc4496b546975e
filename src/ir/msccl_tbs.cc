// Lanes to MSCCL thread blocks (see msccl_tbs.h).
#include "src/ir/msccl_tbs.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

namespace braid {
namespace {

int send_peer(const Op& op) { return op_sends(op.type) ? op.send_peer : -1; }
int recv_peer(const Op& op) { return op_receives(op.type) ? op.recv_peer : -1; }

// Splits one lane into tbs with one send and one recv peer each: an op stays
// in its predecessor's tb where the peers allow (so a lane that talks to one
// peer each way stays one tb), else goes to the lane's first tb that fits.
void split_lane(const Lane& lane, uint16_t l, std::vector<MscclTb>* tbs, std::vector<MscclOpPlace>* place) {
  const size_t first = tbs->size();
  int prev = -1;
  for (uint32_t i = 0; i < lane.ops.size(); ++i) {
    const int sp = send_peer(lane.ops[i]), rp = recv_peer(lane.ops[i]);
    auto fits = [&](const MscclTb& t) {
      return (sp < 0 || t.send < 0 || t.send == sp) && (rp < 0 || t.recv < 0 || t.recv == rp);
    };
    int chosen = prev >= 0 && fits((*tbs)[size_t(prev)]) ? prev : -1;
    for (size_t t = first; chosen < 0 && t < tbs->size(); ++t)
      if (fits((*tbs)[t])) chosen = int(t);
    if (chosen < 0) {
      chosen = int(tbs->size());
      tbs->push_back({l, -1, -1, lane.channel, {}});
    }
    MscclTb& t = (*tbs)[size_t(chosen)];
    if (sp >= 0) t.send = sp;
    if (rp >= 0) t.recv = rp;
    t.ops.push_back(i);
    place->push_back({uint32_t(chosen), prev >= 0 && chosen != prev});
    prev = chosen;
  }
  if (lane.ops.empty()) tbs->push_back({l, -1, -1, lane.channel, {}});  // keeps tb ids = lane ids
}

// MSCCL matches a connection's sends and recvs by (peer, channel): two tbs of
// a rank on one of them would leave the order between them undefined.
bool check_unique_peers(const MscclTbPlan& plan, std::string* error) {
  for (size_t r = 0; r < plan.tbs.size(); ++r) {
    std::map<std::tuple<bool, int, int>, size_t> owner;  // (sends?, peer, channel) -> tb
    for (size_t t = 0; t < plan.tbs[r].size(); ++t) {
      const MscclTb& tb = plan.tbs[r][t];
      for (bool sends : {true, false}) {
        const int peer = sends ? tb.send : tb.recv;
        if (peer < 0) continue;
        auto [it, added] = owner.emplace(std::tuple{sends, peer, int(tb.channel)}, t);
        if (added) continue;
        const MscclTb& other = plan.tbs[r][it->second];
        return *error = fmt::format("rank {} lanes {} and {} both {} rank {} on channel {} once split into one MSCCL "
                                    "tb per peer (a tb {} one peer): MSCCL could not tell their steps apart",
                                    r, other.lane, tb.lane, sends ? "send to" : "receive from", peer, tb.channel,
                                    sends ? "sends to" : "receives from"),
               false;
      }
    }
  }
  return true;
}

bool within_channel_limit(const MscclTbPlan& plan) {
  for (const auto& tbs : plan.tbs) {
    std::map<int, int> sends, recvs;
    for (const MscclTb& t : tbs) {
      if (t.send >= 0 && ++sends[t.channel] > kMscclMaxTbsPerChannel) return false;
      if (t.recv >= 0 && ++recvs[t.channel] > kMscclMaxTbsPerChannel) return false;
    }
  }
  return true;
}

int find_root(std::vector<int>& up, int x) {
  while (up[size_t(x)] != x) x = up[size_t(x)] = up[size_t(up[size_t(x)])];
  return x;
}

// Moves tbs to other channels, each connection's two ends together, so that
// no channel of a rank holds more than MSCCL's 32 sending (or receiving) tbs.
bool spread_channels(MscclTbPlan* plan, std::string* error) {
  std::vector<size_t> base(plan->tbs.size() + 1, 0);
  for (size_t r = 0; r < plan->tbs.size(); ++r) base[r + 1] = base[r] + plan->tbs[r].size();
  std::vector<int> up(base.back());
  std::iota(up.begin(), up.end(), 0);
  std::map<std::tuple<int, int, int>, size_t> receiver;  // (rank, from, channel) -> global tb
  for (size_t r = 0; r < plan->tbs.size(); ++r)
    for (size_t t = 0; t < plan->tbs[r].size(); ++t)
      if (plan->tbs[r][t].recv >= 0) receiver[{int(r), plan->tbs[r][t].recv, plan->tbs[r][t].channel}] = base[r] + t;
  for (size_t r = 0; r < plan->tbs.size(); ++r)
    for (size_t t = 0; t < plan->tbs[r].size(); ++t)
      if (auto it = receiver.find({plan->tbs[r][t].send, int(r), plan->tbs[r][t].channel}); it != receiver.end())
        up[size_t(find_root(up, int(base[r] + t)))] = find_root(up, int(it->second));
  std::map<int, std::vector<std::pair<size_t, size_t>>> groups;  // root -> (rank, tb), by first member
  for (size_t r = 0; r < plan->tbs.size(); ++r)
    for (size_t t = 0; t < plan->tbs[r].size(); ++t) groups[find_root(up, int(base[r] + t))].push_back({r, t});
  std::vector<std::map<int, std::set<int>>> sends(plan->tbs.size()), recvs(plan->tbs.size());  // [rank][channel]
  for (const auto& [root, members] : groups) {
    auto fits = [&](int ch) {
      for (auto [r, t] : members) {
        const MscclTb& tb = plan->tbs[r][t];
        const auto& s = sends[r][ch];
        const auto& v = recvs[r][ch];
        if (tb.send >= 0 && (s.size() >= size_t(kMscclMaxTbsPerChannel) || s.count(tb.send))) return false;
        if (tb.recv >= 0 && (v.size() >= size_t(kMscclMaxTbsPerChannel) || v.count(tb.recv))) return false;
      }
      return true;
    };
    int ch = 0;
    while (ch < kMscclMaxChannels && !fits(ch)) ++ch;
    if (ch == kMscclMaxChannels) {
      auto [r, t] = members.front();
      return *error = fmt::format("rank {} needs more than {} channels of {} sending (or receiving) thread blocks "
                                  "each (tb {}): MSCCL allows {} per channel (MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL) "
                                  "and {} channels", r, kMscclMaxChannels, kMscclMaxTbsPerChannel, t,
                                  kMscclMaxTbsPerChannel, kMscclMaxChannels),
             false;
    }
    for (auto [r, t] : members) {
      MscclTb& tb = plan->tbs[r][t];
      tb.channel = uint16_t(ch);
      if (tb.send >= 0) sends[r][ch].insert(tb.send);
      if (tb.recv >= 0) recvs[r][ch].insert(tb.recv);
    }
  }
  return true;
}

bool check_steps(const Schedule& s, const MscclTbPlan& plan, std::string* error) {
  for (size_t r = 0; r < plan.tbs.size(); ++r)
    for (size_t t = 0; t < plan.tbs[r].size(); ++t) {
      size_t steps = 0;
      for (uint32_t op : plan.tbs[r][t].ops)
        steps += std::max<size_t>(1, msccl_step_deps(s, plan, r, plan.tbs[r][t].lane, op).size());
      if (steps > size_t(kMscclMaxSteps))
        return *error = fmt::format("rank {} thread block {} (lane {}) has {} steps: MSCCL's runtime refuses more than "
                                    "{} in one thread block (MSCCL_MAX_NUM_STEPS); keep this schedule as braid JSON",
                                    r, t, plan.tbs[r][t].lane, steps, kMscclMaxSteps),
               false;
    }
  return true;
}

}  // namespace

std::vector<Dep> msccl_step_deps(const Schedule& s, const MscclTbPlan& plan, size_t rank, uint16_t lane, uint32_t op) {
  std::vector<Dep> deps = s.ranks[rank].lanes[lane].ops[op].deps;
  if (plan.place[rank][lane][op].waits_for_previous) deps.push_back({lane, op - 1});
  return deps;
}

bool plan_msccl_tbs(const Schedule& s, MscclTbPlan* out, std::string* error) {
  MscclTbPlan plan;
  plan.tbs.resize(s.ranks.size());
  plan.place.resize(s.ranks.size());
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    plan.place[r].resize(s.ranks[r].lanes.size());
    for (size_t l = 0; l < s.ranks[r].lanes.size(); ++l)
      split_lane(s.ranks[r].lanes[l], uint16_t(l), &plan.tbs[r], &plan.place[r][l]);
  }
  if (!check_unique_peers(plan, error)) return false;
  if (!within_channel_limit(plan) && !spread_channels(&plan, error)) return false;
  if (!check_steps(s, plan, error)) return false;
  *out = std::move(plan);
  return true;
}

}  // namespace braid
