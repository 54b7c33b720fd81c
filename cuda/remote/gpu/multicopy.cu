// multicopy.cu — cuda-samples' simpleMultiCopy in substance (nvcc, CUDA
// runtime): four streams, pinned buffers of 4 Mi ints; each cycle runs a
// kernel on one stream's frame while the next frame is uploaded and the
// previous one downloaded. Times the serial (one stream) and the
// overlapped (four streams) runs of 10 cycles, the whole program, and
// checks every output frame. Prints key=value lines.
#include <chrono>
#include <cstdio>

#define STREAM_COUNT 4
static int N = 1 << 22, memsize = (1 << 22) * sizeof(int), inner_reps = 5;
static int *h_data_source, *h_data_sink, *h_data_in[STREAM_COUNT], *d_data_in[STREAM_COUNT];
static int *h_data_out[STREAM_COUNT], *d_data_out[STREAM_COUNT];
static cudaEvent_t cycleDone[STREAM_COUNT], start, stop;
static cudaStream_t stream[STREAM_COUNT];

__global__ void incKernel(int *g_out, int *g_in, int N, int inner_reps) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N)
        for (int i = 0; i < inner_reps; ++i)
            g_out[idx] = g_in[idx] + 1;
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("error=%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static float processWithStreams(int streams_used) {
    dim3 block(512), grid((N + block.x - 1) / block.x);
    int current_stream = 0;
    float time;
    CK(cudaEventRecord(start, 0));
    for (int i = 0; i < 10; ++i) {
        int next_stream = (current_stream + 1) % streams_used;
        // Ensure that processing and copying of the last cycle has finished
        CK(cudaEventSynchronize(cycleDone[next_stream]));
        // Process current frame
        incKernel<<<grid, block, 0, stream[current_stream]>>>(d_data_out[current_stream], d_data_in[current_stream], N,
                                                              inner_reps);
        // Upload next frame
        CK(cudaMemcpyAsync(d_data_in[next_stream], h_data_in[next_stream], memsize, cudaMemcpyHostToDevice,
                           stream[next_stream]));
        CK(cudaEventRecord(cycleDone[next_stream], stream[next_stream]));
        // Download current frame
        CK(cudaMemcpyAsync(h_data_out[current_stream], d_data_out[current_stream], memsize, cudaMemcpyDeviceToHost,
                           stream[current_stream]));
        current_stream = next_stream;
    }
    CK(cudaEventRecord(stop, 0));
    CK(cudaDeviceSynchronize());
    CK(cudaEventElapsedTime(&time, start, stop));
    return time;
}

static int wrong_frames() {
    int bad = 0;
    for (int i = 0; i < STREAM_COUNT; ++i)
        for (int j = 0; j < N; ++j)
            if (h_data_out[i][j] != j + 1) {
                bad++;
                break;
            }
    return bad;
}

int main() {
    auto p0 = std::chrono::steady_clock::now();
    CK(cudaHostAlloc(&h_data_source, memsize, cudaHostAllocDefault));
    CK(cudaHostAlloc(&h_data_sink, memsize, cudaHostAllocDefault));
    for (int i = 0; i < STREAM_COUNT; ++i) {
        CK(cudaHostAlloc(&h_data_in[i], memsize, cudaHostAllocDefault));
        CK(cudaMalloc(&d_data_in[i], memsize));
        CK(cudaMemset(d_data_in[i], 0, memsize));
        CK(cudaHostAlloc(&h_data_out[i], memsize, cudaHostAllocDefault));
        CK(cudaMalloc(&d_data_out[i], memsize));
        CK(cudaStreamCreate(&stream[i]));
        CK(cudaEventCreate(&cycleDone[i]));
        CK(cudaEventRecord(cycleDone[i], stream[i]));
    }
    CK(cudaEventCreate(&start));
    CK(cudaEventCreate(&stop));
    for (int i = 0; i < N; ++i)
        h_data_source[i] = i;
    for (int i = 0; i < STREAM_COUNT; ++i)
        for (int j = 0; j < N; ++j)
            h_data_in[i][j] = h_data_source[j];
    // Warm up and time one of each (as the sample does).
    dim3 block(512), grid((N + block.x - 1) / block.x);
    float memcpy_h2d_time, memcpy_d2h_time, kernel_time;
    CK(cudaEventRecord(start, 0));
    CK(cudaMemcpyAsync(d_data_in[0], h_data_in[0], memsize, cudaMemcpyHostToDevice, 0));
    CK(cudaEventRecord(stop, 0));
    CK(cudaEventSynchronize(stop));
    CK(cudaEventElapsedTime(&memcpy_h2d_time, start, stop));
    CK(cudaEventRecord(start, 0));
    CK(cudaMemcpyAsync(h_data_out[0], d_data_out[0], memsize, cudaMemcpyDeviceToHost, 0));
    CK(cudaEventRecord(stop, 0));
    CK(cudaEventSynchronize(stop));
    CK(cudaEventElapsedTime(&memcpy_d2h_time, start, stop));
    CK(cudaEventRecord(start, 0));
    incKernel<<<grid, block, 0, 0>>>(d_data_out[0], d_data_in[0], N, inner_reps);
    CK(cudaEventRecord(stop, 0));
    CK(cudaEventSynchronize(stop));
    CK(cudaEventElapsedTime(&kernel_time, start, stop));
    // Prime every stream's input frame.
    for (int i = 0; i < STREAM_COUNT; ++i)
        CK(cudaMemcpy(d_data_in[i], h_data_in[i], memsize, cudaMemcpyHostToDevice));
    auto s0 = std::chrono::steady_clock::now();
    float serial_time = processWithStreams(1);
    auto s1 = std::chrono::steady_clock::now();
    float overlap_time = processWithStreams(STREAM_COUNT);
    auto s2 = std::chrono::steady_clock::now();
    int bad = wrong_frames();
    for (int i = 0; i < STREAM_COUNT; ++i) {
        CK(cudaFreeHost(h_data_in[i]));
        CK(cudaFree(d_data_in[i]));
        CK(cudaFreeHost(h_data_out[i]));
        CK(cudaFree(d_data_out[i]));
        CK(cudaStreamDestroy(stream[i]));
        CK(cudaEventDestroy(cycleDone[i]));
    }
    CK(cudaFreeHost(h_data_source));
    CK(cudaFreeHost(h_data_sink));
    auto p1 = std::chrono::steady_clock::now();
    auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    printf("multicopy_h2d_ms=%.2f\nmulticopy_d2h_ms=%.2f\nmulticopy_kernel_ms=%.2f\n", memcpy_h2d_time,
           memcpy_d2h_time, kernel_time);
    printf("multicopy_serial_event_ms=%.2f\nmulticopy_overlap_event_ms=%.2f\n", serial_time, overlap_time);
    printf("multicopy_serial_wall_ms=%.2f\nmulticopy_overlap_wall_ms=%.2f\nmulticopy_program_ms=%.2f\n",
           ms(s0, s1), ms(s1, s2), ms(p0, p1));
    printf("multicopy_wrong_frames=%d\n", bad);
    return bad != 0;
}
