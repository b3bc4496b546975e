"""braid's MoE dispatch and combine from Python (include/braid/moe.h), and
its AlltoAllv whose counts live in memory (include/braid/alltoallv.h).

    import braid_moe
    comm = braid_moe.Comm(nranks, unique_id, rank)     # or braid_moe.Comm.wrap(ncclComm_t pointer)
    moe = braid_moe.Moe(comm, num_experts=256, top_k=8, hidden=7168, max_tokens_per_rank=128, dtype="bfloat16")
    recv, counts, dropped = moe.dispatch(tokens, topk_idx)
    out = moe.combine(expert_out, topk_weights)
    a2a = braid_moe.AlltoAllv(comm, max_count_per_peer=4096, dtype="bfloat16")
    recv, recv_counts = a2a(send, send_counts)          # all_to_all_single, splits as int64 in memory

Buffers are PyTorch tensors (contiguous) or any contiguous buffer
(bytearray, ctypes arrays, memoryview, array).  On a communicator of the
host backend they are host memory and every call completes before it
returns.  On a CUDA communicator they are CUDA tensors: a call launches its
kernel on the stream (default: the tensor's device's current stream) and
returns at once, the counts (and dispatch's dropped rows) come back as
device tensors, and check() raises what a kernel hit since.
Outputs not given are allocated like the inputs: tensors for tensors,
bytearrays otherwise.  Nothing here needs PyTorch on the host backend; it
is imported to read a tensor's stream and to make tensors (zero-copy
buffers over DLPack, outputs like the inputs).

The library, errors, unique ids and communicators are braid_nccl's
(braid_moe.Comm is braid_nccl.Comm): BRAID_LIB names braid's libnccl.so.2.
Errors raise braid_nccl.Error with ncclGetLastError's message.
"""
import contextlib
import ctypes

import braid_nccl
from braid_nccl import Comm, Error, get_unique_id
from braid_nccl import check as _check

__all__ = ["Error", "Comm", "Moe", "AlltoAllv", "get_unique_id", "library"]

DTYPES = {"float16": 6, "float32": 7, "bfloat16": 9, "float8_e4m3": 10, "float8_e5m2": 11}
DTYPE_BYTES = {"float16": 2, "float32": 4, "bfloat16": 2, "float8_e4m3": 1, "float8_e5m2": 1}
LAYOUTS = {"expert": 0, "rank": 1}
# Every NCCL datatype, for AlltoAllv (which moves elements and reduces nothing): (ncclDataType_t, bytes).
A2A_DTYPES = {"int8": (0, 1), "uint8": (1, 1), "int32": (2, 4), "uint32": (3, 4), "int64": (4, 8), "uint64": (5, 8),
              "float16": (6, 2), "float32": (7, 4), "float64": (8, 8), "bfloat16": (9, 2), "float8_e4m3": (10, 1),
              "float8_e5m2": (11, 1)}


class _Config(ctypes.Structure):  # braidMoeConfig_t
    _fields_ = [("size", ctypes.c_size_t), ("numExperts", ctypes.c_int), ("topK", ctypes.c_int),
                ("hidden", ctypes.c_int), ("maxTokensPerRank", ctypes.c_int), ("dtype", ctypes.c_int),
                ("tileRows", ctypes.c_int), ("capacityFactor", ctypes.c_float), ("layout", ctypes.c_int),
                ("blocks", ctypes.c_int), ("timeoutMs", ctypes.c_int), ("zeroCopy", ctypes.c_int)]


class _Stats(ctypes.Structure):  # braidMoeStats_t
    _fields_ = [(name, ctypes.c_uint64) for name in
                ("dispatches", "combines", "rowsRouted", "rowsDropped", "payloadBytesRemote", "signalBytesRemote",
                 "bytesLocal", "signalsRemote", "signalsLocal", "fences")]


_declared = False


def library():
    """braid's library (braid_nccl.library), with its MoE and AlltoAllv functions declared."""
    global _declared
    lib = braid_nccl.library()
    if not _declared:
        vp, i32, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        braid_nccl.declare(lib, {
            "braidMoeCreate": [vp, ctypes.POINTER(_Config), ctypes.POINTER(vp)],
            "braidMoeGetInfo": [vp, ctypes.POINTER(sz), ctypes.POINTER(i32)],
            "braidMoeDispatch": [vp, vp, vp, i32, vp, vp, vp, vp],
            "braidMoeCombine": [vp, vp, vp, vp, vp],
            "braidMoeGetCombineBuffer": [vp, ctypes.POINTER(vp)],
            "braidMoeGetDispatchBuffer": [vp, ctypes.POINTER(vp)],
            "braidMoeGetStats": [vp, ctypes.POINTER(_Stats)],
            "braidMoeGetAsyncError": [vp, ctypes.POINTER(i32)],
            "braidMoeDestroy": [vp],
            "braidAlltoAllvCreate": [vp, i32, sz, i32, ctypes.POINTER(vp)],
            "braidAlltoAllv": [vp, vp, vp, vp, vp, vp],
            "braidAlltoAllvGetAsyncError": [vp, ctypes.POINTER(i32)],
            "braidAlltoAllvDestroy": [vp],
        })
        _declared = True
    return lib


def _check_async(function, handle, comm):
    code = ctypes.c_int(0)
    _check(function(handle, ctypes.byref(code)), comm)
    _check(code.value, comm)


def _is_tensor(x):
    return hasattr(x, "data_ptr") and hasattr(x, "is_contiguous")


def _is_float32(x):
    """float32 elements, or raw bytes whose type the caller vouches for."""
    if _is_tensor(x):
        return str(x.dtype) == "torch.float32"
    view = memoryview(x)
    return view.format == "f" or view.itemsize == 1


def _nbytes(x):
    return x.numel() * x.element_size() if _is_tensor(x) else memoryview(x).nbytes


class _Addresses:
    """A call's buffers as addresses, each (and the ctypes view that gave
    its address) kept alive as long as this object: one per call, so that
    calls from several threads never share it."""

    def __init__(self):
        self._keep = []

    def of(self, x, what, writable):
        """(address, bytes) of a tensor or a contiguous buffer."""
        if _is_tensor(x):
            if not x.is_contiguous():
                raise Error(4, f"{what}: the tensor is not contiguous")
            return x.data_ptr(), x.numel() * x.element_size()
        view = memoryview(x)
        if not view.contiguous or (writable and view.readonly):
            raise Error(4, f"{what}: a buffer that is contiguous{' and writable' if writable else ''}")
        if view.nbytes == 0:
            return None, 0
        raw = view.cast("B")
        if raw.readonly:  # ctypes takes addresses of writable buffers only: a read-only input is copied
            raw = memoryview(bytearray(raw))
        holder = (ctypes.c_char * raw.nbytes).from_buffer(raw)
        self._keep.append((x, raw, holder))
        return ctypes.addressof(holder), raw.nbytes


def _stream(stream, like):
    if stream is not None:
        return stream if isinstance(stream, int) else getattr(stream, "cuda_stream", stream)
    if _is_tensor(like) and getattr(like, "is_cuda", False):
        import torch
        return torch.cuda.current_stream(like.device).cuda_stream
    return 0


def _on_stream(stream, like):
    """Where a call's outputs are made: for CUDA tensors and an explicit stream, on that stream (the caching
    allocator then hands their memory to nothing else while the call's kernel writes them)."""
    if stream is not None and _is_tensor(like) and getattr(like, "is_cuda", False):
        import torch
        return torch.cuda.stream(torch.cuda.ExternalStream(_stream(stream, like), device=like.device))
    return contextlib.nullcontext()


def _like(like, nbytes, shape, dtype_of):
    """A new output: a tensor on `like`'s device (dtype_of: its dtype), or a bytearray."""
    if _is_tensor(like):
        import torch
        return torch.empty(shape, dtype=dtype_of(torch), device=like.device)
    return bytearray(nbytes)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLManagedTensor(ctypes.Structure):  # dlpack.h's DLManagedTensor (its DLTensor inline)
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_DLPACK_STRUCTS = []  # every capsule's struct, for the life of the process: torch reads it again when its tensor dies
_new_capsule = None


def _tensor_over(address, nbytes, cuda_device):
    """A uint8 torch tensor over nbytes at address, on CUDA device cuda_device (or the CPU for -1), through a DLPack
    capsule.  The memory stays the handle's (the struct has no deleter).  Unlike CUDA's array interface, this needs no
    NumPy."""
    global _new_capsule
    import torch.utils.dlpack
    if _new_capsule is None:
        _new_capsule = ctypes.pythonapi.PyCapsule_New
        _new_capsule.restype, _new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                                         ctypes.c_void_p]
    shape = (ctypes.c_int64 * 1)(nbytes)
    device = _DLDevice(2, cuda_device) if cuda_device >= 0 else _DLDevice(1, 0)  # kDLCUDA, kDLCPU
    managed = _DLManagedTensor(address, device, 1, _DLDataType(1, 8, 1), shape, None, 0, None, None)  # kDLUInt, 8 bits
    _DLPACK_STRUCTS.append((managed, shape))
    return torch.utils.dlpack.from_dlpack(_new_capsule(ctypes.addressof(managed), b"dltensor", None))


def _torch_dtype(torch, name):
    """torch's dtype for a handle's dtype name (float8 types need a torch that has them)."""
    dtype = getattr(torch, {"float8_e4m3": "float8_e4m3fn"}.get(name, name), None)
    if dtype is None:
        raise Error(4, f"this torch has no {name} dtype")
    return dtype


class Moe:
    """One layer shape of dispatch and combine on a communicator (braidMoeCreate; collective)."""

    def __init__(self, comm, num_experts, top_k, hidden, max_tokens_per_rank, dtype="bfloat16", tile_rows=0,
                 capacity_factor=0.0, layout="expert", blocks=0, timeout_ms=0, zero_copy_combine=False,
                 zero_copy_dispatch=False):
        if dtype not in DTYPES or layout not in LAYOUTS:
            raise Error(4, f"dtype is one of {sorted(DTYPES)} and layout one of {sorted(LAYOUTS)}")
        config = _Config(ctypes.sizeof(_Config), num_experts, top_k, hidden, max_tokens_per_rank, DTYPES[dtype],
                         tile_rows, capacity_factor, LAYOUTS[layout], blocks, timeout_ms,
                         int(zero_copy_combine) | 2 * int(zero_copy_dispatch))
        self.comm, self.top_k, self.hidden, self.dtype = comm, top_k, hidden, dtype
        self.max_tokens_per_rank = max_tokens_per_rank
        self.handle = ctypes.c_void_p()
        _check(library().braidMoeCreate(comm.handle, ctypes.byref(config), ctypes.byref(self.handle)), comm.handle)
        rows, capacity = ctypes.c_size_t(), ctypes.c_int()
        _check(library().braidMoeGetInfo(self.handle, ctypes.byref(rows), ctypes.byref(capacity)), comm.handle)
        self.max_output_rows, self.capacity = rows.value, capacity.value
        self.nranks = comm.count()
        self.local_experts = num_experts // self.nranks
        self._views = {}  # _window_rows' tensors
        self._dispatched = None  # the last dispatch's token count: what combine's weights and output hold

    def dispatch(self, tokens, topk_idx, recv_tokens=None, recv_counts=None, stream=None):
        """tokens [n][hidden] of the dtype, topk_idx [n][top_k] int32 (-1: none).  Returns (recv_tokens,
        recv_counts [nranks][local experts] int32, rows of this rank dropped past capacity: an int, or for
        CUDA tensors a one-element int64 tensor on their device, written by the kernel)."""
        row_bytes = self.hidden * DTYPE_BYTES[self.dtype]
        with _on_stream(stream, tokens):
            if recv_tokens is None:
                recv_tokens = _like(tokens, self.max_output_rows * row_bytes, (self.max_output_rows, self.hidden),
                                    lambda torch: tokens.dtype)
            if recv_counts is None:
                recv_counts = _like(topk_idx, self.nranks * self.local_experts * 4, (self.nranks, self.local_experts),
                                    lambda torch: torch.int32)
            if getattr(tokens, "is_cuda", False):
                import torch
                dropped = torch.empty(1, dtype=torch.int64, device=tokens.device)  # the kernel writes it
        addresses = _Addresses()
        t, t_bytes = addresses.of(tokens, "tokens", False)
        k, k_bytes = addresses.of(topk_idx, "topk_idx", False)
        r, r_bytes = addresses.of(recv_tokens, "recv_tokens", True)
        c, c_bytes = addresses.of(recv_counts, "recv_counts", True)
        num_tokens = k_bytes // (4 * self.top_k)
        if t_bytes < num_tokens * row_bytes or r_bytes < self.max_output_rows * row_bytes or \
                c_bytes < self.nranks * self.local_experts * 4:
            raise Error(4, f"dispatch: tokens need {num_tokens} rows of {row_bytes} bytes, recv_tokens "
                           f"{self.max_output_rows}, recv_counts {self.nranks * self.local_experts} int32")
        if getattr(tokens, "is_cuda", False):
            d = dropped.data_ptr()
        else:
            dropped = ctypes.c_int64(0)
            d = ctypes.addressof(dropped)
        _check(library().braidMoeDispatch(self.handle, t, k, num_tokens, r, c, ctypes.c_void_p(d),
                                          _stream(stream, tokens)), self.comm.handle)
        self._dispatched = num_tokens
        return recv_tokens, recv_counts, dropped if not isinstance(dropped, ctypes.c_int64) else dropped.value

    def combine(self, expert_out, topk_weights, out_tokens=None, stream=None):
        """expert_out in recv_tokens' places, topk_weights [n][top_k] float32 of the last dispatch.  Returns
        out_tokens [n][hidden]: each token's weighted sum of its experts' results."""
        num_tokens = _nbytes(topk_weights) // (4 * self.top_k)
        if self._dispatched is not None:
            # The C call reads the last dispatch's tokens' weights and writes as many rows: weights of another
            # type or count would be misread, and an output sized from them overrun.
            num_tokens = self._dispatched
            if not _is_float32(topk_weights) or _nbytes(topk_weights) != num_tokens * self.top_k * 4:
                raise Error(4, f"combine: topk_weights must be float32 [{num_tokens}][{self.top_k}] (the last "
                               f"dispatch's tokens), got {_nbytes(topk_weights)} bytes of "
                               f"{getattr(topk_weights, 'dtype', None) or memoryview(topk_weights).format}")
        row_bytes = self.hidden * DTYPE_BYTES[self.dtype]
        if out_tokens is None:
            with _on_stream(stream, expert_out):
                out_tokens = _like(expert_out, num_tokens * row_bytes, (num_tokens, self.hidden),
                                   lambda torch: expert_out.dtype)
        addresses = _Addresses()
        e, e_bytes = addresses.of(expert_out, "expert_out", False)
        w, _ = addresses.of(topk_weights, "topk_weights", False)
        o, o_bytes = addresses.of(out_tokens, "out_tokens", True)
        if e_bytes < self.max_output_rows * row_bytes or o_bytes < num_tokens * row_bytes:
            raise Error(4, f"combine: expert_out needs {self.max_output_rows} rows of {row_bytes} bytes (recv_tokens' "
                           f"places), out_tokens {num_tokens}")
        _check(library().braidMoeCombine(self.handle, e, w, o, _stream(stream, expert_out)), self.comm.handle)
        return out_tokens

    def combine_buffer(self, like=None):
        """Zero-copy combine (zero_copy_combine=True): max_output_rows rows in the handle's window, in
        recv_tokens' layout.  Dispatch into it (recv_tokens=) or write the experts' results there, and pass it to
        combine as expert_out: the ranks that map this rank's window read their results in place.  Write it only
        between a dispatch and its combine.  See _window_rows for what it returns."""
        return self._window_rows(library().braidMoeGetCombineBuffer, self.max_output_rows, like, "combine_buffer")

    def dispatch_buffer(self, like=None):
        """Zero-copy dispatch (zero_copy_dispatch=True): max_tokens_per_rank rows in the handle's window.  Write
        this rank's tokens there and pass it to dispatch as tokens: the experts' owners that map this rank's
        window read their rows in place.  Write it only between a combine (or the start) and the next dispatch.
        See _window_rows for what it returns."""
        return self._window_rows(library().braidMoeGetDispatchBuffer, self.max_tokens_per_rank, like,
                                 "dispatch_buffer")

    def _window_rows(self, getter, rows, like, what):
        """`rows` rows of the handle's window, gone with close(): for a CUDA communicator, or a tensor `like`, a
        [rows][hidden] torch tensor over them (like's dtype, else the handle's; on the communicator's device), the
        same tensor each time; otherwise (the host backend) a writable memoryview of their bytes."""
        p = ctypes.c_void_p()
        _check(getter(self.handle, ctypes.byref(p)), self.comm.handle)
        nbytes = rows * self.hidden * DTYPE_BYTES[self.dtype]
        device = self.comm.cuda_device()
        if device < 0 and not _is_tensor(like):
            return memoryview((ctypes.c_char * nbytes).from_address(p.value)).cast("B")
        import torch
        if _is_tensor(like):
            on = like.device.index if like.device.type == "cuda" else -1
            if on != device:
                raise Error(4, f"{what}: like is on {like.device}, the window on "
                               f"{'cuda:%d' % device if device >= 0 else 'the host'}")
            if like.element_size() != DTYPE_BYTES[self.dtype]:
                raise Error(4, f"{what}: like's elements are {like.element_size()} bytes; the handle's dtype "
                               f"{self.dtype} has {DTYPE_BYTES[self.dtype]}")
        dtype = like.dtype if _is_tensor(like) else _torch_dtype(torch, self.dtype)
        key = (p.value, nbytes, dtype)
        if key not in self._views:
            self._views[key] = _tensor_over(p.value, nbytes, device).view(dtype).view(rows, self.hidden)
        return self._views[key]

    def check(self):
        """Raises what a call that already returned hit since (CUDA: its kernels)."""
        _check_async(library().braidMoeGetAsyncError, self.handle, self.comm.handle)

    def stats(self):
        s = _Stats()
        _check(library().braidMoeGetStats(self.handle, ctypes.byref(s)), self.comm.handle)
        return {name: getattr(s, name) for name, _ in _Stats._fields_}

    def close(self):
        """Collective, like braidMoeDestroy (it waits for this handle's last call; replays of a CUDA graph that
        holds its calls are the caller's to synchronize first)."""
        if self.handle:
            _check(library().braidMoeDestroy(self.handle), self.comm.handle)
        self.handle = None
        self._views.clear()


class AlltoAllv:
    """PyTorch's all_to_all_single with uneven splits whose sizes stay in memory (braidAlltoAllvCreate;
    collective): a rank sends each peer up to max_count_per_peer elements of `dtype` per call."""

    def __init__(self, comm, max_count_per_peer, dtype="float32", timeout_ms=0):
        if dtype not in A2A_DTYPES:
            raise Error(4, f"dtype is one of {sorted(A2A_DTYPES)}")
        self.comm, self.max_count, self.dtype = comm, max_count_per_peer, dtype
        self.nranks = comm.count()
        self.handle = ctypes.c_void_p()
        _check(library().braidAlltoAllvCreate(comm.handle, A2A_DTYPES[dtype][0], max_count_per_peer, timeout_ms,
                                              ctypes.byref(self.handle)), comm.handle)

    def __call__(self, send, send_counts, recv=None, recv_counts=None, stream=None):
        """send: each rank's elements back to back; send_counts [nranks] int64.  Returns (recv: each rank's
        elements back to back, room for nranks x max_count_per_peer; recv_counts [nranks] int64)."""
        elem = A2A_DTYPES[self.dtype][1]
        with _on_stream(stream, send):
            if recv is None:
                recv = _like(send, self.nranks * self.max_count * elem, (self.nranks * self.max_count,),
                             lambda torch: send.dtype)
            if recv_counts is None:
                recv_counts = _like(send_counts, self.nranks * 8, (self.nranks,), lambda torch: torch.int64)
        addresses = _Addresses()
        s, _ = addresses.of(send, "send", False)
        sc, sc_bytes = addresses.of(send_counts, "send_counts", False)
        r, r_bytes = addresses.of(recv, "recv", True)
        rc, rc_bytes = addresses.of(recv_counts, "recv_counts", True)
        if sc_bytes < self.nranks * 8 or rc_bytes < self.nranks * 8 or r_bytes < self.nranks * self.max_count * elem:
            raise Error(4, f"alltoallv: send_counts and recv_counts hold {self.nranks} int64, recv "
                           f"{self.nranks * self.max_count} elements of {elem} bytes")
        _check(library().braidAlltoAllv(self.handle, s, sc, r, rc, _stream(stream, send)), self.comm.handle)
        return recv, recv_counts

    def check(self):
        """Raises what a call that already returned hit since (CUDA: its kernel)."""
        _check_async(library().braidAlltoAllvGetAsyncError, self.handle, self.comm.handle)

    def close(self):
        """Collective, like braidAlltoAllvDestroy (it waits for this handle's last call; replays of a CUDA graph
        that holds its calls are the caller's to synchronize first)."""
        if self.handle:
            _check(library().braidAlltoAllvDestroy(self.handle), self.comm.handle)
        self.handle = None
