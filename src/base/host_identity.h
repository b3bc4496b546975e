// Which host and which machine this process runs on, as hashes every rank
// publishes at init: equal host hashes put ranks on shared memory, equal
// machine hashes mean they share cores.
#pragma once

#include <cstdint>

namespace braid {

// Identity of this host: its machine and the memory behind /dev/shm, where
// shm_open puts segments (BRAID_HOSTID overrides: an emulated cluster gives
// each network namespace its own).  Containers of one machine with a
// /dev/shm each (docker without --ipc=host) cannot map each other's
// segments, so they are different hosts: sockets between them.
uint64_t host_hash();
// The file system behind /dev/shm (its device number; 0 if none).
uint64_t shm_identity();
// Identity of this machine (host name and boot), whatever BRAID_HOSTID says.
uint64_t machine_hash();
// A random value drawn once per process, and again in each forked child.
// With the pid it tells whether two ranks share an address space: pids
// repeat across containers and hosts, and forked children in pid namespaces
// of their own have equal pids (all 2, say).
uint64_t this_process();
// getpid(), without a system call after the first (a forked child asks again).
int this_pid();
// This process's pid namespace (the inode of /proc/self/ns/pid; 0 when it
// cannot be read): a pid names the same process only within one.
uint64_t pid_namespace();
// Whether `local_ranks` ranks (or busy threads) outnumber the cores they can
// share: the CPUs online, or this process's affinity if wider (mpirun binds
// each of 2 ranks to its own core, and 1 core per process is no
// oversubscription).  Then a thread that spins only delays the one it
// waits for.
bool host_oversubscribed(int local_ranks);

}  // namespace braid
