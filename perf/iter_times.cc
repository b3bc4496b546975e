#include "perf/iter_times.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "perf/device.h"

namespace perf {

IterClock::IterClock(int iters, bool paired, cudaStream_t stream)
    : iters_(iters), paired_(paired), events_(device_buffers()), stream_(stream) {
  const size_t marks = iters <= 0 ? 0 : size_t(paired ? 2 * iters : iters + 1);
  if (events_) {
    events_list_.resize(marks);
    for (void*& e : events_list_) e = event_create();
  } else {
    host_.resize(marks);
  }
}

IterClock::~IterClock() {
  for (void* e : events_list_) event_destroy(e);
}

void IterClock::mark(int iter, bool stop) {
  if (iters_ <= 0) return;
  const size_t i = size_t(index(iter, stop));
  if (events_) {
    event_record(events_list_[i], stream_);
  } else {
    host_[i] = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
}

std::vector<double> IterClock::seconds(int agg) const {
  std::vector<double> out;
  for (int i = 0; i < iters_; ++i) {
    // Unpaired, iteration i runs from mark i to mark i + 1; paired, from its start to its stop.
    const size_t a = size_t(index(i, false)), b = a + 1;
    const double s = events_ ? event_seconds(events_list_[a], events_list_[b]) : host_[b] - host_[a];
    out.push_back(s / agg);
  }
  return out;
}

IterStats iter_stats(std::vector<double> t) {
  IterStats s;
  const int n = int(t.size());
  if (n == 0) return s;
  std::sort(t.begin(), t.end());
  const auto rank = [n, &t](int percent) { return t[size_t(std::min(n - 1, (n * percent + 99) / 100 - 1))]; };
  s.min = t.front();
  s.max = t.back();
  s.p50 = t[size_t(n / 2)];
  s.p95 = rank(95);
  s.p99 = rank(99);
  double sum = 0;
  for (double x : t) sum += x;
  s.avg = sum / n;
  double var = 0;
  for (double x : t) var += (x - s.avg) * (x - s.avg);
  s.stdev = std::sqrt(var / n);
  return s;
}

}  // namespace perf
