/* braid's AlltoAllv whose split sizes live in memory the call reads when it
 * runs (issue 40): PyTorch's all_to_all_single with uneven splits, without
 * the count exchange and the device-to-host copy of the splits that make a
 * CPU wait for the device.  The call reads each rank's send counts itself,
 * sends only those elements, and writes the receive counts next to the
 * packed output, so a kernel can compute the counts and another consume the
 * output with nothing in between on the CPU.
 *
 * One handle per communicator, datatype and capacity.  The output holds at
 * most nranks x maxCountPerPeer elements: a rank may send any peer up to
 * maxCountPerPeer elements per call.  Only the counted elements travel, plus
 * one 8-byte word per (sender, receiver) pair and one acknowledgement back.
 *
 * On the host backend (host buffers), on one host or several: ranks store
 * straight into the windows they map and reach the others through one-sided
 * RMA (src/moe/window_routes.h); where ranks span hosts, create splits a
 * communicator of its own off comm.  Every call completes before it
 * returns; the stream is accepted and not used.  braidAlltoAllv is refused
 * (ncclInvalidUsage) inside a group (ncclGroupStart/End), on every route:
 * a group would defer its RMA past the caller's buffers.
 *
 * On a CUDA communicator (device buffers, counts in device memory): every
 * rank's window must be within reach of LSA pointers (NVLink peers, or
 * ranks sharing a GPU).  A call launches one kernel on the stream and
 * returns; the kernel reads sendCounts and writes recvCounts, so the call
 * can be captured in a CUDA graph.  Calls of one handle must be ordered on
 * the device.  What a kernel hits (a bad count, a timeout) is reported by
 * the handle's next call and braidAlltoAllvGetAsyncError.
 *
 * Create and destroy are collective; every rank calls braidAlltoAllv the
 * same number of times.  Errors are ncclResult_t codes with a message for
 * ncclGetLastError; ncclTimeout when a peer did not answer within the
 * timeout (late, or gone).  As MoE handles (braid/moe.h): a handle's calls
 * run one at a time, a call holds the communicator while it runs, an abort
 * or revoke ends a waiting call, destroy is refused inside a group, and a
 * non-blocking communicator is fine.
 */
#ifndef BRAID_ALLTOALLV_H_
#define BRAID_ALLTOALLV_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct braidAlltoAllvHandle* braidAlltoAllv_t;

/* Collective.  maxCountPerPeer: elements one rank may send one peer in a
 * call, at least 1 and below 2^31; timeoutMs bounds braidAlltoAllv's waits
 * (0: BRAID_TIMEOUT); create's and destroy's collective steps are bounded
 * by BRAID_TIMEOUT.  Fails on every rank alike when the ranks' arguments
 * differ. */
ncclResult_t braidAlltoAllvCreate(ncclComm_t comm, ncclDataType_t datatype, size_t maxCountPerPeer, int timeoutMs,
                                  braidAlltoAllv_t* handle);

/* sendCounts[nranks]: the elements for each rank, back to back in sendbuff in
 * rank order.  Writes recvCounts[nranks] (what each rank sent this one) and
 * recvbuff: each rank's elements back to back in rank order.  A count that
 * is negative or over maxCountPerPeer (or a NULL argument, on the host
 * backend) fails the call on every rank at once: that rank gets
 * ncclInvalidArgument, the others ncclRemoteError.  On the host backend the
 * handle then takes the next call; on CUDA, and after a timeout or a peer
 * gone, it refuses further calls: destroy it. */
ncclResult_t braidAlltoAllv(braidAlltoAllv_t handle, const void* sendbuff, const int64_t* sendCounts, void* recvbuff,
                            int64_t* recvCounts, cudaStream_t stream);

/* *asyncError: what a call that already returned hit since (CUDA: its
 * kernel), with its message for ncclGetLastError; ncclSuccess if nothing. */
ncclResult_t braidAlltoAllvGetAsyncError(braidAlltoAllv_t handle, ncclResult_t* asyncError);

/* Collective.  On CUDA it first waits for the handle's last launched call;
 * replays of a CUDA graph that holds its calls are the caller's to
 * synchronize before. */
ncclResult_t braidAlltoAllvDestroy(braidAlltoAllv_t handle);

#ifdef __cplusplus
}
#endif

#endif /* BRAID_ALLTOALLV_H_ */
