// kernels.cu — the kernels test/rprobe.c loads (nvcc -ptx): the same
// names and parameters as the fake driver's.
extern "C" __global__ void vecadd(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

extern "C" __global__ void matmul(const float *A, const float *B, float *C, int n) {
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n && col < n) {
        float acc = 0;
        for (int k = 0; k < n; k++)
            acc = __fadd_rn(acc, __fmul_rn(A[row * n + k], B[k * n + col]));
        C[row * n + col] = acc;
    }
}

extern "C" __global__ void scale(float *x, float f, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] *= f;
}

extern "C" __global__ void spin(int loops) {
    for (int i = 0; i < loops; i++)
        __nanosleep(100);
}
