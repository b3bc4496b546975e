// Reading a file a user names (a schedule, a registration, a topology, a
// sketch, NCCL's configuration file) whole: a regular file of bounded size,
// so that a device (/dev/zero) or a FIFO named by mistake gives an error
// instead of a read without end, in the CLI and in a communicator's init.
#pragma once

#include <cstdint>
#include <string>

namespace braid {

constexpr uintmax_t kMostTextFileBytes = uintmax_t(1) << 30;

// False, with *error saying why ("cannot open P", "P is not a regular file
// (a directory, device or FIFO)", "P is N bytes: ..."), where it cannot be read.
bool read_text_file(const std::string& path, std::string* text, std::string* error,
                    uintmax_t most_bytes = kMostTextFileBytes);
// Whether `path` names something that exists (a file of any kind, a directory).
bool path_exists(const std::string& path);

}  // namespace braid
