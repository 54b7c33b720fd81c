/*
 * cublas_check.c — cuBLAS through whatever libcuda.so.1 the process loads:
 * cublasCreate, then an FP32 SGEMM and a BF16 GEMM (tensor cores) checked
 * against a CPU reference. Prints key=value lines; exit status 0 only if
 * every result is right.
 *
 *   nvcc -O2 -o cublas_check cublas_check.c -lcublas
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

/* bfloat16 by hand (cuda_bf16.h is C++): the upper half of a float,
 * rounded to nearest even. */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int fails;
#define CUDA(x)                                                                                             \
    do {                                                                                                    \
        cudaError_t e_ = (x);                                                                               \
        if (e_ != cudaSuccess) {                                                                            \
            printf("error=%s -> %s\n", #x, cudaGetErrorString(e_));                                         \
            return 1;                                                                                       \
        }                                                                                                   \
    } while (0)
#define BLAS(x)                                                                                             \
    do {                                                                                                    \
        cublasStatus_t s_ = (x);                                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                  \
            printf("error=%s -> %d (%s)\n", #x, (int)s_, cublasGetStatusString(s_));                        \
            return 1;                                                                                       \
        }                                                                                                   \
    } while (0)

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* sgemm: C = alpha A B + beta C, column-major, m x k times k x n. */
static int sgemm(cublasHandle_t h, int m, int n, int k) {
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4), *R = malloc(nc * 4);
    for (size_t i = 0; i < na; i++)
        A[i] = (float)((i * 7) % 17) / 8.0f - 1.0f;
    for (size_t i = 0; i < nb; i++)
        B[i] = (float)((i * 5) % 13) / 4.0f - 1.5f;
    for (size_t i = 0; i < nc; i++)
        C[i] = (float)(i % 3);
    float *dA, *dB, *dC;
    CUDA(cudaMalloc((void **)&dA, na * 4));
    CUDA(cudaMalloc((void **)&dB, nb * 4));
    CUDA(cudaMalloc((void **)&dC, nc * 4));
    CUDA(cudaMemcpy(dA, A, na * 4, cudaMemcpyHostToDevice));
    CUDA(cudaMemcpy(dB, B, nb * 4, cudaMemcpyHostToDevice));
    CUDA(cudaMemcpy(dC, C, nc * 4, cudaMemcpyHostToDevice));
    float alpha = 1.5f, beta = 0.5f;
    BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, dA, m, dB, k, &beta, dC, m));
    CUDA(cudaDeviceSynchronize());
    CUDA(cudaMemcpy(R, dC, nc * 4, cudaMemcpyDeviceToHost));
    int wrong = 0;
    double maxerr = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double acc = 0;
            for (int p = 0; p < k; p++)
                acc += (double)A[i + (size_t)p * m] * B[p + (size_t)j * k];
            double want = alpha * acc + beta * C[i + (size_t)j * m];
            double err = fabs(want - R[i + (size_t)j * m]);
            if (err > maxerr)
                maxerr = err;
            wrong += err > 1e-3 * (1 + fabs(want));
        }
    printf("sgemm_%dx%dx%d_wrong=%d\nsgemm_%dx%dx%d_maxerr=%.3g\nsgemm_%dx%dx%d_sum=%016llx\n", m, n, k, wrong, m, n,
           k, maxerr, m, n, k, (unsigned long long)fnv(R, nc * 4));
    fails += wrong != 0;
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    free(A), free(B), free(C), free(R);
    return 0;
}

/* bf16 GEMM with FP32 accumulation (tensor cores), checked on a sample. */
static int gemm_bf16(cublasHandle_t h, int m, int n, int k) {
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    uint16_t *A = malloc(na * 2), *B = malloc(nb * 2);
    float *Af = malloc(na * 4), *Bf = malloc(nb * 4), *R = malloc(nc * 4);
    for (size_t i = 0; i < na; i++) {
        A[i] = to_bf16((float)((i * 3) % 11) / 8.0f - 0.5f);
        Af[i] = from_bf16(A[i]);
    }
    for (size_t i = 0; i < nb; i++) {
        B[i] = to_bf16((float)((i * 7) % 5) / 4.0f - 0.5f);
        Bf[i] = from_bf16(B[i]);
    }
    void *dA, *dB, *dC;
    CUDA(cudaMalloc(&dA, na * 2));
    CUDA(cudaMalloc(&dB, nb * 2));
    CUDA(cudaMalloc(&dC, nc * 4));
    CUDA(cudaMemcpy(dA, A, na * 2, cudaMemcpyHostToDevice));
    CUDA(cudaMemcpy(dB, B, nb * 2, cudaMemcpyHostToDevice));
    float alpha = 1.0f, beta = 0.0f;
    BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, dA, CUDA_R_16BF, m, dB, CUDA_R_16BF, k, &beta, dC,
                      CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CUDA(cudaDeviceSynchronize());
    CUDA(cudaMemcpy(R, dC, nc * 4, cudaMemcpyDeviceToHost));
    int wrong = 0, checked = 0;
    double maxerr = 0;
    for (int j = 0; j < n; j += 7)
        for (int i = 0; i < m; i += 5) {
            double acc = 0;
            for (int p = 0; p < k; p++)
                acc += (double)Af[i + (size_t)p * m] * Bf[p + (size_t)j * k];
            double err = fabs(acc - R[i + (size_t)j * m]);
            if (err > maxerr)
                maxerr = err;
            wrong += err > 1e-2 * (1 + fabs(acc));
            checked++;
        }
    printf("bf16_%dx%dx%d_wrong=%d\nbf16_%dx%dx%d_checked=%d\nbf16_%dx%dx%d_maxerr=%.3g\nbf16_%dx%dx%d_sum=%016llx\n",
           m, n, k, wrong, m, n, k, checked, m, n, k, maxerr, m, n, k, (unsigned long long)fnv(R, nc * 4));
    fails += wrong != 0;
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    free(A), free(B), free(Af), free(Bf), free(R);
    return 0;
}

/* gemm_us: the time of one 256^3 SGEMM call, over 200 calls then a
 * synchronisation (launch cost dominates: what GPU-over-IP adds). The
 * first call uses cuBLAS's own workspace and its status is printed; then
 * the handle gets a workspace of the program's (as PyTorch gives it). */
static int gemm_us(cublasHandle_t h) {
    const int n = 256, calls = 200;
    float *d;
    void *ws;
    CUDA(cudaMalloc((void **)&d, (size_t)3 * n * n * 4));
    CUDA(cudaMalloc(&ws, 32u << 20));
    CUDA(cudaMemset(d, 0, (size_t)3 * n * n * 4));
    float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st =
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, d, n, d + n * n, n, &beta, d + 2 * n * n, n);
    printf("sgemm_256_own_workspace_status=%d\n", (int)st);
    BLAS(cublasSetWorkspace(h, ws, 32u << 20));
    BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, d, n, d + n * n, n, &beta, d + 2 * n * n, n));
    CUDA(cudaDeviceSynchronize());
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < calls; i++)
        BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, d, n, d + n * n, n, &beta, d + 2 * n * n, n));
    CUDA(cudaDeviceSynchronize());
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("sgemm_256_us=%.1f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / calls);
    cudaFree(d);
    cudaFree(ws);
    return 0;
}

int main(void) {
    cublasHandle_t h;
    int v = 0;
    BLAS(cublasCreate(&h));
    BLAS(cublasGetVersion(h, &v));
    printf("cublas_create=ok\ncublas_version=%d\n", v);
    if (sgemm(h, 64, 64, 64) || sgemm(h, 513, 257, 129) || gemm_bf16(h, 1024, 1024, 1024) || gemm_us(h)) {
        printf("done=0\n");
        return 1;
    }
    BLAS(cublasDestroy(h));
    printf("done=%d\n", fails == 0);
    return fails != 0;
}
