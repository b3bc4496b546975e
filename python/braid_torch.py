"""braid as a torch.distributed backend for CPU tensors.

    import torch.distributed as dist
    import braid_torch                    # registers the backend "braid"
    dist.init_process_group("braid")      # torchrun's env://, or any init_method or store

NCCL serves CUDA tensors only, so a job's CPU runs (CI, development
machines, CPU-only tests of distributed code) fall back to Gloo, whose
semantics differ.  This backend runs the NCCL calls the job would make on
CUDA tensors (ncclAllReduce, ncclSend, ...) on its CPU tensors instead,
over braid's host backend: shared memory between the ranks of a host,
sockets or InfiniBand between hosts, braid's schedules and its
BRAID_*/NCCL_* settings.  DistributedDataParallel, new_group, async_op,
batch_isend_irecv, all_to_all_single with uneven splits, and all_gather and
reduce_scatter with uneven sizes work.

How a process group maps onto braid:
  - one communicator per group, from a unique id rank 0 publishes in the
    group's store (as ProcessGroupNCCL does);
  - the group's calls run in issue order on one worker thread (NCCL's
    stream order): a call returns its Work at once, Work.wait() and the
    Work's future complete when braid's call has;
  - calls inside batch_isend_irecv (torch's coalescing manager) run as one
    NCCL group, so crossed sends and receives cannot deadlock;
  - a Work.wait() that passes its timeout (the group's by default) aborts
    the communicator, as ProcessGroupNCCL's watchdog does: the worker is
    freed and every later call fails at once.  braid's own waits are
    bounded by BRAID_TIMEOUT, and a peer that dies fails the calls waiting
    for it.
Every datatype NCCL has (bool as uint8, complex as pairs of reals for
SUM and AVG), and the reductions SUM, PRODUCT, MIN, MAX and AVG.  What
NCCL cannot do is refused with the reason when called: the bitwise
reductions, PREMUL_SUM, a receive from any source, CUDA tensors (use the
backend "nccl" with braid's libnccl.so.2 for those), several tensors per
call.  The library is braid_nccl's (BRAID_LIB); the communicator must be
a host-backend one, so a process that sees a CUDA device sets
BRAID_BACKEND=host.
"""
import datetime
import queue
import threading
import weakref

import torch
import torch.distributed as dist
from torch.futures import Future

import braid_nccl

__all__ = ["ProcessGroupBraid", "BACKEND"]

BACKEND = "braid"

# ncclDataType_t of each torch dtype; bool travels as uint8 (its reductions: see _nccl_op).
_NCCL_TYPES = {torch.int8: 0, torch.uint8: 1, torch.bool: 1, torch.int32: 2, torch.int64: 4, torch.float16: 6,
               torch.float32: 7, torch.float64: 8, torch.bfloat16: 9}
for _name, _code in (("uint32", 3), ("uint64", 5), ("float8_e4m3fn", 10), ("float8_e5m2", 11)):
    if hasattr(torch, _name):  # dtypes of newer torch releases
        _NCCL_TYPES[getattr(torch, _name)] = _code
_R = dist.ReduceOp
_NCCL_OPS = [(_R.SUM, 0), (_R.PRODUCT, 1), (_R.MAX, 2), (_R.MIN, 3), (_R.AVG, 4)]
_WorkBase = getattr(dist, "Work", None) or dist.distributed_c10d.Work


class _Error(RuntimeError):
    pass


def _nccl_op(op, dtype):
    """ncclRedOp_t for a torch ReduceOp on `dtype` (ProcessGroupNCCL's mapping)."""
    if dtype == torch.bool:
        if op == _R.AVG:
            raise _Error("braid: ReduceOp.AVG of bool tensors has no meaning")
        if op == _R.SUM:
            return 2  # logical or
        if op == _R.PRODUCT:
            return 3  # logical and
    if dtype.is_complex and not (op == _R.SUM or op == _R.AVG):
        raise _Error("braid: complex tensors reduce with SUM or AVG only (as pairs of reals)")
    for torch_op, code in _NCCL_OPS:
        if op == torch_op:
            return code
    raise _Error(f"braid: {op} is not a reduction NCCL has (SUM, PRODUCT, MIN, MAX, AVG; PREMUL_SUM is not served)")


class _Buffer:
    """A CPU tensor as NCCL sees it: (address, count, ncclDataType_t); complex as pairs of reals."""

    def __init__(self, tensor, what):
        if not isinstance(tensor, torch.Tensor):
            raise _Error(f"braid: {what} must be a tensor, not {type(tensor).__name__}")
        if tensor.device.type != "cpu":
            raise _Error(f"braid: {what} is on {tensor.device}: this backend serves CPU tensors (for CUDA "
                         "tensors use the backend 'nccl' with braid's libnccl.so.2)")
        if not tensor.is_contiguous():
            raise _Error(f"braid: {what} is not contiguous")
        real = torch.view_as_real(tensor) if tensor.is_complex() else tensor
        if real.dtype not in _NCCL_TYPES:
            raise _Error(f"braid: {what} is {tensor.dtype}, which NCCL has no datatype for")
        self.tensor, self.dtype = tensor, tensor.dtype
        self.address, self.count, self.nccl_type = real.data_ptr(), real.numel(), _NCCL_TYPES[real.dtype]


def _one(tensors, what):
    if len(tensors) != 1:
        raise _Error(f"braid: {what} takes one tensor per call, not {len(tensors)} (several are for several "
                     "devices per process)")
    return _Buffer(tensors[0], what)


def _buffers_like(tensors, like, what):
    """The tensors' _Buffers, each of `like`'s count and dtype."""
    buffers = [_Buffer(t, what) for t in tensors]
    for b in buffers:
        if b.count != like.count or b.dtype != like.dtype:
            raise _Error(f"braid: {what}: every tensor must have {like.count} elements of {like.dtype}, not "
                         f"{b.count} of {b.dtype}")
    return buffers


def _typed(buffers, dtype, what):
    """`buffers`, each checked to hold `dtype` (their counts may differ)."""
    for b in buffers:
        if b.dtype != dtype:
            raise _Error(f"braid: {what}: every tensor must be {dtype}, not {b.dtype}")
    return buffers


def _seconds(timeout):
    """A wait's timeout in seconds, None when unset (a timedelta of 0 or less, as C++'s kNoTimeout)."""
    if timeout is None:
        return None
    s = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    return s if s > 0 else None


class _Work(_WorkBase):
    """One call's completion: wait() blocks (bounded), get_future() gives a torch Future of its tensors."""

    def __init__(self, group, what, result):
        super().__init__()
        self._group, self._what, self._result = group, what, result
        self._done, self._error = threading.Event(), None
        self._future = Future()

    def _finish(self, error):
        self._error = error
        try:  # the future first: a wait() that returned has it complete
            if error is None:
                self._future.set_result(self._result)
            else:
                self._future.set_exception(error)
        finally:
            self._done.set()

    def wait(self, timeout=None):
        limit = _seconds(timeout) or self._group._timeout_s
        if not self._done.wait(limit):
            self._group._abort(f"{self._what} did not complete within {limit:g} s")
            raise _Error(f"braid: {self._what} did not complete within {limit:g} s: the process group's "
                         "communicator is aborted")
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        return self._done.is_set()

    def is_success(self):
        return self._done.is_set() and self._error is None

    def exception(self):
        return self._error

    def result(self):
        self.wait()
        return self._result

    def source_rank(self):
        raise _Error("braid: a Work has a source rank only after a receive from any source, which NCCL has not")

    def synchronize(self):
        pass  # CPU tensors: completion is all there is

    def get_future(self):
        return self._future


class _Worker:
    """Runs a group's calls in issue order on one thread; ends with close()."""

    def __init__(self, comm):
        self.comm, self.aborted = comm, None
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="braid_torch", daemon=True)
        self._thread.start()

    def submit(self, works, job):
        self._jobs.put((works, job))

    def _run(self):
        while True:
            item = self._jobs.get()
            if item is None:
                return
            works, job = item
            error = None
            try:
                if self.aborted:
                    raise _Error(f"braid: the communicator was aborted ({self.aborted})")
                job(self.comm.handle)
            except Exception as e:  # a failed call fails its Works, not the worker
                error = e if isinstance(e, RuntimeError) else _Error(f"braid: {e}")
            for w in works:
                w._finish(error)

    def abort(self, why):
        if not self.aborted:
            self.aborted = why
            try:
                self.comm.abort()  # ends a call the worker is blocked in
            except braid_nccl.Error:
                pass

    def close(self):
        """The worker ends once its queued calls have; the communicator is destroyed, or aborted where a call is
        still stuck after the group's timeout."""
        self._jobs.put(None)
        self._thread.join(timeout=10)
        if self._thread.is_alive():
            self.abort("the process group was destroyed while a call was stuck")
            self._thread.join()
        elif not self.aborted:
            self.comm.destroy()


def _nccl(function, *args):
    """A job step: calls braid's `function` with its arguments (a _Buffer or _Slice stands for its address, and
    keeps its tensor alive until the step has run), raising its error."""
    f = getattr(braid_nccl.library(), function)

    def step(comm):
        values = [a.address if isinstance(a, (_Buffer, _Slice)) else a for a in args]
        braid_nccl.check(f(*values, comm, None), comm)
    return step


class ProcessGroupBraid(dist.ProcessGroup):
    """A torch process group whose calls are braid's (see the module's doc)."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        uid = braid_nccl.get_unique_id() if rank == 0 else None
        if rank == 0:
            store.set("braid_unique_id", uid)
        else:
            uid = store.get("braid_unique_id")
        comm = braid_nccl.Comm(size, uid, rank)
        if comm.cuda_device() >= 0:
            comm.destroy()
            raise _Error("braid: this process sees a CUDA device, so braid made a CUDA communicator; the 'braid' "
                         "backend serves CPU tensors: set BRAID_BACKEND=host (CUDA tensors: backend 'nccl' with "
                         "braid's libnccl.so.2)")
        self._timeout_s = _seconds(timeout) or 1800.0  # torch's default process group timeout
        self._worker = _Worker(comm)
        self._finalizer = weakref.finalize(self, self._worker.close)
        self._coalesced = None  # between _start_coalescing and _end_coalescing: [(work, steps, after)]

    def getBackendName(self):  # also what torch's _get_backend_name() returns, through C++
        return BACKEND

    def _abort(self, why):
        self._worker.abort(why)

    def shutdown(self):
        """Ends the worker and destroys the communicator (also done when the group is collected)."""
        self._finalizer()

    def _call(self, what, result, steps, after=None):
        """A Work for `steps` (each takes the communicator) run as one NCCL call or group, then `after`."""
        work = _Work(self, what, result)
        if self._coalesced is not None:
            self._coalesced.append((work, steps, after))
            return work

        def job(comm):
            _run_steps(steps, comm)
            if after:
                after()
        self._worker.submit([work], job)
        return work

    # torch's coalescing manager (batch_isend_irecv): one NCCL group.  torch 1.13 passes the list of the calls'
    # works to _end_coalescing; torch 2 passes a device and takes one Work for the whole group back.
    def _start_coalescing(self, *device):
        if self._coalesced is not None:
            raise _Error("braid: coalescing is already under way")
        self._coalesced = []

    def _end_coalescing(self, *reqs_or_device):
        calls, self._coalesced = self._coalesced or [], None
        whole = _Work(self, "coalesced calls", [])

        def job(comm):
            _run_steps([s for _, steps, _ in calls for s in steps], comm, grouped=True)
            for _, _, after in calls:
                if after:
                    after()
        self._worker.submit([w for w, _, _ in calls] + [whole], job)
        return whole

    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        b = _one(tensors, "allreduce")
        op = _nccl_op(opts.reduceOp, b.dtype)
        return self._call("allreduce", tensors, [_nccl("ncclAllReduce", b, b, b.count, b.nccl_type, op)])

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        steps = []
        for i, t in enumerate(tensors):
            b = _Buffer(t, f"allreduce_coalesced tensor {i}")
            steps.append(_nccl("ncclAllReduce", b, b, b.count, b.nccl_type,
                               _nccl_op(opts.reduceOp, b.dtype)))
        return self._call_grouped("allreduce_coalesced", tensors, steps)

    def _call_grouped(self, what, result, steps, after=None):
        return self._call(what, result, [_Group(steps)], after)

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        b = _one(tensors, "broadcast")
        self._root(opts.rootRank, "broadcast")
        return self._call("broadcast", tensors, [_nccl("ncclBroadcast", b, b, b.count, b.nccl_type,
                                                       opts.rootRank)])

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        b = _one(tensors, "reduce")
        self._root(opts.rootRank, "reduce")
        return self._call("reduce", tensors, [_nccl("ncclReduce", b, b, b.count, b.nccl_type,
                                                    _nccl_op(opts.reduceOp, b.dtype), opts.rootRank)])

    def allgather(self, output_lists, inputs, opts=None):
        b = _one(inputs, "allgather")
        outputs = self._per_rank(output_lists, "allgather")
        # Rank r's tensor is the size of rank r's input: uneven sizes are served (ProcessGroupNCCL's allgather_v).
        outs = _typed([_Buffer(t, "allgather output") for t in outputs], b.dtype, "allgather output")
        self._sized(outs[self.rank()], b.count, b.dtype, "allgather output for this rank")
        # Straight into the outputs: a send and a receive per peer in one group (a flat ncclAllGather and the
        # copies out of it took 4x as long, perf/results/torch_cpu_*).
        steps = []
        for peer in range(self.size()):
            if peer != self.rank():
                steps += [_nccl("ncclSend", b, b.count, b.nccl_type, peer),
                          _nccl("ncclRecv", outs[peer], outs[peer].count, b.nccl_type, peer)]
        mine = outputs[self.rank()]
        return self._call_grouped("allgather", output_lists, steps, after=lambda: mine.copy_(b.tensor))

    def _allgather_base(self, output, input, opts=None):
        b, o = _Buffer(input, "allgather input"), _Buffer(output, "allgather output")
        self._sized(o, b.count * self.size(), b.dtype, "allgather output")
        return self._call("allgather", [output], [_nccl("ncclAllGather", b, o, b.count, b.nccl_type)])

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        if len(output_lists) != self.size():
            raise _Error(f"braid: allgather_coalesced takes {self.size()} output lists, not {len(output_lists)}")
        steps, flats = [], []
        for i, t in enumerate(inputs):
            b = _Buffer(t, f"allgather_coalesced input {i}")
            flat = torch.empty(self.size() * t.numel(), dtype=t.dtype)
            flats.append((flat, [row[i] for row in output_lists]))
            steps.append(_nccl("ncclAllGather", b, _Buffer(flat, ""), b.count, b.nccl_type))

        def unpack():
            for flat, outs in flats:
                _unpack(flat, outs)
        return self._call_grouped("allgather_coalesced", output_lists, steps, after=unpack)

    def gather(self, output_lists, inputs, opts=None):
        opts = opts or dist.GatherOptions()
        root = self._root(opts.rootRank, "gather")
        b = _one(inputs, "gather")
        flat, outputs = None, []
        if self.rank() == root:
            outputs = self._per_rank(output_lists, "gather")
            _buffers_like(outputs, b, "gather output")
            flat = torch.empty(self.size() * b.tensor.numel(), dtype=b.dtype)
        into = _Buffer(flat, "gather") if flat is not None else None
        return self._call("gather", output_lists, [_nccl("ncclGather", b, into, b.count, b.nccl_type, root)],
                          after=(lambda: _unpack(flat, outputs)) if flat is not None else None)

    def scatter(self, outputs, input_lists, opts=None):
        opts = opts or dist.ScatterOptions()
        root = self._root(opts.rootRank, "scatter")
        o = _one(outputs, "scatter")
        source = None
        if self.rank() == root:
            inputs = self._per_rank(input_lists, "scatter")
            _buffers_like(inputs, o, "scatter input")
            source = _Buffer(torch.cat([t.reshape(-1) for t in inputs]), "scatter")
        return self._call("scatter", outputs, [_nccl("ncclScatter", source, o, o.count, o.nccl_type, root)])

    def reduce_scatter(self, outputs, input_lists, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        o = _one(outputs, "reduce_scatter")
        op = _nccl_op(opts.reduceOp, o.dtype)
        inputs = _typed([_Buffer(t, "reduce_scatter input") for t in self._per_rank(input_lists, "reduce_scatter")],
                        o.dtype, "reduce_scatter input")
        self._sized(inputs[self.rank()], o.count, o.dtype, "reduce_scatter input for this rank")
        if any(i.count != o.count for i in inputs):
            # Uneven (input r the size of rank r's output): a reduce to each rank in one group, as
            # ProcessGroupNCCL's reduce_scatter_v.  Only the root's receive buffer is written.
            steps = [_nccl("ncclReduce", i, o if r == self.rank() else i, i.count, o.nccl_type, op, r)
                     for r, i in enumerate(inputs)]
            return self._call_grouped("reduce_scatter", outputs, steps)
        flat = _Buffer(torch.cat([i.tensor.reshape(-1) for i in inputs]), "reduce_scatter")
        return self._call("reduce_scatter", outputs, [_nccl("ncclReduceScatter", flat, o, o.count, o.nccl_type, op)])

    def _reduce_scatter_base(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        i, o = _Buffer(input, "reduce_scatter input"), _Buffer(output, "reduce_scatter output")
        self._sized(i, o.count * self.size(), o.dtype, "reduce_scatter input")
        return self._call("reduce_scatter", [output], [_nccl("ncclReduceScatter", i, o, o.count, o.nccl_type,
                                                             _nccl_op(opts.reduceOp, o.dtype))])

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        i, o = _Buffer(input, "alltoall input"), _Buffer(output, "alltoall output")
        n = self.size()
        if not output_split_sizes and not input_split_sizes:
            self._sized(i, o.count, o.dtype, "alltoall input")
            if o.count % n:
                raise _Error(f"braid: alltoall: {o.count} elements do not split evenly over {n} ranks")
            return self._call("alltoall", [output], [_nccl("ncclAlltoAll", i, o, o.count // n, o.nccl_type)])
        # Uneven splits (rows of dim 0): one send and one receive per peer in one group, as ProcessGroupNCCL.
        send = self._splits(i, input_split_sizes, "input")
        recv = self._splits(o, output_split_sizes, "output")
        steps = []
        for peer in range(n):
            (s_at, s_count), (r_at, r_count) = send[peer], recv[peer]
            if s_count:
                steps.append(_nccl("ncclSend", s_at, s_count, i.nccl_type, peer))
            if r_count:
                steps.append(_nccl("ncclRecv", r_at, r_count, o.nccl_type, peer))
        return self._call_grouped("alltoall", [output], steps)

    def alltoall(self, outputs, inputs, opts=None):
        n = self.size()
        if len(outputs) != n or len(inputs) != n:
            raise _Error(f"braid: alltoall takes {n} input and {n} output tensors, not {len(inputs)} and "
                         f"{len(outputs)}")
        steps = []
        for peer in range(n):
            s, r = _Buffer(inputs[peer], f"alltoall input {peer}"), _Buffer(outputs[peer], f"alltoall output {peer}")
            if s.dtype != r.dtype:
                raise _Error(f"braid: alltoall: input {peer} is {s.dtype}, output {peer} {r.dtype}")
            if s.count:
                steps.append(_nccl("ncclSend", s, s.count, s.nccl_type, peer))
            if r.count:
                steps.append(_nccl("ncclRecv", r, r.count, r.nccl_type, peer))
        return self._call_grouped("alltoall", outputs, steps)

    def send(self, tensors, dst, tag=0):
        b = _one(tensors, "send")
        self._peer(dst, "send")
        return self._call("send", tensors, [_nccl("ncclSend", b, b.count, b.nccl_type, dst)])

    def recv(self, tensors, src, tag=0):
        b = _one(tensors, "recv")
        self._peer(src, "recv")
        return self._call("recv", tensors, [_nccl("ncclRecv", b, b.count, b.nccl_type, src)])

    def recv_anysource(self, tensors, tag=0):
        raise _Error("braid: NCCL has no receive from any source: name the sender")

    def barrier(self, opts=None):
        one = _Buffer(torch.zeros(1, dtype=torch.int32), "barrier")
        return self._call("barrier", [], [_nccl("ncclAllReduce", one, one, 1, one.nccl_type, 0)])

    def _root(self, root, what):
        if not 0 <= root < self.size():
            raise _Error(f"braid: {what}: root {root} is not a rank of this group of {self.size()}")
        return root

    def _peer(self, peer, what):
        if not 0 <= peer < self.size() or peer == self.rank():
            raise _Error(f"braid: {what}: {peer} is not another rank of this group of {self.size()}")

    def _per_rank(self, lists, what):
        if len(lists) != 1 or len(lists[0]) != self.size():
            raise _Error(f"braid: {what} takes one list of {self.size()} tensors (one per rank)")
        return lists[0]

    @staticmethod
    def _sized(buffer, count, dtype, what):
        if buffer.count != count or buffer.dtype != dtype:
            raise _Error(f"braid: {what} must have {count} elements of {dtype}, not {buffer.count} of "
                         f"{buffer.dtype}")

    def _splits(self, buffer, sizes, what):
        """(_Slice, count) of each rank's rows of dim 0: `sizes` rows each, or an even split."""
        t, n = buffer.tensor, self.size()
        rows = t.shape[0] if t.dim() else 1
        sizes = list(sizes) if sizes else [rows // n] * n
        if len(sizes) != n or sum(sizes) != rows or any(s < 0 for s in sizes):
            raise _Error(f"braid: alltoall {what} splits {sizes} do not split {rows} rows over {n} ranks")
        per_row = buffer.count // rows if rows else 0  # NCCL elements (complex: two)
        row_bytes = t.element_size() * t.numel() // rows if rows else 0
        out, row = [], 0
        for s in sizes:
            out.append((_Slice(buffer, row * row_bytes), s * per_row))
            row += s
        return out


class _Slice:
    """An address inside a _Buffer (which it keeps alive)."""

    def __init__(self, buffer, offset):
        self.buffer, self.address = buffer, buffer.address + offset


class _Group:
    """Steps run as one NCCL group (ncclGroupStart .. ncclGroupEnd)."""

    def __init__(self, steps):
        self.steps = steps

    def __call__(self, comm):
        _run_steps(self.steps, comm, grouped=True)


def _run_steps(steps, comm, grouped=False):
    lib = braid_nccl.library()
    if not grouped:
        for step in steps:
            step(comm)
        return
    braid_nccl.check(lib.ncclGroupStart(), comm)
    failed = None
    try:
        for step in steps:
            step(comm)
    except Exception as e:  # the group still ends; the first error is the one to report
        failed = e
    ended = lib.ncclGroupEnd()
    if failed:
        raise failed
    braid_nccl.check(ended, comm)


def _unpack(flat, outputs):
    for chunk, out in zip(flat.chunk(len(outputs)), outputs):
        out.copy_(chunk.view_as(out))


def _create(store, rank, size, timeout):
    return ProcessGroupBraid(store, rank, size, timeout)


if BACKEND.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, _create)
