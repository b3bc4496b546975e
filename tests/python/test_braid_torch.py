"""python/braid_torch.py, the torch.distributed backend "braid", end to end
on CPU tensors: ranks as forked processes meeting in a FileStore.

  calls   every torch.distributed call the backend serves, each datatype
          NCCL has and each reduction, checked exactly against what every
          rank can recompute; the object collectives; async calls in
          flight together; crossed sends in batch_isend_irecv (one NCCL
          group); uneven all_to_all_single; a subgroup;
          DistributedDataParallel against the same steps on the whole
          batch in one process; bad input refused at the call with the
          reason.  --hosts puts each rank on
          its own emulated host (BRAID_HOSTID: sockets between them).
  faults  a rank killed mid-job fails its peers' next call well within
          BRAID_TIMEOUT; a Work.wait(timeout) that passes aborts the
          communicator, after which a call fails at once, and the peer that
          came late fails too instead of hanging.

    BRAID_LIB=build/libnccl.so.2 BRAID_BACKEND=host PYTHONPATH=python \\
        python3 tests/python/test_braid_torch.py calls|faults [NRANKS] [--hosts]

Exit status: the number of failed ranks.
"""
import datetime
import os
import signal
import sys
import tempfile
import time
import warnings

import torch
import torch.distributed as dist

import braid_torch

R = dist.ReduceOp


class Checks:
    def __init__(self, rank):
        self.rank, self.errors = rank, []

    def equal(self, what, got, want):
        if not torch.equal(got, want):
            self.errors.append(f"{what}: got {got.tolist()}, want {want.tolist()}")

    def refused(self, what, call, says):
        try:
            call()
            self.errors.append(f"{what}: not refused")
        except RuntimeError as e:
            if says not in str(e):
                self.errors.append(f"{what}: refused with '{e}', not '{says}'")


def value(rank, i, dtype):
    """Rank `rank`'s element i: small integers, exact in every dtype."""
    if dtype == torch.bool:
        return torch.tensor((rank + i) % 3 == 0)
    return torch.tensor((rank * 3 + i) % 5 + 1).to(dtype)


def data(rank, count, dtype):
    return torch.stack([value(rank, i, dtype) for i in range(count)]) if count else torch.empty(0, dtype=dtype)


def reduced(n, count, dtype, op):
    rows = torch.stack([data(r, count, dtype) for r in range(n)])
    if dtype == torch.bool:
        return rows.any(0) if op in (R.SUM, R.MAX) else rows.all(0)
    if op == R.SUM:
        return rows.sum(0, dtype=dtype)
    if op == R.PRODUCT:  # wide (torch has no half product on the CPU), exact in `dtype`
        return rows.to(torch.float64 if dtype.is_floating_point else torch.int64).prod(0).to(dtype)
    if op == R.MAX:
        return rows.max(0).values
    if op == R.MIN:
        return rows.min(0).values
    return (rows.to(torch.float64).sum(0) / n).to(dtype) if dtype.is_floating_point else rows.sum(0) // n


DTYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64, torch.bool]


def reductions(c, rank, n):
    for dtype in DTYPES:
        for op in (R.SUM, R.PRODUCT, R.MAX, R.MIN, R.AVG):
            if dtype == torch.bool and op == R.AVG:
                continue
            if op == R.PRODUCT and dtype in (torch.int8, torch.uint8, torch.float16, torch.bfloat16) and n > 3:
                continue  # 5^n leaves the dtype's exact range
            if op == R.AVG and not dtype.is_floating_point:
                continue  # NCCL's integer average rounds as C does; torch's // floors: not compared
            t = data(rank, 7, dtype)
            dist.all_reduce(t, op=op)
            c.equal(f"all_reduce {dtype} {op}", t, reduced(n, 7, dtype, op))
    z = torch.complex(data(rank, 4, torch.float32), -data(rank, 4, torch.float32))
    dist.all_reduce(z)
    want = reduced(n, 4, torch.float32, R.SUM)
    c.equal("all_reduce complex64", z, torch.complex(want, -want))
    t = data(rank, 6, torch.int32)
    dist.reduce(t, dst=n - 1, op=R.MAX)
    if rank == n - 1:
        c.equal("reduce", t, reduced(n, 6, torch.int32, R.MAX))
    coalesced = [data(rank, 3, torch.float32), data(rank + 1, 5, torch.float32)]
    dist.all_reduce_coalesced(coalesced)
    c.equal("all_reduce_coalesced 0", coalesced[0], reduced(n, 3, torch.float32, R.SUM))
    c.equal("all_reduce_coalesced 1", coalesced[1], sum(data(r + 1, 5, torch.float32) for r in range(n)))


def movers(c, rank, n):
    for dtype in (torch.uint8, torch.int64, torch.bfloat16, torch.float64, torch.bool):
        t = data(rank, 5, dtype)
        dist.broadcast(t, src=1 % n)
        c.equal(f"broadcast {dtype}", t, data(1 % n, 5, dtype))
        outs = [torch.empty(5, dtype=dtype) for _ in range(n)]
        dist.all_gather(outs, data(rank, 5, dtype))
        for r in range(n):
            c.equal(f"all_gather {dtype} from {r}", outs[r], data(r, 5, dtype))
    flat = torch.empty(n * 4, dtype=torch.float32)
    dist.all_gather_into_tensor(flat, data(rank, 4, torch.float32))  # the group's _allgather_base
    c.equal("all_gather_into_tensor", flat, torch.cat([data(r, 4, torch.float32) for r in range(n)]))
    out = torch.empty(3, dtype=torch.int32)
    dist.reduce_scatter(out, [data(rank * n + r, 3, torch.int32) for r in range(n)])
    c.equal("reduce_scatter", out, sum(data(s * n + rank, 3, torch.int32) for s in range(n)).to(torch.int32))
    # Uneven sizes, rank r's share r elements (0 included): ProcessGroupNCCL's allgather_v and reduce_scatter_v.
    outs = [torch.empty(r, dtype=torch.int64) for r in range(n)]
    dist.all_gather(outs, data(rank, rank, torch.int64))
    for r in range(n):
        c.equal(f"all_gather uneven from {r}", outs[r], data(r, r, torch.int64))
    out = torch.empty(rank, dtype=torch.float32)
    inputs = [data(rank * n + r, r, torch.float32) for r in range(n)]
    dist.reduce_scatter(out, inputs, op=R.MAX)
    want = torch.stack([data(s * n + rank, rank, torch.float32) for s in range(n)]).max(0).values
    c.equal("reduce_scatter uneven", out, want)
    for r in range(n):  # a reduce to another rank must not write the input it reads
        c.equal(f"reduce_scatter uneven input {r} after", inputs[r], data(rank * n + r, r, torch.float32))
    out = torch.empty(2, dtype=torch.float64)
    dist.reduce_scatter_tensor(out, data(rank, 2 * n, torch.float64), op=R.MIN)  # the group's _reduce_scatter_base
    c.equal("reduce_scatter_tensor", out, reduced(n, 2 * n, torch.float64, R.MIN)[2 * rank:2 * rank + 2])
    root = n - 1
    gathered = [torch.empty(3, dtype=torch.int64) for _ in range(n)] if rank == root else None
    dist.gather(data(rank, 3, torch.int64), gathered, dst=root)
    if rank == root:
        for r in range(n):
            c.equal(f"gather from {r}", gathered[r], data(r, 3, torch.int64))
    out = torch.empty(3, dtype=torch.float32)
    dist.scatter(out, [data(10 + r, 3, torch.float32) for r in range(n)] if rank == 0 else None, src=0)
    c.equal("scatter", out, data(10 + rank, 3, torch.float32))
    x = torch.cat([data(rank * n + r, 2, torch.float32) for r in range(n)])
    y = torch.empty_like(x)
    dist.all_to_all_single(y, x)
    c.equal("all_to_all_single", y, torch.cat([data(s * n + rank, 2, torch.float32) for s in range(n)]))
    # Uneven splits: rank s sends (s + d) % 3 rows of 2 to rank d; 0 rows included.
    rows = lambda s, d: (s + d) % 3  # noqa: E731
    x = torch.cat([torch.full((rows(rank, d), 2), float(rank * 10 + d)) for d in range(n)])
    y = torch.empty(sum(rows(s, rank) for s in range(n)), 2)
    dist.all_to_all_single(y, x, [rows(s, rank) for s in range(n)], [rows(rank, d) for d in range(n)])
    c.equal("all_to_all_single uneven", y, torch.cat([torch.full((rows(s, rank), 2), float(s * 10 + rank))
                                                      for s in range(n)]))
    outs = [torch.empty(r + 1, dtype=torch.int32) for r in range(n)]
    dist.all_to_all(outs, [torch.full((rank + 1,), rank * 100 + d, dtype=torch.int32) for d in range(n)])
    for s in range(n):
        c.equal(f"all_to_all from {s}", outs[s], torch.full((s + 1,), s * 100 + rank, dtype=torch.int32))


def point_to_point(c, rank, n):
    big = 1 << 20  # 4 MB each way: crossed sends that are not one NCCL group would stall
    send = torch.full((big,), float(rank))
    recv_next, recv_prev = torch.empty(big), torch.empty(big)
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    ops = [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.isend, send, prv),
           dist.P2POp(dist.irecv, recv_prev, prv), dist.P2POp(dist.irecv, recv_next, nxt)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    c.equal("batch_isend_irecv from prev", recv_prev[:4], torch.full((4,), float(prv)))
    c.equal("batch_isend_irecv from next", recv_next[-4:], torch.full((4,), float(nxt)))
    if rank in (0, 1):  # blocking send/recv, in matching order
        t = torch.tensor([rank + 5])
        if rank == 0:
            dist.send(t, 1)
        else:
            dist.recv(t, 0)
            c.equal("send/recv", t, torch.tensor([5]))
    # Async calls in flight together: issue order is run order, each result its own.
    tensors = [data(rank + k, 64, torch.float32) for k in range(6)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    futures = [w.get_future() for w in works]
    for w in works:
        w.wait()
    for k, t in enumerate(tensors):
        want = sum(data(r + k, 64, torch.float32) for r in range(n))
        c.equal(f"async all_reduce {k}", t, want)
        c.equal(f"async all_reduce {k}'s future", futures[k].value()[0], want)
    dist.barrier()


def objects(c, rank, n):
    """The object collectives (pickles in uint8 tensors of varying size over all_gather, broadcast, gather and
    scatter), which scripts use for metadata."""
    got = [None] * n
    dist.all_gather_object(got, {"rank": rank, "name": "r" * (rank + 1)})
    if got != [{"rank": r, "name": "r" * (r + 1)} for r in range(n)]:
        c.errors.append(f"all_gather_object gave {got}")
    sent = [("config", [1, 2, 3]), None] if rank == 0 else [None, None]
    dist.broadcast_object_list(sent, src=0)
    if sent != [("config", [1, 2, 3]), None]:
        c.errors.append(f"broadcast_object_list gave {sent}")
    gathered = [None] * n if rank == n - 1 else None
    dist.gather_object(rank * 10, gathered, dst=n - 1)
    if rank == n - 1 and gathered != [r * 10 for r in range(n)]:
        c.errors.append(f"gather_object gave {gathered}")
    mine = [None]
    dist.scatter_object_list(mine, [f"to {r}" for r in range(n)] if rank == 0 else None, src=0)
    if mine != [f"to {rank}"]:
        c.errors.append(f"scatter_object_list gave {mine}")


def subgroup(c, rank, n):
    members = list(range(0, n, 2))
    group = dist.new_group(members)  # every rank calls it; only members use it
    if rank in members:
        t = torch.tensor([rank + 1])
        dist.all_reduce(t, group=group)
        c.equal("subgroup all_reduce", t, torch.tensor([sum(m + 1 for m in members)]))
        if dist.get_backend(group) != "braid":
            c.errors.append(f"the subgroup's backend is {dist.get_backend(group)}")


def ddp(c, rank, n):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).double()
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).double()
    reference.load_state_dict(model.state_dict())
    if rank == 0:  # rank 0's weights are the ones DDP broadcasts
        with torch.no_grad():
            model[0].weight.add_(0.0)
    else:
        with torch.no_grad():
            model[0].weight.mul_(3.0)  # DDP must replace these with rank 0's
    wrapped = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.0001)  # several buckets
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(3):
        batches = [torch.Generator().manual_seed(step * 100 + r) for r in range(n)]
        inputs = [torch.randn(4, 8, generator=g, dtype=torch.float64) for g in batches]
        opt.zero_grad()
        wrapped(inputs[rank]).pow(2).mean().backward()
        opt.step()
        ref_opt.zero_grad()
        reference(torch.cat(inputs)).pow(2).mean().backward()  # equal batches: the mean of the ranks' means
        ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        if not torch.allclose(p, q, rtol=0, atol=1e-12):
            c.errors.append(f"DDP {name} differs from the whole batch's by {(p - q).abs().max().item()}")


def bad_input(c, rank, n):
    t = torch.ones(4, dtype=torch.int32)
    c.refused("a bitwise reduction", lambda: dist.all_reduce(t, op=R.BAND), "not a reduction NCCL has")
    c.refused("bool AVG", lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool), op=R.AVG), "AVG of bool")
    opts = dist.AllreduceOptions()
    opts.reduceOp = R.MAX  # torch refuses it before the backend: ask the group itself
    c.refused("complex MAX", lambda: dist.distributed_c10d._get_default_group().allreduce(
        [torch.ones(2, dtype=torch.complex64)], opts), "SUM or AVG only")
    c.refused("a strided tensor", lambda: dist.all_reduce(torch.ones(4, 4)[:, 1]), "not contiguous")
    c.refused("uneven splits that do not add up",
              lambda: dist.all_to_all_single(torch.empty(n), torch.empty(n), [2] * n, [1] * n), "do not split")
    c.refused("a receive from any source", lambda: dist.recv(torch.empty(1)), "any source")
    c.refused("a send to itself", lambda: dist.send(torch.empty(1), rank), "not another rank")
    c.refused("a short output list", lambda: dist.all_gather([torch.empty(4, dtype=torch.int32)], t),
              "one list of")
    c.refused("this rank's output not its input's size",
              lambda: dist.all_gather([torch.empty(5, dtype=torch.int32) for _ in range(n)], t), "for this rank")
    mixed = [torch.empty(r + 1, dtype=torch.float64 if r else torch.float32) for r in range(n)]  # torch refuses
    c.refused("uneven inputs of two dtypes", lambda: dist.distributed_c10d._get_default_group().reduce_scatter(
        [torch.empty(rank + 1)], [mixed], dist.ReduceScatterOptions()), "every tensor must be")
    # Nothing was queued by the refusals: the next call pairs up as usual.
    t = torch.tensor([rank])
    dist.all_reduce(t)
    c.equal("the call after the refusals", t, torch.tensor([n * (n - 1) // 2]))


def calls(rank, n):
    warnings.filterwarnings("ignore", message=".*will be deprecated")  # all_reduce_coalesced, still served
    c = Checks(rank)
    for part in (reductions, movers, objects, point_to_point, subgroup, ddp, bad_input):
        part(c, rank, n)
    return c.errors


def fails_within(errors, what, call, seconds, says=""):
    """`call` must raise a RuntimeError saying `says` within `seconds`."""
    start = time.monotonic()
    try:
        call()
        errors.append(f"{what} succeeded")
    except RuntimeError as e:
        took = time.monotonic() - start
        if says not in str(e) or took > seconds:
            errors.append(f"{what} failed after {took:.1f} s saying '{e}' (expected within {seconds} s: '{says}')")


def faults(rank, n):
    """A rank killed mid-job: its peers' next call fails well within BRAID_TIMEOUT (30 s)."""
    errors = []
    t = torch.ones(16)
    dist.all_reduce(t)
    if rank == n - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    fails_within(errors, "an all_reduce with a killed peer", lambda: dist.all_reduce(t), 15)
    return errors


def timeout(rank, n):
    """Rank 1 comes 3 s late; rank 0's wait gives up after 0.5 s and aborts."""
    errors = []
    t = torch.ones(16)
    if rank == 0:
        work = dist.all_reduce(t, async_op=True)
        fails_within(errors, "a wait for a peer 3 s late", lambda: work.wait(timeout=datetime.timedelta(seconds=0.5)),
                     5, "did not complete within 0.5 s")
        fails_within(errors, "a call after the abort", lambda: dist.all_reduce(t), 1, "aborted")
    else:
        time.sleep(3)
        fails_within(errors, "an all_reduce with an aborted peer", lambda: dist.all_reduce(t), 15)
    return errors


def rank_main(mode, rank, n, store_path, hosts):
    if hosts:
        os.environ["BRAID_HOSTID"] = f"torch-host-{rank}"
    os.environ["BRAID_TIMEOUT"] = "30"
    store = dist.FileStore(store_path, n)
    dist.init_process_group(braid_torch.BACKEND, store=store, rank=rank, world_size=n)
    if mode == "faults":
        errors = faults(rank, n) if n > 2 else timeout(rank, n)
    else:
        errors = calls(rank, n)
    if mode != "faults":
        dist.destroy_process_group()
    for e in errors:
        print(f"rank {rank}: {e}", file=sys.stderr)
    return 1 if errors else 0


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    mode = args[0] if args else "calls"
    n = int(args[1]) if len(args) > 1 else 4
    hosts = "--hosts" in sys.argv
    runs = [n] if mode == "calls" else [3, 2]  # faults: a killed rank at 3, a timed-out wait at 2
    failed = 0
    for size in runs:
        with tempfile.TemporaryDirectory() as tmp:
            pids = []
            for rank in range(size):
                pid = os.fork()
                if pid == 0:
                    code = 1
                    try:
                        code = rank_main(mode, rank, size, os.path.join(tmp, "store"), hosts)
                    except Exception as e:  # a rank's failure is its exit status
                        print(f"rank {rank}: {type(e).__name__}: {e}", file=sys.stderr)
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
                pids.append(pid)
            statuses = [os.waitpid(pid, 0)[1] for pid in pids]
            if mode == "faults" and size > 2:
                statuses = statuses[:-1]  # the killed rank
            failed += sum(1 for s in statuses if s != 0)
    print(f"braid_torch {mode}: {runs} ranks{' on emulated hosts' if hosts else ''}: "
          f"{'all passed' if not failed else f'{failed} ranks failed'}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
