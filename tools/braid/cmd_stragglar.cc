// `braid stragglar`:
//   --rounds [-n N | --from A --to B]   phase-1 round counts vs the lower bound and ring
//   --plan -n N                         the round plan (logical labels, straggler n-1)
//   --verify [-n N | --from A --to B] [-s RANK]   verify the schedules
//   --model [--from 8 --to 256] [--alpha-us 3] [--gbps 450] [--bytes 1G]
//                                       alpha-beta time after the straggler arrives, vs ring
//   --host-work [--from 2 --to 16]      bytes the host executor touches after arrival, vs ring
//   -n N [-s RANK] -o FILE              write the schedule (braid JSON, or MSCCL XML for .xml)
#include "tools/braid/cmd_stragglar.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "braid/algorithms.h"
#include "braid/schedule_library.h"
#include "braid/stragglar.h"
#include "braid/verify.h"

namespace braid::cli {
namespace {

struct Args {
  bool rounds = false, plan = false, verify = false, model = false, host_work = false;
  int n = 0, from = 2, to = 64, straggler = -1, plans_up_to = 64;
  double alpha_us = 3, gbps = 450, bytes = 1024.0 * 1024 * 1024;
  std::string output;
} args;

void range(int* lo, int* hi) {
  *lo = args.n > 0 ? args.n : args.from;
  *hi = args.n > 0 ? args.n : args.to;
}

int print_rounds() {
  int lo, hi;
  range(&lo, &hi);
  fmt::print("{:>4} {:>7} {:>7} {:>5}\n", "n", "rounds", "bound", "ring");
  for (int n = std::max(lo, 2); n <= hi; ++n)
    fmt::print("{:>4} {:>7} {:>7} {:>5}\n", n, stragglar_rounds(n).rounds.size(), stragglar_round_lower_bound(n),
               2 * (n - 1));
  return 0;
}

int print_plan() {
  if (args.n < 2) {
    fmt::print(stderr, "braid stragglar --plan: give -n N (N >= 2)\n");
    return 2;
  }
  StragglarRounds plan = stragglar_rounds(args.n);
  fmt::print("phase 1 of StragglAR on {} ranks (straggler {}; fast rank c holds chunk c's partial sum): {} rounds\n",
             args.n, args.n - 1, plan.rounds.size());
  for (size_t t = 0; t < plan.rounds.size(); ++t) {
    std::string line;
    for (const StragglarTransfer& x : plan.rounds[t])
      line += x.reduce ? fmt::format("  {}->{} c{}(+)", x.from, x.to, x.chunk)
                       : fmt::format("  {}->{} c{}", x.from, x.to, x.chunk);
    fmt::print("r{:<3}{}\n", t, line);
  }
  return 0;
}

int verify_all() {
  int lo, hi, bad = 0;
  range(&lo, &hi);
  if (args.straggler >= hi)  // nothing verified is no success
    return fmt::print(stderr, "braid stragglar: straggler {} out of range for at most {} ranks\n", args.straggler, hi), 2;
  for (int n = std::max(lo, 1); n <= hi; ++n) {
    int s_lo = args.straggler >= 0 ? args.straggler : n - 1, s_hi = args.straggler >= 0 ? args.straggler : n - 1;
    for (int s = s_lo; s <= s_hi && s < n; ++s) {
      VerifyResult r = verify(stragglar_allreduce(n, s));
      fmt::print("stragglar_allreduce n={} straggler={}: {}\n", n, s, r.ok ? "OK" : "FAILED");
      for (const std::string& e : r.errors) fmt::print("  {}\n", e);
      bad += !r.ok;
    }
  }
  return bad ? 1 : 0;
}

int print_model() {
  AlphaBeta ab{args.alpha_us * 1e-6, 1.0 / (args.gbps * 1e9)};
  int lo = args.n > 0 ? args.n : (args.from == 2 ? 8 : args.from);
  int hi = args.n > 0 ? args.n : (args.to == 64 ? 256 : args.to);
  fmt::print("# alpha-beta model, time after the straggler arrives: alpha {} us, {} GB/s, {} bytes\n", args.alpha_us,
             args.gbps, args.bytes);
  fmt::print("# ring 2(n-1)(a+bS/n); StragglAR R(a+bS/(n-1)), R = n-2+ceil(log2 n) (the bound; the paper's count\n"
             "# for powers of two); 'plan' uses braid's generated round count (n <= {}); 'no delay' adds phase 0\n",
             args.plans_up_to);
  fmt::print("{:>5} {:>12} {:>14} {:>9} {:>6} {:>10} {:>16}\n", "n", "ring_us", "stragglar_us", "speedup", "plan",
             "plan_spdup", "no_delay_spdup");
  for (int n = std::max(lo, 2); n <= hi; n = n < 16 ? n + 1 : n * 2) {
    const int bound = stragglar_round_lower_bound(n);
    const double ring = ring_allreduce_model(n, args.bytes, ab);
    const double ideal = stragglar_post_arrival_model(n, bound, args.bytes, ab);
    std::string plan = "-", plan_speedup = "-";
    if (n <= args.plans_up_to) {
      int rounds = int(stragglar_rounds(n).rounds.size());
      plan = std::to_string(rounds);
      plan_speedup = fmt::format("{:.3f}", ring / stragglar_post_arrival_model(n, rounds, args.bytes, ab));
    }
    fmt::print("{:>5} {:>12.1f} {:>14.1f} {:>9.3f} {:>6} {:>10} {:>16.3f}\n", n, ring * 1e6, ideal * 1e6,
               ring / ideal, plan, plan_speedup, ring / stragglar_no_delay_model(n, bound, args.bytes, ab));
  }
  return 0;
}

// Buffer passes (reads + writes of one chunk) an op costs the host executor:
// a send copies into the slot, a receive copies out of it, a reduction reads
// two operands.  On a host with fewer cores than ranks this total, not the
// per-link time of the alpha-beta model, is what the clock sees.
int passes(OpType t) {
  switch (t) {
    case OpType::Send: case OpType::Recv: case OpType::Copy: case OpType::Put: case OpType::Get: return 2;
    case OpType::RecvCopySend: case OpType::RecvReduceSend: case OpType::RecvReduceCopy: case OpType::Reduce:
    case OpType::GetReduce: case OpType::GetReduceCopy: return 3;
    case OpType::RecvReduceCopySend: return 4;
    case OpType::Nop: case OpType::Signal: case OpType::Wait: return 0;
  }
  return 0;
}

// Passes in units of the whole buffer: all ranks (lanes from `first_lane`), and the busiest rank.
std::pair<double, double> work(const Schedule& s, size_t first_lane) {
  double total = 0, busiest = 0;
  for (const RankProgram& p : s.ranks) {
    double mine = 0;
    for (size_t l = first_lane; l < p.lanes.size(); ++l)
      for (const Op& op : p.lanes[l].ops) mine += double(passes(op.type)) * op.count / p.input_chunks;
    total += mine;
    busiest = std::max(busiest, mine);
  }
  return {total, busiest};
}

int print_host_work() {
  int lo = args.n > 0 ? args.n : args.from, hi = args.n > 0 ? args.n : (args.to == 64 ? 16 : args.to);
  fmt::print("# buffer passes after the straggler arrives (units of S): all ranks, busiest rank\n");
  fmt::print("# (StragglAR: phase 1 only, phase 0 hidden; ring: everything)\n");
  fmt::print("{:>4} {:>10} {:>12} {:>15} {:>17} {:>11}\n", "n", "ring_total", "ring_busiest", "stragglar_total",
             "stragglar_busiest", "total_ratio");
  for (int n = std::max(lo, 2); n <= hi; ++n) {
    auto [rt, rb] = work(ring_allreduce(n), 0);
    auto [st, sb] = work(stragglar_allreduce(n, n - 1), 1);
    fmt::print("{:>4} {:>10.2f} {:>12.2f} {:>15.2f} {:>17.2f} {:>11.2f}\n", n, rt, rb, st, sb, rt / st);
  }
  return 0;
}

int write_schedule() {
  if (args.n < 1) {
    fmt::print(stderr, "braid stragglar -o: give -n N\n");
    return 2;
  }
  const int straggler = args.straggler >= 0 ? args.straggler : args.n - 1;
  if (straggler >= args.n) {
    fmt::print(stderr, "braid stragglar: straggler {} out of range for {} ranks\n", straggler, args.n);
    return 2;
  }
  std::string error;
  if (!save_schedule_file(args.output, stragglar_allreduce(args.n, straggler), &error)) {
    fmt::print(stderr, "braid: {}\n", error);
    return 2;
  }
  fmt::print("stragglar_allreduce n={} straggler={} -> {}\n", args.n, straggler, args.output);
  return 0;
}

}  // namespace

CLI::App* add_stragglar_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("stragglar", "StragglAR round plans, verification and cost model");
  cmd->add_flag("--rounds", args.rounds, "phase-1 round counts per rank count");
  cmd->add_flag("--plan", args.plan, "print the round plan for -n");
  cmd->add_flag("--verify", args.verify, "verify the schedules");
  cmd->add_flag("--model", args.model, "alpha-beta model vs ring (default n = 8..256)");
  cmd->add_flag("--host-work", args.host_work, "buffer passes after arrival vs ring (default n = 2..16)");
  // Plans grow as n^3 past a few thousand ranks, and schedules as n^2 (stragglar.h).
  cmd->add_option("-n,--nranks", args.n, "one rank count")->check(CLI::Range(1, 4096));
  cmd->add_option("--from", args.from, "first rank count")->check(CLI::Range(1, 4096));
  cmd->add_option("--to", args.to, "last rank count")->check(CLI::Range(1, 4096));
  cmd->add_option("-s,--straggler", args.straggler, "straggler rank for --verify and -o (default n-1)")
      ->check(CLI::Range(0, 4095));
  cmd->add_option("-o,--output", args.output, "write the schedule for -n and -s (.json braid, .xml MSCCL)");
  cmd->add_option("--alpha-us", args.alpha_us, "model: latency per step, microseconds");
  cmd->add_option("--gbps", args.gbps, "model: link bandwidth, GB/s")->check(CLI::Range(1e-6, 1e9));
  cmd->add_option("--bytes", args.bytes, "model: AllReduce size in bytes")->check(CLI::Range(0.0, 1e18));
  cmd->add_option("--plans-up-to", args.plans_up_to, "model: generate plans up to this n");
  return cmd;
}

int run_stragglar() {
  int rc = 0;
  if (args.rounds) rc |= print_rounds();
  if (args.plan) rc |= print_plan();
  if (args.verify) rc |= verify_all();
  if (args.model) rc |= print_model();
  if (args.host_work) rc |= print_host_work();
  if (!args.output.empty()) rc |= write_schedule();
  if (!args.rounds && !args.plan && !args.verify && !args.model && !args.host_work && args.output.empty())
    rc = print_rounds();
  return rc;
}

}  // namespace braid::cli
