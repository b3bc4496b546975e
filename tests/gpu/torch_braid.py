"""PyTorch on braid: run under torchrun with braid's libnccl.so.2 preloaded.

    LD_PRELOAD=build/libnccl.so.2 torchrun --nproc-per-node 2 tests/gpu/torch_braid.py

Every rank uses the same GPU (cuda:0): NCCL refuses that, braid allows it.
Checks exact results of all_reduce (sum, avg, max), all_gather_into_tensor,
reduce_scatter_tensor, broadcast, all_to_all_single with uneven splits,
send/recv, an all_reduce captured in a CUDA graph and replayed, and DDP
training steps whose parameters must equal, bit for bit, a gloo DDP run of
the same model and data (values are small dyadic numbers, so every sum is
exact in any order).  Exits non-zero on the first mismatch.
"""
import ctypes
import os
import sys

import torch
import torch.distributed as dist


def check(name, ok):
    rank = dist.get_rank()
    if not ok:
        print(f"rank {rank}: FAILED {name}", flush=True)
        sys.exit(1)
    if rank == 0:
        print(f"ok: {name}", flush=True)


class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p),
                ("saddr", ctypes.c_void_p)]


def nccl_library():
    """The file that ncclAllReduce resolves to in this process, and its version code."""
    lib = ctypes.CDLL(None)
    version = ctypes.c_int()
    lib.ncclGetVersion(ctypes.byref(version))
    info = DlInfo()
    ctypes.CDLL("libc.so.6").dladdr(ctypes.cast(lib.ncclAllReduce, ctypes.c_void_p), ctypes.byref(info))
    return os.path.realpath(info.fname.decode()), version.value


def collectives(world, rank, dev):
    n = 1000 + 7 * rank  # uneven sizes only where the API allows
    x = torch.arange(1000, dtype=torch.float32, device=dev) + rank
    dist.all_reduce(x)
    want = torch.arange(1000, dtype=torch.float32, device=dev) * world + sum(range(world))
    check("all_reduce sum float32", torch.equal(x, want))

    x = torch.full((4096,), float(rank + 1), dtype=torch.bfloat16, device=dev)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    check("all_reduce max bfloat16", torch.equal(x, torch.full_like(x, float(world))))

    x = torch.full((333,), 2.0 * (rank + 1), dtype=torch.float16, device=dev)
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    check("all_reduce avg float16", torch.equal(x, torch.full_like(x, float(world + 1))))

    # PreMulSum (ncclRedOpCreatePreMulSum), where this PyTorch exposes it.
    make_premul = getattr(dist.distributed_c10d, "_make_nccl_premul_sum", None)
    if make_premul is not None:
        x = torch.full((1000,), float(rank + 1), dtype=torch.float32, device=dev)
        dist.all_reduce(x, op=make_premul(0.5))
        check("all_reduce premul_sum(0.5) float32", torch.equal(x, torch.full_like(x, world * (world + 1) / 4)))

    x = torch.arange(513, dtype=torch.int64, device=dev) * (rank + 1)
    out = torch.empty(513 * world, dtype=torch.int64, device=dev)
    dist.all_gather_into_tensor(out, x)
    want = torch.cat([torch.arange(513, dtype=torch.int64, device=dev) * (r + 1) for r in range(world)])
    check("all_gather_into_tensor int64", torch.equal(out, want))

    x = torch.arange(300 * world, dtype=torch.float32, device=dev) + rank
    out = torch.empty(300, dtype=torch.float32, device=dev)
    dist.reduce_scatter_tensor(out, x)
    want = (torch.arange(300, dtype=torch.float32, device=dev) + 300 * rank) * world + sum(range(world))
    check("reduce_scatter_tensor float32", torch.equal(out, want))

    root = world - 1
    x = torch.arange(777, dtype=torch.int32, device=dev) if rank == root else torch.zeros(777, dtype=torch.int32, device=dev)
    dist.broadcast(x, src=root)
    check("broadcast int32 from last rank", torch.equal(x, torch.arange(777, dtype=torch.int32, device=dev)))

    # all_to_all_single, uneven: rank r sends (r + p + 1) elements to rank p.
    in_splits = [rank + p + 1 for p in range(world)]
    out_splits = [p + rank + 1 for p in range(world)]
    send = torch.cat([torch.full((in_splits[p],), float(100 * rank + p), device=dev) for p in range(world)])
    recv = torch.empty(sum(out_splits), device=dev)
    dist.all_to_all_single(recv, send, out_splits, in_splits)
    want = torch.cat([torch.full((out_splits[p],), float(100 * p + rank), device=dev) for p in range(world)])
    check("all_to_all_single uneven splits", torch.equal(recv, want))

    # send/recv around a ring
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    out = torch.full((n,), float(rank), device=dev)
    inp = torch.empty(1000 + 7 * prv, device=dev)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, out, nxt), dist.P2POp(dist.irecv, inp, prv)])
    for r in reqs:
        r.wait()
    check("batch_isend_irecv ring", torch.equal(inp, torch.full_like(inp, float(prv))))


def graph_capture(world, rank, dev):
    # 256 KB runs a schedule; 4 KB the LL protocol, whose call counter lives
    # on the device so that each replay is a new call.
    for n in (1 << 16, 1 << 10):
        y = torch.full((n,), float(rank + 1), device=dev)
        dist.all_reduce(y)  # outside capture first: braid builds the plan here
        torch.cuda.synchronize()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            with torch.cuda.graph(graph, stream=stream):
                dist.all_reduce(y)
        torch.cuda.synchronize()
        total = float(world * (world + 1) // 2)
        for replay in range(3):
            y.fill_(float(rank + 1))
            torch.cuda.synchronize()
            graph.replay()
            torch.cuda.synchronize()
            check(f"CUDA graph all_reduce of {4 * n} B, replay {replay}", torch.equal(y, torch.full_like(y, total)))
        # A larger call outside the graph grows braid's buffers (more slices,
        # lane counters, scratch): the graph must still run on what it captured,
        # which braid keeps rather than frees (src/exec/cuda/stream_buffers.h).
        big = torch.full((1 << 24,), float(rank + 1), device=dev)
        dist.all_reduce(big)
        torch.cuda.synchronize()
        check("all_reduce of 64 MB between replays", torch.equal(big, torch.full_like(big, total)))
        del big
        y.fill_(float(rank + 1))
        torch.cuda.synchronize()
        graph.replay()
        torch.cuda.synchronize()
        check(f"CUDA graph all_reduce of {4 * n} B after a larger call", torch.equal(y, torch.full_like(y, total)))


def ddp_matches_gloo(world, rank, dev):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gloo = dist.new_group(backend="gloo")

    def model():
        g = torch.Generator().manual_seed(1234)
        m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        with torch.no_grad():
            for p in m.parameters():  # small dyadic values: all arithmetic below is exact
                p.copy_(torch.randint(-4, 5, p.shape, generator=g).float() / 8)
        return m

    gpu = torch.nn.parallel.DistributedDataParallel(model().to(dev), device_ids=[0] if dev.type == "cuda" else None)
    cpu = torch.nn.parallel.DistributedDataParallel(model(), process_group=gloo)
    opt_gpu = torch.optim.SGD(gpu.parameters(), lr=1.0 / 64)
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=1.0 / 64)
    g = torch.Generator().manual_seed(99 + rank)
    for step in range(3):
        x = torch.randint(-2, 3, (8, 16), generator=g).float()
        c = torch.randint(-2, 3, (8, 4), generator=g).float()
        for net, opt, d in ((gpu, opt_gpu, dev), (cpu, opt_cpu, torch.device("cpu"))):
            opt.zero_grad()
            (net(x.to(d)) * c.to(d)).sum().backward()
            opt.step()
    same = all(torch.equal(a.detach().cpu(), b.detach()) for a, b in zip(gpu.parameters(), cpu.parameters()))
    check("DDP (braid) parameters equal DDP (gloo) after 3 steps", same)


def main():
    dist.init_process_group("nccl")
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    path, version = nccl_library()
    if rank == 0:
        print(f"world {world}, ncclAllReduce from {path} (version code {version})", flush=True)
    expected = os.environ.get("BRAID_EXPECT_LIB")
    if expected:
        check(f"NCCL calls go to {expected}", path == os.path.realpath(expected))
    collectives(world, rank, dev)
    graph_capture(world, rank, dev)
    ddp_matches_gloo(world, rank, dev)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("torch_braid: all checks passed", flush=True)


if __name__ == "__main__":
    main()
