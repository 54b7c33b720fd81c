// vecadd.cu — the CUDA runtime's vector add (nvcc, unmodified); prints a
// checksum of the result and whether every element is right.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

__global__ void add(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("error=%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

int main() {
    const int n = 1 << 22;
    size_t bytes = n * sizeof(float);
    float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes);
    for (int i = 0; i < n; i++) {
        a[i] = sinf((float)i);
        b[i] = cosf((float)i) * 3.0f;
    }
    float *da, *db, *dc;
    CK(cudaMalloc(&da, bytes));
    CK(cudaMalloc(&db, bytes));
    CK(cudaMalloc(&dc, bytes));
    CK(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));
    add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    CK(cudaGetLastError());
    CK(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < n; i++)
        wrong += c[i] != a[i] + b[i];
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    printf("device=%s sm=%d.%d\nvecadd_wrong=%d\nvecadd_sum=%016llx\n", p.name, p.major, p.minor, wrong,
           (unsigned long long)fnv(c, bytes));
    CK(cudaFree(da));
    CK(cudaFree(db));
    CK(cudaFree(dc));
    return wrong != 0;
}
