/* sim_torch.h - the C API of the PyTorch stand-in (tests/sim/torch,
 * built as build/tests/torch/lib/libc10_cuda.so), for test programs.
 *
 * The stand-in is a small caching allocator that follows PyTorch's rules
 * (c10_cuda.cpp says which) over the simulated CUDA runtime, with
 * PyTorch's trace tracker hook, so that gpumemtrace's PyTorch bridge can
 * be tested without PyTorch. Real PyTorch has no such C API: these calls
 * stand for what torch.empty / del / torch.cuda.* do underneath.
 * Python test programs call them through ctypes (tests/e2e/py/torch_app.py)
 * and declare the same signatures there.
 *
 * Nothing here throws: failures are NULL or -1.
 */
#ifndef SIM_TORCH_H
#define SIM_TORCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* PyTorch's lazy CUDA init: creates the allocators of devices 0..ndev-1
 * (ndev <= 0: every device the runtime has). Before it the allocator is
 * not initialized() and trackers cannot be attached. 0, or -1. */
int sim_torch_init(int ndev);

/* The backend in use: "native", or SIM_TORCH_BACKEND's value when set.
 * "cudaMallocAsync" selects a stand-in of PyTorch's cudaMallocAsync
 * backend (one cudaMallocAsync per block, no trace events, attaching a
 * tracker throws); any other value keeps the native caching allocator
 * but name() reports that value. */
const char *sim_torch_backend(void);

/* A block of `size` bytes on the current device (cudaGetDevice), for
 * `stream` (NULL: the legacy default stream), from the default memory
 * pool. NULL when out of memory (after PyTorch's OOM handling and its OOM
 * trace event), or for size 0. With PYTORCH_NO_CUDA_MEMORY_CACHING=1 each
 * block is a cudaMalloc of its own, as in PyTorch, and no event fires. */
void *sim_torch_malloc(size_t size, void *stream);

/* The same from the private memory pool {first, second} (PyTorch's
 * MempoolId_t: {0, id} a torch.cuda.MemPool, {capture id, 0} a CUDA
 * graph's pool), created at first use. */
void *sim_torch_malloc_pool(size_t size, void *stream,
                            unsigned long long first,
                            unsigned long long second);

/* Frees a block (FREE_REQUESTED; FREE_COMPLETED now, or once the streams
 * it was recorded on are past the free). 0, or -1 for an unknown pointer. */
int sim_torch_free(void *p);

/* Tensor.record_stream: the block is in use on `stream` too, so its free
 * completes only when that stream reaches the free. 0, or -1. */
int sim_torch_record_stream(void *p, void *stream);

/* torch.cuda.empty_cache: waits for pending frees, gives every unsplit
 * free segment of the default pools (and of released private pools) back
 * with cudaFree. */
void sim_torch_empty_cache(void);

/* The private pool may be freed once empty (torch.cuda.MemPool deleted). */
int sim_torch_release_pool(unsigned long long first, unsigned long long second);

/* Aggregate statistics of device `dev` (DeviceStats, index 0):
 * out[0] allocated_bytes current, out[1] its peak, out[2] reserved_bytes
 * current, out[3] its peak. All -1 for a device without an allocator. */
void sim_torch_stats(int dev, long long out[4]);

/* Event counts of device `dev`: out[0] blocks handed out (ALLOC),
 * out[1] blocks freed (FREE_REQUESTED), out[2] frees completed
 * (FREE_COMPLETED), out[3] segments allocated (SEGMENT_ALLOC), out[4]
 * segments freed (SEGMENT_FREE), out[5] out-of-memory errors (OOM). */
void sim_torch_counts(int dev, long long out[6]);

/* One figure of DeviceStats by name: "<stat>.<current|peak|allocated|freed>"
 * for allocation, segment, active, inactive_split, allocated_bytes,
 * reserved_bytes, active_bytes, inactive_split_bytes, requested_bytes
 * (aggregate), or num_ooms, num_alloc_retries, num_device_alloc,
 * num_device_free. -1 for an unknown name or device. */
long long sim_torch_stat(int dev, const char *name);

/* torch.cuda.reset_peak_memory_stats(dev). */
void sim_torch_reset_peak(int dev);

/* The size of the block at p as the allocator keeps it (>= the request
 * rounded to 512 bytes: a free block not worth splitting is handed out
 * whole). 0 for an unknown pointer. */
size_t sim_torch_block_size(void *p);

/* Helpers for the Python tests (which load no CUDA library themselves):
 * cudaSetDevice, cudaStreamCreate, a simulated kernel that only takes
 * `usec` on a stream (simLaunchSleep), cudaDeviceSynchronize. */
int sim_torch_set_device(int dev);
void *sim_torch_stream_create(void);
int sim_torch_stream_sleep(void *stream, unsigned usec);
int sim_torch_synchronize(void);

/* The layers above the allocator (ops.cpp), for the tests of how
 * allocations are named: an op called from Python (torch.mul's binding,
 * dispatch, kernel, output allocation: n bytes), torch.mm's the same
 * way, and a backward pass (MeanBackward0 then MulBackward0, n bytes
 * each, then AccumulateGrad) run on the autograd engine's own thread
 * while the caller waits. out: the two gradients; 0, or -1. */
void *sim_torch_op_mul(size_t n);
void *sim_torch_op_mm(size_t n);
int sim_torch_run_backward(size_t n, void *out[2]);
/* A backward pass that cleans up as autograd does: MeanBackward0 makes an
 * intermediate gradient of n_intermediate bytes, MulBackward0 the
 * gradient (n_grad bytes, returned), then the engine's thread gives back
 * the intermediate and the nsaved saved tensors. */
void *sim_torch_run_backward_release(size_t n_intermediate, size_t n_grad, void **saved,
                                     int nsaved);
/* cuBLAS's workspace, n bytes, from at::cuda::getCUDABlasLtWorkspace. */
void *sim_torch_workspace(size_t n);
/* A Python dispatch mode (NULL: none): while set, the mul op (forward and
 * MulBackward0's) calls mode(n), which calls sim_torch_boxed_mul(n) - the
 * kernel called boxed, as from torch.ops. */
void sim_torch_set_dispatch_mode(void *(*mode)(size_t));
void *sim_torch_boxed_mul(size_t n);

#ifdef __cplusplus
}
#endif

#endif /* SIM_TORCH_H */
