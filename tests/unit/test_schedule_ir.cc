// The IR's names and its JSON form: every built-in schedule round-trips
// losslessly, and malformed files are refused with a message naming the field.
#include <catch2/catch.hpp>

#include "braid/algorithms.h"
#include "braid/schedule_json.h"

using namespace braid;

namespace {

// Parses `text`, which must fail, and returns the error.
std::string rejection(const std::string& text) {
  Schedule s;
  s.name = "untouched";
  std::string error;
  INFO(text);
  REQUIRE_FALSE(schedule_from_json(text, &s, &error));
  CHECK_FALSE(error.empty());
  CHECK(s.name == "untouched");  // no partial result on failure
  return error;
}

// A small valid schedule, as text, to damage in the tests below.
const char* kTwoRankSend = R"({"collective": "allgather", "nranks": 2, "ranks": [
  {"input_chunks": 1, "output_chunks": 2, "lanes": [{"channel": 0, "ops": [
    {"type": "copy", "src": {"buffer": "input", "index": 0}, "dst": {"buffer": "output", "index": 0}},
    {"type": "send", "send_peer": 1, "src": {"buffer": "input", "index": 0}},
    {"type": "recv", "recv_peer": 1, "dst": {"buffer": "output", "index": 1}, "deps": [{"lane": 0, "op": 0}]}]}]},
  {"input_chunks": 1, "output_chunks": 2, "lanes": [{"ops": [
    {"type": "copy", "src": {"buffer": "input", "index": 0}, "dst": {"buffer": "output", "index": 1}},
    {"type": "send", "send_peer": 0, "src": {"buffer": "input", "index": 0}},
    {"type": "recv", "recv_peer": 0, "dst": {"buffer": "output", "index": 0}}]}]}]})";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  size_t pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  return text.replace(pos, from.size(), to);
}

}  // namespace

TEST_CASE("enum names round-trip", "[ir]") {
  for (int c = 0; c <= int(Collective::Custom); ++c) {
    auto back = collective_from_string(to_string(Collective(c)));
    REQUIRE(back);
    CHECK(*back == Collective(c));
  }
  for (int t = 0; t <= int(OpType::Nop); ++t) {
    auto back = op_type_from_string(to_string(OpType(t)));
    REQUIRE(back);
    CHECK(*back == OpType(t));
  }
  CHECK(std::string(to_string(Collective::AllReduce)) == "allreduce");
  CHECK(std::string(to_string(Collective::ReduceScatter)) == "reducescatter");
  CHECK(std::string(to_string(OpType::RecvReduceCopySend)) == "rrcs");
  CHECK(std::string(to_string(BufferKind::Scratch)) == "scratch");
  CHECK_FALSE(collective_from_string("AllReduce"));
  CHECK_FALSE(collective_from_string(""));
  CHECK_FALSE(op_type_from_string("sendrecv"));
}

TEST_CASE("every built-in schedule round-trips through JSON", "[ir][json]") {
  for (const AlgorithmInfo& algo : algorithm_registry())
    for (int n : {1, 2, 3, 5, 8, 13})
      for (int root : algo.rooted ? std::vector<int>{0, n / 2, n - 1} : std::vector<int>{-1}) {
        Schedule s = algo.make(n, root);
        INFO(s.name << " n=" << n << " root=" << root);
        std::string text = schedule_to_json(s);
        Schedule back;
        std::string error;
        REQUIRE(schedule_from_json(text, &back, &error));
        CHECK(error.empty());
        CHECK(back == s);
        CHECK(schedule_to_json(back) == text);
      }
}

TEST_CASE("JSON keeps fields the generators leave at their defaults", "[ir][json]") {
  Schedule s;
  s.name = "odd \"name\"";
  s.collective = Collective::Custom;
  s.nranks = 2;
  s.root = 1;
  s.in_place = false;
  s.min_bytes = 7;
  s.max_bytes = UINT64_MAX;
  s.protocol = "LL128";
  s.ranks.resize(2);
  s.ranks[0] = {3, 4, 5, {{7, {}}, {65535, {}}}};
  Op op;
  op.type = OpType::RecvReduceCopySend;
  op.send_peer = 1;
  op.recv_peer = 1;
  op.src = {BufferKind::Scratch, 2};
  op.dst = {BufferKind::Output, 1};
  op.count = 3;
  op.deps = {{1, 0}};
  Op nop;
  nop.type = OpType::Nop;
  nop.src = {BufferKind::Output, 2};  // unused by a nop, but kept
  nop.send_peer = 0;
  s.ranks[0].lanes[1].ops = {nop};
  s.ranks[0].lanes[0].ops = {op};
  std::string text = schedule_to_json(s);
  Schedule back;
  std::string error;
  REQUIRE(schedule_from_json(text, &back, &error));
  CHECK(back == s);
}

TEST_CASE("the sample schedule parses", "[ir][json]") {
  Schedule s;
  std::string error;
  REQUIRE(schedule_from_json(kTwoRankSend, &s, &error));
  CHECK(s.collective == Collective::AllGather);
  CHECK(s.root == -1);
  CHECK(s.in_place);
  CHECK(s.out_of_place);
  REQUIRE(s.ranks[0].lanes[0].ops.size() == 3);
  CHECK(s.ranks[0].lanes[0].ops[2].deps == std::vector<Dep>{{0, 0}});
  CHECK(s.ranks[1].lanes[0].channel == 0);
}

TEST_CASE("malformed JSON is rejected with a useful message", "[ir][json]") {
  CHECK_THAT(rejection(""), Catch::Contains("not valid JSON"));
  CHECK_THAT(rejection("{\"collective\": "), Catch::Contains("not valid JSON"));
  CHECK_THAT(rejection("[1, 2]"), Catch::Contains("object"));
  CHECK_THAT(rejection(R"({"name": "broken", "collective": "allreduce", "nranks": "four"})"),
             Catch::Contains("nranks"));
  CHECK_THAT(rejection(R"({"nranks": 1, "ranks": [{}]})"), Catch::Contains("collective: missing"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "allgather", "allgatherv")), Catch::Contains("unknown collective"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"nranks\": 2", "\"nranks\": 3")), Catch::Contains("rank programs"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"nranks\": 2", "\"nranks\": 0")), Catch::Contains("nranks"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"nranks\": 2", "\"nranks\": 2, \"root\": 2")),
             Catch::Contains("root"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"nranks\": 2", "\"nranks\": 2, \"version\": 9")),
             Catch::Contains("version"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"type\": \"send\"", "\"type\": \"fetch\"")),
             Catch::Contains("unknown op type 'fetch'"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"send_peer\": 1", "\"send_peer\": 2")),
             Catch::Contains("ranks[0].lanes[0].ops[1].send_peer"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"send_peer\": 1", "\"send_peer\": -2")),
             Catch::Contains("send_peer"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"send_peer\": 1", "\"sned_peer\": 1")),
             Catch::Contains("unknown field 'sned_peer'"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"send_peer\": 1,", "")), Catch::Contains("needs a send_peer"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"recv_peer\": 1,", "")), Catch::Contains("needs a recv_peer"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"index\": 1}, \"deps\"", "\"index\": 2}, \"deps\"")),
             Catch::Contains("ranks[0].lanes[0].ops[2].dst"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"buffer\": \"output\", \"index\": 1}, \"deps\"",
                               "\"buffer\": \"scratch\", \"index\": 0}, \"deps\"")),
             Catch::Contains("scratch buffer"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"buffer\": \"input\"", "\"buffer\": \"in\"")),
             Catch::Contains("unknown buffer 'in'"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "{\"lane\": 0, \"op\": 0}", "{\"lane\": 1, \"op\": 0}")),
             Catch::Contains("lane 1 op 0 does not exist"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "{\"lane\": 0, \"op\": 0}", "{\"lane\": 0, \"op\": 3}")),
             Catch::Contains("deps[0]"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "{\"lane\": 0, \"op\": 0}", "[0, 0]")), Catch::Contains("deps[0]"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"channel\": 0", "\"channel\": 65536")), Catch::Contains("channel"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"channel\": 0", "\"channel\": 1.5")), Catch::Contains("integer"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"input_chunks\": 1", "\"input_chunks\": -1")),
             Catch::Contains("input_chunks"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"lanes\": [{\"ops\"", "\"lanes\": {\"ops\"")),
             Catch::Contains("not valid JSON"));
  CHECK_THAT(rejection(replace(kTwoRankSend, "\"ranks\": [", "\"ranks\": 3, \"x\": [")),
             Catch::Contains("unknown field"));
}
