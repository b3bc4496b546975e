// The registry of braid's configuration variables: every BRAID_* variable,
// declared once here with its default and a one-line description (`braid
// env` prints the table).  A constant table, so that a name given to
// env_int/env_string is checked when braid compiles (env.h, EnvName): a
// mistyped name fails the build instead of reading nothing.
#pragma once

#include <cstddef>

namespace braid {

struct EnvVar {
  const char* name;
  const char* default_value;
  const char* description;
};

inline constexpr EnvVar kEnvVars[] = {
    {"BRAID_DEBUG", "", "log level: VERSION, WARN, INFO or TRACE (falls back to NCCL_DEBUG)"},
    {"BRAID_DEBUG_SUBSYS", "", "comma list of log subsystems, ^ negates (falls back to NCCL_DEBUG_SUBSYS)"},
    {"BRAID_DEBUG_FILE", "", "log file pattern, %h host, %p pid (falls back to NCCL_DEBUG_FILE)"},
    {"BRAID_TIMEOUT", "300", "seconds without progress before a wait fails (bootstrap, collectives)"},
    {"BRAID_MOE_RMA", "0",
     "1: MoE dispatch/combine and braidAlltoAllv reach every other rank through one-sided RMA, even where windows "
     "map (tests, benchmarks)"},
    {"BRAID_COMM_ID", "", "ip:port, host:port or [ipv6]:port of the bootstrap root; rank 0 listens there (also "
                          "NCCL_COMM_ID)"},
    {"BRAID_HOSTID", "", "overrides host identity: ranks with equal values use shared memory"},
    {"BRAID_SOCKET_ADDR", "", "IPv4 or IPv6 address to listen on for bootstrap and socket transport"},
    {"BRAID_SOCKET_IFNAME", "",
     "interfaces the sockets may use, NCCL's syntax (eth,enp | =eth0 | ^docker,lo); unset: NCCL_SOCKET_IFNAME, else "
     "chosen (src/base/net_interface.h)"},
    {"BRAID_TRANSPORT", "auto",
     "auto (shm on one host; across hosts the net plugin's network if one loaded, else InfiniBand verbs where every "
     "rank has a usable device, else sockets; each fallback logged at INFO), shm, socket, ib or plugin (socket, ib "
     "and plugin: that one for every peer, also on one host)"},
    {"BRAID_IB_HCA", "",
     "InfiniBand/RoCE devices and ports to use, NCCL's syntax (mlx5_0:1,mlx5_1 prefixes | =exact | ^exclude); unset: "
     "NCCL_IB_HCA, else every active port"},
    {"BRAID_IB_GID_INDEX", "-1",
     "GID index on RoCE ports (-1: the first RoCE v2 GID holding an IPv4 address, as NCCL); unset: NCCL_IB_GID_INDEX"},
    {"BRAID_IB_QPS_PER_CONNECTION", "2",
     "queue pairs per InfiniBand connection, each message split across them (1..8); unset: NCCL_IB_QPS_PER_CONNECTION"},
    {"BRAID_IB_SPLIT_DATA_ON_QPS", "1",
     "1: each InfiniBand message split across the connection's queue pairs; 0: each whole on the next queue pair in "
     "turn (NCCL 2.20+'s default); unset: NCCL_IB_SPLIT_DATA_ON_QPS, else 1 (braid's default 2 queue pairs share "
     "each large message)"},
    {"BRAID_IB_TIMEOUT", "18",
     "InfiniBand ack timeout exponent, 4.096 us * 2^value per try (1..31); unset: NCCL_IB_TIMEOUT"},
    {"BRAID_IB_RETRY_CNT", "7", "InfiniBand retries before a send fails (0..7); unset: NCCL_IB_RETRY_CNT"},
    {"BRAID_NET_PLUGIN", "",
     "NCCL net plugin to load for the transport across hosts: a name (libnccl-net-NAME.so), a library file, or none; "
     "unset: NCCL_NET_PLUGIN, else libnccl-net.so if it exists"},
    {"BRAID_NET_SLOT_BYTES", "1048576", "bytes per fragment on InfiniBand and net-plugin connections"},
    {"BRAID_NET_SLOTS", "4", "fragments in flight per InfiniBand or net-plugin connection (2..16)"},
    {"BRAID_ALGO", "", "force an algorithm: a name for every collective that has it, or coll=name,coll=name (any case and spacing; the same on every rank, agreed at init)"},
    {"BRAID_DETERMINISTIC", "0", "1: AllReduce, ReduceScatter and Reduce fold every element in rank order, x0+x1+x2..., so floating-point results are the same bits whatever the message size, the element's offset or the path (schedules that fold otherwise, StragglAR among them, give way to braid's rank-order schedules); 0: the fastest schedule"},
    {"BRAID_STRAGGLER", "off", "StragglAR AllReduce: off, auto (detect a persistent late rank), eager (last arrival, one host) or the late rank (the same on every rank, agreed at init)"},
    {"BRAID_STRAGGLAR_LANES", "auto", "StragglAR's phase 1: connection (one lane per connection: no transfer waits behind another peer's; the host backend's default), compact (a rank's sends on one lane, its receives on another: fewer thread blocks idle on a GPU; the cuda backend's default) or auto"},
    {"BRAID_SHM_SLOT_BYTES", "262144", "bytes per shared-memory fragment (at least 256); a slot holds two, and calls whose every chunk spans at least 4 slots send slot-wide fragments through half the slots"},
    {"BRAID_SHM_SLOTS", "8", "slots per shared-memory connection"},
    {"BRAID_ONESHOT_MAX_BYTES", "auto", "host backend, ranks on one host: AllReduce, ReduceScatter, AllGather and AlltoAll whose per-rank input is at most this size run one-shot on a shared board, Broadcast, Reduce, Gather and Scatter whose largest writer puts at most this much run eager (0: never; auto: 4096, 8192 on 2 ranks, or where some host runs more ranks than it has cores 65536, and 262144 for Broadcast and Gather; at most 262144)"},
    {"BRAID_DIRECT_MIN_BYTES", "32768", "host backend: calls of at least this many bytes on buffers in windows every rank can map run single-copy (-1: never)"},
    {"BRAID_CMA", "auto", "host backend, processes on one host: collectives on plain buffers may pull peers' inputs with process_vm_readv (cross-memory attach): auto (AllGather, AlltoAll and Broadcast, measured against the shared-memory slots, per collective and size; where ranks outnumber cores, AllGather and AlltoAll of 256 KiB and more only), on (always, and AllReduce, Reduce and ReduceScatter too, pushing their results with process_vm_writev) or off"},
    {"BRAID_LLC_BYTES", "0",
     "host backend: last-level cache bytes the output-store rule counts on (0: sysfs's size; a VM sees its host's "
     "whole cache)"},
    {"BRAID_CMA_MIN_BYTES", "32768", "host backend: calls whose larger buffer is smaller than this never pull (-1: never)"},
    {"BRAID_REDUCE_ISA", "auto", "host reductions: auto (AVX2 and F16C where the CPU has them, chosen at run time) or baseline (the build's own SSE2 loops; the results are bit-identical, this is for tests and timing)"},
    {"BRAID_SLOT_STORES", "auto", "host backend: how calls that stream their output (outputs of 16 MiB and more) write the fragments they send into shared-memory slots: auto (timed per collective and size, through the cache or with streaming stores; through the cache where ranks outnumber cores), cached or streamed"},
    {"BRAID_SOCKET_SLOT_BYTES", "1048576", "bytes per socket fragment (at least 256)"},
    {"BRAID_BACKEND", "auto", "executor backend: auto (cuda when a CUDA device is visible), cuda or host"},
    {"BRAID_CUDA_CHANNELS", "", "cuda backend: connections per peer pair, 1..64 (unset: the tuning table's, else 32; every rank sets the same): schedule channels x parallel slices; each costs slots x slot bytes of device memory per peer; launches stay within what ranks sharing a GPU can keep resident together"},
    {"BRAID_TEST_GIN_AS_DEVICE", "0",
     "host backend, for tests: 1 serves GIN as on a GPU (windows moved only through staged copies, no adds to "
     "window memory, so no 2.30 VA signals), to run those paths without one"},
    {"BRAID_TEST_FAIL_WINDOW_RANK", "-1",
     "for tests: the rank whose ncclCommWindowRegister fails before its backend's exchanges, as a backend that "
     "cannot map or connect would (every rank's fails, and the communicator breaks)"},
    {"BRAID_TEST_FAIL_RESUME_RANK", "-1",
     "for tests: the rank whose ncclCommResume fails as it connects its windows again, as one that cannot map "
     "or connect would (every rank's fails, and the communicator breaks)"},
    {"BRAID_TEST_DIAG_CORRUPT", "",
     "for tests: SRC:DST makes rank SRC's init diagnostics send DST a pattern with one byte changed, as a faulty "
     "path would deliver it (NCCL_RUN_DIAGNOSTICS)"},
    {"BRAID_TEST_DIAG_EXIT_RANK", "-1",
     "for tests: the rank whose process exits as its init diagnostics start sending (NCCL_RUN_DIAGNOSTICS), as a "
     "rank that dies there"},
    {"BRAID_TEST_FAIL_INIT_RANK", "-1",
     "for tests: the rank whose communicator init fails after its first exchange, as one that cannot connect its "
     "transports would (every rank's init fails)"},
    {"BRAID_TEST_STALL_INIT_RANK", "-1",
     "for tests: the rank whose communicator init stalls after its first exchange until it is aborted (or "
     "BRAID_TIMEOUT), as one stuck in its device's setup would"},
    {"BRAID_TEST_FAIL_DERIVE_ROOT_RANK", "-1",
     "for tests: the parent rank that cannot start the bootstrap root of a communicator it is the first member of "
     "(ncclCommSplit, ncclCommShrink), as one out of sockets could not"},
    {"BRAID_TEST_STALL_SCALABLE_RANK", "-1",
     "for tests: the rank whose init with several roots (ncclCommInitRankScalable) stalls between the bootstrap's "
     "rendezvous and its exchanges until it is aborted (or BRAID_TIMEOUT)"},
    {"BRAID_GIN_NET", "auto",
     "how GIN of NCCL's device API reaches other hosts' ranks: auto (the communicator's net, InfiniBand verbs or an "
     "NCCL net plugin as BRAID_TRANSPORT chooses, else GIN's own TCP streams) or socket (the TCP streams); read at "
     "ncclDevCommCreate, the same on every rank"},
    {"BRAID_CUDA_GIN", "0",
     "cuda backend: 1 serves GPU-initiated networking (GIN) of NCCL's device API through braid's proxy (copy "
     "engines, host-mapped signals); built, not yet run on a GPU, so off by default: devComms that need GIN are "
     "refused"},
    {"BRAID_CUDA_LL_MAX_BYTES", "", "cuda backend: AllReduce, ReduceScatter, AllGather and AlltoAll whose message (what a rank sends all peers) is at most this many bytes run one-shot on the LL protocol (unset: the tuning table's, else 65536; flags travel with the data: one store and one poll per peer and 8 bytes; 0: never, at most 1048576; the least any rank sets); each rank's arena holds 4 x this per peer"},
    {"BRAID_CUDA_SLOTS", "", "cuda backend: fragments a connection buffers, 2..8 (unset: the tuning table's, else 4); every rank sets the same"},
    {"BRAID_CUDA_SLOT_BYTES", "", "cuda backend: bytes per fragment slot, >= 4096, a multiple of 256 (unset: the tuning table's, else 262144); every rank sets the same"},
    {"BRAID_TUNING_FILE", "", "cuda backend: a tuning table (tuning/cuda.json's format) whose rows go before the built-in ones; every rank reads the same (braid tuning shows what it resolves to)"},
    {"BRAID_CHECK", "0",
     "1: check argument consistency across ranks before each collective, and between the two ranks of each "
     "send and receive (read at init; any rank turns it on for all; NCCL_CHECK_MODE=DEBUG_GLOBAL does the same)"},
    {"BRAID_SCHEDULES", "",
     "schedule files to run (braid JSON, MSCCL XML): a file, a directory (searched recursively) or a colon list of "
     "them; a call takes the first that fits it, searching these before the MSCCL_* ones (the same files on every "
     "rank, agreed at init)"},
    {"MSCCL_XML_FILES", "", "MSCCL: colon list of algorithm files (searched after BRAID_SCHEDULES)"},
    {"MSCCL_CONFIG", "", "MSCCL: registration file, <msccl_algos><load path minbytes maxbytes proto/> (after MSCCL_XML_FILES)"},
    {"MSCCL_ALGO_DIR", "", "MSCCL: directory of algorithm files, *.xml, not recursive (searched last)"},
    {"BRAID_NCCL_LIB", "", "path of the real libnccl.so.2 to forward to"},
    {"BRAID_NCCL_VERSION", "",
     "the NCCL version ncclGetVersion reports, X.Y.Z or its code, 2.28.0 up to braid's API level (unset: braid's "
     "API level, 2.32.6): for a client that requires the library to equal the header it was built with "
     "(docs/compatibility.md)"},
    {"BRAID_FORWARD", "", "collectives (allreduce,allgather,...) or all to run on BRAID_NCCL_LIB (cuda backend)"},
};

}  // namespace braid
