/* braid's MoE dispatch and combine (issue 40): a C API next to NCCL's.
 *
 * One handle per communicator and layer shape.  Dispatch sends each token's
 * row to the ranks owning its top-k experts and leaves, on every rank, the
 * rows its local experts must process; combine sends the experts' results
 * back and sums each token's results weighted by its top-k weights.  Only
 * routed rows travel, and each (sender, destination) pair adds a fixed
 * number of signal words (one per local expert) per call.
 *
 * On the host backend (host buffers): ranks are threads or processes of
 * one host or of several.  A rank stores straight into the windows it maps
 * and reaches the others through one-sided RMA (InfiniBand, a net plugin or
 * TCP between hosts; src/moe/host_moe.h, window_routes.h).  Where ranks span
 * hosts, create splits a communicator of its own off comm (its RMA signals
 * are the handle's alone).  Every call completes before it returns; the
 * stream is accepted and not used; dispatch and combine are refused
 * (ncclInvalidUsage) inside a group (ncclGroupStart/End), on every route:
 * a group would defer their RMA past the caller's buffers.
 *
 * On a CUDA communicator (device buffers): every rank's window must be
 * within reach of LSA pointers (NVLink peers, or ranks sharing a GPU).
 * Dispatch and combine launch one kernel each on the stream and return;
 * recvCounts and droppedRows are device memory written by the kernel, so a
 * dispatch+combine can be captured in a CUDA graph and replayed.  Calls of
 * one handle must be ordered on the device (one stream, or streams the
 * caller orders).  What a kernel hits (a timeout, a bad expert index) is
 * reported by the handle's next call and by braidMoeGetAsyncError; then
 * the handle takes no more calls.  The device library under these kernels,
 * for a user's own kernel, is braid/moe.cuh.
 *
 * Zero-copy (config.zeroCopy): a rank's tokens and its experts' results
 * left in buffers of the handle's window are read in place by the peers
 * that map it, instead of being put (braidMoeGetDispatchBuffer,
 * braidMoeGetCombineBuffer).
 *
 * Create and destroy are collective over the communicator; dispatch and combine are
 * called by every rank, alternately (dispatch, combine, dispatch, ...).
 * Errors are ncclResult_t codes with a message for ncclGetLastError;
 * ncclTimeout when a peer did not signal within the timeout (late, or gone),
 * after which the handle takes no more calls (a late peer may still use
 * the windows): destroy it.
 * The calls of one handle run one at a time: one made while another
 * thread is in a call on the handle gets ncclInvalidUsage.  A call holds
 * the communicator while it runs (an ncclCommAbort or ncclCommDestroy from
 * another thread waits for it); an abort or revoke of the communicator
 * ends a waiting call with ncclInvalidUsage, and a revoked communicator's
 * handle takes no more calls (destroy it: after a revoke no barrier is
 * waited for).  Destroy is refused inside a group, the handle left as it
 * was.  A non-blocking communicator (config.blocking = 0) is fine: the
 * handle's own collective steps complete before its calls return.
 * A bad argument on one rank alone (an expert index out of range,
 * numTokens out of range, a NULL buffer) fails that call on every rank at
 * once: that rank gets ncclInvalidArgument saying what was wrong, the
 * others ncclRemoteError (on CUDA, from their next call or
 * braidMoeGetAsyncError).  No peer waits for the timeout.  On the host
 * backend the handle then takes the next dispatch; on CUDA it takes no
 * more calls.  A refused call made while the stream is being captured is
 * captured too (its kernel tells the peers when the graph replays): abandon
 * that capture.
 */
#ifndef BRAID_MOE_H_
#define BRAID_MOE_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct braidMoe* braidMoe_t;

typedef enum {
  /* [local expert][source rank][rows]: each local expert's rows from every
   * source back to back, the expert's total rounded up to tileRows (what a
   * grouped GEMM over the local experts takes). */
  braidMoeExpertMajor = 0,
  /* [source rank][local expert][rows], each block rounded up to tileRows. */
  braidMoeRankMajor = 1
} braidMoeLayout_t;

typedef enum { braidMoeZeroCopyCombine = 1, braidMoeZeroCopyDispatch = 2 } braidMoeZeroCopy_t;

typedef struct {
  size_t size;          /* sizeof(braidMoeConfig_t) */
  int numExperts;       /* global experts, a multiple of the rank count; expert e lives on rank e / (numExperts / nranks) */
  int topK;             /* choices per token */
  int hidden;           /* elements per token row */
  int maxTokensPerRank; /* tokens a rank passes to one dispatch, at most */
  ncclDataType_t dtype; /* ncclFloat32, ncclFloat16, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2 */
  int tileRows;         /* padding unit of the receive blocks and outputs (0: 1) */
  float capacityFactor; /* 0: worst-case capacity (no overflow); f > 0: f times the mean load per (rank, expert) */
  braidMoeLayout_t layout;
  int blocks;    /* agents per rank that put rows: host threads (0: 1, at most 64), CUDA CTAs (0: 8, at most 16) */
  int timeoutMs; /* bound of dispatch's and combine's waits (0: BRAID_TIMEOUT); create's and
                  * destroy's collective steps are bounded by BRAID_TIMEOUT */
  /* braidMoeZeroCopy_t flags: the window also holds a combine buffer
   * (braidMoeGetCombineBuffer, maxOutputRows rows) and/or a dispatch buffer
   * (braidMoeGetDispatchBuffer, maxTokensPerRank rows): CUDA device memory;
   * on the host, pages taken only once written.  A client built before this
   * field passes the shorter size, and gets 0. */
  int zeroCopy;
} braidMoeConfig_t;

#define BRAID_MOE_CONFIG_INITIALIZER \
  { sizeof(braidMoeConfig_t), 0, 0, 0, 0, ncclBfloat16, 0, 0.0f, braidMoeExpertMajor, 0, 0, 0 }

typedef struct {
  uint64_t dispatches, combines;
  uint64_t rowsRouted;         /* (token, k) pairs with an expert, both calls' senders */
  uint64_t rowsDropped;        /* of those, past capacity: not sent, left out of combine */
  uint64_t payloadBytesRemote; /* row bytes put into other ranks' windows (dispatch and combine) */
  uint64_t signalBytesRemote;  /* signal-word bytes put into other ranks' windows */
  uint64_t bytesLocal;         /* row and signal bytes a rank put into its own window */
  uint64_t signalsRemote, signalsLocal;
  uint64_t fences;             /* ordering points: one per destination per call */
} braidMoeStats_t;

/* Collective.  Fails on every rank alike when the ranks' configs differ. */
ncclResult_t braidMoeCreate(ncclComm_t comm, const braidMoeConfig_t* config, braidMoe_t* moe);

/* The rows a dispatch output (and combine input) may need (every block full,
 * padding included), and the rows per (source, local expert) block. */
ncclResult_t braidMoeGetInfo(braidMoe_t moe, size_t* maxOutputRows, int* capacity);

/* tokens[numTokens][hidden], topkIdx[numTokens][topK] (global experts, -1:
 * none; a token names an expert at most once: the host backend refuses a
 * repeated one with ncclInvalidArgument, as other bad indices).  Writes
 * recvTokens (layout of the config, at most maxOutputRows rows),
 * recvCounts[nranks][numExperts / nranks] (rows each source sent to each
 * local expert) and, if not NULL, *droppedRows (this rank's rows past
 * capacity). */
ncclResult_t braidMoeDispatch(braidMoe_t moe, const void* tokens, const int32_t* topkIdx, int numTokens,
                              void* recvTokens, int32_t* recvCounts, int64_t* droppedRows, cudaStream_t stream);

/* expertOut: the experts' results in recvTokens' places; topkWeights
 * [numTokens][topK] of the last dispatch.  outTokens[numTokens][hidden] =
 * sum over k of weight * result (accumulated in float), dropped and
 * unrouted choices left out. */
ncclResult_t braidMoeCombine(braidMoe_t moe, const void* expertOut, const float* topkWeights, void* outTokens,
                             cudaStream_t stream);

/* Zero-copy dispatch (config.zeroCopy has braidMoeZeroCopyDispatch; else
 * ncclInvalidUsage).  *tokens: a buffer of maxTokensPerRank rows in the
 * handle's window.  Write this rank's tokens there and pass it to
 * braidMoeDispatch as tokens: the experts' owners that map this rank's
 * window (LSA peers on CUDA) then copy the rows they need from it straight
 * into their outputs, and only the owners reached over RMA get them put.
 * The buffer is the handle's from braidMoeDispatch until the next
 * braidMoeCombine completes: write it only between a combine (or create)
 * and the next dispatch. */
ncclResult_t braidMoeGetDispatchBuffer(braidMoe_t moe, void** tokens);

/* Zero-copy combine (config.zeroCopy has braidMoeZeroCopyCombine; else
 * ncclInvalidUsage).  *expertOut: a buffer of maxOutputRows rows in the
 * handle's window (device memory on CUDA), in the dispatch output's layout.
 * Write the experts' results there (or dispatch straight into it, for
 * experts that work in place) and pass it to braidMoeCombine as expertOut:
 * the sources that map this rank's window (LSA peers on CUDA) then read
 * their results from it, and only the sources reached over RMA get them
 * put.  The buffer is the handle's from braidMoeCombine until the next
 * braidMoeDispatch completes: write it only between a dispatch and its
 * combine.  That dispatch may itself be the writer (recvTokens = this
 * buffer): it writes its output only once every source's last reads are
 * done. */
ncclResult_t braidMoeGetCombineBuffer(braidMoe_t moe, void** expertOut);

/* CUDA: the counts of the kernels that completed (synchronize the stream
 * first for a call's). */
ncclResult_t braidMoeGetStats(braidMoe_t moe, braidMoeStats_t* stats);
/* *asyncError: what a call that already returned hit since (CUDA: its
 * kernels), with its message for ncclGetLastError; ncclSuccess if nothing. */
ncclResult_t braidMoeGetAsyncError(braidMoe_t moe, ncclResult_t* asyncError);

/* Collective.  On CUDA it first waits for the handle's last launched call;
 * replays of a CUDA graph that holds its calls are the caller's to
 * synchronize before. */
ncclResult_t braidMoeDestroy(braidMoe_t moe);

#ifdef __cplusplus
}
#endif

#endif /* BRAID_MOE_H_ */
