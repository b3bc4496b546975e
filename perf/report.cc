#include "perf/report.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>

#include "perf/device.h"
#include "perf/iter_times.h"
#include "perf/values.h"

namespace perf {

std::string hostname() {
  char h[256] = {};
  gethostname(h, sizeof(h) - 1);
  return h;
}

std::string now_string() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", int(c));
      continue;
    }
    out += c;
  }
  return out;
}

// nccl-tests' (v3) JSON values: numbers as printf's %lf, booleans as the
// strings "true" and "false", a NaN as the string "nan" (and, where its
// %lf would write a bare inf, "inf": a file a JSON parser cannot read helps
// nobody).
std::string json_number(double v) {
  if (std::isnan(v)) return "\"nan\"";
  if (std::isinf(v)) return v > 0 ? "\"inf\"" : "\"-inf\"";
  return fmt::format("{:f}", v);
}
std::string json_bool(bool v) { return v ? "\"true\"" : "\"false\""; }

std::string float_str(double value, int width) {
  int power = 0;
  for (uint64_t v = 1; value >= double(v) && power < 40; v *= 10) power++;
  if (power < width - 2) return fmt::format("{:{}.2f}", value, width);
  if (power < width - 1) return fmt::format("{:{}.1f}", value, width);
  if (power < width + 1) return fmt::format("{:{}.0f}", value, width);
  return fmt::format("{:{}.1e}", value, width);
}

Report::Report(const Options& o, const Benchmark& b, std::string tool)
    : opt_(o), bench_(b), tool_(std::move(tool)), min_bytes_(o.min_bytes), max_bytes_(o.max_bytes),
      start_(now_string()) {}

std::string Report::run_header(int nccl_version) const {
  const Options& o = opt_;
  std::string s;
  s += fmt::format("# nccl-tests version braid-perf nccl-headers={} nccl-library={}\n", NCCL_VERSION_CODE,
                   nccl_version);
  s += fmt::format("# Collective test starting: {}\n", tool_);
  s += fmt::format(
      "# nThread {} nGpus {} minBytes {} maxBytes {} step: {}({}) warmup iters: {} iters: {} agg iters: {} "
      "validation: {} graph: {} unalign: {}\n",
      o.threads, o.gpus, o.min_bytes, o.max_bytes, o.step_factor > 1 ? o.step_factor : o.step_bytes,
      o.step_factor > 1 ? "factor" : "bytes", o.warmup, o.iters, o.agg, o.check, o.graph, o.unalign);
  if (o.blocking == 1) s += "# Blocking Enabled: wait and barrier after each inner iteration (-m) \n";
  if (o.blocking == 2) s += "# Blocking Enabled: wait after each inner iteration (-m), no barrier \n";
  if (o.blocking == 3)
    s += "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier \n";
  if (o.per_iter) {
    s += fmt::format("# Per-Iteration Report: {} timing; i_* uses max over process rows",
                     device_buffers() ? "CUDA event" : "host clock");
    if (o.per_iter_skip) s += fmt::format("; summary skips first {} iterations", o.per_iter_skip);
    s += " \n";
  }
  if (o.parallel_init) s += "# Parallel Init Enabled: threads call into NcclInitRank concurrently \n";
  for (const std::string& note : o.notes) s += "# " + note + "\n";
  s += "#\n# Using devices\n";
  return s;
}

void Report::set_devices(const std::string& lines) {
  int rank = 0, pid = 0, dev = 0, group = 0;
  char host[256];
  for (size_t pos = 0; pos < lines.size();) {
    size_t end = lines.find('\n', pos);
    if (end == std::string::npos) end = lines.size();
    if (std::sscanf(lines.substr(pos, end - pos).c_str(), "#  Rank %d Group %d Pid %d on %255s device %d", &rank,
                    &group, &pid, host, &dev) == 5)
      devices_ += fmt::format(R"({}{{"rank": {}, "group": {}, "pid": {}, "hostname": "{}", "device": {}, )"
                              R"("device_hex": "cpu", "device_info": "host"}})",
                              devices_.empty() ? "" : ", ", rank, group, pid, json_escape(host), dev);
    pos = end + 1;
  }
}

void Report::set_args(const std::vector<std::string>& args) {
  for (const std::string& a : args) args_ += fmt::format("{}\"{}\"", args_.empty() ? "" : ", ", json_escape(a));
}

std::string Report::table_header() const {
  const std::string time = opt_.cputime ? "cputime" : "time";
  const char* ts_label = opt_.timestamps ? "timestamp" : "";
  const char* ts_fmt = opt_.timestamps ? "%Y-%m-%d %H:%M:%S" : "";
  const int ts_pad = opt_.timestamps ? 19 : 0;
  std::string s = "#\n";
  if (opt_.per_iter) {
    s += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}              out-of-place (+ per-iteration)         "
                     "                       in-place (+ per-iteration)\n",
                     "", "", "", "", "");
    const char* columns = "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>7}  {:>7}  "
                          "{:>7}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>7}  {:>7}  {:>7} {:>{}}\n";
    s += fmt::format(fmt::runtime(columns), "size", "count", "type", "redop", "root", time, "algbw", "busbw",
                     "#wrong", "i_min", "i_max", "i_p99", "i_cv%", time, "algbw", "busbw", "#wrong", "i_min", "i_max",
                     "i_p99", "i_cv%", ts_label, ts_pad);
    s += fmt::format(fmt::runtime(columns), "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
                     "(us)", "(us)", "(%)", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)", ts_fmt,
                     ts_pad);
    return s;
  }
  s += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place    "
                   "      \n",
                   "", "", "", "", "");
  const char* columns =
      "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} {:>{}}\n";
  s += fmt::format(fmt::runtime(columns), "size", "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong",
                   time, "algbw", "busbw", "#wrong", ts_label, ts_pad);
  s += fmt::format(fmt::runtime(columns), "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
                   "(GB/s)", "(GB/s)", "", ts_fmt, ts_pad);
  return s;
}

void Report::per_iter(const Placement& r, bool out_of_place, std::string* line, std::string* json) const {
  if (r.iter_times.empty()) return;  // not process 0's first thread: prints nothing
  const int skip = std::min<int>(opt_.per_iter_skip, int(r.iter_times.size()) - 1);
  const IterStats st = iter_stats(std::vector<double>(r.iter_times.begin() + skip, r.iter_times.end()));
  const double cv = st.avg > 0 ? st.stdev / st.avg * 100.0 : 0.0;
  *line += fmt::format("  {}  {}  {}  {}", float_str(st.min * 1e6, 7), float_str(st.max * 1e6, 7),
                       float_str(st.p99 * 1e6, 7), float_str(cv, 7));
  const auto us_list = [](const std::vector<double>& v) {
    std::string l;
    for (double x : v) l += fmt::format("{}{}", l.empty() ? "" : ", ", json_number(x * 1e6));
    return "[" + l + "]";
  };
  *json += fmt::format(R"(, "{}_per_iter": {{"skipped_iterations": {}, "min_us": {}, "max_us": {}, "avg_us": {}, )"
                       R"("p50_us": {}, "p95_us": {}, "p99_us": {}, "stdev_us": {}, "cv_pct": {}, "times_us": {})",
                       out_of_place ? "out_of_place" : "in_place", skip, json_number(st.min * 1e6),
                       json_number(st.max * 1e6), json_number(st.avg * 1e6), json_number(st.p50 * 1e6),
                       json_number(st.p95 * 1e6), json_number(st.p99 * 1e6), json_number(st.stdev * 1e6),
                       json_number(cv), us_list(r.iter_times));
  if (!r.process_times.empty()) {
    std::string rows;
    for (const std::vector<double>& p : r.process_times) rows += (rows.empty() ? "" : ", ") + us_list(p);
    *json += fmt::format(R"(, "per_process_max_times_us": [{}])", rows);
  }
  *json += "}";
}

std::string Report::row(ncclDataType_t type, ncclRedOp_t op, int root, const Counts& c, size_t row_bytes,
                        const Placement res[2]) {
  const char* op_col = bench_.reduces || bench_.names_ops ? op_name(op) : "none";
  std::string line =
      fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {:>6}", row_bytes, c.param, type_name(type), op_col, root);
  std::string json = fmt::format(R"({{"size": {}, "count": {}, "type": "{}", "redop": "{}", "root": "{:>6}")",
                                 row_bytes, c.param, type_name(type), op_col, root);
  for (int p = 0; p < 2; ++p) {
    const Placement& r = res[p];
    line += fmt::format("  {}  {}  {}", float_str(r.time_us, 7), float_str(r.algbw, 6), float_str(r.busbw, 6));
    line += r.wrong < 0 ? std::string("    N/A") : fmt::format("  {:6g}", double(r.wrong));
    json += fmt::format(R"(, "{}": {{"{}": {}, "alg_bw": {}, "bus_bw": {}, "nwrong": {}}})",
                        p == 0 ? "out_of_place" : "in_place", opt_.cputime ? "cpu_time" : "time",
                        json_number(r.time_us), json_number(r.algbw), json_number(r.busbw),
                        r.wrong < 0 ? std::string("null") : json_number(double(r.wrong)));
    if (opt_.per_iter) per_iter(r, p == 0, &line, &json);
    bw_sum_ += r.busbw;
    ++bw_count_;
  }
  if (opt_.timestamps) line += fmt::format("{:>21}", now_string());
  json += fmt::format(R"(, "actual_iterations": {}, "experiment_name": ""}})", opt_.iters_for(row_bytes));
  rows_.push_back(json);
  return line + "\n";
}

std::string Report::footer(int errors, double min_bw) const {
  std::string s = fmt::format("# {:<20} : {} {}\n", "Out of bounds values", errors, errors ? "FAILED" : "OK");
  s += fmt::format("# {:<20} : {:g} {}\n", "Avg bus bandwidth", avg_busbw(),
                   min_bw == -1 ? "" : bandwidth_ok(min_bw) ? "OK" : "FAILED");
  s += fmt::format("#\n# Collective test concluded: {}\n#\n", tool_);
  return s;
}

void Report::write_json(int errors, double min_bw) const {
  if (opt_.json_file.empty()) return;
  std::string path = opt_.json_file;
  FILE* f = std::fopen(path.c_str(), "wx");
  for (int k = 0; !f && errno == EEXIST && k < 1000; ++k) {
    path = fmt::format("{}.{}", opt_.json_file, k);
    f = std::fopen(path.c_str(), "wx");
  }
  if (!f) {
    std::printf("# skipping json output; %s not accessible\n", opt_.json_file.c_str());
    return;
  }
  const Options& o = opt_;
  int version = 0;
  ncclGetVersion(&version);
  std::string env;
  for (char** e = environ; e && *e; ++e) env += fmt::format("{}\"{}\"", env.empty() ? "" : ", ", json_escape(*e));
  std::string s = fmt::format(R"({{"version": 3, "start_time": "{}", "args": [{}], "env": [{}], "nccl_version": {}, )",
                              start_, args_, env, version);
  s += fmt::format(R"("config": {{"nthreads": {}, "ngpus": {}, "minimum_bytes": {}, "maximum_bytes": {}, "{}": {}, )"
                   R"("warmup_iters": {}, "iterations": {}, "aggregated_iterations": {}, "validation": {}, )"
                   R"("graph": {}, "blocking_collectives": {}, "per_iter_timing": {}, "per_iter_skip": {}, )"
                   R"("parallel_init": {}}}, )",
                   o.threads, o.gpus, min_bytes_, max_bytes_, o.step_factor > 1 ? "step_factor" : "step_bytes",
                   o.step_factor > 1 ? o.step_factor : o.step_bytes, o.warmup, o.iters, o.agg, o.check, o.graph,
                   json_bool(o.blocking), json_bool(o.per_iter), o.per_iter_skip, json_bool(o.parallel_init));
  s += fmt::format(R"("devices": [{}], "results": [)", devices_);
  for (size_t i = 0; i < rows_.size(); ++i) s += (i ? ", " : "") + rows_[i];
  s += fmt::format(R"(], "out_of_bounds": {{"count": {}, "okay": {}}}, )", errors, json_bool(errors == 0));
  s += fmt::format(R"("average_bus_bandwidth": {{"bandwidth": {}, "okay": {}}}, "errors": [], )",
                   json_number(avg_busbw()), min_bw == -1 ? "\"unchecked\"" : json_bool(bandwidth_ok(min_bw)));
  s += fmt::format(R"("end_time": "{}"}})", now_string());
  s += "\n";
  std::fputs(s.c_str(), f);
  std::fclose(f);
  std::printf("# Writing JSON output to %s\n", path.c_str());  // nccl-tests' words (it writes as it goes)
}

}  // namespace perf
