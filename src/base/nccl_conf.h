// NCCL's configuration files, read as NCCL 2.23+ reads them (its
// src/misc/param.cc): first NCCL_CONF_FILE, or ~/.nccl.conf where that is
// unset, then /etc/nccl.conf.  Each line NAME=value (split at the first
// '='; a line starting with '#', or without '=', is skipped; nothing is
// trimmed) sets NAME in the process environment unless it is already set.
// So the environment wins over the user's file, and the user's file over
// the system's.  Any NAME is set, not only NCCL_* ones: BRAID_* variables
// may live there too, and a net plugin that calls getenv sees them as well.
//
// braid applies them once per process, before it first reads a variable
// (env.cc), on the application's thread: setenv must not race a getenv,
// and braid's own threads never call either.
#pragma once

#include <string>
#include <vector>

namespace braid {

// One variable a file set: NAME, value and the file it came from.
struct ConfSetting {
  std::string name, value, file;
};

// Applies the files once per process; later calls do nothing.
void apply_nccl_conf_files_once();
// What the files set (variables the environment already had are not
// listed), for init to log.
std::vector<ConfSetting> nccl_conf_settings();
// Why a file that exists was not read (not a regular file, over 1 MiB),
// for init to warn of: it cannot log itself, being applied before the log
// reads its own variables.
std::vector<std::string> nccl_conf_unread();

// The steps, for tests: the files in NCCL's order for these values of
// NCCL_CONF_FILE and HOME (either may be null); and one file applied,
// adding what it set to *set.
std::vector<std::string> nccl_conf_files(const char* conf_file, const char* home);
void apply_conf_file(const std::string& path, std::vector<ConfSetting>* set,
                     std::vector<std::string>* unread = nullptr);

}  // namespace braid
