// moe_perf's CUDA ranks (--device): braid's MoE kernels against the PyTorch
// path on the same GPU(s), interleaved, as moe_perf.cc does on the host.
//
// The baseline is what a PyTorch MoE layer runs around all_to_all_single,
// on the device: sort the (token, k) pairs by expert and gather their rows
// (argsort + index_select), exchange the per-expert counts
// (all_to_all_single of the counts), copy them to the host and wait (the
// .tolist() every uneven all_to_all_single needs: the CPU synchronisation
// braid's dispatch has not), the uneven AlltoAll (ncclSend/ncclRecv per
// peer in a group); and back: the reverse AlltoAll, then each token's
// weighted sum of its rows (index_add).  Every phase is timed on the host
// from a barrier to its stream's end.
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "perf/moe_perf.h"
#include "src/moe/elements.h"

namespace moe_perf {

namespace {

// The pairs sorted by expert (a counting sort by one CTA): per_expert[e]
// pairs go to expert e, order[j] is the pair in row j of the send buffer,
// position[pair] its row.
__global__ void sort_by_expert(const int32_t* topk, int pairs, int experts, int32_t* per_expert, int32_t* order,
                               int32_t* position) {
  extern __shared__ int32_t cursor[];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) cursor[e] = 0;
  __syncthreads();
  for (int j = threadIdx.x; j < pairs; j += blockDim.x) atomicAdd(&cursor[topk[j]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t start = 0;
    for (int e = 0; e < experts; ++e) {
      per_expert[e] = cursor[e];
      const int32_t c = cursor[e];
      cursor[e] = start;
      start += c;
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < pairs; j += blockDim.x) {
    const int32_t row = atomicAdd(&cursor[topk[j]], 1);
    order[row] = j;
    position[j] = row;
  }
}

__global__ void gather_rows(char* send, const char* tokens, const int32_t* order, int pairs, int k,
                            size_t row_bytes) {
  for (int j = blockIdx.x; j < pairs; j += gridDim.x) {
    const uint4* src = reinterpret_cast<const uint4*>(tokens + size_t(order[j] / k) * row_bytes);
    uint4* dst = reinterpret_cast<uint4*>(send + size_t(j) * row_bytes);
    for (size_t i = threadIdx.x; i < row_bytes / 16; i += blockDim.x) dst[i] = src[i];
  }
}

template <ncclDataType_t T>
__global__ void weighted_sum(char* out, const char* back, const int32_t* position, const float* weights, int tokens,
                             int k, int hidden, size_t row_bytes) {
  for (int t = blockIdx.x; t < tokens; t += gridDim.x)
    for (int x = threadIdx.x; x < hidden; x += blockDim.x) {
      float acc = 0.0f;
      for (int j = 0; j < k; ++j)
        acc = __fadd_rn(acc, __fmul_rn(weights[t * k + j], braid::element<T>(
                                                               back + size_t(position[t * k + j]) * row_bytes, x)));
      braid::set_element<T>(out + size_t(t) * row_bytes, x, acc);
    }
}

#define CTRY(call)                                                                                         \
  do {                                                                                                     \
    const cudaError_t e_ = (call);                                                                         \
    if (e_ != cudaSuccess) {                                                                               \
      snprintf(res.error, sizeof(res.error), "%s: %s", #call, cudaGetErrorString(e_));                     \
      return;                                                                                              \
    }                                                                                                      \
  } while (0)
#define LCUDA(call)                                                          \
  do {                                                                       \
    if ((call) != cudaSuccess) return ncclUnhandledCudaError;                \
  } while (0)

// Device memory of `bytes`, freed with the rank; stream-ordered, since a
// cudaMalloc or cudaFree that waited for the device would wait for a peer
// rank's kernel (threads share the GPU's context), which may be waiting
// for this rank's next one.
class DeviceBuffers {
 public:
  explicit DeviceBuffers(cudaStream_t stream) : stream_(stream) {}
  ~DeviceBuffers() {
    for (void* p : owned_) cudaFreeAsync(p, stream_);
  }
  template <class T>
  T* get(size_t bytes) {
    void* p = nullptr;
    if (cudaMallocAsync(&p, bytes ? bytes : 16, stream_) != cudaSuccess) return nullptr;
    owned_.push_back(p);
    return static_cast<T*>(p);
  }

 private:
  cudaStream_t stream_;
  std::vector<void*> owned_;
};

}  // namespace

void cuda_rank_main(const Options& o, const ncclUniqueId& id, int rank, RankResult& res) {
  const int n = o.nranks, L = o.experts / n, K = o.topk, H = o.hidden, eb = elem_bytes(o.dtype);
  const size_t row_bytes = size_t(H) * eb, pairs = size_t(o.tokens) * K;
  if (row_bytes % 16) {
    snprintf(res.error, sizeof(res.error), "--device needs rows of a multiple of 16 bytes (hidden x element size)");
    return;
  }
  int devices = 0;
  CTRY(cudaGetDeviceCount(&devices));
  CTRY(cudaSetDevice(rank % devices));
  // Stream-ordered frees keep their memory: trimming the pool at a
  // synchronize could wait for a peer rank's kernel.
  cudaMemPool_t pool;
  uint64_t keep = UINT64_MAX;
  CTRY(cudaDeviceGetDefaultMemPool(&pool, rank % devices));
  CTRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  ncclComm_t comm = nullptr;
  TRY(ncclCommInitRank(&comm, n, id, rank));
  struct OwnedStream {
    cudaStream_t s = nullptr;
    ~OwnedStream() {
      if (s) cudaStreamDestroy(s);
    }
  } owned;  // destroyed after `mem`, whose frees are ordered on it
  CTRY(cudaStreamCreateWithFlags(&owned.s, cudaStreamNonBlocking));
  const cudaStream_t stream = owned.s;
  DeviceBuffers mem(stream);
  float* zero = mem.get<float>(sizeof(float));
  if (zero) CTRY(cudaMemsetAsync(zero, 0, sizeof(float), stream));
  auto barrier = [&]() -> ncclResult_t {
    LTRY(ncclAllReduce(zero, zero, 1, ncclFloat, ncclSum, comm, stream));
    LCUDA(cudaStreamSynchronize(stream));
    return ncclSuccess;
  };

  const std::vector<int32_t> topk = route(o, rank);
  std::vector<char> tokens(size_t(o.tokens) * row_bytes);
  for (int t = 0; t < o.tokens; ++t)
    for (int h = 0; h < H; ++h) store(o.dtype, tokens.data(), size_t(t) * H + h, float((rank + t + h) % 7 - 3));
  const std::vector<float> weights(pairs, 1.0f);
  char* d_tokens = mem.get<char>(tokens.size());
  int32_t* d_topk = mem.get<int32_t>(pairs * 4);
  float* d_weights = mem.get<float>(pairs * 4);
  if (!d_tokens || !d_topk || !d_weights || !zero) {
    snprintf(res.error, sizeof(res.error), "cudaMalloc failed");
    return;
  }
  CTRY(cudaMemcpyAsync(d_tokens, tokens.data(), tokens.size(), cudaMemcpyHostToDevice, stream));
  CTRY(cudaMemcpyAsync(d_topk, topk.data(), pairs * 4, cudaMemcpyHostToDevice, stream));
  CTRY(cudaMemcpyAsync(d_weights, weights.data(), pairs * 4, cudaMemcpyHostToDevice, stream));
  CTRY(cudaStreamSynchronize(stream));

  // ---- braid MoE.
  braidMoeConfig_t cfg = config_of(o);
  braidMoe_t moe = nullptr;
  TRY(braidMoeCreate(comm, &cfg, &moe));
  size_t max_rows = 0;
  int capacity = 0;
  TRY(braidMoeGetInfo(moe, &max_rows, &capacity));
  char* d_recv = nullptr;  // the experts' rows, then (the identity) their results
  if (o.zero_copy & braidMoeZeroCopyCombine) TRY(braidMoeGetCombineBuffer(moe, reinterpret_cast<void**>(&d_recv)));
  else d_recv = mem.get<char>(max_rows * row_bytes);
  if (o.zero_copy & braidMoeZeroCopyDispatch) {  // the same tokens every layer, in the dispatch buffer
    char* buffer = nullptr;
    TRY(braidMoeGetDispatchBuffer(moe, reinterpret_cast<void**>(&buffer)));
    CTRY(cudaMemcpyAsync(buffer, d_tokens, tokens.size(), cudaMemcpyDeviceToDevice, stream));
    CTRY(cudaStreamSynchronize(stream));
    d_tokens = buffer;
  }
  char* d_out = mem.get<char>(tokens.size());
  int32_t* d_counts = mem.get<int32_t>(size_t(n) * L * 4);
  int64_t* d_dropped = mem.get<int64_t>(8);
  auto moe_layer = [&](double* d, double* c) -> ncclResult_t {
    LTRY(barrier());
    auto t0 = Clock::now();
    LTRY(braidMoeDispatch(moe, d_tokens, d_topk, o.tokens, d_recv, d_counts, d_dropped, stream));
    LCUDA(cudaStreamSynchronize(stream));
    *d += us_since(t0);
    LTRY(barrier());
    t0 = Clock::now();
    LTRY(braidMoeCombine(moe, d_recv, d_weights, d_out, stream));  // experts: the identity
    LCUDA(cudaStreamSynchronize(stream));
    *c += us_since(t0);
    return ncclSuccess;
  };

  // ---- The PyTorch path.
  int32_t* d_per_expert = mem.get<int32_t>(size_t(o.experts) * 4);
  int32_t* d_recv_per_expert = mem.get<int32_t>(size_t(o.experts) * 4);
  int32_t* d_order = mem.get<int32_t>(pairs * 4);
  int32_t* d_position = mem.get<int32_t>(pairs * 4);
  char* d_send = mem.get<char>(pairs * row_bytes);
  char* d_back = mem.get<char>(pairs * row_bytes);
  char* d_a2a_out = mem.get<char>(tokens.size());
  // Received rows: at most every rank's every pair.
  char* d_a2a_recv = mem.get<char>(size_t(n) * pairs * row_bytes);
  std::vector<int32_t> per_expert(size_t(o.experts)), recv_per_expert(size_t(o.experts));
  std::vector<size_t> send_off(size_t(n) + 1), recv_off(size_t(n) + 1);
  auto a2a_layer = [&](double* d, double* c) -> ncclResult_t {
    LTRY(barrier());
    auto t0 = Clock::now();
    sort_by_expert<<<1, 1024, size_t(o.experts) * 4, stream>>>(d_topk, int(pairs), o.experts, d_per_expert, d_order,
                                                                 d_position);
    gather_rows<<<256, 256, 0, stream>>>(d_send, d_tokens, d_order, int(pairs), K, row_bytes);
    LTRY(ncclAlltoAll(d_per_expert, d_recv_per_expert, size_t(L), ncclInt32, comm, stream));
    LCUDA(cudaMemcpyAsync(per_expert.data(), d_per_expert, per_expert.size() * 4, cudaMemcpyDeviceToHost, stream));
    LCUDA(cudaMemcpyAsync(recv_per_expert.data(), d_recv_per_expert, recv_per_expert.size() * 4,
                          cudaMemcpyDeviceToHost, stream));
    LCUDA(cudaStreamSynchronize(stream));  // the splits, on the host
    for (int p = 0; p < n; ++p) {
      size_t sent = 0, got = 0;
      for (int le = 0; le < L; ++le) {
        sent += size_t(per_expert[size_t(p) * L + le]);
        got += size_t(recv_per_expert[size_t(p) * L + le]);
      }
      send_off[size_t(p) + 1] = send_off[size_t(p)] + sent;
      recv_off[size_t(p) + 1] = recv_off[size_t(p)] + got;
    }
    LTRY(ncclGroupStart());
    for (int p = 0; p < n; ++p) {
      LTRY(ncclSend(d_send + send_off[size_t(p)] * row_bytes, (send_off[size_t(p) + 1] - send_off[size_t(p)]) * H,
                    o.dtype, p, comm, stream));
      LTRY(ncclRecv(d_a2a_recv + recv_off[size_t(p)] * row_bytes,
                    (recv_off[size_t(p) + 1] - recv_off[size_t(p)]) * H, o.dtype, p, comm, stream));
    }
    LTRY(ncclGroupEnd());
    LCUDA(cudaStreamSynchronize(stream));
    *d += us_since(t0);
    LTRY(barrier());
    t0 = Clock::now();
    LTRY(ncclGroupStart());
    for (int p = 0; p < n; ++p) {  // experts: the identity, so the received rows go back as they are
      LTRY(ncclSend(d_a2a_recv + recv_off[size_t(p)] * row_bytes,
                    (recv_off[size_t(p) + 1] - recv_off[size_t(p)]) * H, o.dtype, p, comm, stream));
      LTRY(ncclRecv(d_back + send_off[size_t(p)] * row_bytes, (send_off[size_t(p) + 1] - send_off[size_t(p)]) * H,
                    o.dtype, p, comm, stream));
    }
    LTRY(ncclGroupEnd());
    braid::with_element_type(o.dtype, [&]<ncclDataType_t T>() {
      weighted_sum<T><<<256, 256, 0, stream>>>(d_a2a_out, d_back, d_position, d_weights, o.tokens, K, H, row_bytes);
    });
    LCUDA(cudaStreamSynchronize(stream));
    *c += us_since(t0);
    return ncclSuccess;
  };

  TRY(run_rounds(o, moe, moe_layer, a2a_layer, res));

  std::vector<int32_t> counts(size_t(n) * L);
  std::vector<char> out(tokens.size()), a2a_out(tokens.size());
  CTRY(cudaMemcpyAsync(counts.data(), d_counts, counts.size() * 4, cudaMemcpyDeviceToHost, stream));
  CTRY(cudaMemcpyAsync(&res.dropped, d_dropped, 8, cudaMemcpyDeviceToHost, stream));
  CTRY(cudaMemcpyAsync(out.data(), d_out, out.size(), cudaMemcpyDeviceToHost, stream));
  CTRY(cudaMemcpyAsync(a2a_out.data(), d_a2a_out, a2a_out.size(), cudaMemcpyDeviceToHost, stream));
  CTRY(cudaStreamSynchronize(stream));
  const size_t own_rows = send_off[size_t(rank) + 1] - send_off[size_t(rank)];
  finish_rank(o, rank, capacity, topk, tokens, counts, out, a2a_out, (pairs - own_rows) * row_bytes, res);
  TRY(braidMoeDestroy(moe));
  TRY(ncclCommDestroy(comm));
}

}  // namespace moe_perf
