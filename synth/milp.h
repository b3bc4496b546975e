// A thin MILP model builder over COIN-OR CBC's C interface: columns, rows,
// a MIP start, a time limit, and the best solution found so far.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace braid::synth {

class Milp {
 public:
  int add_col(double lb, double ub, double objective, bool integer);
  // sense: 'L' (<=), 'G' (>=), 'E' (=).  Terms on the same column are summed.
  void add_row(std::vector<std::pair<int, double>> terms, char sense, double rhs);
  // A CBC parameter by its command-line name ("preprocess", "off").
  void set_parameter(std::string name, std::string value) { params_.push_back({std::move(name), std::move(value)}); }
  int cols() const { return int(lb_.size()); }
  int rows() const { return int(rows_.size()); }

  struct Result {
    bool has_solution = false;
    bool optimal = false;
    double objective = 0;
    double bound = 0;
    double seconds = 0;
    std::vector<double> values;
  };
  // `start`: a feasible assignment (all columns) given to CBC as its first
  // incumbent, or empty.  `log_level` 0 quiet, 1 CBC's progress lines.
  bool solve(double time_limit_s, const std::vector<double>& start, int log_level, Result* out, std::string* error);

 private:
  struct Row {
    std::vector<std::pair<int, double>> terms;
    char sense;
    double rhs;
  };
  std::vector<double> lb_, ub_, obj_;
  std::vector<char> integer_;
  std::vector<Row> rows_;
  std::vector<std::pair<std::string, std::string>> params_;
};

bool milp_available();

}  // namespace braid::synth
