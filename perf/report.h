// What the perf tools print and write, as nccl-tests does: the header lines,
// the table (one line per row), the footer, and the -J JSON file.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "nccl.h"
#include "perf/harness.h"
#include "perf/options.h"

namespace perf {

std::string hostname();
std::string now_string();  // local time, "%Y-%m-%d %H:%M:%S"
std::string json_escape(const std::string& s);
// nccl-tests' getFloatStr: `width` characters, as many decimals as fit.
std::string float_str(double value, int width);

// One placement's (out of place or in place) result of a row.
struct Placement {
  double time_us = 0, algbw = 0, busbw = 0;
  long wrong = 0;  // -1: not checked (N/A)
  // -I (process 0's first thread only): each iteration's seconds per call,
  // the max over ranks, and with several processes each process's max.
  std::vector<double> iter_times;
  std::vector<std::vector<double>> process_times;
};

// Written by process 0's first thread; the others' copies stay unused.
class Report {
 public:
  Report(const Options& o, const Benchmark& b, std::string tool);

  // The lines before the device lines ("# nccl-tests version ..." to "# Using devices").
  std::string run_header(int nccl_version) const;
  // The device lines of every rank, for the JSON file.
  void set_devices(const std::string& lines);
  void set_args(const std::vector<std::string>& args);
  std::string table_header() const;
  // A row's line (with its newline); the row is kept for the JSON file and the average.
  std::string row(ncclDataType_t type, ncclRedOp_t op, int root, const Counts& c, size_t row_bytes,
                  const Placement res[2]);
  // min_bw: NCCL_TESTS_MIN_BW (-1: none), as nccl-tests: the average bus
  // bandwidth is OK when at least 90% of it.
  std::string footer(int errors, double min_bw) const;
  void write_json(int errors, double min_bw) const;
  bool bandwidth_ok(double min_bw) const { return !(avg_busbw() < min_bw * 0.9); }

 private:
  double avg_busbw() const { return bw_count_ ? bw_sum_ / double(bw_count_) : 0.0; }
  // -I's columns and JSON object for one placement.
  void per_iter(const Placement& r, bool out_of_place, std::string* line, std::string* json) const;

  const Options& opt_;
  const Benchmark& bench_;
  const std::string tool_;
  const size_t min_bytes_, max_bytes_;  // -b and -e as given (the JSON config's, as nccl-tests')
  std::string start_, args_, devices_;
  std::vector<std::string> rows_;  // JSON objects
  double bw_sum_ = 0;
  long bw_count_ = 0;
};

}  // namespace perf
