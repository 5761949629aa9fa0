# aiter_mla - build, test, run, bench.
#
#   make run         the decode example (GPU when there is one, else the CPU reference)
#   make test        host tests (ASan/UBSan), header and kernel compile checks, GPU tests
#                    when a GPU is present; ends with "N passed, N failed"
#   make test-gpu    the GPU test sweep only
#   make test-gpu-mfma  (NVIDIA) the decode, sparse, prefill and V4 GPU tests on the AMD matrix-core
#                    kernels, their 16x16x16 product emulated (AITER_MLA_MFMA_EMULATE)
#   make bench       ceilings, then decode, sparse, V4, small-op and prefill timings (needs a GPU)
#   make sanitize    (NVIDIA) the quick GPU sweep under compute-sanitizer's memcheck,
#                    racecheck and synccheck (SANITIZE_TOOLS=, SANITIZE_GROUPS=)
#   make test-host   the host tests only; make test-all: make test and the host builds CI
#                    has no time for (below); make clean
#
# GPU=auto|cuda|hip|none picks the GPU compiler (auto: the vendor whose GPU is present);
# ARCH= overrides the target (sm_90a, sm_100a, gfx942, gfx950, "gfx942,gfx950", ...), which is
# otherwise the first GPU's (sm_90a on Hopper, for its wgmma kernels; sm_XY from its compute
# capability elsewhere; its gfx name on AMD), or sm_90a / gfx942 where none answers;
# compute_XY builds PTX alone (run through the driver's JIT, CUDA_FORCE_PTX_JIT=1 on a newer GPU).
# KERNEL_FLAGS= adds flags for kernels.hip: -DAITER_MLA_MAX_SMEM_PER_BLOCK=101376 with
# ARCH=compute_80 runs, on an H100, what RTX 30 and A10 GPUs (99 KB a block) run; with
# ARCH=compute_89 what RTX 40, L4 and L40 GPUs run.

GPU ?= auto
CC ?= cc
CXX ?= c++
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
HIPCC ?= $(shell command -v hipcc 2>/dev/null)
BUILD ?= build
comma := ,

ifeq ($(GPU),auto)
  ifneq ($(and $(NVCC),$(shell nvidia-smi -L 2>/dev/null | grep -q GPU && echo y)),)
    GPU := cuda
  else ifneq ($(and $(HIPCC),$(wildcard /dev/kfd)),)
    GPU := hip
  else
    GPU := none
  endif
endif

WARN := -Wall -Wextra -Werror
CFLAGS_HOST := -std=c99 -pedantic $(WARN)
SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

ifeq ($(GPU),cuda)
  ifndef ARCH
    GPU_CC := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .\r' | grep -E '^[0-9]+$$')
    ARCH := $(if $(filter 90,$(GPU_CC)),sm_90a,$(if $(GPU_CC),sm_$(GPU_CC),sm_90a))
  endif
  GPUCC := $(NVCC)
  GPUFLAGS := -x cu -std=c++17 -O3 --split-compile=0 $(foreach a,$(subst $(comma), ,$(ARCH)),-gencode=arch=compute_$(patsubst compute_%,%,$(a:sm_%=%)),code=$(a)) \
              -Xcompiler -Wall,-Wextra,-Werror
  # the warpgroup (wgmma) kernels need sm_90a: builds with it take them (on Hopper alone;
  # ARCH=sm_80,sm_90a runs mma.sync and portable kernels on Ampere)
  GPUFLAGS += $(if $(filter sm_90a,$(subst $(comma), ,$(ARCH))),-DAITER_MLA_WGMMA)
  GPULINK := $(NVCC) -Xcompiler -fopenmp
  GPULIBS := -lcublas
  BLAS := -DAITER_MLA_WITH_BLAS
else ifeq ($(GPU),hip)
  ifndef ARCH
    GPU_GFX := $(shell rocm_agent_enumerator 2>/dev/null | grep -E '^gfx[0-9a-f]+$$' | grep -v '^gfx000$$' | head -n 1)
    ARCH := $(if $(GPU_GFX),$(GPU_GFX),gfx942)
  endif
  GPUCC := $(HIPCC)
  GPUFLAGS := -std=c++17 -O3 $(foreach a,$(subst $(comma), ,$(ARCH)),--offload-arch=$(a)) $(WARN)
  GPULINK := $(HIPCC) -fopenmp
  GPULIBS := $(if $(wildcard /opt/rocm/lib/libhipblas.so /usr/lib/x86_64-linux-gnu/libhipblas.so),-lhipblas)
  BLAS := $(if $(GPULIBS),-DAITER_MLA_WITH_BLAS)
endif
HEADER := aiter_mla.h
EXAMPLES := decode bench prefill sparse dsv4

.PHONY: all test test-all test-host test-gpu test-gpu-mfma sanitize run bench clean check-header check-kernels
all: $(addprefix $(BUILD)/,$(EXAMPLES)) $(BUILD)/test_host

$(BUILD):
	@mkdir -p $(BUILD)

# ---- host-only programs ----------------------------------------------------------------
$(BUILD)/test_host: tests/test_host.c tests/testing.h $(HEADER) | $(BUILD)
	$(CC) $(CFLAGS_HOST) -O1 -g $(SAN) -DAITER_MLA_NO_GPU -o $@ tests/test_host.c -lm

# ---- examples and GPU tests: with kernels.hip when GPU != none ----------------------------
ifeq ($(GPU),none)
$(BUILD)/%: examples/%.c $(HEADER) examples/where.h | $(BUILD)
	$(CC) $(CFLAGS_HOST) -O2 -DAITER_MLA_NO_GPU -o $@ $< -lm
$(BUILD)/test_gpu $(BUILD)/test_gpu_mfma:
	@echo "$(@F) needs GPU=cuda or GPU=hip (no GPU compiler and device found)"; exit 1
else
$(BUILD)/kernels.o: kernels.hip $(HEADER) | $(BUILD)
	$(GPUCC) $(GPUFLAGS) $(KERNEL_FLAGS) -c -o $@ kernels.hip
$(BUILD)/gpu.o: examples/gpu.hip examples/gpu.h | $(BUILD)
	$(GPUCC) $(GPUFLAGS) $(BLAS) -c -o $@ examples/gpu.hip
$(BUILD)/%.o: examples/%.c $(HEADER) examples/gpu.h examples/where.h | $(BUILD)
	$(CC) $(CFLAGS_HOST) -O2 -c -o $@ $<
$(BUILD)/test_gpu.o: tests/test_gpu.c tests/testing.h $(HEADER) examples/gpu.h | $(BUILD)
	$(CC) $(CFLAGS_HOST) -O2 -Wno-unknown-pragmas -fopenmp -c -o $@ $<
$(BUILD)/%: $(BUILD)/%.o $(BUILD)/kernels.o $(BUILD)/gpu.o
	$(GPULINK) -o $@ $^ $(GPULIBS) -lm
# kernels.hip with the AMD matrix-core kernels in place of the mma ones (NVIDIA: emulated)
$(BUILD)/kernels_mfma.o: kernels.hip $(HEADER) | $(BUILD)
	$(GPUCC) $(GPUFLAGS) -DAITER_MLA_MFMA_EMULATE -c -o $@ kernels.hip
$(BUILD)/test_gpu_mfma: $(BUILD)/test_gpu.o $(BUILD)/kernels_mfma.o $(BUILD)/gpu.o
	$(GPULINK) -o $@ $^ $(GPULIBS) -lm
endif
MFMA_TESTS := test_decode_sweep test_decode_variants test_decode_rising_keys test_decode_graph test_sparse_attention test_decode_fp8_codes test_prefill \
              test_v4_attention_gpu test_v4_prefill_gpu test_bad_plans

# ---- the README's commands ------------------------------------------------------------------
run: $(BUILD)/decode
	$(abspath $(BUILD))/decode

RUN_TESTS = GPU=$(GPU) NVCC="$(NVCC)" HIPCC="$(HIPCC)" CC="$(CC)" CXX="$(CXX)" BUILD=$(BUILD) MAKE="$(MAKE)" sh tests/run_tests.sh
test:
	@$(RUN_TESTS)

# make test, and the host test runs CI has no time for: clang's ASan/UBSan build, gcc's -m32
# build (x87), the AArch64 build run under qemu-user
test-all:
	@TEST_ALL=1 $(RUN_TESTS)

test-host: $(BUILD)/test_host
	$(abspath $(BUILD))/test_host

test-gpu: $(BUILD)/test_gpu
	$(abspath $(BUILD))/test_gpu

test-gpu-mfma: $(BUILD)/test_gpu_mfma
	$(abspath $(BUILD))/test_gpu_mfma $(MFMA_TESTS)

sanitize: $(BUILD)/test_gpu
	sh tests/sanitize.sh $(abspath $(BUILD))/test_gpu

bench: $(BUILD)/bench
	$(abspath $(BUILD))/bench

clean:
	rm -rf $(BUILD)
