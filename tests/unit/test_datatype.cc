// Datatype arithmetic: narrow-float conversions bit by bit, every type x op
// against a wide reference, integer wrap-around, avg's division, env/log config.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "src/ops/datatype.h"
#include "src/ops/host_kernels.h"
#include "src/base/env.h"
#include "src/ops/float_formats.h"
#include "src/base/log.h"

using namespace braid;

TEST_CASE("fp8 and half decode/encode round trip every pattern", "[datatype]") {
  for (uint32_t b = 0; b < 256; ++b) {
    float v = e4m3_to_float(uint8_t(b));
    if (std::isnan(v)) {
      CHECK(std::isnan(e4m3_to_float(float_to_e4m3(v))));
    } else {
      CHECK(float_to_e4m3(v) == b);
    }
    float w = e5m2_to_float(uint8_t(b));
    if (std::isnan(w)) {
      CHECK(std::isnan(e5m2_to_float(float_to_e5m2(w))));
    } else if (!std::isinf(w)) {
      CHECK(float_to_e5m2(w) == b);
    }
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    float v = half_to_float(uint16_t(h));
    if (!std::isnan(v)) REQUIRE(float_to_half(v) == h);
    if (!std::isnan(bf16_to_float(uint16_t(h)))) REQUIRE(float_to_bf16(bf16_to_float(uint16_t(h))) == h);
  }
}

TEST_CASE("narrow floats: known values, rounding to nearest even, saturation", "[datatype]") {
  CHECK(float_to_half(1.0f) == 0x3C00);
  CHECK(float_to_half(65504.0f) == 0x7BFF);
  CHECK(float_to_half(70000.0f) == 0x7C00);  // overflow -> inf
  CHECK(float_to_half(1.0f + 1.0f / 2048) == 0x3C00);            // tie -> even (down)
  CHECK(float_to_half(1.0f + 3.0f / 2048) == 0x3C02);            // tie -> even (up)
  CHECK(float_to_bf16(1.0f) == 0x3F80);
  CHECK(float_to_bf16(1.0f + 1.0f / 256) == 0x3F80);             // tie -> even
  CHECK(e4m3_to_float(0x7E) == 448.0f);
  CHECK(float_to_e4m3(1000.0f) == 0x7E);                         // saturate to finite
  CHECK(float_to_e4m3(-1000.0f) == 0xFE);
  CHECK(e5m2_to_float(0x7B) == 57344.0f);
  CHECK(float_to_e5m2(1e6f) == 0x7B);
  CHECK(e4m3_to_float(float_to_e4m3(17.0f)) == 16.0f);           // 17 is a tie between 16 and 18
  CHECK(e4m3_to_float(float_to_e4m3(0.001953125f)) == 0.001953125f);  // smallest subnormal 2^-9
}

namespace {

// Wide reference for one element, then stored back into the type.
template <typename T>
std::vector<T> reference(const std::vector<T>& a, const std::vector<T>& b, ncclRedOp_t op) {
  std::vector<T> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    long double x = a[i], y = b[i], r = 0;
    switch (op) {
      case ncclSum: case ncclAvg: r = x + y; break;
      case ncclProd: r = x * y; break;
      case ncclMax: r = x > y ? x : y; break;
      default: r = x < y ? x : y; break;
    }
    out[i] = T(r);
  }
  return out;
}

template <typename T>
void check_native(ncclDataType_t type) {
  std::mt19937 rng(uint32_t(type) + 1);
  const size_t n = 1037;  // odd, not a multiple of any vector width
  std::vector<T> a(n), b(n), dst(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = T(int(rng() % 21) - (std::is_signed_v<T> ? 10 : 0));
    b[i] = T(int(rng() % 21) - (std::is_signed_v<T> ? 10 : 0));
  }
  for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin}) {
    reduce(dst.data(), a.data(), b.data(), n, type, op);
    REQUIRE(dst == reference(a, b, op));
    std::vector<T> inplace = a;  // dst aliases a
    reduce(inplace.data(), inplace.data(), b.data(), n, type, op);
    REQUIRE(inplace == dst);
  }
}

}  // namespace

TEST_CASE("reduce: native types x ops match a wide reference", "[datatype]") {
  check_native<int8_t>(ncclInt8);
  check_native<uint8_t>(ncclUint8);
  check_native<int32_t>(ncclInt32);
  check_native<uint32_t>(ncclUint32);
  check_native<int64_t>(ncclInt64);
  check_native<uint64_t>(ncclUint64);
  check_native<float>(ncclFloat32);
  check_native<double>(ncclFloat64);
}

TEST_CASE("reduce: signed integers wrap, unsigned too", "[datatype]") {
  int8_t a = 100, b = 100, d = 0;
  reduce(&d, &a, &b, 1, ncclInt8, ncclSum);
  CHECK(d == int8_t(-56));
  int32_t x = INT32_MAX, y = 2, z = 0;
  reduce(&z, &x, &y, 1, ncclInt32, ncclProd);
  CHECK(z == -2);
  uint8_t u = 200, v = 100, w = 0;
  reduce(&w, &u, &v, 1, ncclUint8, ncclSum);
  CHECK(w == 44);
}

TEST_CASE("reduce: narrow floats computed in float and rounded", "[datatype]") {
  struct Narrow {
    ncclDataType_t type;
    size_t size;
    float (*decode)(uint32_t);
    uint32_t (*encode)(float);
  };
  const Narrow types[] = {
      {ncclFloat16, 2, [](uint32_t h) { return half_to_float(uint16_t(h)); }, [](float f) -> uint32_t { return float_to_half(f); }},
      {ncclBfloat16, 2, [](uint32_t h) { return bf16_to_float(uint16_t(h)); }, [](float f) -> uint32_t { return float_to_bf16(f); }},
      {ncclFloat8e4m3, 1, [](uint32_t h) { return e4m3_to_float(uint8_t(h)); }, [](float f) -> uint32_t { return float_to_e4m3(f); }},
      {ncclFloat8e5m2, 1, [](uint32_t h) { return e5m2_to_float(uint8_t(h)); }, [](float f) -> uint32_t { return float_to_e5m2(f); }},
  };
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-20.0f, 20.0f);
  for (const Narrow& t : types) {
    const size_t n = 700;
    std::vector<uint8_t> a(n * t.size), b(n * t.size), d(n * t.size);
    std::vector<uint32_t> av(n), bv(n);
    for (size_t i = 0; i < n; ++i) {
      av[i] = t.encode(dist(rng));
      bv[i] = t.encode(dist(rng));
      std::memcpy(&a[i * t.size], &av[i], t.size);
      std::memcpy(&b[i * t.size], &bv[i], t.size);
    }
    for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin}) {
      reduce(d.data(), a.data(), b.data(), n, t.type, op);
      for (size_t i = 0; i < n; ++i) {
        float x = t.decode(av[i]), y = t.decode(bv[i]);
        float r = op == ncclSum ? x + y : op == ncclProd ? x * y : op == ncclMax ? std::max(x, y) : std::min(x, y);
        uint32_t got = 0;
        std::memcpy(&got, &d[i * t.size], t.size);
        INFO(datatype_name(t.type) << " " << redop_name(op) << " " << x << " " << y);
        REQUIRE(got == t.encode(r));
      }
    }
  }
}

TEST_CASE("divide_by: integer division truncates, floats divide", "[datatype]") {
  std::vector<int32_t> ints = {7, -7, 8, 0};
  divide_by(ints.data(), ints.size(), ncclInt32, 2);
  CHECK(ints == std::vector<int32_t>{3, -3, 4, 0});
  std::vector<float> floats = {3.0f, 1.0f};
  divide_by(floats.data(), floats.size(), ncclFloat32, 4);
  CHECK(floats == std::vector<float>{0.75f, 0.25f});
  uint16_t h = float_to_half(6.0f);
  divide_by(&h, 1, ncclFloat16, 3);
  CHECK(half_to_float(h) == 2.0f);
}

TEST_CASE("datatype sizes and names", "[datatype]") {
  CHECK(datatype_size(ncclInt8) == 1);
  CHECK(datatype_size(ncclBfloat16) == 2);
  CHECK(datatype_size(ncclFloat64) == 8);
  CHECK(datatype_size(ncclFloat8e5m2) == 1);
  CHECK(datatype_size(ncclDataType_t(12)) == 0);
  CHECK(std::string(datatype_name(ncclFloat16)) == "half");
  CHECK(std::string(redop_name(ncclAvg)) == "avg");
}

TEST_CASE("env registry: defaults, overrides, malformed values", "[env]") {
  unsetenv("BRAID_SHM_SLOTS");
  CHECK(env_int("BRAID_SHM_SLOTS") == 8);
  CHECK_FALSE(env_is_set("BRAID_SHM_SLOTS"));
  setenv("BRAID_SHM_SLOTS", "3", 1);
  CHECK(env_int("BRAID_SHM_SLOTS") == 3);
  setenv("BRAID_SHM_SLOTS", "lots", 1);
  CHECK(env_int("BRAID_SHM_SLOTS") == 8);
  CHECK_FALSE(env_number("BRAID_SHM_SLOTS"));  // not a number: no value, where env_int takes the default
  setenv("BRAID_SHM_SLOTS", "0x10", 1);
  CHECK(env_number("BRAID_SHM_SLOTS") == 16);
  unsetenv("BRAID_SHM_SLOTS");
  CHECK(env_number("BRAID_SHM_SLOTS") == 8);
  unsetenv("BRAID_ONESHOT_MAX_BYTES");  // its default is a word: "auto"
  CHECK_FALSE(env_number("BRAID_ONESHOT_MAX_BYTES"));
  for (const EnvVar& v : env_registry()) {
    // braid's own, and MSCCL's schedule-file variables, honoured as MSCCL does.
    const std::string name = v.name;
    CHECK((name.rfind("BRAID_", 0) == 0 || name.rfind("MSCCL_", 0) == 0));
    CHECK(std::strlen(v.description) > 10);
  }
}

TEST_CASE("env choice: the word's position, its default when unset, and an error naming the words", "[env]") {
  int index = -1;
  unsetenv("BRAID_CMA");
  REQUIRE(env_choice("BRAID_CMA", {"off", "auto", "on"}, &index).is_ok());
  CHECK(index == 1);  // the registered default, auto
  setenv("BRAID_CMA", "on", 1);
  REQUIRE(env_choice("BRAID_CMA", {"off", "auto", "on"}, &index).is_ok());
  CHECK(index == 2);
  setenv("BRAID_CMA", "sometimes", 1);
  index = -1;
  Status s = env_choice("BRAID_CMA", {"off", "auto", "on"}, &index);
  CHECK(s.code() == ncclInvalidArgument);
  CHECK(s.message() == "BRAID_CMA=sometimes (expected one of off, auto, on)");
  CHECK(index == -1);
  unsetenv("BRAID_CMA");
}

TEST_CASE("a braid-started thread reads the environment its starter saw", "[env]") {
  setenv("BRAID_SHM_SLOTS", "5", 1);
  setenv("NCCL_COMM_ID", "10.0.0.1:9", 1);
  auto body = with_caller_env([] { return std::make_pair(env_int("BRAID_SHM_SLOTS"), env_raw("NCCL_COMM_ID")); });
  setenv("BRAID_SHM_SLOTS", "6", 1);  // after the snapshot: the thread must not see it
  unsetenv("NCCL_COMM_ID");
  std::pair<int64_t, std::string> seen;
  std::thread([&] { seen = body(); }).join();
  CHECK(seen.first == 5);
  CHECK(seen.second == "10.0.0.1:9");
  CHECK(env_int("BRAID_SHM_SLOTS") == 6);  // the caller still reads the live environment
  {
    EnvSnapshot empty_shm;  // a snapshot taken with the variable unset reads the default
    unsetenv("BRAID_SHM_SLOTS");
    empty_shm = EnvSnapshot::capture();
    setenv("BRAID_SHM_SLOTS", "7", 1);
    ScopedEnv scoped(empty_shm);
    CHECK(env_int("BRAID_SHM_SLOTS") == 8);
    CHECK_FALSE(env_is_set("BRAID_SHM_SLOTS"));
  }
  CHECK(env_int("BRAID_SHM_SLOTS") == 7);  // restored when the scope ends
  unsetenv("BRAID_SHM_SLOTS");
}

TEST_CASE("log levels and subsystem filter follow BRAID_DEBUG / NCCL_DEBUG", "[log]") {
  unsetenv("BRAID_DEBUG");
  unsetenv("BRAID_DEBUG_SUBSYS");
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "COLL,P2P", 1);
  log_reset();
  CHECK(log_enabled(LogLevel::Warn, kInit));
  CHECK(log_enabled(LogLevel::Info, kColl));
  CHECK_FALSE(log_enabled(LogLevel::Info, kInit));
  CHECK_FALSE(log_enabled(LogLevel::Trace, kColl));
  setenv("BRAID_DEBUG", "WARN", 1);  // BRAID_* wins over NCCL_*
  setenv("BRAID_DEBUG_SUBSYS", "^COLL", 1);
  log_reset();
  CHECK(log_enabled(LogLevel::Warn, kColl));
  CHECK_FALSE(log_enabled(LogLevel::Info, kP2P));
  setenv("BRAID_DEBUG", "TRACE", 1);
  log_reset();
  CHECK(log_enabled(LogLevel::Trace, kP2P));
  CHECK_FALSE(log_enabled(LogLevel::Trace, kColl));
  unsetenv("BRAID_DEBUG");
  unsetenv("BRAID_DEBUG_SUBSYS");
  unsetenv("NCCL_DEBUG");
  unsetenv("NCCL_DEBUG_SUBSYS");
  log_reset();
  CHECK_FALSE(log_enabled(LogLevel::Warn, kInit));
}

namespace {
std::vector<std::string> g_forwarded;
void capture(LogLevel level, uint32_t subsys, const char* message) {
  g_forwarded.push_back(fmt::format("{} {:#x} {}", int(level), subsys, message));
}
}  // namespace

TEST_CASE("NCCL's subsystem flags and braid's map both ways", "[log]") {
  CHECK(subsys_from_nccl_flags(0x10, kProfile) == kNet);                   // NCCL_NET
  CHECK(subsys_from_nccl_flags(0x1000 | 0x1, kNet) == (kBootstrap | kInit));  // NCCL_BOOTSTRAP | NCCL_INIT
  CHECK(subsys_from_nccl_flags(0x4000, kNet) == kProfile);                 // NCCL_PROFILE
  CHECK(subsys_from_nccl_flags(0x400, kNet) == kNet);                      // NCCL_PROXY: none of braid's
  CHECK(subsys_from_nccl_flags(0, kProfile) == kProfile);
  for (uint32_t s : std::initializer_list<uint32_t>{kInit, kColl, kNet, kAlloc, kBootstrap, kProfile, kNet | kBootstrap})
    CHECK(subsys_from_nccl_flags(nccl_flags_from_subsys(s), 0) == s);
  CHECK(nccl_flags_from_subsys(kBootstrap) == 0x1000);
}

TEST_CASE("a net plugin's lines go to its host's logger, and its log file is not opened", "[log]") {
  const std::string file = fmt::format("/tmp/braid-forward-test-{}.log", getpid());
  std::remove(file.c_str());
  setenv("BRAID_DEBUG", "INFO", 1);
  setenv("BRAID_DEBUG_FILE", file.c_str(), 1);
  log_forward_to(capture);
  BRAID_INFO(kInit, "over {}", "the host");
  BRAID_TRACE(kInit, "not at INFO");  // braid's own level filter still applies
  CHECK(g_forwarded == std::vector<std::string>{fmt::format("{} 0x1 over the host", int(LogLevel::Info))});
  FILE* opened = std::fopen(file.c_str(), "r");
  CHECK(opened == nullptr);  // the host's file would have been truncated
  if (opened) std::fclose(opened);
  log_forward_to(nullptr);  // braid's own output again: the file now
  BRAID_INFO(kInit, "to the file");
  CHECK(g_forwarded.size() == 1);
  opened = std::fopen(file.c_str(), "r");
  REQUIRE(opened != nullptr);
  char line[256] = {};
  CHECK(std::fgets(line, sizeof line, opened) != nullptr);
  CHECK(std::string(line).find("braid INFO to the file") != std::string::npos);
  std::fclose(opened);
  unsetenv("BRAID_DEBUG");
  unsetenv("BRAID_DEBUG_FILE");
  log_reset();  // closes the file
  std::remove(file.c_str());
}
