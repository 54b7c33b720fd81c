// spin.cu — the kernel gpuprobe runs: it spins for `cycles` clock cycles.
// gpu-test.sh compiles it to PTX with nvcc when nvcc is there.
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
