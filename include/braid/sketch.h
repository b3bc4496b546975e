// A communication sketch (TACCL): the user's hints that cut the synthesis
// search space.  braid reads TACCL's sketch JSON as is:
//
//   nnodes                      nodes of the topology to synthesize for
//   intranode_sketch.strategy   "none" (any intra-node link) or "switch"
//                               (only links inside one of `switches`); TACCL's
//                               "maxmin"/"minmax" are read as "none"
//   intranode_sketch.switches   [[local GPU ids]] per switch
//   switch_hyperedge_strategy   ["uc-max" | "uc-min"] per switch: prefer many
//                               or few distinct GPU pairs on the switch
//   internode_sketch.strategy   "relay" (only listed inter-node GPU pairs)
//   internode_conn              {"sender": [receivers]} local ids, or
//                               "fully-connected", or "direct-map" (i -> i)
//   gpus_to_sender_rev_map      {"sender": [local GPUs whose data it may send]}
//   enforce_ordering            accepted; braid always keeps per-link order
//   symmetry_offsets            [[offset, group size]]: rank r behaves like
//                               r + offset within its group (mod the group)
//   hyperparameters.input_chunkup  chunks per rank's input
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace braid {

struct Sketch {
  int nnodes = 1;
  bool intra_switch = false;  // strategy "switch"
  std::vector<std::vector<int>> switches;
  std::vector<std::string> switch_strategy;  // per switch: "uc-max", "uc-min" or ""
  enum class InterConn { Custom, FullyConnected, DirectMap } inter = InterConn::FullyConnected;
  std::map<int, std::vector<int>> internode_conn;          // sender -> receivers (Custom)
  std::map<int, std::vector<int>> gpus_to_sender_rev_map;  // sender -> GPUs it carries; empty: any
  bool enforce_ordering = false;
  std::vector<std::pair<int, int>> symmetry_offsets;  // (offset, group size)
  int input_chunkup = 1;
};

// Never throws; false with a message naming the field on bad input.
// `gpus_per_node` checks the local ids (0 skips the check).
bool sketch_from_json(const std::string& text, int gpus_per_node, Sketch* out, std::string* error);
bool load_sketch(const std::string& path, int gpus_per_node, Sketch* out, std::string* error);

}  // namespace braid
