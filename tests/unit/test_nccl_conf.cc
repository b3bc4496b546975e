// NCCL's configuration files (src/base/nccl_conf.h): which files, in which
// order, and how a file's lines set variables; and that a braid thread's
// snapshot sees every NCCL_* and BRAID_* variable, listed or not.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "src/base/env.h"
#include "src/base/nccl_conf.h"

using namespace braid;

namespace {

std::string write_temp(const std::string& text) {
  char path[] = "/tmp/braid_conf_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

std::string env_or_unset(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "(unset)";
}

}  // namespace

TEST_CASE("NCCL_CONF_FILE replaces ~/.nccl.conf and /etc/nccl.conf comes last", "[env][conf]") {
  using V = std::vector<std::string>;
  CHECK(nccl_conf_files("/x/my.conf", "/home/u") == V{"/x/my.conf", "/etc/nccl.conf"});
  CHECK(nccl_conf_files("", "/home/u") == V{"/home/u/.nccl.conf", "/etc/nccl.conf"});
  CHECK(nccl_conf_files(nullptr, "/home/u") == V{"/home/u/.nccl.conf", "/etc/nccl.conf"});
  CHECK(nccl_conf_files(nullptr, nullptr) == V{"/etc/nccl.conf"});
}

TEST_CASE("a configuration file sets what the environment lacks, line by line as NCCL reads it", "[env][conf]") {
  for (const char* n : {"BRAIDCONF_A", "BRAIDCONF_B", "BRAIDCONF_C", "BRAIDCONF_D", "BRAIDCONF_E"}) unsetenv(n);
  setenv("BRAIDCONF_C", "from the environment", 1);
  const std::string user = write_temp(
      "# a comment\n"
      "BRAIDCONF_A=1\n"
      "BRAIDCONF_B==eth0\n"  // split at the first '=': the value keeps the second
      "no equals sign here\n"
      "=no name\n"
      "\n"
      "BRAIDCONF_C=from the file\n"
      "BRAIDCONF_D= spaced value \r\n"
      " #BRAIDCONF_E=not a comment: the name starts with a space\n");
  const std::string system = write_temp("BRAIDCONF_A=2\nBRAIDCONF_E=system\n");
  std::vector<ConfSetting> set;
  apply_conf_file(user, &set);
  apply_conf_file(system, &set);  // after the user's file, as NCCL: the user's wins
  std::vector<std::string> unread;
  apply_conf_file("/nonexistent/braid.conf", &set, &unread);  // a missing file is no error
  CHECK(unread.empty());
  apply_conf_file("/dev/zero", &set, &unread);  // a device named by mistake is not read without end
  apply_conf_file("/tmp", &set, &unread);
  REQUIRE(unread.size() == 2);
  CHECK(unread[0] == "/dev/zero is not a regular file (a directory, device or FIFO)");
  CHECK(env_or_unset("BRAIDCONF_A") == "1");
  CHECK(env_or_unset("BRAIDCONF_B") == "=eth0");
  CHECK(env_or_unset("BRAIDCONF_C") == "from the environment");
  CHECK(env_or_unset("BRAIDCONF_D") == " spaced value ");
  CHECK(env_or_unset("BRAIDCONF_E") == "system");
  REQUIRE(set.size() == 5);  // A, B, D, " #BRAIDCONF_E" from the user's file; E from the system's
  CHECK((set[0].name == "BRAIDCONF_A" && set[0].value == "1" && set[0].file == user));
  CHECK(set[2].name == "BRAIDCONF_D");
  CHECK(set[3].name == " #BRAIDCONF_E");
  CHECK((set[4].name == "BRAIDCONF_E" && set[4].file == system));
  for (const char* n : {"BRAIDCONF_A", "BRAIDCONF_B", "BRAIDCONF_C", "BRAIDCONF_D", "BRAIDCONF_E", " #BRAIDCONF_E"})
    unsetenv(n);
  std::remove(user.c_str());
  std::remove(system.c_str());
}

TEST_CASE("a braid thread's snapshot holds every NCCL and BRAID variable, listed or not", "[env]") {
  setenv("NCCL_NOT_IN_ANY_TABLE", "seen", 1);
  setenv("NCCL_IB_HCA", "mlx5_0:1", 1);
  unsetenv("NCCL_ALSO_NOT_IN_A_TABLE");
  auto body = with_caller_env([] {
    return std::make_tuple(env_raw("NCCL_NOT_IN_ANY_TABLE"), env_raw("NCCL_IB_HCA"),
                           env_raw("NCCL_ALSO_NOT_IN_A_TABLE"));
  });
  unsetenv("NCCL_NOT_IN_ANY_TABLE");
  unsetenv("NCCL_IB_HCA");
  std::tuple<std::string, std::string, std::string> seen;
  std::thread([&] { seen = body(); }).join();
  CHECK(std::get<0>(seen) == "seen");
  CHECK(std::get<1>(seen) == "mlx5_0:1");
  CHECK(std::get<2>(seen).empty());
}
