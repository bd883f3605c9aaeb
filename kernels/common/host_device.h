#pragma once
// KVSCOPE_HD marks the small inline functions that both backends compile: __host__ __device__ under nvcc,
// nothing for the host compiler, so the CPU and CUDA kernels run the very same per-element math.
#if defined(__CUDACC__)
#define KVSCOPE_HD __host__ __device__
#else
#define KVSCOPE_HD
#endif
