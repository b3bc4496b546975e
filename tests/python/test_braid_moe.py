"""python/braid_moe.py end to end on the host backend: ranks as forked
processes, float32 tokens in plain buffers (array, bytearray), random
routings (experts with no tokens, unrouted choices), identity experts, one
layer zero-copy (tokens in the dispatch buffer, dispatched into the combine
buffer, combined from it);
with --torch, one more layer of PyTorch CPU tensors, zero-copy through
the window tensors combine_buffer()/dispatch_buffer() give (DLPack);
then AlltoAllv with counts in memory, counts changing call to call.
Checks every received row and count against the routings every rank can
recompute, every combined token exactly, the call counters, and bad input
refused with braid's message.  Exit status: the number of failed ranks.

    BRAID_LIB=build/libnccl.so.2 PYTHONPATH=python python3 tests/python/test_braid_moe.py [NRANKS] [--torch]
"""
import array
import ctypes
import os
import random
import sys

import braid_moe

TOKENS, HIDDEN, TOP_K, PER_RANK = 12, 8, 2, 3  # PER_RANK: local experts


def routing(rank, n):
    """Rank `rank`'s top-k choices: distinct experts or -1, the same on every rank that recomputes it."""
    rng = random.Random(rank * 7919 + n)
    choices = []
    for _ in range(TOKENS):
        picked = rng.sample(range(n * PER_RANK), TOP_K)
        choices += [e if rng.random() > 0.2 else -1 for e in picked]
    return choices


def token_value(rank, t, j):
    return float(rank * 1000 + t * 10 + j)


def a2a_count(src, dst, call):
    return (src * 5 + dst * 3 + call) % 7  # 0..6, the capacity 6 included


def a2a_errors(rank, n, comm, errors):
    """AlltoAllv with counts in memory: int64 elements, counts changing call to call, every element checked."""
    a2a = braid_moe.AlltoAllv(comm, max_count_per_peer=6, dtype="int64")
    try:
        a2a(array.array("q"), array.array("q", [0] * (n - 1)))
        errors.append("alltoallv: a short send_counts was taken")
    except braid_moe.Error as e:
        if "send_counts" not in str(e):
            errors.append(f"alltoallv: short send_counts: {e}")
    for call in range(4):
        counts = [a2a_count(rank, d, call) for d in range(n)]
        send = array.array("q", [rank * 10000 + d * 100 + call * 10 + i for d in range(n) for i in range(counts[d])])
        recv, recv_counts = a2a(send, array.array("q", counts))
        got_counts = list(array.array("q", bytes(recv_counts)))
        want_counts = [a2a_count(s, rank, call) for s in range(n)]
        want = [s * 10000 + rank * 100 + call * 10 + i for s in range(n) for i in range(want_counts[s])]
        if got_counts != want_counts or list(array.array("q", bytes(recv)))[:len(want)] != want:
            errors.append(f"alltoallv call {call}: counts {got_counts} (wanted {want_counts}) or elements wrong")
    a2a.check()  # nothing went wrong since: no error
    a2a.close()


def wanted_rows(rank, n):
    """Each source's rows routed to this rank's experts, and the counts per (source, local expert)."""
    want_rows = []
    want_counts = [0] * (n * PER_RANK)
    for src in range(n):
        choices = routing(src, n)
        for t in range(TOKENS):
            for e in choices[t * TOP_K:(t + 1) * TOP_K]:
                if e >= 0 and e // PER_RANK == rank:
                    want_counts[src * PER_RANK + e % PER_RANK] += 1
                    want_rows.append(tuple(token_value(src, t, j) for j in range(HIDDEN)))
    return want_rows, want_counts


def torch_layer_errors(rank, n, moe, errors):
    """One zero-copy layer of torch CPU tensors: the window's tensors (the same ones each time), identity experts."""
    import torch
    tokens = torch.tensor([[token_value(rank, t, j) for j in range(HIDDEN)] for t in range(TOKENS)])
    topk = torch.tensor(routing(rank, n), dtype=torch.int32).view(TOKENS, TOP_K)
    buffer, token_buffer = moe.combine_buffer(like=tokens), moe.dispatch_buffer(like=tokens)
    if buffer is not moe.combine_buffer(like=tokens) or tuple(token_buffer.shape) != (TOKENS, HIDDEN):
        errors.append(f"torch: the window tensors are new each call or shaped {tuple(token_buffer.shape)}")
    for tensor, view in ((buffer, moe.combine_buffer()), (token_buffer, moe.dispatch_buffer())):
        if tensor.data_ptr() != ctypes.addressof(ctypes.c_char.from_buffer(view)):
            errors.append("torch: a window tensor is not over the window's memory")
    try:
        moe.combine_buffer(like=torch.zeros(1, dtype=torch.float64))
        errors.append("torch: a float64 like was taken for a float32 handle")
    except braid_moe.Error as e:
        if "like" not in str(e):
            errors.append(f"torch: float64 like: {e}")
    token_buffer.copy_(tokens)
    recv, counts, dropped = moe.dispatch(token_buffer, topk, recv_tokens=buffer)
    want_rows, want_counts = wanted_rows(rank, n)
    if recv is not buffer or counts.flatten().tolist() != want_counts or dropped != 0:
        errors.append(f"torch: recv_tokens {'is' if recv is buffer else 'is not'} the buffer passed; recv_counts "
                      f"{counts.flatten().tolist()}, wanted {want_counts}; {dropped} dropped")
    if sorted(tuple(r) for r in buffer[:sum(want_counts)].tolist()) != sorted(want_rows):
        errors.append("torch: the received rows are not the routed ones")
    weights = torch.tensor([0.5, 0.25] * TOKENS).view(TOKENS, TOP_K)
    out = moe.combine(buffer, weights)  # identity experts, results read in place
    mask = (topk >= 0).float()
    want = tokens * (weights * mask).sum(dim=1, keepdim=True)  # two terms of exact binary fractions: exact
    if not isinstance(out, torch.Tensor) or not torch.equal(out, want):
        errors.append("torch: the combined tokens are not the weighted sums")


def run(rank, n, uid, use_torch):
    comm = braid_moe.Comm(n, uid, rank)
    moe = braid_moe.Moe(comm, num_experts=n * PER_RANK, top_k=TOP_K, hidden=HIDDEN, max_tokens_per_rank=TOKENS,
                        dtype="float32", zero_copy_combine=True, zero_copy_dispatch=True)
    errors = []
    try:
        braid_moe.Moe(comm, num_experts=n * PER_RANK, top_k=TOP_K, hidden=HIDDEN, max_tokens_per_rank=TOKENS,
                      dtype="int8")
        errors.append("dtype int8 was taken")
    except braid_moe.Error:
        pass
    tokens = array.array("f", [token_value(rank, t, j) for t in range(TOKENS) for j in range(HIDDEN)])
    topk = array.array("i", routing(rank, n))
    try:
        moe.dispatch(tokens, topk, recv_tokens=bytearray(4))
        errors.append("a 4-byte recv_tokens was taken")
    except braid_moe.Error as e:
        if "recv_tokens" not in str(e):
            errors.append(f"too small recv_tokens: {e}")
    try:
        moe.combine(bytearray(4), array.array("f", [0.5, 0.25] * TOKENS))
        errors.append("a 4-byte expert_out was taken")
    except braid_moe.Error as e:
        if "expert_out" not in str(e):
            errors.append(f"too small expert_out: {e}")
    buffer, token_buffer = moe.combine_buffer(), moe.dispatch_buffer()
    token_buffer[:len(tokens) * 4] = bytes(tokens)
    for layer in range(3):  # back to back, no reset; layer 1 zero-copy (tokens and results in the window)
        recv, counts, dropped = moe.dispatch(token_buffer if layer == 1 else tokens, topk,
                                             recv_tokens=buffer if layer == 1 else None)
        got_counts = array.array("i", bytes(counts))
        want_rows, want_counts = wanted_rows(rank, n)
        if list(got_counts) != want_counts:
            errors.append(f"layer {layer}: recv_counts {list(got_counts)}, wanted {want_counts}")
        rows = array.array("f", bytes(recv))
        got_rows = [tuple(rows[i * HIDDEN:(i + 1) * HIDDEN]) for i in range(sum(want_counts))]
        if sorted(got_rows) != sorted(want_rows):
            errors.append(f"layer {layer}: the received rows are not the routed ones")
        if dropped != 0:
            errors.append(f"layer {layer}: {dropped} rows dropped at worst-case capacity")
        weights = array.array("f", [0.5, 0.25] * TOKENS)
        out = array.array("f", bytes(moe.combine(recv, weights)))  # identity experts
        for t in range(TOKENS):
            ks = topk[t * TOP_K:(t + 1) * TOP_K]
            for j in range(HIDDEN):
                want = sum(w * token_value(rank, t, j) for w, e in zip((0.5, 0.25), ks) if e >= 0)
                if out[t * HIDDEN + j] != want:
                    errors.append(f"layer {layer}: token {t} element {j} is {out[t * HIDDEN + j]}, wanted {want}")
                    break
    # Weights that do not match the last dispatch (another type, fewer tokens) are refused before the call:
    # the C call reads the dispatch's count of float32 weights, and the output was sized from these.
    recv, counts, dropped = moe.dispatch(tokens, topk)
    for bad in (array.array("f", [0.5, 0.25] * (TOKENS // 2)), array.array("d", [0.5, 0.25] * TOKENS)):
        try:
            moe.combine(recv, bad)
            errors.append(f"combine took {len(bad)} weights of type {bad.typecode}")
        except braid_moe.Error as e:
            if "topk_weights must be float32" not in str(e):
                errors.append(f"mismatched topk_weights: {e}")
    moe.combine(recv, array.array("f", [0.5, 0.25] * TOKENS))  # the handle takes the right ones after
    if use_torch:
        torch_layer_errors(rank, n, moe, errors)
    a2a_errors(rank, n, comm, errors)
    moe.check()
    stats = moe.stats()
    layers = 5 if use_torch else 4
    if stats["dispatches"] != layers or stats["combines"] != layers:
        errors.append(f"stats count {stats['dispatches']} dispatches, {stats['combines']} combines")
    moe.close()
    comm.destroy()
    for e in errors:
        print(f"rank {rank}: {e}", file=sys.stderr)
    return 1 if errors else 0


def main():
    use_torch = "--torch" in sys.argv[1:]
    numbers = [a for a in sys.argv[1:] if a != "--torch"]
    n = int(numbers[0]) if numbers else 4
    uid = braid_moe.get_unique_id()
    pids = []
    for rank in range(n):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = run(rank, n, uid, use_torch)
            except Exception as e:  # a rank's failure is its exit status
                print(f"rank {rank}: {type(e).__name__}: {e}", file=sys.stderr)
            os._exit(code)
        pids.append(pid)
    failed = sum(1 for pid in pids if os.waitpid(pid, 0)[1] != 0)
    print(f"braid_moe.py: {n} ranks, dispatch and combine x{4 if use_torch else 3}, alltoallv x4: "
          f"{'all exact' if not failed else f'{failed} failed'}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
