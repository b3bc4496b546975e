"""braid's libnccl.so.2 from Python (ctypes, no build step): the library,
errors, unique ids and communicators that braid_moe and braid_torch share.

    import braid_nccl
    uid = braid_nccl.get_unique_id()                     # 128 bytes: hand them to every rank
    comm = braid_nccl.Comm(nranks, uid, rank)           # or braid_nccl.Comm.wrap(ncclComm_t pointer)

The library is braid's libnccl.so.2: BRAID_LIB names it, else the dynamic
loader's libnccl.so.2 (braid's when it is first on LD_LIBRARY_PATH or
preloaded); one without braid's own functions (NVIDIA's NCCL) is refused.
Errors raise braid_nccl.Error with ncclGetLastError's message.
"""
import ctypes
import os

__all__ = ["Error", "Comm", "get_unique_id", "library", "declare"]


class Error(RuntimeError):
    """A braid call failed: .code is its ncclResult_t."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


_vp, _i32, _sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
# NCCL's host API, as far as braid's Python modules call it.
_NCCL_SIGNATURES = {
    "ncclGetUniqueId": [ctypes.POINTER(UniqueId)],
    "ncclCommInitRank": [ctypes.POINTER(_vp), _i32, UniqueId, _i32],
    "ncclCommDestroy": [_vp],
    "ncclCommAbort": [_vp],
    "ncclCommCount": [_vp, ctypes.POINTER(_i32)],
    "ncclCommCuDevice": [_vp, ctypes.POINTER(_i32)],
    "ncclGetLastError": [_vp],
    "ncclGroupStart": [],
    "ncclGroupEnd": [],
    # (send, recv, count, datatype, [op,] [root,] comm, stream)
    "ncclAllReduce": [_vp, _vp, _sz, _i32, _i32, _vp, _vp],
    "ncclReduce": [_vp, _vp, _sz, _i32, _i32, _i32, _vp, _vp],
    "ncclBroadcast": [_vp, _vp, _sz, _i32, _i32, _vp, _vp],
    "ncclAllGather": [_vp, _vp, _sz, _i32, _vp, _vp],
    "ncclReduceScatter": [_vp, _vp, _sz, _i32, _i32, _vp, _vp],
    "ncclAlltoAll": [_vp, _vp, _sz, _i32, _vp, _vp],
    "ncclGather": [_vp, _vp, _sz, _i32, _i32, _vp, _vp],
    "ncclScatter": [_vp, _vp, _sz, _i32, _i32, _vp, _vp],
    "ncclSend": [_vp, _sz, _i32, _i32, _vp, _vp],
    "ncclRecv": [_vp, _sz, _i32, _i32, _vp, _vp],
}

_lib = None


def declare(lib, signatures):
    """Sets argtypes (and restype: int, or a string for ncclGetLastError) of `lib`'s functions."""
    for name, args in signatures.items():
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = ctypes.c_char_p if name == "ncclGetLastError" else ctypes.c_int


def library():
    """braid's library, loaded once (see the module's doc)."""
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(os.environ.get("BRAID_LIB") or "libnccl.so.2")
        if not hasattr(lib, "braidMoeCreate"):
            raise Error(5, f"{lib._name} is not braid's libnccl.so.2 (no braidMoeCreate): set BRAID_LIB")
        declare(lib, _NCCL_SIGNATURES)
        _lib = lib
    return _lib


def check(code, comm=None):
    """Raises Error for a failed call's code, with the communicator's (or the process's) last error."""
    if code != 0:
        raise Error(code, library().ncclGetLastError(comm).decode(errors="replace"))


def get_unique_id():
    """A new ncclUniqueId, as 128 bytes to hand to every rank."""
    uid = UniqueId()
    check(library().ncclGetUniqueId(ctypes.byref(uid)))
    return bytes(uid)  # all 128 bytes (the field's value would stop at a zero byte)


class Comm:
    """A communicator: made here (collective over `nranks`), or wrapping an existing ncclComm_t."""

    def __init__(self, nranks, unique_id, rank):
        if len(unique_id) != 128:
            raise Error(4, f"a unique id is 128 bytes, not {len(unique_id)}")
        uid = UniqueId.from_buffer_copy(bytes(unique_id))
        handle = ctypes.c_void_p()
        check(library().ncclCommInitRank(ctypes.byref(handle), nranks, uid, rank))
        self.handle, self._owned = handle, True

    @classmethod
    def wrap(cls, pointer):
        """An ncclComm_t made elsewhere (e.g. ProcessGroupNCCL._comm_ptr()); not destroyed here."""
        self = cls.__new__(cls)
        self.handle, self._owned = ctypes.c_void_p(pointer), False
        return self

    def count(self):
        n = ctypes.c_int()
        check(library().ncclCommCount(self.handle, ctypes.byref(n)), self.handle)
        return n.value

    def cuda_device(self):
        """The communicator's CUDA device (ncclCommCuDevice), -1 for a host-backend communicator."""
        device = ctypes.c_int()
        check(library().ncclCommCuDevice(self.handle, ctypes.byref(device)), self.handle)
        return device.value

    def destroy(self):
        if self._owned and self.handle:
            check(library().ncclCommDestroy(self.handle))
        self.handle = None

    def abort(self):
        """ncclCommAbort: also ends calls other threads are blocked in."""
        if self._owned and self.handle:
            check(library().ncclCommAbort(self.handle))
        self.handle = None
