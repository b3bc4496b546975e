// The JSON form of RAS reports between processes (ras_report.h).  Reading
// checks every field's type, so a peer of another braid version, or
// anything else that reached the port, is refused instead of thrown on.
#include <exception>

#include "src/runtime/ras_report.h"

namespace braid::ras {

using nlohmann::json;

json to_json(const ProcessInfo& p) {
  return {{"addr", p.addr}, {"host", p.host}, {"pid", p.pid}, {"cuda_devs", p.cuda_devs}};
}

json to_json(const ProcessReport& r) {
  json comms = json::array();
  for (const CommReport& c : r.comms) {
    json ranks = json::array();
    for (const RankState& s : c.ranks)
      ranks.push_back({{"rank", s.rank}, {"cuda_dev", s.cuda_dev}, {"init_state", s.init_state},
                       {"async_error", s.async_error}, {"finalize_called", s.finalize_called},
                       {"destroy_flag", s.destroy_flag}, {"abort_flag", s.abort_flag}, {"counts", s.coll_counts}});
    comms.push_back({{"hash", c.id.hash}, {"host_hash", c.id.host_hash}, {"pid_hash", c.id.pid_hash},
                     {"nranks", c.nranks}, {"ranks", std::move(ranks)}});
  }
  json peers = json::array();
  for (const ProcessInfo& p : r.peers) peers.push_back(to_json(p));
  return {{"process", to_json(r.process)}, {"comms", std::move(comms)}, {"peers", std::move(peers)}};
}

json to_json(const std::vector<RankHome>& homes) {
  json out = json::array();
  for (const RankHome& h : homes) out.push_back({{"rank", h.rank}, {"addr", h.addr}, {"cuda_dev", h.cuda_dev}});
  return out;
}

namespace {

// The get<> calls throw on a wrong type or a missing key; one catch turns
// any of that into "not a report".
template <class F>
bool parse(F&& body) {
  try {
    body();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

void read_process(const json& j, ProcessInfo* p) {
  p->addr = j.at("addr").get<std::string>();
  p->host = j.at("host").get<std::string>();
  p->pid = j.at("pid").get<int64_t>();
  p->cuda_devs = j.at("cuda_devs").get<std::vector<int>>();
}

}  // namespace

bool from_json(const json& j, ProcessInfo* out) {
  return parse([&] { read_process(j, out); });
}

bool from_json(const json& j, ProcessReport* out) {
  return parse([&] {
    ProcessReport r;
    read_process(j.at("process"), &r.process);
    for (const json& c : j.at("comms")) {
      CommReport comm;
      comm.id = {c.at("hash").get<uint64_t>(), c.at("host_hash").get<uint64_t>(), c.at("pid_hash").get<uint64_t>()};
      comm.nranks = c.at("nranks").get<int>();
      for (const json& s : c.at("ranks")) {
        RankState st;
        st.rank = s.at("rank").get<int>();
        st.cuda_dev = s.at("cuda_dev").get<int>();
        st.init_state = s.at("init_state").get<int>();
        st.async_error = s.at("async_error").get<int>();
        st.finalize_called = s.at("finalize_called").get<bool>();
        st.destroy_flag = s.at("destroy_flag").get<bool>();
        st.abort_flag = s.at("abort_flag").get<bool>();
        st.coll_counts = s.at("counts").get<std::array<uint64_t, kCounted>>();
        comm.ranks.push_back(st);
      }
      r.comms.push_back(std::move(comm));
    }
    for (const json& p : j.at("peers")) {
      ProcessInfo info;
      read_process(p, &info);
      r.peers.push_back(std::move(info));
    }
    *out = std::move(r);
  });
}

bool from_json(const json& j, std::vector<RankHome>* out) {
  return parse([&] {
    std::vector<RankHome> homes;
    for (const json& h : j)
      homes.push_back({h.at("rank").get<int>(), h.at("addr").get<std::string>(), h.at("cuda_dev").get<int>()});
    *out = std::move(homes);
  });
}

}  // namespace braid::ras
