/* where.h - where an example's operations run: on the GPU when the build has one and a
 * device is present, else on the CPU reference, with one program text for both.
 *
 * The example keeps every array on the host. On the GPU each array an operation touches
 * is a device copy of a host array: dev(host, bytes) gives it (uploading the host contents
 * when it makes the copy; later calls return the same copy, holding what the GPU wrote
 * there), refresh(host) uploads host contents the example changed since, back(host)
 * downloads what the GPU wrote. On the CPU the host arrays serve as they are and those
 * calls do nothing. OP(aiter_mla_x, &args) calls aiter_mla_x(&args, stream) on the GPU and
 * aiter_mla_x_ref(&args) on the CPU: every GPU operation has a reference of the same
 * arguments. TRY(call) prints the failure reason and returns 1 from the calling function.
 *
 * A runtime has its own allocator and streams; this is the examples' stand-in (gpu.h's
 * calls exit the program on a failure). Include it after aiter_mla.h, in one file. */
#ifndef AITER_MLA_EXAMPLES_WHERE_H
#define AITER_MLA_EXAMPLES_WHERE_H
#include <stdio.h>
#include <stdlib.h>
#ifndef AITER_MLA_NO_GPU
#include "gpu.h"
#endif

static int use_gpu;     /* set by where_init: 1 when the operations run on the GPU */
static int num_cu;      /* the GPU's multiprocessors (0 on the CPU) */
static void *g_stream;  /* the GPU stream every operation is queued on */
#ifndef AITER_MLA_NO_GPU
enum { WHERE_MAX_MIRRORS = 64 };
static struct {
    void *host, *dev;
    size_t bytes;
} where_mirrors[WHERE_MAX_MIRRORS];
static int where_num_mirrors;
static inline int where_find(const void *host) {
    int i;
    for (i = 0; i < where_num_mirrors && where_mirrors[i].host != host; i++) {}
    return i;
}
#endif

/* Picks the GPU when there is one (and the build has one). */
static inline void where_init(void) {
#ifndef AITER_MLA_NO_GPU
    use_gpu = gpu_device_count() > 0;
    if (use_gpu) g_stream = gpu_stream_create();
    if (use_gpu) num_cu = gpu_num_cu();
#endif
}
static inline const char *where_name(void) { return use_gpu ? "GPU" : "CPU reference"; }

static inline void *dev(const void *host, size_t bytes) {
#ifndef AITER_MLA_NO_GPU
    if (use_gpu) {
        const int i = where_find(host);
        if (i == where_num_mirrors) {
            if (where_num_mirrors == WHERE_MAX_MIRRORS) {
                fprintf(stderr, "where.h: more than %d device copies\n", WHERE_MAX_MIRRORS);
                exit(1);
            }
            where_mirrors[i].host = (void *)host;
            where_mirrors[i].dev = gpu_malloc(bytes);
            where_mirrors[i].bytes = bytes;
            where_num_mirrors++;
            gpu_upload(where_mirrors[i].dev, host, bytes);
        } else if (bytes > where_mirrors[i].bytes) {
            fprintf(stderr, "where.h: %zu bytes asked of a device copy of %zu\n", bytes, where_mirrors[i].bytes);
            exit(1);
        }
        return where_mirrors[i].dev;
    }
#endif
    (void)bytes;
    return (void *)host;
}
/* The host array's contents into its device copy (made by dev), after the host changed it. */
static inline void refresh(const void *host) {
#ifndef AITER_MLA_NO_GPU
    const int i = where_find(host);
    if (use_gpu && i < where_num_mirrors) gpu_upload(where_mirrors[i].dev, host, where_mirrors[i].bytes);
#else
    (void)host;
#endif
}
/* What the GPU wrote into the device copy, back into the host array (waits for the work). */
static inline void back(void *host) {
#ifndef AITER_MLA_NO_GPU
    const int i = where_find(host);
    if (use_gpu && i < where_num_mirrors) gpu_download(host, where_mirrors[i].dev, where_mirrors[i].bytes);
#else
    (void)host;
#endif
}
/* A device copy of short-lived host data (freed by temp_free), or the data itself on the CPU. */
static inline void *temp_copy(const void *host, size_t bytes) {
#ifndef AITER_MLA_NO_GPU
    if (use_gpu) {
        void *d = gpu_malloc(bytes);
        gpu_upload(d, host, bytes);
        return d;
    }
#endif
    (void)bytes;
    return (void *)host;
}
static inline void temp_free(void *p) {
#ifndef AITER_MLA_NO_GPU
    if (use_gpu) gpu_free(p); /* waits for the work that reads it */
#else
    (void)p;
#endif
}
/* Frees every device copy (the host arrays stay). */
static inline void mirrors_free(void) {
#ifndef AITER_MLA_NO_GPU
    while (where_num_mirrors > 0) gpu_free(where_mirrors[--where_num_mirrors].dev);
#endif
}
static inline void where_done(void) {
    mirrors_free();
#ifndef AITER_MLA_NO_GPU
    if (use_gpu) gpu_stream_destroy(g_stream);
#endif
}

#define OP(name, args) (use_gpu ? name((args), g_stream) : name##_ref(args))

#define TRY(call)                                                                                            \
    do {                                                                                                     \
        aiter_mla_status st_ = (call);                                                                       \
        if (st_ != AITER_MLA_OK) {                                                                           \
            fprintf(stderr, "%s: %s: %s\n", #call, aiter_mla_status_string(st_), aiter_mla_last_error());    \
            return 1;                                                                                        \
        }                                                                                                    \
    } while (0)

#endif
