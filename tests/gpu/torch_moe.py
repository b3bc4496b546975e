"""braid's MoE dispatch/combine and AlltoAllv from PyTorch on CUDA (python/braid_moe.py), under torchrun:

    LD_PRELOAD=build/libnccl.so.2 PYTHONPATH=python torchrun --nproc-per-node 2 tests/gpu/torch_moe.py

Every rank uses the same GPU (cuda:0).  The ranks meet over gloo (the unique id), then open a braid
communicator on the GPU and run, with CUDA tensors on the current stream:
- MoE layers: dispatch, the experts (each scales its rows), combine (the last layer zero-copy: the
  tokens written into the dispatch buffer, the results into the combine buffer); every combined
  token checked against a reference every rank computes from every rank's inputs (all-gathered
  over gloo);
- the same layer captured in a CUDA graph (torch.cuda.graph) and replayed with new inputs copied into
  the captured tensors, checked each time;
- braidAlltoAllv with send counts in a device tensor, checked element by element.
Values are small integers, so every sum is exact.  Exits non-zero on the first mismatch.
"""
import sys

import torch
import torch.distributed as dist

import braid_moe

EXPERTS_PER_RANK, TOP_K, HIDDEN, TOKENS = 4, 2, 256, 64


def check(name, ok):
    if not ok:
        print(f"rank {dist.get_rank()}: FAILED {name}", flush=True)
        sys.exit(1)
    if dist.get_rank() == 0:
        print(f"ok: {name}", flush=True)


def inputs(rank, layer, experts, dev):
    g = torch.Generator().manual_seed(1000 * layer + rank)
    tokens = torch.randint(-4, 5, (TOKENS, HIDDEN), generator=g).to(torch.bfloat16)
    first = torch.randint(0, experts, (TOKENS, 1), generator=g)
    topk = torch.cat([first, (first + 1 + torch.randint(0, experts - 1, (TOKENS, 1), generator=g)) % experts], 1)
    return tokens.to(dev), topk.to(torch.int32).to(dev)


def scale(experts):  # expert e multiplies its rows by e % 3 + 1
    return (torch.arange(experts) % 3 + 1).to(torch.float32)


def expert_outputs(recv, counts, rank, world, dev):
    """The experts' results in recv's places (expert-major, tile 1): each local expert's rows, all sources."""
    out = torch.zeros_like(recv)
    row = 0
    per_expert = counts.view(world, EXPERTS_PER_RANK).sum(0).tolist()
    for le in range(EXPERTS_PER_RANK):
        e = rank * EXPERTS_PER_RANK + le
        rows = per_expert[le]
        out[row:row + rows] = (recv[row:row + rows].float() * float(e % 3 + 1)).to(recv.dtype)
        row += rows
    return out


def reference(tokens, topk, weights, experts):
    s = scale(experts).to(tokens.device)[topk.long()]  # [tokens][k]
    return (tokens.float().unsqueeze(1) * (weights * s).unsqueeze(2)).sum(1).to(tokens.dtype)


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    uid = [braid_moe.get_unique_id() if rank == 0 else None]
    dist.broadcast_object_list(uid, src=0)
    comm = braid_moe.Comm(world, uid[0], rank)
    experts = world * EXPERTS_PER_RANK
    moe = braid_moe.Moe(comm, num_experts=experts, top_k=TOP_K, hidden=HIDDEN, max_tokens_per_rank=TOKENS,
                        dtype="bfloat16", timeout_ms=30000, zero_copy_combine=True, zero_copy_dispatch=True)
    weights = torch.tensor([[0.5, 0.25]] * TOKENS, dtype=torch.float32, device=dev)

    for layer in range(3):
        tokens, topk = inputs(rank, layer, experts, dev)
        sent = tokens
        if layer == 2:  # zero-copy: the tokens go into the dispatch buffer, where the owners read them
            sent = moe.dispatch_buffer(like=tokens)[:tokens.shape[0]]
            sent.copy_(tokens)
        recv, counts, dropped = moe.dispatch(sent, topk)
        torch.cuda.current_stream().synchronize()
        moe.check()
        check(f"layer {layer}: no row dropped", int(dropped.item()) == 0)
        results = expert_outputs(recv, counts, rank, world, dev)
        if layer == 2:  # zero-copy: the results go into the combine buffer, where the sources read them
            buffer = moe.combine_buffer(like=recv)
            buffer.copy_(results)
            results = buffer
        out = moe.combine(results, weights)
        torch.cuda.current_stream().synchronize()
        moe.check()
        check(f"layer {layer}: combined tokens exact", torch.equal(out, reference(tokens, topk, weights, experts)))

    # One layer captured in a CUDA graph: dispatch, experts (here: the identity), combine.
    tokens, topk = inputs(rank, 100, experts, dev)
    static_tokens, static_topk = tokens.clone(), topk.clone()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            recv, counts, _ = moe.dispatch(static_tokens, static_topk, stream=stream.cuda_stream)
            out = moe.combine(recv, weights, stream=stream.cuda_stream)
    for replay in range(10):
        tokens, topk = inputs(rank, 200 + replay, experts, dev)
        static_tokens.copy_(tokens)
        static_topk.copy_(topk)
        graph.replay()
        torch.cuda.synchronize()
        moe.check()
        want = (tokens.float() * weights.sum(1, keepdim=True)).to(tokens.dtype)
        check(f"graph replay {replay}: combined tokens exact", torch.equal(out, want))
    moe.close()

    a2a = braid_moe.AlltoAllv(comm, max_count_per_peer=1000, dtype="float32", timeout_ms=30000)
    for call in range(5):
        counts = torch.tensor([(rank * 31 + d * 7 + call * 13) % 1001 for d in range(world)], dtype=torch.int64)
        send = torch.cat([torch.arange(int(c), dtype=torch.float32) + 1000 * rank + 100000 * call for c in counts])
        recv, recv_counts = a2a(send.to(dev), counts.to(dev))
        torch.cuda.current_stream().synchronize()
        a2a.check()
        want_counts = [(s * 31 + rank * 7 + call * 13) % 1001 for s in range(world)]
        want = torch.cat([torch.arange(c, dtype=torch.float32) + 1000 * s + 100000 * call
                          for s, c in enumerate(want_counts)])
        check(f"alltoallv call {call}: counts", recv_counts.cpu().tolist() == want_counts)
        check(f"alltoallv call {call}: elements", torch.equal(recv[:len(want)].cpu(), want))
    a2a.close()
    comm.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
