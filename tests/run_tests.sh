#!/bin/sh
# run_tests.sh - what `make test` runs. Each step counts as one test, except the test
# programs, whose own "N passed, N failed" lines are added in. Ends with the total line.
# Environment (from the Makefile): GPU, NVCC, HIPCC, CC, CXX, BUILD, MAKE.
set -u
BUILD=${BUILD:-build}
CC=${CC:-cc}
CXX=${CXX:-c++}
MAKE=${MAKE:-make}
LOG=$BUILD/test-logs
mkdir -p "$LOG"
passed=0
failed=0

now() { date +%s; }
report() { # report NAME RC SECONDS: count a finished step; on failure show the end of its log
    if [ "$2" -eq 0 ]; then
        passed=$((passed + 1)); echo "ok    $1 ($3 s)"
    else
        failed=$((failed + 1)); echo "FAIL  $1 ($3 s, log: $LOG/$1.log)"; tail -n 30 "$LOG/$1.log" | sed 's/^/      /'
    fi
}
step() { # step NAME COMMAND...: run, count, keep the log
    name=$1; shift
    t0=$(now)
    "$@" >"$LOG/$name.log" 2>&1
    report "$name" $? $(($(now) - t0))
}
program() { # program NAME COMMAND...: a test program whose last line is "N passed, N failed"
    name=$1; shift
    t0=$(now)
    "$@" >"$LOG/$name.log" 2>&1
    rc=$?
    secs=$(($(now) - t0))
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$LOG/$name.log" | tail -n 1)
    if [ -n "$line" ]; then
        p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
        passed=$((passed + p)); failed=$((failed + f))
    fi
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        [ -n "$line" ] && [ "$f" -gt 0 ] || failed=$((failed + 1))
        echo "FAIL  $name: ${line:-no summary} (exit $rc, $secs s, log: $LOG/$name.log)"; grep -E 'FAIL|ERROR|error' "$LOG/$name.log" | head -n 30 | sed 's/^/      /'
    else
        echo "ok    $name: $line ($secs s)"
    fi
}

kdir="$BUILD/kcheck"
mkdir -p "$kdir"
started=$(now)
# The compile checks of kernels.hip (minutes each) run in the background from the start, in
# two lanes beside the host work: NVIDIA's targets one after the other, AMD's one after the
# other. Section 4 waits for them and counts them. Two targets are checked in full (sm_90a
# with the warpgroup kernels, gfx940): every kernel compiled to machine code. Three more are
# checked up to the compilers' back ends, which take most of the time (CI has two cores and
# 20 minutes); the two PTX checks optimise at -O1 (-Xcicc -O1: the same front end, warnings
# and kernels as -O3, in a tenth of the time; -O3's device code is what the sm_90a check
# compiles to machine code): sm_90 to PTX (the sm_90a build's kernels less the warpgroup and bulk-copy
# ones, plus the mma.sync instances sm_90a leaves to them), sm_80 to PTX with AITER_MLA_WGMMA
# (the pass of a build for several targets that compiles the sm_90 and sm_90a kernels' bodies
# out: Ampere's mma.sync decode, sparse and V4 instances, the mma.sync prefill; and the host
# code that picks them at run time), and gfx90a to LLVM IR (the source path of gfx940's
# matrix-core kernels; front end and code generation, so every kernel is instantiated for it
# and its builtins checked). nvcc's own warnings are errors too (-Werror all-warnings).
# gfx940 stays at -O3: at -O1 it took 394 s against 436 on one core (ROCm 5.2, the two side by
# side), too little to give up compiling what users build.
later() { # later NAME COMMAND...: run in a lane, keep the log, the exit status and the seconds
    name=$1; shift
    t0=$(now)
    "$@" >"$LOG/$name.log" 2>&1
    echo "$? $(($(now) - t0))" >"$LOG/$name.rc"
}
collect() { # collect NAME: count a lane's finished step
    set -- "$1" $(cat "$LOG/$1.rc" 2>/dev/null || echo "1 0")
    report "$1" "$2" "$3"
}
# --split-compile=0: the device code optimised on every core (sm_90a 9.6 -> 5.4 min on two)
if [ -n "${NVCC:-}" ]; then
    ( later kernels-cuda-sm_90a "$NVCC" -x cu -std=c++17 -O3 --split-compile=0 -gencode=arch=compute_90a,code=sm_90a -DAITER_MLA_WGMMA \
          -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -c kernels.hip -o "$kdir/k-sm90a.o"
      later kernels-cuda-sm_90-ptx "$NVCC" -x cu -std=c++17 -O3 -gencode=arch=compute_90,code=compute_90 -Xcicc -O1 \
          -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -c kernels.hip -o "$kdir/k-sm90.o"
      later kernels-cuda-sm_80-ptx "$NVCC" -x cu -std=c++17 -O3 -gencode=arch=compute_80,code=compute_80 -Xcicc -O1 -DAITER_MLA_WGMMA \
          -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -c kernels.hip -o "$kdir/k-sm80.o" ) &
    nvidia_lane=$!
fi
if [ -n "${HIPCC:-}" ]; then
    ( later kernels-hip-gfx940 "$HIPCC" --offload-arch=gfx940 -std=c++17 -O3 -Wall -Wextra -Werror -c kernels.hip -o "$kdir/k-gfx940.o"
      later kernels-hip-gfx90a-ir "$HIPCC" --offload-arch=gfx90a -std=c++17 -O0 -Wall -Wextra -Werror --cuda-device-only -emit-llvm \
          -c kernels.hip -o "$kdir/k-gfx90a.bc" ) &
    amd_lane=$!
fi

# 1. host tests under ASan + UBSan
step build-test-host $MAKE --no-print-directory GPU=none BUILD="$BUILD" "$BUILD/test_host"
program test-host "./$BUILD/test_host"
# The same tests over other layouts of their buffers: built by clang (other stack frames),
# and without sanitizers with every allocation in a mapping of its own (other neighbours). A
# check whose expected answer holds for one layout only (an output span running past its
# buffer into whatever lies next) fails in one of them; each run counts as one test.
# TEST_ALL=1 (`make test-all`) adds three runs that CI's two cores have no time for (with the
# kernels' compile checks beside them, make test took 19-24 minutes with them): clang's
# ASan/UBSan build (clang builds the MemorySanitizer and -m32 runs below), gcc's -m32 build
# (x87 arithmetic) and the AArch64 run under qemu-user.
all_runs=${TEST_ALL:-0}
host_flags="-std=c99 -pedantic -Wall -Wextra -Werror -DAITER_MLA_NO_GPU"
if command -v clang >/dev/null 2>&1; then
    if [ "$all_runs" = 1 ]; then
        step build-test-host-clang clang $host_flags -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
            -fno-sanitize-recover=all -o "$BUILD/test_host_clang" tests/test_host.c -lm
        step test-host-clang "./$BUILD/test_host_clang"
    else
        echo "note  clang's ASan/UBSan build runs in make test-all"
    fi
    # ... and under MemorySanitizer (its own allocator, another layout), which reports a read
    # of memory never written, something ASan does not see
    if printf 'int main(void){return 0;}\n' | clang -fsanitize=memory -x c -o "$BUILD/msan-probe" - >/dev/null 2>&1; then
        step build-test-host-msan clang $host_flags -O1 -g -fsanitize=memory -fno-omit-frame-pointer \
            -o "$BUILD/test_host_msan" tests/test_host.c -lm
        step test-host-msan "./$BUILD/test_host_msan"
    else
        echo "note  clang cannot build with -fsanitize=memory here: the MemorySanitizer run not made"
    fi
fi
# The build without sanitizers also takes what an AArch64 host does differently from x86-64
# (the qemu run below is in make test-all only: 4-5 minutes of one core): char unsigned, and
# a * b + c contracted into fused multiply-adds where this CPU runs them (clang contracts by
# default on AArch64; gcc -std=c99 does not, so -ffp-contract=fast asks it to).
plain_flags="-funsigned-char"
if printf 'int main(void){volatile double a = 3, b = 5, c = 7; return __builtin_fma(a, b, c) == 22 ? 0 : 1;}\n' |
    "$CC" -mfma -ffp-contract=fast -O2 -x c -o "$BUILD/fma-probe" - >/dev/null 2>&1 && "./$BUILD/fma-probe"; then
    plain_flags="$plain_flags -mfma -ffp-contract=fast"
else
    echo "note  no FMA here: the build without sanitizers keeps a * b + c uncontracted"
fi
step build-test-host-plain "$CC" $host_flags $plain_flags -O2 -o "$BUILD/test_host_plain" tests/test_host.c -lm
step test-host-own-mappings env GLIBC_TUNABLES=glibc.malloc.mmap_threshold=0 "./$BUILD/test_host_plain"
# ... and on a 32-bit host ABI (size_t of 32 bits, int64_t aligned to 4, the stack near the
# top of the address space), by each compiler that can build for one (gcc-multilib on
# Debian). gcc keeps i386's x87 arithmetic, whose wider intermediates C99 rounds at every
# assignment and cast (-std=c99 gives -fexcess-precision=standard); clang, which carries
# them past casts, uses SSE. clang's build beside gcc's runs under UBSan alone: without
# ASan's redzones (and the alignment they give) its arrays lie as i386 lays them, where an
# array of 16 bytes or more need not be 16-byte aligned.
# make test runs one of the two (make test-all both): clang's where clang builds for -m32
# with UBSan, else gcc's, so that no machine goes without a 32-bit run.
builds_m32() { # builds_m32 COMPILER SANITIZERS: whether it links a -m32 program with them
    printf 'int main(void){return 0;}\n' | "$1" -m32 -fsanitize="$2" -x c -o "$BUILD/m32-probe" - >/dev/null 2>&1
}
clang_m32=0
command -v clang >/dev/null 2>&1 && builds_m32 clang undefined && clang_m32=1
for cc32 in "$CC" clang; do
    command -v "$cc32" >/dev/null 2>&1 || continue
    [ "$cc32" = clang ] && "$CC" --version 2>/dev/null | grep -q clang && continue # $CC is clang: built once
    if [ "$cc32" != clang ] && [ "$all_runs" != 1 ] && [ "$clang_m32" = 1 ]; then
        echo "note  $cc32's -m32 build (x87 arithmetic) runs in make test-all"
        continue
    fi
    tag=$(basename "$cc32")
    fp="-mfpmath=387"
    "$cc32" --version 2>/dev/null | grep -q clang && fp="-msse2 -mfpmath=sse"
    san32=address,undefined
    [ "$cc32" = clang ] && [ "$CC" != clang ] && san32=undefined
    if builds_m32 "$cc32" $san32; then
        step build-test-host-m32-$tag "$cc32" -m32 $fp $host_flags -O1 -g -fsanitize=$san32 \
            -fno-omit-frame-pointer -fno-sanitize-recover=all -o "$BUILD/test_host_m32_$tag" tests/test_host.c -lm
        step test-host-m32-$tag "./$BUILD/test_host_m32_$tag"
    else
        echo "note  $cc32 cannot build for -m32 with sanitizers here: its 32-bit host tests not run"
    fi
done
# ... and on AArch64 (the hosts of Grace Hopper and Graviton), in make test-all, built by
# clang and run under qemu-user where both can (Debian:
# binutils-aarch64-linux-gnu libc6-dev-arm64-cross libgcc-12-dev-arm64-cross qemu-user; the
# cross gcc conflicts with gcc-multilib): char is unsigned there, arrays have no 16-byte
# alignment of their own, and clang contracts a * b + c into one fused multiply-add by default.
if [ "$all_runs" != 1 ]; then
    echo "note  the AArch64 run under qemu-user runs in make test-all"
elif command -v clang >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null 2>&1 &&
    printf 'int main(void){return 0;}\n' | clang --target=aarch64-linux-gnu -static -x c -o "$BUILD/a64-probe" - >/dev/null 2>&1 &&
    qemu-aarch64 "$BUILD/a64-probe" >/dev/null 2>&1; then
    step build-test-host-aarch64 clang --target=aarch64-linux-gnu $host_flags -O2 -static -o "$BUILD/test_host_aarch64" tests/test_host.c -lm
    step test-host-aarch64 qemu-aarch64 "./$BUILD/test_host_aarch64"
else
    echo "note  no clang build for aarch64 run by qemu-aarch64 here: the AArch64 host tests not run"
fi
# the sweep's field tables in test_host.c list every scalar field of the header's args structs
step check-sweep-fields sh tests/check_sweep_fields.sh

# 2. the header alone: C99 -pedantic (gcc, clang), C++ (11, 17), with and without the
#    implementation, and AITER_MLA_STATIC; -Wconversion too, which users' builds may enable
hdr="$BUILD/hdr"
mkdir -p "$hdr"
printf '#include "../../aiter_mla.h"\nint main(void){return 0;}\n' >"$hdr/decl.c"
printf '#define AITER_MLA_IMPLEMENTATION\n#define AITER_MLA_NO_GPU\n#include "../../aiter_mla.h"\nint main(void){return 0;}\n' >"$hdr/impl.c"
printf '#define AITER_MLA_STATIC\n#define AITER_MLA_IMPLEMENTATION\n#define AITER_MLA_NO_GPU\n#include "../../aiter_mla.h"\nint main(void){return 0;}\n' >"$hdr/static.c"
for f in decl impl static; do
    cp "$hdr/$f.c" "$hdr/$f.cpp"
    step "header-$f-gcc-c99" "$CC" -std=c99 -pedantic -Wall -Wextra -Wconversion -Werror -o "$hdr/$f-gcc" "$hdr/$f.c" -lm
    if command -v clang >/dev/null 2>&1; then
        step "header-$f-clang-c99" clang -std=c99 -pedantic -Wall -Wextra -Wconversion -Werror -o "$hdr/$f-clang" "$hdr/$f.c" -lm
    fi
    step "header-$f-c++11" "$CXX" -std=c++11 -Wall -Wextra -Werror -o "$hdr/$f-cxx11" "$hdr/$f.cpp" -lm
    step "header-$f-c++17" "$CXX" -std=c++17 -Wall -Wextra -Wconversion -Wsign-conversion -Werror -pedantic -o "$hdr/$f-cxx17" "$hdr/$f.cpp" -lm
done

# 3. the examples without a GPU, on the CPU reference
step build-examples-cpu $MAKE --no-print-directory GPU=none BUILD="$BUILD/cpu" "$BUILD/cpu/decode" "$BUILD/cpu/bench" "$BUILD/cpu/prefill" "$BUILD/cpu/sparse" "$BUILD/cpu/dsv4"
step run-decode-cpu "./$BUILD/cpu/decode"
step run-prefill-cpu "./$BUILD/cpu/prefill"
step run-sparse-cpu "./$BUILD/cpu/sparse"
step run-dsv4-cpu "./$BUILD/cpu/dsv4"

# 4. kernels.hip (and the examples' GPU shim) compile for every target whose compiler is here
if [ -n "${HIPCC:-}" ]; then
    step "gpu-shim-hip" "$HIPCC" --offload-arch=gfx90a -std=c++17 -Wall -Wextra -Werror -c examples/gpu.hip -o "$kdir/g-hip.o"
else
    echo "note  hipcc not found: AMD compile checks not run"
fi
if [ -n "${NVCC:-}" ]; then
    step "gpu-shim-cuda" "$NVCC" -x cu -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DAITER_MLA_WITH_BLAS -Xcompiler -Wall,-Wextra,-Werror -c examples/gpu.hip -o "$kdir/g-cuda.o"
else
    echo "note  nvcc not found: NVIDIA compile checks not run"
fi
step compile-test-gpu "$CC" -std=c99 -pedantic -Wall -Wextra -Werror -Wno-unknown-pragmas -c tests/test_gpu.c -o "$kdir/test_gpu.o"
if [ -n "${HIPCC:-}" ]; then
    t0=$(now); wait "$amd_lane"; echo "note  waited $(($(now) - t0)) s for the AMD compile checks"
    collect kernels-hip-gfx940
    step kernel-symbols-gfx940 sh tests/check_kernel_symbols.sh "$kdir/k-gfx940.o"
    collect kernels-hip-gfx90a-ir
fi
if [ -n "${NVCC:-}" ]; then
    t0=$(now); wait "$nvidia_lane"; echo "note  waited $(($(now) - t0)) s for the NVIDIA compile checks"
    collect kernels-cuda-sm_90a
    step kernel-symbols-sm_90a sh tests/check_kernel_symbols.sh "$kdir/k-sm90a.o"
    # ptxas says so when it serializes a kernel's wgmma products (a wait after every product,
    # e.g. C7518 or C7520); no test would notice, and it costs a wgmma kernel most of its speed
    step wgmma-not-serialized sh -c "if grep 'wgmma.mma_async instructions are serialized' '$LOG/kernels-cuda-sm_90a.log'; then exit 1; fi"
    collect kernels-cuda-sm_90-ptx
    collect kernels-cuda-sm_80-ptx
fi

# 5. the GPU tests, when there is a GPU
if [ "${GPU:-none}" != none ]; then
    step build-test-gpu $MAKE --no-print-directory GPU="$GPU" BUILD="$BUILD" "$BUILD/test_gpu"
    program test-gpu "./$BUILD/test_gpu"
    # the examples on the GPU: each checks its results and exits non-zero on a failure
    step build-examples-gpu $MAKE --no-print-directory GPU="$GPU" BUILD="$BUILD" "$BUILD/decode" "$BUILD/prefill" "$BUILD/sparse" "$BUILD/dsv4"
    for ex in decode prefill sparse dsv4; do step "run-$ex-gpu" "./$BUILD/$ex"; done
    if [ "$GPU" = cuda ]; then
        step build-test-gpu-mfma $MAKE --no-print-directory GPU="$GPU" BUILD="$BUILD" "$BUILD/test_gpu_mfma"
        program test-gpu-mfma $MAKE --no-print-directory GPU="$GPU" BUILD="$BUILD" test-gpu-mfma
    fi
else
    echo "note  no GPU here: GPU tests not run (make test-gpu on a GPU machine)"
fi

echo "note  $(($(now) - started)) s in all"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
