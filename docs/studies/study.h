// study.h - what the standalone studies in this folder share (not part of the library): error
// checks, the device line, and timing as `make bench` times a row (device events around a
// launch queued behind a spin, so that each run measures the device's time for its work and
// not the host's launch in front of it; the median of the runs after 5 untimed ones).
#pragma once
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                                \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

// ~cycles of one thread's spin on the stream
__global__ void study_hold(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

struct StudyTimer {
    cudaStream_t st;
    cudaEvent_t e0, e1;
    StudyTimer() {
        CK(cudaStreamCreate(&st));
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
    }
    // The median, in us, of `runs` timed calls of launch(r) (r = 5, 6, ...; r = 0 .. 4 untimed):
    // launch enqueues its work on st.
    template <class F>
    double median_us(int runs, F &&launch) {
        std::vector<float> ts;
        for (int r = 0; r < runs + 5; r++) {
            float ms;
            study_hold<<<1, 1, 0, st>>>(200000);
            CK(cudaEventRecord(e0, st));
            launch(r);
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 5) ts.push_back(ms * 1000.0f);
        }
        std::sort(ts.begin(), ts.end());
        return ts[ts.size() / 2];
    }
};

// The device's properties, its name, SM count and L2 size printed on one line.
static cudaDeviceProp study_device() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    return prop;
}
