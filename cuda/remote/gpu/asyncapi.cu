// asyncapi.cu — cuda-samples' asyncAPI, unmodified in substance (nvcc,
// CUDA runtime): pinned memory, a copy to the device, a kernel and a copy
// back issued on the default stream with events around them; the CPU
// counts how often cudaEventQuery says "not ready" while the GPU works.
// Prints key=value lines: the GPU's time, the CPU's time in the CUDA
// calls, the iterations, and whether the result is right.
#include <chrono>
#include <cstdio>
#include <cstring>

__global__ void increment_kernel(int *g_data, int inc_value) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    g_data[idx] = g_data[idx] + inc_value;
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("error=%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

int main() {
    int n = 16 * 1024 * 1024, nbytes = n * sizeof(int), value = 26;
    int *a = 0, *d_a = 0;
    CK(cudaMallocHost((void **)&a, nbytes));
    memset(a, 0, nbytes);
    CK(cudaMalloc((void **)&d_a, nbytes));
    CK(cudaMemset(d_a, 255, nbytes));
    dim3 threads = dim3(512, 1), blocks = dim3(n / threads.x, 1);
    cudaEvent_t start, stop;
    CK(cudaEventCreate(&start));
    CK(cudaEventCreate(&stop));
    CK(cudaDeviceSynchronize());
    float gpu_time = 0.0f;
    auto t0 = std::chrono::steady_clock::now();
    cudaEventRecord(start, 0);
    cudaMemcpyAsync(d_a, a, nbytes, cudaMemcpyHostToDevice, 0);
    increment_kernel<<<blocks, threads, 0, 0>>>(d_a, value);
    cudaMemcpyAsync(a, d_a, nbytes, cudaMemcpyDeviceToHost, 0);
    cudaEventRecord(stop, 0);
    auto t1 = std::chrono::steady_clock::now();
    unsigned long int counter = 0;
    while (cudaEventQuery(stop) == cudaErrorNotReady)
        counter++;
    auto t2 = std::chrono::steady_clock::now();
    CK(cudaEventElapsedTime(&gpu_time, start, stop));
    int wrong = 0;
    for (int i = 0; i < n; i++)
        wrong += a[i] != value;
    printf("asyncapi_gpu_ms=%.2f\nasyncapi_cpu_calls_ms=%.2f\nasyncapi_wait_ms=%.2f\nasyncapi_iterations=%lu\n"
           "asyncapi_wrong=%d\n",
           gpu_time, std::chrono::duration<double, std::milli>(t1 - t0).count(),
           std::chrono::duration<double, std::milli>(t2 - t1).count(), counter, wrong);
    CK(cudaEventDestroy(start));
    CK(cudaEventDestroy(stop));
    CK(cudaFreeHost(a));
    CK(cudaFree(d_a));
    return wrong != 0;
}
