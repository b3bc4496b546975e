// Opening an NCCL plugin library (net, profiler, environment) by NCCL's
// rule (its src/plugin/plugin_open.cc): the variable's value as given, and
// where that fails and the value is a bare name (no '/', not lib*.so),
// <prefix>-<value>.so; an unset or empty value tries <prefix>.so.  So
// NCCL_NET_PLUGIN=aws-ofi opens libnccl-net-aws-ofi.so, and a path opens
// that file.  "none" (any case) is the caller's to refuse first.
#pragma once

#include <string>
#include <vector>

namespace braid {

// The names dlopen is given, in order, for `value` of a plugin whose
// default library is `prefix`.so ("libnccl-net" and so on).
std::vector<std::string> plugin_library_names(const std::string& prefix, const std::string& value);

// The first of those that dlopen opens (RTLD_NOW | RTLD_LOCAL), its name in
// *opened; null where none does, with each name's dlerror in *error.
void* open_plugin_library(const std::string& prefix, const std::string& value, std::string* opened,
                          std::string* error);

}  // namespace braid
