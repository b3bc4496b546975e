// Which InfiniBand ports and GID braid's verbs net takes (ib_select.h):
// NCCL_IB_HCA's syntax and NCCL's GID rule, without a device.
#include <arpa/inet.h>

#include <catch2/catch.hpp>

#include <cstring>

#include "src/transport/ibverbs/ib_select.h"

using namespace braid;

namespace {

HcaFilter parse(const std::string& spec) {
  HcaFilter f;
  Status s = parse_hca_filter("NCCL_IB_HCA", spec, &f);
  INFO(s.to_string());
  REQUIRE(s.is_ok());
  return f;
}

GidEntry gid(int index, GidType type, const char* ip6) {
  GidEntry g;
  g.index = index;
  g.type = type;
  REQUIRE(inet_pton(AF_INET6, ip6, g.raw) == 1);
  return g;
}

}  // namespace

TEST_CASE("NCCL_IB_HCA: prefixes, ports, exact names, exclusion", "[unit][ib]") {
  HcaFilter all = parse("");
  CHECK(all.passes("mlx5_0", 1));
  CHECK(all.passes("rxe0", 2));

  HcaFilter f = parse("mlx5_0:1,mlx5_1");
  CHECK(f.passes("mlx5_0", 1));
  CHECK_FALSE(f.passes("mlx5_0", 2));  // port 1 only
  CHECK(f.passes("mlx5_1", 2));        // any port
  CHECK(f.passes("mlx5_10", 1));       // a prefix of mlx5_10 too, as NCCL
  CHECK_FALSE(f.passes("mlx5_2", 1));

  HcaFilter exact = parse("=mlx5_1");
  CHECK(exact.passes("mlx5_1", 1));
  CHECK_FALSE(exact.passes("mlx5_10", 1));

  HcaFilter not_these = parse("^mlx5_0,rxe");
  CHECK_FALSE(not_these.passes("mlx5_0", 1));
  CHECK_FALSE(not_these.passes("rxe0", 1));
  CHECK(not_these.passes("mlx5_1", 1));

  HcaFilter not_exact = parse("^=rxe0:1");
  CHECK_FALSE(not_exact.passes("rxe0", 1));
  CHECK(not_exact.passes("rxe0", 2));
  CHECK(not_exact.passes("rxe01", 1));
}

TEST_CASE("NCCL_IB_HCA: NCCL 2.30's name:port:rail:plane, each field optional", "[unit][ib]") {
  HcaFilter f = parse("mlx5_0:1:0:1,mlx5_1::3,mlx5_2:,=x");  // (the last name is a prefix, "=" leads the spec only)
  REQUIRE(f.entries.size() == 4);
  const HcaEntry* e = f.entry_for("mlx5_0", 1);
  REQUIRE(e);
  CHECK((e->port == 1 && e->rail == 0 && e->plane == 1));
  CHECK_FALSE(f.entry_for("mlx5_0", 2));
  e = f.entry_for("mlx5_1", 2);  // an empty port: any
  REQUIRE(e);
  CHECK((e->port == -1 && e->rail == 3 && e->plane == -1));
  e = f.entry_for("mlx5_2", 1);  // "mlx5_2:": no port, rail or plane
  REQUIRE(e);
  CHECK((e->port == -1 && e->rail == -1 && e->plane == -1));
  CHECK(f.passes("mlx5_2", 4));
  // An exclusion's entries are the ports not used: they give no rail.
  HcaFilter not_these = parse("^mlx5_0:1:2");
  CHECK_FALSE(not_these.passes("mlx5_0", 1));
  CHECK_FALSE(not_these.entry_for("mlx5_1", 1));
  CHECK_FALSE(parse("").entry_for("mlx5_0", 1));
}

TEST_CASE("NCCL_IB_HCA: malformed specs are refused with the variable named", "[unit][ib]") {
  for (const char* bad : {"mlx5_0:x", "mlx5_0:0", ":1", "mlx5_0,,mlx5_1", "^", "=", "^=", "mlx5_0:1:x",
                          "mlx5_0:1:-1", "mlx5_0:1:0:40000", "mlx5_0:1:0:0:0"}) {
    HcaFilter f;
    Status s = parse_hca_filter("BRAID_IB_HCA", bad, &f);
    INFO(bad);
    CHECK(s.code() == ncclInvalidArgument);
    CHECK(s.message().find("BRAID_IB_HCA") != std::string::npos);
  }
}

TEST_CASE("GID choice: RoCE v2 with an IPv4 address first, as NCCL, and a forced index must exist", "[unit][ib]") {
  // rxe's table: link-local IPv6 as v1 and v2, then the IPv4 address as v1 and v2.
  std::vector<GidEntry> table{gid(0, GidType::RoceV1, "fe80::5054:ff:fe77:1"), gid(1, GidType::RoceV2, "fe80::5054:ff:fe77:1"),
                              gid(2, GidType::RoceV1, "::ffff:10.77.0.1"), gid(3, GidType::RoceV2, "::ffff:10.77.0.1")};
  GidEntry chosen;
  REQUIRE(choose_gid(table, -1, "NCCL_IB_GID_INDEX", GidPreference{}, &chosen).is_ok());
  CHECK(chosen.index == 3);
  CHECK(gid_is_ipv4(chosen.raw));
  CHECK(gid_to_string(chosen.raw) == "::ffff:10.77.0.1");

  // No IPv4 one: the first RoCE v2.
  REQUIRE(choose_gid({table[0], table[1]}, -1, "NCCL_IB_GID_INDEX", GidPreference{}, &chosen).is_ok());
  CHECK(chosen.index == 1);
  // Only v1: the first.
  REQUIRE(choose_gid({table[2], table[0]}, -1, "NCCL_IB_GID_INDEX", GidPreference{}, &chosen).is_ok());
  CHECK(chosen.index == 2);

  REQUIRE(choose_gid(table, 2, "NCCL_IB_GID_INDEX", GidPreference{}, &chosen).is_ok());
  CHECK(chosen.index == 2);
  Status s = choose_gid(table, 7, "BRAID_IB_GID_INDEX", GidPreference{}, &chosen);
  CHECK(s.code() == ncclSystemError);
  CHECK(s.message().find("BRAID_IB_GID_INDEX=7") != std::string::npos);
  CHECK(s.message().find("0, 1, 2, 3") != std::string::npos);
  CHECK(choose_gid({}, -1, "NCCL_IB_GID_INDEX", GidPreference{}, &chosen).code() == ncclSystemError);
}

TEST_CASE("GID choice again (port recovery): the table as it is now, and only a GID like the one before",
          "[unit][ib]") {
  const GidEntry link_v2 = gid(1, GidType::RoceV2, "fe80::5054:ff:fe77:1");
  const GidEntry before = gid(3, GidType::RoceV2, "::ffff:10.77.0.1");
  GidEntry chosen;
  // The address came back at another index (the old one still held), or changed.
  REQUIRE(choose_gid_again({link_v2, gid(5, GidType::RoceV2, "::ffff:10.77.0.1")}, -1, "NCCL_IB_GID_INDEX",
                           GidPreference{}, before, &chosen).is_ok());
  CHECK(chosen.index == 5);
  REQUIRE(choose_gid_again({link_v2, gid(3, GidType::RoceV2, "::ffff:10.77.3.1")}, -1, "NCCL_IB_GID_INDEX",
                           GidPreference{}, before, &chosen).is_ok());
  CHECK(gid_to_string(chosen.raw) == "::ffff:10.77.3.1");
  // Not back yet: the link-local GID is no substitute, and nothing is chosen.
  chosen = before;
  Status s = choose_gid_again({link_v2}, -1, "NCCL_IB_GID_INDEX", GidPreference{}, before, &chosen);
  CHECK(s.code() == ncclSystemError);
  CHECK(s.message().find("no GID like index 3 ::ffff:10.77.0.1") != std::string::npos);
  CHECK(chosen.index == 3);
  // A v1 address where v2 was: refused too.
  CHECK(!choose_gid_again({gid(2, GidType::RoceV1, "::ffff:10.77.0.1")}, -1, "NCCL_IB_GID_INDEX", GidPreference{},
                          before, &chosen).is_ok());
  // A forced index: that entry, whatever its address is now.
  REQUIRE(choose_gid_again({link_v2, gid(3, GidType::RoceV2, "::ffff:10.77.9.9")}, 3, "NCCL_IB_GID_INDEX",
                           GidPreference{}, before, &chosen).is_ok());
  CHECK(gid_to_string(chosen.raw) == "::ffff:10.77.9.9");
  CHECK(!choose_gid_again({}, -1, "NCCL_IB_GID_INDEX", GidPreference{}, before, &chosen).is_ok());
}

TEST_CASE("GID choice: NCCL_IB_ADDR_FAMILY, NCCL_IB_ADDR_RANGE and NCCL_IB_ROCE_VERSION_NUM, as NCCL", "[unit][ib]") {
  // Two IPv4 addresses (v1 and v2 each), a global IPv6 one (v2), link-local ones.
  std::vector<GidEntry> table{
      gid(0, GidType::RoceV1, "fe80::5054:ff:fe77:1"), gid(1, GidType::RoceV2, "fe80::5054:ff:fe77:1"),
      gid(2, GidType::RoceV1, "::ffff:10.77.0.1"),     gid(3, GidType::RoceV2, "::ffff:10.77.0.1"),
      gid(4, GidType::RoceV1, "::ffff:192.168.5.9"),   gid(5, GidType::RoceV2, "::ffff:192.168.5.9"),
      gid(6, GidType::RoceV2, "2001:db8::7")};
  auto pick = [&](const std::string& family, const std::string& range, const std::string& version) {
    std::string ignored;
    GidPreference p = parse_gid_preference(family, range, version, &ignored);
    GidEntry chosen;
    REQUIRE(choose_gid(table, -1, "NCCL_IB_GID_INDEX", p, &chosen).is_ok());
    return std::make_pair(chosen.index, ignored);
  };
  CHECK(pick("", "", "").first == 3);                               // the defaults: IPv4, RoCE v2
  CHECK(pick("", "", "1").first == 2);                              // RoCE v1
  CHECK(pick("AF_INET", "192.168.0.0/16", "").first == 5);          // the range
  CHECK(pick("AF_INET", "192.168.5.9/32", "1").first == 4);
  CHECK(pick("AF_INET", "172.16.0.0/12", "").first == 3);           // nothing in range: the default order
  CHECK(pick("AF_INET6", "", "").first == 6);                       // IPv6, not link-local
  CHECK(pick("AF_INET6", "2001:db8::/32", "1").first == 6);         // no v1 of it: the family's other version
  CHECK(pick("AF_INET", "0.0.0.0/0", "").first == 3);               // every address
  // Ranges NCCL ignores, as it does.
  auto no_mask = pick("AF_INET", "192.168.0.0", "");
  CHECK(no_mask.first == 3);
  CHECK(no_mask.second == "NCCL_IB_ADDR_RANGE=192.168.0.0 has no /mask");
  auto too_long = pick("AF_INET", "192.168.0.0/33", "");
  CHECK(too_long.first == 3);
  CHECK(too_long.second == "NCCL_IB_ADDR_RANGE=192.168.0.0/33 is not a range of AF_INET");
  CHECK(pick("AF_INET6", "192.168.0.0/16", "").second == "NCCL_IB_ADDR_RANGE=192.168.0.0/16 is not a range of AF_INET6");
  CHECK(pick("", "", "two").first == 3);  // not a number: version 2
}

TEST_CASE("NCCL_IB_PKEY names an entry of the port's P_Key table, not an empty one", "[unit][ib]") {
  CHECK(check_pkey(0, 1, 0xffff).is_ok());
  CHECK(check_pkey(3, 4, 0x8123).is_ok());
  const Status past = check_pkey(4, 4, 0xffff);
  CHECK(past.code() == ncclInvalidArgument);
  CHECK_THAT(past.message(), Catch::Contains("NCCL_IB_PKEY=4: not an index of the port's P_Key table (0 to 3)"));
  CHECK(check_pkey(-1, 4, 0xffff).code() == ncclInvalidArgument);
  const Status empty = check_pkey(1, 4, 0x8000);  // membership bit, partition 0: empty
  CHECK(empty.code() == ncclSystemError);
  CHECK_THAT(empty.message(), Catch::Contains("is empty (0x8000)"));
}

TEST_CASE("two P_Keys reach each other in one partition with a full member", "[unit][ib]") {
  std::string why;
  CHECK(pkeys_reach(0xffff, 0xffff, &why));
  CHECK(pkeys_reach(0x8123, 0x0123, &why));  // full and limited
  CHECK(pkeys_reach(0x0123, 0x8123, &why));
  CHECK_FALSE(pkeys_reach(0x8123, 0x8124, &why));
  CHECK_THAT(why, Catch::Contains("0x8123 here and 0x8124 at the peer are different partitions"));
  CHECK_FALSE(pkeys_reach(0x0123, 0x0123, &why));
  CHECK_THAT(why, Catch::Contains("both limited members"));
}

TEST_CASE("NCCL_IB_PCI_RELAXED_ORDERING: 2 (default) where libibverbs can, 1 insists, others off", "[unit][ib]") {
  auto use = [](std::optional<int64_t> mode, bool iova2) {
    bool on = !iova2;  // the opposite of what any case should give, so a missing write shows
    Status s = relaxed_ordering_setting(mode, iova2, &on);
    REQUIRE(s.is_ok());
    return on;
  };
  CHECK(use(std::nullopt, true));
  CHECK(use(2, true));
  CHECK(use(1, true));
  CHECK_FALSE(use(std::nullopt, false));  // no ibv_reg_mr_iova2: strict, quietly
  CHECK_FALSE(use(2, false));
  CHECK_FALSE(use(0, true));
  CHECK_FALSE(use(3, true));  // NCCL uses it only for 1 and 2
  CHECK_FALSE(use(-1, true));
  bool on = true;
  const Status insisted = relaxed_ordering_setting(1, false, &on);
  CHECK(insisted.code() == ncclSystemError);
  CHECK_FALSE(on);
  CHECK_THAT(insisted.message(), Catch::Contains("NCCL_IB_PCI_RELAXED_ORDERING=1, but this libibverbs has no "
                                                 "ibv_reg_mr_iova2"));
}
