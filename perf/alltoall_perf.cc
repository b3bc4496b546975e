#include "perf/benchmarks.h"

int main(int argc, char** argv) { return perf::perf_main(argc, argv, perf::kAlltoAll); }
