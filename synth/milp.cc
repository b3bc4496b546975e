// CBC behind braid::synth::Milp.  The model is loaded in column form in one
// call (Cbc_loadProblem), which is much faster than row-by-row insertion for
// the tens of thousands of rows a routing model has.
#include "synth/milp.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>

#ifdef BRAID_HAVE_CBC
#include <coin/Cbc_C_Interface.h>
#endif

namespace braid::synth {

int Milp::add_col(double lb, double ub, double objective, bool integer) {
  lb_.push_back(lb);
  ub_.push_back(ub);
  obj_.push_back(objective);
  integer_.push_back(integer);
  return int(lb_.size() - 1);
}

void Milp::add_row(std::vector<std::pair<int, double>> terms, char sense, double rhs) {
  std::sort(terms.begin(), terms.end());
  std::vector<std::pair<int, double>> merged;
  for (auto& t : terms) {
    if (!merged.empty() && merged.back().first == t.first) merged.back().second += t.second;
    else merged.push_back(t);
  }
  merged.erase(std::remove_if(merged.begin(), merged.end(), [](auto& t) { return t.second == 0; }), merged.end());
  rows_.push_back({std::move(merged), sense, rhs});
}

#ifdef BRAID_HAVE_CBC
bool milp_available() { return true; }

bool Milp::solve(double time_limit_s, const std::vector<double>& start, int log_level, Result* out, std::string* error) {
  auto t0 = std::chrono::steady_clock::now();
  const int ncols = cols(), nrows = rows();
  std::vector<std::vector<std::pair<int, double>>> by_col(ncols);
  std::vector<double> rlo(nrows), rhi(nrows);
  for (int r = 0; r < nrows; ++r) {
    for (auto& [c, v] : rows_[r].terms) by_col[c].push_back({r, v});
    double inf = 1e30;
    rlo[r] = rows_[r].sense == 'L' ? -inf : rows_[r].rhs;
    rhi[r] = rows_[r].sense == 'G' ? inf : rows_[r].rhs;
  }
  std::vector<int> starts{0}, index;
  std::vector<double> value;
  for (int c = 0; c < ncols; ++c) {
    for (auto& [r, v] : by_col[c]) index.push_back(r), value.push_back(v);
    starts.push_back(int(index.size()));
  }
  Cbc_Model* m = Cbc_newModel();
  Cbc_loadProblem(m, ncols, nrows, starts.data(), index.data(), value.data(), lb_.data(), ub_.data(), obj_.data(),
                  rlo.data(), rhi.data());
  for (int c = 0; c < ncols; ++c)
    if (integer_[c]) Cbc_setInteger(m, c);
  Cbc_setMaximumSeconds(m, std::max(1.0, time_limit_s));
  Cbc_setParameter(m, "timeMode", "elapsed");  // the limit is wall-clock, not CPU seconds
  Cbc_setLogLevel(m, log_level);
  for (auto& [name, value] : params_) Cbc_setParameter(m, name.c_str(), value.c_str());
  if (!start.empty()) {
    std::vector<int> idx(ncols);
    for (int c = 0; c < ncols; ++c) idx[c] = c;
    Cbc_setMIPStartI(m, ncols, idx.data(), start.data());
  }
  Cbc_solve(m);
  const double* sol = Cbc_bestSolution(m);
  out->has_solution = sol != nullptr;
  out->optimal = Cbc_isProvenOptimal(m);
  out->objective = Cbc_getObjValue(m);
  out->bound = Cbc_getBestPossibleObjValue(m);
  if (sol) out->values.assign(sol, sol + ncols);
  Cbc_deleteModel(m);
  out->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!out->has_solution) *error = "CBC found no feasible solution within the time limit";
  return out->has_solution;
}
#else
bool milp_available() { return false; }

bool Milp::solve(double, const std::vector<double>&, int, Result*, std::string* error) {
  *error = "braid was built without COIN-OR CBC (install coinor-libcbc-dev and rebuild)";
  return false;
}
#endif

}  // namespace braid::synth
