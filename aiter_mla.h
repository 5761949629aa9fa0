/* aiter_mla.h - MLA attention for DeepSeek-class models, v0.1.0
 *
 * One C99 header and one HIP source (kernels.hip) that give a C or C++ inference runtime
 * the multi-head latent attention (MLA) of DeepSeek V2/V3: host planners, head-padding
 * helpers, validating launch wrappers, GPU kernels for AMD (hipcc) and NVIDIA (nvcc on the
 * same source) and a CPU reference for every operation. No Python, no device allocation, no
 * stream creation, no device queries but two (NVIDIA launches ask the runtime once per device
 * which of kernels.hip's images it runs and how much shared memory a block may take, so that
 * a build for several targets takes the kernels that run and fit on each device); host
 * memory only in the plan checkers and some CPU references. docs/SPEC.md states what each op
 * computes (the "SPEC n" section numbers below); docs/DESIGN.md explains the layout.
 *
 * ---------------------------------------------------------------------------------------
 * INCLUDING
 *
 *   In ONE C or C++ file:           #define AITER_MLA_IMPLEMENTATION
 *                                   #include "aiter_mla.h"
 *   Everywhere else:                #include "aiter_mla.h"
 *   No GPU at all:                  #define AITER_MLA_NO_GPU before the implementation;
 *                                   GPU entry points then validate their arguments and
 *                                   return AITER_MLA_ERR_NO_GPU, the CPU references
 *                                   (*_ref) run, and the program links without kernels.hip.
 *   GPU kernels (AMD):              hipcc -std=c++17 --offload-arch=gfx942 -c kernels.hip
 *   GPU kernels (NVIDIA Hopper):    nvcc -x cu -std=c++17 -gencode=arch=compute_90a,code=sm_90a
 *                                        -DAITER_MLA_WGMMA -c kernels.hip
 *                                   (other targets and what each gets: BUILDING KERNELS.HIP)
 *   Link with -lm (the CPU references use libm); with kernels.o, link through the GPU
 *   compiler (nvcc / hipcc: they add the GPU runtime and the C++ library kernels.o needs),
 *   or add them by hand (cc ... kernels.o -lcudart -lstdc++ -lm; AMD: -lamdhip64). In C++,
 *   zero a desc or args struct with `= {}` (C's `= {0}` draws -Wmissing-field-initializers
 *   there).
 *
 * ---------------------------------------------------------------------------------------
 * WHAT IS HERE (GPU = a launch wrapper over kernels.hip; every op also has a CPU *_ref)
 *
 *   dense decode + split-KV plan + reduce    aiter_mla_decode (GPU), _decode_ref(_scheduled)
 *   decode metadata, page-index expansion    aiter_mla_decode_metadata_build, _expand_page_indices (GPU)
 *   head padding for 16-head kernels         aiter_mla_pad_q / _unpad_o (GPU)
 *   KV cache write (bf16/f16/fp8)            aiter_mla_kv_cache_write (GPU)
 *   varlen prefill + persistent plan         aiter_mla_prefill (GPU), _prefill_ref(_scheduled), _prefill_plan_*
 *   merge of attention states                aiter_mla_merge_attn_states (GPU)
 *   context gather (paged cache -> rows)     aiter_mla_gather_cache (GPU)
 *   V3.2 sparse: index conversion, filter    aiter_mla_convert_sparse_indices, _filter_prefill_indices (GPU)
 *   V3.2 fp8_ds_mla cache rows               aiter_mla_ds_mla_write (GPU), _ds_mla_read_row (host)
 *   V3.2 sparse attention                    aiter_mla_sparse_attention (GPU)
 *   V4 MODEL1 cache pages: writer, gather    aiter_mla_v4_cache_write, _v4_gather (GPU), _v4_read_row (host)
 *   V4 sparse: index lists                   aiter_mla_v4_swa_indices, _v4_global_topk, _v4_c128_indices,
 *                                            _v4_combine, _v4_copy_ragged (GPU)
 *   V4 sparse: attention                     aiter_mla_v4_attention (GPU, decode and prefill lists)
 *   V4 chunked prefill (vLLM's workspace)    aiter_mla_v4_prefill (GPU)
 *   which GPU kernel an attention call takes aiter_mla_decode_kernel, _prefill_kernel,
 *                                            _sparse_attention_kernel, _v4_attention_kernel
 *
 * ---------------------------------------------------------------------------------------
 * A DECODE STEP (DeepSeek V3, 16 heads per rank, bf16 cache, page size 1)
 *
 *   Tensors (bf16 held as uint16_t, converted by aiter_mla_f32_to_bf16 and
 *   aiter_mla_bf16_to_f32; T = query tokens of the step, one a request here):
 *     q [T, 16, 576] (the absorbed query: 512 latent dims, then 64 rope dims),
 *     o [T, 16, 512], lse [T, 16] float (optional); the cache kv_cache
 *     [num_pages, page_size, 576], each row a token's latent (512) and rope (64) values;
 *     the block table bt [batch, max_pages] int32, each request's page ids in order.
 *   Each call below returns aiter_mla_status (AITER_MLA_OK = 0; see ERRORS below).
 *
 *   1. Once, at start-up: size the plan from upper bounds and allocate its buffers.
 *        aiter_mla_decode_plan_desc pd = {0};
 *        pd.max_batch = 256; pd.num_heads = 16; pd.max_q_len = 1;
 *        pd.page_size = 1;   pd.num_cu = <multiprocessor / CU count>;
 *        (page_size: a power of two 1..256, the same in pd, w, meta and a below; num_cu
 *        1..65535, the plan's list count (up to 64 query rows a tile; info.num_lists
 *        in general): on a CPU-only build any count gives the right
 *        result, but 1 plans one list and splits nothing, so the scheduled reference below
 *        replays a GPU's pieces and reduce only with that GPU's count, e.g. 132 on an H100)
 *        aiter_mla_decode_plan_info info;
 *        aiter_mla_decode_plan_get_info(&pd, &info);
 *        host:   int32_t plan_h[info.plan_ints]          (pinned memory is best;
 *                                                         plan_ints is int64_t)
 *        device: int32_t plan_d[info.plan_ints], and a 16-byte aligned workspace of
 *                info.workspace_bytes bytes (fp32 partials of split pieces; 0 where the
 *                plan can split nothing, and then a NULL workspace is accepted)
 *
 *   2. Every step: write the step's new latents into the cache (the decode attends over
 *      every key of seq_lens, the new token's included), build the paged-KV metadata and
 *      the split-KV plan on the host, copy them to the device, and launch.
 *        aiter_mla_kv_cache_write_args w = {0};           new rows -> their cache slots
 *        w.kv_c = kv_c_d; w.k_pe = k_pe_d;                [T, 512], [T, 64] bf16
 *        w.slot_mapping = slots_d;                        [T] int64: page * page_size + offset
 *        w.kv_cache = cache_d; w.num_blocks = num_pages; w.block_size = 1; w.num_tokens = T;
 *        aiter_mla_kv_cache_write(&w, stream);            (num_blocks, block_size: vLLM's
 *                                                         names for num_pages, page_size)
 *        aiter_mla_decode_metadata_args meta = {0};       block table -> indptr/indices
 *        meta.block_table = bt_h; meta.block_table_stride = max_pages;
 *        meta.seq_lens = seq_lens_h; meta.batch = batch; meta.page_size = 1;
 *        meta.q_len = 1;                                  (0 means 1; or per request:
 *                                                         meta.q_lens = [batch] host ints)
 *        meta.qo_indptr = qo_indptr_h;                    out [batch + 1]
 *        meta.kv_indptr = kv_indptr_h;                    out [batch + 1]
 *        meta.kv_indices = kv_indices_h;                  out [cap], cap >= the sum over
 *        meta.kv_indices_capacity = cap;                  requests of ceil(seq_len / page_size)
 *        meta.kv_last_page_lens = last_page_lens_h;       out [batch]
 *        aiter_mla_decode_metadata_build(&meta);
 *        aiter_mla_decode_plan_build(&info, qo_indptr_h, kv_indptr_h, last_page_lens_h,
 *                                    batch, plan_h);
 *        memcpy-async plan_h -> plan_d (and the metadata arrays -> device); do not
 *        rebuild plan_h before that copy has finished (double-buffer it, or wait on an
 *        event recorded after the copy)
 *        aiter_mla_decode_args a = {0};
 *        a.q = q_d;  a.kv_cache = cache_d;  a.num_pages = num_pages;  a.o = o_d;
 *        a.kv_cache_bytes = cache_size;                 (optional: a cache smaller than
 *                                                       num_pages x page_size rows is refused)
 *        a.lse = lse_d;                                 (optional: NULL writes no lse)
 *        a.qo_indptr = qo_indptr_d;  a.kv_indptr = kv_indptr_d;   (the device copies of
 *        a.kv_indices = kv_indices_d;                             the metadata arrays)
 *        a.kv_last_page_lens = last_page_lens_d;
 *        a.batch = batch; a.num_heads = 16; a.page_size = 1;
 *        (q, the cache and o are bf16 when a.q_dtype, a.kv_dtype, a.o_dtype are zero; an
 *        fp8 cache sets a.kv_dtype and a.kv_scale, see aiter_mla_decode_args)
 *        a.plan = plan_d; a.plan_info = &info;          (the decode writes counters into
 *                                                       plan_d and clears them before it
 *                                                       ends: one decode per plan_d at a time)
 *        a.workspace = ws_d; a.workspace_bytes = info.workspace_bytes;
 *        a.sm_scale = model_scale;                     (0 means 1/sqrt(576), which is
 *                                                       not DeepSeek's: see model_scale)
 *        if (aiter_mla_decode(&a, stream) != AITER_MLA_OK)
 *            fprintf(stderr, "%s\n", aiter_mla_last_error());
 *
 *      A call costs the host about one kernel launch per kernel it enqueues (here two:
 *      the decode and its reduce; 10-12 us on an H100 server's host). Capture the step in
 *      a graph to pay one graph launch instead (make bench prints each row's host cost).
 *
 *      The same structs with host copies of q, the cache and the four metadata arrays are
 *      the CPU references: aiter_mla_kv_cache_write_ref(&w), then aiter_mla_decode_ref(&a)
 *      (plan and workspace unused), or aiter_mla_decode_ref_scheduled(&a) with plan_h and
 *      a host workspace of info.workspace_bytes, which replays the plan's pieces and reduce.
 *      The two agree exactly where the plan splits nothing; split pieces keep fp32 partials
 *      that the reduce merges in another order, so o may then differ in its last bits and
 *      lse by fp32 rounding (SPEC 8 gives the tolerances against any reference).
 *      examples/decode.c is this recipe as a program.
 *
 *   model_scale, here and in every recipe below, is the model's softmax scale, vLLM's
 *   `scaling`: for DeepSeek V2/V3/V3.2, mscale^2 / sqrt(qk_nope_head_dim +
 *   qk_rope_head_dim) = mscale^2 / sqrt(192), with mscale = 0.1 * mscale_all_dim *
 *   ln(factor) + 1 from the checkpoint's YaRN rope scaling, 1 without it (V3: factor 40,
 *   mscale_all_dim 1, mscale 1.369, model_scale 0.1352). An sm_scale left 0 takes a default
 *   (1/sqrt(576) for decode and sparse attention) that no DeepSeek checkpoint uses: the
 *   results look plausible and are wrong.
 *   (V4 attention's default, 512^-0.5, is V4's own scale.)
 *
 * ---------------------------------------------------------------------------------------
 * A V3.2 SPARSE DECODE STEP (fp8_ds_mla cache of 656-byte rows, pages of 64; no plan)
 *
 *   q [T, H, 576] and o [T, H, 512] bf16 (H 1..128; V3.2 runs 128 a rank), lse [T, H]
 *   fp32; the cache [num_blocks, 64, 656] bytes (aiter_mla_ds_mla_read_row((const uint8_t *)
 *   cache + (size_t)slot * AITER_MLA_DS_MLA_ROW_BYTES, AITER_MLA_DTYPE_DEFAULT, out576)
 *   reads a row on the host). Zero the cache once when you allocate it (see step 2).
 *   1. Write the step's new latents into the cache:
 *        aiter_mla_ds_mla_write_args w = {0};
 *        w.kv_c = kv_c_d;  w.k_pe = k_pe_d;              [T, 512], [T, 64] bf16
 *        w.slot_mapping = slots_of_new_tokens_d;         [T] int64
 *        w.kv_cache = cache_d;  w.num_blocks = num_blocks;  w.block_size = 64;
 *        w.num_tokens = T;
 *        aiter_mla_ds_mla_write(&w, stream);
 *   2. Turn the indexer's request-local top-k positions into global cache slots (positions
 *      are not checked against seq_len: one at or past it reads whatever its slot holds,
 *      and bytes never written may read as NaN or inf, which makes the token's o and lse NaN;
 *      pad the block table with -1, since a zeroed entry maps to page 0):
 *        aiter_mla_sparse_index_args ix = {0};
 *        ix.indices = topk_local_d;  ix.req_id = req_of_token_d;  ix.num_tokens = T;
 *        ix.block_table = block_table_d;  ix.block_table_stride = max_pages;
 *        ix.block_size = 64;  ix.num_requests = batch;  ix.topk = 2048;
 *        ix.out = slots_d;                               [T, 2048] int32; -1 stays -1
 *        ix.valid_counts = counts_d;                     optional out [T] int32: entries != -1
 *        aiter_mla_convert_sparse_indices(&ix, stream);
 *   3. Attend (entries of -1, or outside the cache's num_blocks * 64 slots, are skipped):
 *        aiter_mla_sparse_args sa = {0};
 *        sa.q = q_d;  sa.kv_cache = cache_d;  sa.num_slots = num_blocks * 64;
 *        sa.cache_is_ds_mla = 1;                         (0 reads bf16 rows of 1152 bytes:
 *                                                        past the end of this cache)
 *        sa.kv_cache_bytes = num_blocks * 64 * 656;      (optional: then a cache_is_ds_mla
 *                                                        left 0 is refused, not read past)
 *        sa.indices = slots_d;
 *        sa.o = o_d;  sa.lse = lse_d;  sa.num_tokens = T;  sa.num_heads = 128;
 *        sa.topk = 2048;  sa.sm_scale = model_scale;  sa.num_cu = <SM / CU count>;
 *        aiter_mla_sparse_attention(&sa, stream);        (sm_scale 0: 1/sqrt(576); a token
 *                                                        with no valid entry: o 0, lse +inf)
 *      sa.topk_length (FlashMLA's, optional) stops each row after its first n entries: set
 *      it (e.g. to ix.valid_counts) only where every row's valid entries come first.
 *   The same structs on host copies run the CPU references, without the stream argument:
 *   aiter_mla_ds_mla_write_ref, _convert_sparse_indices_ref, _sparse_attention_ref.
 *   examples/sparse.c is this recipe as a program (on the GPU when there is one, else on
 *   the references), checked against its own softmax over the cache's rows.
 *
 * ---------------------------------------------------------------------------------------
 * A V4 SPARSE DECODE STEP (a compress-ratio-4 layer: window of 128 + the indexer's top-k)
 *
 *   q, o [T, H, 512] bf16 (448 nope + 64 rope dims), lse [T, H] fp32, attn_sink [H] fp32
 *   (optional); two caches of MODEL1 pages (aiter_mla_v4_page_bytes(block_size) bytes a
 *   page): the SWA cache (raw tokens, 64 a page; a request's block table maps position p to
 *   its page p / 64, no ring) and the compressed cache (64 entries a page at ratio 4, entry
 *   j covering positions 4j .. 4j + 3). aiter_mla_v4_read_row reads one row back as 512
 *   floats on the host.
 *   1. aiter_mla_v4_cache_write (w.kv [T, 512] bf16, w.slot_mapping [T] int64, w.kv_cache,
 *      w.num_blocks, w.block_size, w.num_tokens = T: 0 writes nothing) puts new rows in
 *      either cache, e4m3fn by default. The step's new tokens go into the SWA cache before
 *      step 3: each token's window holds its own position.
 *      Page sizes: the SWA cache 64 tokens a page; the compressed cache 256 / ratio entries
 *      (64 at ratio 4, 2 at ratio 128). A block_size left 0 means 64 in the writer, the
 *      gather, the top-k builder and the attention's key lists (256 / ratio only in
 *      aiter_mla_v4_c128_args and aiter_mla_v4_prefill's compressed_block_size), so a
 *      ratio-128 layer sets w.block_size and a.extra_keys.block_size to 2 itself; with
 *      a.keys.cache_bytes and a.extra_keys.cache_bytes given, a wrong page size is refused
 *      instead of read past.
 *   2. Each token's SWA list (positions pos - 127 .. pos, its own included) and its top-k
 *      list, ragged (indices + indptr):
 *        aiter_mla_v4_swa_index_args si = {0};
 *        si.query_start_loc = qsl_d;  si.seq_lens = seq_lens_d;  si.token_to_req = req_d;
 *        si.block_table = swa_bt_d;  si.block_table_stride = swa_pages;  si.num_reqs = batch;
 *        si.num_tokens = T;  si.out.indices = swa_idx_d;  si.out.indptr = swa_ptr_d;
 *        si.out.capacity = T * 128;                      (window 128, pages of 64 by default)
 *        aiter_mla_v4_swa_indices(&si, stream);
 *        aiter_mla_v4_topk_args tk = {0};                the indexer's [T, topk] picks:
 *                                                        request-local entries j, -1 none
 *        tk.topk_indices = topk_local_d;  tk.topk = topk;  tk.token_to_req = req_d;
 *        tk.block_table = c_bt_d;  tk.block_table_stride = c_pages;  tk.num_reqs = batch;
 *        tk.num_tokens = T;  tk.out.indices = c_idx_d;  tk.out.indptr = c_ptr_d;
 *        tk.out.capacity = T * topk;
 *        aiter_mla_v4_global_topk(&tk, stream);
 *      Ratio 128 has no top-k: its list is every entry written so far,
 *        aiter_mla_v4_c128_args c = {0};               (c.positions [T] int64: each token's
 *        c.positions = pos_d;  c.token_to_req = req_d;   pos = seq_len - q_len + i)
 *        c.block_table = c_bt_d;  c.block_table_stride = c_pages;  c.num_reqs = batch;
 *        c.width = c_width;                              (>= ceil(max_model_len / 128): a
 *                                                        narrower list keeps the oldest)
 *        c.num_tokens = T;  c.out.indices = c_idx_d;  c.out.indptr = c_ptr_d;
 *        c.out.capacity = T * c_width;
 *        aiter_mla_v4_c128_indices(&c, stream);
 *      (fixed-capacity graph buffers: aiter_mla_v4_copy_ragged.)
 *   3. Attend over both lists: softmax of sm_scale * q.k (0 means 1/sqrt(512)) over the
 *      keys of both, the values being the keys' 512 dims, with exp(attn_sink[h]) added to
 *      the denominator; lse leaves the sink out (aiter_mla_v4_attention_args, SPEC 7):
 *        aiter_mla_v4_attention_args a = {0};
 *        a.q = q_d;  a.o = o_d;  a.lse = lse_d;  a.attn_sink = sink_d;
 *        a.num_tokens = T;  a.num_heads = H;  a.sm_scale = model_scale;  a.num_cu = num_cu;
 *        a.keys.cache = swa_cache_d;  a.keys.num_blocks = swa_num_pages;
 *        a.keys.indices = swa_idx_d;  a.keys.indptr = swa_ptr_d;
 *        a.keys.capacity = si.out.capacity;             (optional: rows cut at it)
 *        a.extra_keys.cache = c_cache_d;  a.extra_keys.num_blocks = c_num_pages;
 *        a.extra_keys.indices = c_idx_d;  a.extra_keys.indptr = c_ptr_d;
 *        a.extra_keys.capacity = tk.out.capacity;
 *        a.keys_read_once = 1;                         (a decode step, one token a request:
 *                                                        a hint, see the field; a prefill
 *                                                        from the pages: keys_shared = 1)
 *        aiter_mla_v4_attention(&a, stream);
 *   Chunked prefill: aiter_mla_v4_prefill (one call a layer: the gathers into a workspace
 *   sized by aiter_mla_v4_prefill_workspace_size, the combine, the attention, per chunk of
 *   requests). examples/dsv4.c runs a decode step at ratios 1, 4 and 128 and a chunked
 *   prefill at ratio 4 on the GPU or the references (each call's *_ref), and checks them
 *   against its own loop.
 *
 * ---------------------------------------------------------------------------------------
 * A CHUNKED PREFILL (vLLM's forward_mha: per-head k and v decompressed by your kv_b_proj)
 *
 *   vLLM merges the context chunks among themselves, then that result (prefix) with the
 *   new tokens' causal one (suffix); the recipe folds each chunk into the new tokens' result.
 *   Equal in exact arithmetic, the orders differ by the bf16 rounding of the running o. With
 *   two chunks or more, vLLM's order merges two empty sides for a request without context,
 *   which its Triton merge (the ROCm path) turns into NaN; the recipe's prefix, the new
 *   tokens' own rows, is never empty.
 *
 *   q [Tq, H, 192] (128 nope dims, then 64 rope) of the step's new tokens, cu_q [batch + 1]
 *   their offsets; o [Tq, H, 128]; lse [H, Tq] fp32, as vLLM lays it out (Tq =
 *   cu_q[batch], always: upstream AITER's kernel strides lse's heads by q's row count,
 *   q.shape[0], the same where q holds exactly the step's rows and not for a padded q).
 *   1. New tokens attend causally among themselves (k, v: the new tokens' own, made by your
 *      kv_b_proj; the rope dims of k are the token's 64 cached rope values for every head):
 *        aiter_mla_prefill_args p = {0};
 *        p.q = q_d;  p.k = k_d;  p.v = v_d;  p.cu_seqlens_q = p.cu_seqlens_k = cu_q_d;
 *        p.o = o_d;  p.lse = lse_d;  p.batch = batch;  p.num_heads = H;  p.causal = 1;
 *        p.max_seqlen_q = max_q;                         (the longest request's new tokens;
 *                                                        required without a plan)
 *        p.sm_scale = model_scale;                       (0 means 1/sqrt(dqk))
 *        aiter_mla_prefill(&p, stream);                  (dqk, dv: 0 means 192, 128)
 *   2. Each context chunk c of C positions, c = 0 .. ceil(longest context / C) - 1: gather
 *      its latent rows (512 latent, then 64 rope), decompress them into k [n, H, 192] and
 *      v [n, H, 128], attend, merge:
 *        aiter_mla_gather_cache_args g = {0};
 *        g.kv_cache = cache_d;  g.num_blocks = num_pages;  g.block_size = page_size;
 *                                                        (0 means 1, as in the kv cache
 *                                                        writer; the V3.2 structs' 64)
 *        g.block_table = bt_d;  g.block_table_stride = max_pages;  g.batch = batch;
 *        g.seq_starts = starts_d;                        [batch]: c * C each
 *        g.cu_out_rows = cu_rows_d;                      [batch + 1] offsets of each
 *                                                        request's max(0, min(ctx,
 *                                                        (c + 1) * C) - c * C) rows
 *        g.out = rows_d;  g.out_rows = n;                [n, 576] bf16
 *        aiter_mla_gather_cache(&g, stream);
 *        p.k, p.v = the chunk's;  p.cu_seqlens_k = cu_rows_d;  p.causal = 0;
 *        p.o = o_chunk_d;  p.lse = lse_chunk_d;          a request with no rows: o 0, lse -inf
 *        aiter_mla_prefill(&p, stream);
 *        aiter_mla_merge_args m = {0};
 *        m.o_prefix = o_d;  m.lse_prefix = lse_d;  m.o_suffix = o_chunk_d;
 *        m.lse_suffix = lse_chunk_d;
 *        m.o = o_d;                                      (o may be an input itself,
 *        m.lse = lse_other_d;                            lse may not: swap lse_d and
 *                                                        lse_other_d after each chunk)
 *        m.num_tokens = Tq;  m.num_heads = H;  m.head_dim = 128;
 *        aiter_mla_merge_attn_states(&m, stream);
 *      (m.dtype is o's type, bf16 when left 0: set it whenever o is not bf16, e.g. f16
 *      q/k/v with p.o_dtype left 0, whose o is f16.)
 *      After the last chunk o_d holds the result and lse_d its lse (after that chunk's swap).
 *   For many requests, a persistent plan (aiter_mla_prefill_plan_*) balances the query
 *   tiles over the GPU.
 *   examples/prefill.c is this recipe as a program (on the GPU when there is one, else on
 *   the references), checked against one causal pass of the reference.
 *
 * ---------------------------------------------------------------------------------------
 * OPTIONS (define before including)
 *
 *   AITER_MLA_IMPLEMENTATION   emit the implementation (in one translation unit)
 *   AITER_MLA_STATIC           make every function static (private copy per file: define it
 *                              together with AITER_MLA_IMPLEMENTATION in each such file)
 *   AITER_MLA_API              storage class of the public functions (default: extern)
 *   AITER_MLA_NO_GPU           build without kernels.hip (GPU calls return ERR_NO_GPU)
 *   AITER_MLA_ASSERT(c)        guard for internal invariants (default: assert.h)
 *   AITER_MLA_MALLOC(n) / AITER_MLA_FREE(p)   host allocation (override both or neither)
 *
 * BUILDING KERNELS.HIP
 *
 *   AMD: gfx90a, gfx94x and gfx950 get matrix-core (MFMA) kernels for decode, sparse, V4 and
 *   prefill; on other AMD targets the same kernels emulate MFMA, slowly.
 *   NVIDIA: AITER_MLA_WGMMA, when Hopper is built as sm_90a (alone or beside other targets,
 *   e.g. also -gencode=arch=compute_80,code=sm_80), adds on Hopper the wgmma kernels for
 *   64-row decode passes and for bf16/f16/e4m3fn prefill (head dims 192/128 and 128/128), and
 *   the 16-row kernel for e4m3fn decode and for V4 over MODEL1 e4m3fn pages with one split.
 *   TMA copies, with tensor maps encoded at launch through the runtime's driver entry point,
 *   bring the prefill's whole tiles and the decode's Q and bf16 pages of 64 keys or more
 *   (cp.async where the driver has no encoder); other keys come by cp.async or loads. Other
 *   NVIDIA targets from sm_80 take the mma.sync kernels, laid out for the device's shared
 *   memory (README.md, "Building for a GPU", says which device takes which).
 *
 * ERRORS
 *
 *   Every call that can fail returns aiter_mla_status. On failure,
 *   aiter_mla_last_error() (thread-local; successful calls leave it as it was) names the
 *   operation, the offending field and the rule, e.g. "decode: num_heads = 129 is outside
 *   1..128". Everything the library
 *   can check is checked before any work: pointers, ranges, shapes against the plan, and
 *   the contents of host index arrays (indptrs, lengths, plans, reduce maps), so bad
 *   input never crashes or aborts. Buffers whose length the library cannot know (q, o
 *   and the cache against the indptrs) are trusted to match what they were built from.
 *   So are the caches, whose extent their counts and format fields give (num_pages,
 *   num_slots, kv_dtype, cache_is_ds_mla, ...), unless their optional size field is set
 *   (kv_cache_bytes, in V4 key lists cache_bytes, in the V4 prefill swa_ and
 *   compressed_cache_bytes): a cache smaller than its fields describe is then refused
 *   (ERR_BUFFER_TOO_SMALL), so that a format left unset, e.g. fp8 rows described as bf16
 *   ones, fails there instead of reading or writing past the buffer. Page ids and slots
 *   that are negative or out of range are data: the key is skipped, the write dropped.
 *   So is a device copy of a plan, which the GPU path cannot read on the host: a work item
 *   or reduce entry that fits neither the arguments nor the plan's info (a plan built for
 *   other lengths or another batch, or overwritten) is skipped or held inside the buffers,
 *   which gives wrong rows but no access outside them.
 *   A GPU entry point validates what its CPU reference validates, plus what its launch
 *   needs (workspaces large enough and not running past the end of the address space,
 *   16-byte alignment where a kernel requires it, grid sizes within int32), except the
 *   contents of device arrays, which the host cannot read: what the reference refuses
 *   there (a non-monotone cu_out_rows, say) the kernel takes as data,
 *   and bad entries (negative or out-of-range slots, blocks, request ids, rows) give -1,
 *   zero rows or dropped writes, never an access outside the buffers the arguments
 *   describe.
 *   Every array a call reads or writes is held to its elements' alignment (that of a 2-, 4- or
 *   8-byte type: a 2-byte value at an odd address faults on the GPU) before any launch or
 *   write, e.g. "decode: q is not 2-byte aligned, as its elements need"; rows of byte
 *   formats (fp8, fp8_ds_mla, MODEL1 pages) need none, fp32 workspaces 4 bytes, and arrays a
 *   call does not read (a plan given to decode_ref, an unused V4 key list) none. Host index
 *   arrays a call validates (indptrs, lengths, plans, reduce maps) are checked for alignment
 *   before their first read, so a misaligned one is named ahead of any rule on its contents.
 *   The GPU wrappers check what their kernels need beyond that (16 bytes for vector loads).
 *   Outputs must not share memory with inputs or with each other (where an op allows
 *   otherwise, e.g. merge_attn_states' o on its own input or head padding in place, its
 *   struct says so). The CPU references check it from the shapes their fields give,
 *   before any write (ERR_INVALID_ARGUMENT, "<output> overlaps <input>"), against every
 *   array they read after their first write, an attention's q included (its o cannot
 *   overwrite q in place: on the GPU, blocks read q rows while others write o, and an o row
 *   wider than a q row reaches rows not yet read). The GPU wrappers make the same check over
 *   every array whose extent host fields give (all of them in the cache writers, the index
 *   converters and builders, the gathers, sparse and V4 attention and V4 prefill; the
 *   splits' partials in their workspaces), and leave out what hangs on device data: a ragged
 *   list's entries (its indptr's last value; a V4 key list's capacity sizes them where
 *   given), the dense decode's and prefill's q, o, lse,
 *   kv_indices, k and v (their indptrs; o's rows are checked against each other over two
 *   tokens), a V4 combine's per-token outputs (its token count; out.indptr[0], written
 *   whatever the count, is checked). Those overlaps on the GPU give undefined results.
 *   ERR_LAUNCH reports the runtime's last error after a launch, which may come from an
 *   earlier asynchronous failure on the device.
 *
 * WHAT THIS LIBRARY DOES NOT DO
 *
 *   - allocate device memory or query the device's properties (you pass num_cu and
 *     buffers; NVIDIA launches only ask, once per device, which kernel image the device runs
 *     and how much shared memory a block may opt in to, both allowed inside a graph capture);
 *   - allocate host memory in a planner or a launch (the plan checkers, decode_ref_scheduled,
 *     prefill_ref_scheduled and the references of the V4 index builders, V4 attention and V4
 *     prefill take scratch through AITER_MLA_MALLOC; ERR_OUT_OF_MEMORY when it returns NULL);
 *   - synchronise the device or create streams (every launch is asynchronous on the
 *     stream you give, so it can be captured in a graph);
 *   - include HIP or CUDA headers (streams and device pointers are void *).
 *
 * CONVENTIONS
 *
 *   Shapes are written [outer, ..., inner]; strides are in elements (int64_t) and a stride
 *   of 0 means "contiguous". Indices are int32 unless stated. Zero-initialised struct
 *   fields mean the documented default. "lse" is the natural-log log-sum-exp of the scaled
 *   logits. L = 512 latent dims, R = 64 rope dims, D = 576 = L + R.
 *
 * LICENSE: MIT.
 */
#ifndef AITER_MLA_H
#define AITER_MLA_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#define AITER_MLA_VERSION_MAJOR 0
#define AITER_MLA_VERSION_MINOR 1
#define AITER_MLA_VERSION_PATCH 0
#define AITER_MLA_VERSION_STRING "0.1.0"

#ifndef AITER_MLA_API
#if defined(AITER_MLA_STATIC) && (defined(__GNUC__) || defined(__clang__))
#define AITER_MLA_API static __attribute__((unused))
#elif defined(AITER_MLA_STATIC)
#define AITER_MLA_API static
#else
#define AITER_MLA_API extern
#endif
#endif

/* Functions that must run on host and device (converters, small helpers). */
#if defined(__CUDACC__) || defined(__HIPCC__)
#define AITER_MLA_HD static inline __host__ __device__
/* hipcc declares a device memcpy only in hip_runtime.h, which a HIP file may include after
 * this header: the builtin serves host and device code whatever the include order. */
#define AITER_MLA__MEMCPY(d, s, n) __builtin_memcpy(d, s, n)
#else
#define AITER_MLA_HD static inline
#define AITER_MLA__MEMCPY(d, s, n) memcpy(d, s, n)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- model constants ------------------------------------------------------------------ */
enum {
    AITER_MLA_LATENT_DIM = 512, /* L: kv_lora_rank, also V's width */
    AITER_MLA_ROPE_DIM = 64,    /* R */
    AITER_MLA_HEAD_DIM = 576,   /* D = L + R: one cache row, one q row */
    AITER_MLA_MAX_HEADS = 128,
    AITER_MLA_MAX_Q_LEN = 8,    /* decode query tokens per request (speculative decoding) */
    AITER_MLA_MAX_PAGE_SIZE = 256,
    AITER_MLA_WORK_INTS = 8,    /* int32 per work item, SPEC 1a */
    AITER_MLA_SLICE_ROWS = 64   /* decode: (token, head) rows a block takes of a query tile */
};

/* ---- status codes: one X-macro makes the enum and its strings ------------------------- */
#define AITER_MLA_STATUS_LIST(X)                                                   \
    X(OK, "ok")                                                                    \
    X(ERR_NULL_POINTER, "a required pointer is null")                              \
    X(ERR_INVALID_ARGUMENT, "an argument is out of range")                         \
    X(ERR_UNSUPPORTED, "the combination is not supported")                         \
    X(ERR_BUFFER_TOO_SMALL, "a caller buffer or workspace is too small")           \
    X(ERR_PLAN_MISMATCH, "the plan was built for other shapes")                    \
    X(ERR_PLAN_INVALID, "the plan breaks an invariant")                            \
    X(ERR_NO_GPU, "built without GPU support (AITER_MLA_NO_GPU)")                  \
    X(ERR_LAUNCH, "the GPU runtime reported an error at launch")                   \
    X(ERR_OUT_OF_MEMORY, "host memory ran out (AITER_MLA_MALLOC returned NULL)")

typedef enum aiter_mla_status {
#define AITER_MLA__ENUM(name, text) AITER_MLA_##name,
    AITER_MLA_STATUS_LIST(AITER_MLA__ENUM)
#undef AITER_MLA__ENUM
    AITER_MLA_STATUS_COUNT
} aiter_mla_status;

AITER_MLA_API const char *aiter_mla_status_string(aiter_mla_status s);
/* Detail of the most recent failure on this thread ("" before the first one). A call that
 * succeeds leaves it as it was (as errno), so read it when a call returns an error. */
AITER_MLA_API const char *aiter_mla_last_error(void);

/* ---- element types -------------------------------------------------------------------- */
typedef enum aiter_mla_dtype {
    AITER_MLA_DTYPE_DEFAULT = 0, /* "whatever the field's documented default is" */
    AITER_MLA_BF16,
    AITER_MLA_F16,
    AITER_MLA_F32,
    AITER_MLA_FP8_E4M3FN,   /* OCP e4m3: bias 7, max 448, NaN 0x7f/0xff (NVIDIA, gfx950) */
    AITER_MLA_FP8_E4M3FNUZ, /* bias 8, max 240, no -0, NaN 0x80 (AMD gfx942) */
    AITER_MLA_DTYPE_COUNT
} aiter_mla_dtype;

AITER_MLA_API size_t aiter_mla_dtype_size(aiter_mla_dtype t); /* 0 for DEFAULT/invalid */
AITER_MLA_API const char *aiter_mla_dtype_name(aiter_mla_dtype t);

/* ---- converters (host and device; round to nearest even) ------------------------------
 * bf16/f16: IEEE behaviour (overflow to inf, NaN stays NaN).
 * fp8: saturating: finite values and infinities beyond the maximum become +-max
 * (448 e4m3fn, 240 e4m3fnuz); NaN becomes the format's NaN (0x7f e4m3fn, 0x80 fnuz). A value
 * that rounds to zero keeps its sign in e4m3fn (-0 is 0x80, as torch's float8_e4m3fn and the
 * hardware converters of vLLM's cache writers give); fnuz has no negative zero: 0x00. */
AITER_MLA_HD uint32_t aiter_mla__f32_bits(float f) { uint32_t u; AITER_MLA__MEMCPY(&u, &f, 4); return u; }
AITER_MLA_HD float aiter_mla__bits_f32(uint32_t u) { float f; AITER_MLA__MEMCPY(&f, &u, 4); return f; }

AITER_MLA_HD float aiter_mla_bf16_to_f32(uint16_t h) { return aiter_mla__bits_f32((uint32_t)h << 16); }
AITER_MLA_HD uint16_t aiter_mla_f32_to_bf16(float f) {
    uint32_t u = aiter_mla__f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

AITER_MLA_HD float aiter_mla_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return aiter_mla__bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) { /* zero or subnormal: m * 2^-24 exactly */
        float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return aiter_mla__bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}
AITER_MLA_HD uint16_t aiter_mla_f32_to_f16(float f) {
    uint32_t u = aiter_mla__f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504: inf */
    if (a < 0x38800000u) { /* below 2^-14: subnormal half, quantum 2^-24 */
        float v = aiter_mla__bits_f32(a) * 16777216.0f; /* exact: scale by 2^24 */
        float r = rintf(v);
        return (uint16_t)(sign | (uint32_t)r);
    }
    a += 0xfffu + ((a >> 13) & 1u) - 0x38000000u; /* rebias 127 -> 15 and round */
    return (uint16_t)(sign | (a >> 13));
}

AITER_MLA_HD int aiter_mla__fp8_is_fnuz(aiter_mla_dtype t) { return t == AITER_MLA_FP8_E4M3FNUZ; }
/* Largest finite value of an fp8 flavour (448 e4m3fn, 240 e4m3fnuz). */
AITER_MLA_HD float aiter_mla_fp8_max(aiter_mla_dtype t) { return aiter_mla__fp8_is_fnuz(t) ? 240.0f : 448.0f; }

AITER_MLA_HD float aiter_mla_fp8_to_f32(uint8_t v, aiter_mla_dtype t) {
    int fnuz = aiter_mla__fp8_is_fnuz(t);
    uint32_t sign = (uint32_t)(v & 0x80u) << 24, e = (v >> 3) & 0xfu, m = v & 7u;
    if (fnuz ? v == 0x80u : (v & 0x7fu) == 0x7fu) return aiter_mla__bits_f32(0x7fc00000u);
    if (e == 0) { /* subnormal: m * 2^(1 - bias - 3) */
        float x = (float)m * (fnuz ? 0.0009765625f : 0.001953125f);
        return sign ? -x : x;
    }
    return aiter_mla__bits_f32(sign | ((e + 127u - (fnuz ? 8u : 7u)) << 23) | (m << 20));
}
AITER_MLA_HD uint8_t aiter_mla_f32_to_fp8(float f, aiter_mla_dtype t) {
    /* The codes of one sign are monotonic in the value: code = exponent_field * 8 + mantissa,
     * so rounding the mantissa up to 8 carries into the next exponent by itself. */
    int fnuz = aiter_mla__fp8_is_fnuz(t), bias = fnuz ? 8 : 7, max_code = fnuz ? 0x7f : 0x7e;
    uint32_t u = aiter_mla__f32_bits(f), neg = u >> 31;
    float a = aiter_mla__bits_f32(u & 0x7fffffffu);
    int code;
    if (a != a) return fnuz ? 0x80u : 0x7fu;
    if (a >= aiter_mla_fp8_max(t)) {
        code = max_code;
    } else if (a < aiter_mla__bits_f32((uint32_t)(128 - bias) << 23)) { /* below min normal */
        code = (int)rintf(a * aiter_mla__bits_f32((uint32_t)(127 + bias + 2) << 23));
    } else {
        int e = 0;
        float mant = frexpf(a, &e); /* a = mant * 2^e, mant in [0.5, 1) */
        code = (e - 1 + bias) * 8 + (int)rintf((mant * 2.0f - 1.0f) * 8.0f);
        if (code > max_code) code = max_code;
    }
    if (code == 0) return fnuz ? 0u : (uint8_t)(neg << 7); /* fnuz: no -0 (0x80 is its NaN) */
    return (uint8_t)((neg << 7) | (uint32_t)code);
}

/* Bytes of an element of dtype t (0 for DEFAULT/invalid) and a head count padded to 16 heads:
 * what aiter_mla_dtype_size and aiter_mla_padded_num_heads return, for kernels.hip too, which
 * must not call an AITER_MLA_API function (AITER_MLA_STATIC makes them static to one file). */
AITER_MLA_HD size_t aiter_mla__dtype_bytes(aiter_mla_dtype t) {
    switch (t) {
    case AITER_MLA_BF16: case AITER_MLA_F16: return 2;
    case AITER_MLA_F32: return 4;
    case AITER_MLA_FP8_E4M3FN: case AITER_MLA_FP8_E4M3FNUZ: return 1;
    default: return 0;
    }
}
AITER_MLA_HD int aiter_mla__padded_heads(int h) { return h < 16 ? 16 : h; }

/* Load element i of a buffer of dtype t as float (fp8 without scale). */
AITER_MLA_HD float aiter_mla_load_f32(const void *p, int64_t i, aiter_mla_dtype t) {
    switch (t) {
    case AITER_MLA_BF16: return aiter_mla_bf16_to_f32(((const uint16_t *)p)[i]);
    case AITER_MLA_F16: return aiter_mla_f16_to_f32(((const uint16_t *)p)[i]);
    case AITER_MLA_F32: return ((const float *)p)[i];
    case AITER_MLA_FP8_E4M3FN:
    case AITER_MLA_FP8_E4M3FNUZ: return aiter_mla_fp8_to_f32(((const uint8_t *)p)[i], t);
    default: return 0.0f;
    }
}
/* Store x as element i of a buffer of dtype t (fp8 saturates, no scale). */
AITER_MLA_HD void aiter_mla_store_f32(void *p, int64_t i, aiter_mla_dtype t, float x) {
    switch (t) {
    case AITER_MLA_BF16: ((uint16_t *)p)[i] = aiter_mla_f32_to_bf16(x); break;
    case AITER_MLA_F16: ((uint16_t *)p)[i] = aiter_mla_f32_to_f16(x); break;
    case AITER_MLA_F32: ((float *)p)[i] = x; break;
    case AITER_MLA_FP8_E4M3FN:
    case AITER_MLA_FP8_E4M3FNUZ: ((uint8_t *)p)[i] = aiter_mla_f32_to_fp8(x, t); break;
    default: break;
    }
}

/* ==== head padding (SPEC 1c) ============================================================
 * Kernels built on AMD's assembly MLA need 16 heads. A head count H is valid for them when
 * H >= 16 and H % 16 == 0, or H < 16 and 16 % H == 0. Padding repeats each head 16/H times
 * (repeat-interleave); unpadding keeps every (16/H)-th head. This library's own kernels
 * take any H in 1..128 and need none of it; the helpers are for runtimes that mix kernels. */
AITER_MLA_API int aiter_mla_num_heads_is_valid(int num_heads); /* 1 or 0 */
AITER_MLA_API int aiter_mla_padded_num_heads(int num_heads);   /* max(H, 16) */

typedef struct aiter_mla_head_pad_args {
    const void *src;   /* pad_q: [num_tokens, H, head_dim];  unpad_o: [num_tokens, Hp, head_dim] */
    void *dst;         /* pad_q: [num_tokens, Hp, head_dim]; unpad_o: [num_tokens, H, head_dim];
                          not over src (dst == src only where H >= 16: nothing moves) */
    int64_t num_tokens; /* 0..2^31 - 1 */
    int num_heads;      /* H (the model's heads), valid per aiter_mla_num_heads_is_valid */
    int head_dim;       /* 1..65536; 0 means 576 */
    aiter_mla_dtype dtype; /* element type of src and dst; DEFAULT means bf16 */
} aiter_mla_head_pad_args;

AITER_MLA_API aiter_mla_status aiter_mla_pad_q_ref(const aiter_mla_head_pad_args *a);   /* host */
AITER_MLA_API aiter_mla_status aiter_mla_unpad_o_ref(const aiter_mla_head_pad_args *a); /* host */
AITER_MLA_API aiter_mla_status aiter_mla_pad_q(const aiter_mla_head_pad_args *a, void *stream);
AITER_MLA_API aiter_mla_status aiter_mla_unpad_o(const aiter_mla_head_pad_args *a, void *stream);

/* ==== page-index expansion (SPEC 1d) ====================================================
 * page_indices[cu_num_tokens[r] + t] = block_table[r, t / K] * K + t % K for t < seq_lens[r],
 * K = kernel_block_size. Turns a block table into per-token flat slots (page size 1).
 * A block id < 0, a block index t / K at or beyond block_table_stride, or a slot that does
 * not fit int32 gives -1.
 * The reference rejects cu_num_tokens that are not monotone or exceed the capacity; the
 * GPU version cannot read them on the host and drops writes outside the capacity. */
typedef struct aiter_mla_expand_page_indices_args {
    const int32_t *block_table;  /* [batch, block_table_stride] */
    int64_t block_table_stride;  /* elements per row, >= 1 and >= ceil(max seq_len / K) */
    const int32_t *cu_num_tokens; /* [batch + 1] start of each request's output */
    const int32_t *seq_lens;     /* [batch] tokens per request */
    int32_t *page_indices;       /* [page_indices_capacity] output */
    int64_t page_indices_capacity; /* elements in page_indices (>= cu_num_tokens[batch]) */
    int batch;                   /* >= 0 */
    int kernel_block_size;       /* K, power of two 1..256; 0 means 1 */
} aiter_mla_expand_page_indices_args;

AITER_MLA_API aiter_mla_status aiter_mla_expand_page_indices_ref(const aiter_mla_expand_page_indices_args *a);
AITER_MLA_API aiter_mla_status aiter_mla_expand_page_indices(const aiter_mla_expand_page_indices_args *a, void *stream);

/* ==== decode metadata (host) ============================================================
 * From a block table and per-request lengths, build the paged-KV addressing of SPEC 1:
 *   qo_indptr[b+1] = qo_indptr[b] + q_lens[b]
 *   kv_indptr[b+1] = kv_indptr[b] + ceil(seq_lens[b] / page_size)
 *   kv_indices     = the first ceil(seq_lens[b] / page_size) block-table entries of each row
 *   kv_last_page_lens[b] = tokens used in the last page (page_size if full, 0 if empty).
 * seq_lens count every key, the new tokens included. The planner and the decode take a request
 * whose pages hold at most 2^31 - 1 slots (pages x page_size), a key count a little below
 * INT32_MAX for pages over 1. */
typedef struct aiter_mla_decode_metadata_args {
    const int32_t *block_table;  /* [batch, block_table_stride] page ids */
    int64_t block_table_stride;  /* elements per row (>= pages of the longest request) */
    const int32_t *seq_lens;     /* [batch] keys per request, >= 0 */
    const int32_t *q_lens;       /* [batch] query tokens per request, 0..8; NULL means q_len each */
    int q_len;                   /* used when q_lens is NULL: 1..8; 0 means 1 */
    int batch;                   /* >= 1 */
    int page_size;               /* power of two 1..256; 0 means 1 */
    int32_t *qo_indptr;          /* [batch + 1] out */
    int32_t *kv_indptr;          /* [batch + 1] out */
    int32_t *kv_indices;         /* [kv_indices_capacity] out */
    int64_t kv_indices_capacity; /* elements available in kv_indices, >= 0 */
    int32_t *kv_last_page_lens;  /* [batch] out */
} aiter_mla_decode_metadata_args;

AITER_MLA_API aiter_mla_status aiter_mla_decode_metadata_build(const aiter_mla_decode_metadata_args *a);

/* ==== split-KV decode plan (SPEC 1a) ====================================================
 * The plan balances (request x query-tile x KV range) pieces over the compute units. Its
 * sizes depend only on the upper bounds in the desc, so its buffers can be allocated once
 * and live in persistent (graph-captured) memory; its contents depend on the lengths and
 * are rebuilt on the host whenever they change.
 *
 * Query tiles: a request's q_len tokens are cut into tiles of tokens_per_tile =
 * min(max_q_len, max(1, 64 / H)) tokens, so a tile holds at most 64 (token, head) rows
 * (the tensor-core kernel's tile), or one token when H > 64. (AITER sizes its tiles for
 * 128 rows; the sizes below follow SPEC 1a with this kernel's tile.)
 *
 * The plan is one int32 buffer of info.plan_ints elements (one copy moves it to the
 * device), laid out as:
 *   header              [AITER_MLA_PLAN_HEADER_INTS]  counts (see aiter_mla_decode_plan_view)
 *   work_indptr         [num_lists + 1]               work items of list c: [indptr[c], indptr[c+1])
 *   work_info           [max_work, 8]                 batch_idx, partial_qo_loc, qo_start,
 *                                                     qo_end, kv_start, kv_end, kv_offset, pad
 *   reduce_indptr       [max_reduce_tiles + 1]
 *   reduce_final_map    [max_reduce_tiles, 2]         (qo_start, qo_end) of each tile
 *   reduce_partial_map  [max_partials]                partial_qo_loc of each split piece
 *   reduce_counters     [2, max_partial_rows]         zero as built. Row 0: at each split
 *                                                     piece's partial_qo_loc, the rows the GPU
 *                                                     decode has stored of it; row 1: at each
 *                                                     tile's first piece's, the reduce's units
 *                                                     done. The reduce sets both back to zero
 * Work item fields: qo_start/qo_end are global query-token rows (end exclusive);
 * kv_start/kv_end index kv_indices (page units, absolute); kv_offset is the number of
 * keys between the piece's end and the end of the sequence (for the causal rule);
 * partial_qo_loc is -1 when the piece is a whole tile (it writes o directly) or else the
 * first row of its fp32 partial output (rows are query tokens, each H x 512 floats).
 * A list's items follow the batch's order, but for a split piece at the list's end, which
 * runs first (its tile's reduce can then start early). Reduce tile t is the t-th query tile
 * of the batch in order; it lists its pieces in KV order when split, nothing otherwise.
 * Unused tail entries of reduce_indptr repeat the last value.
 *
 * The GPU decode may write to its plan: on NVIDIA's tensor-core kernels (the warpgroup one
 * always; the mma ones when the plan's rows, batch x tokens a tile x H, are at least
 * num_cu) each split
 * piece counts its stored rows in reduce_counters, so that the reduce merges a tile as soon
 * as its pieces are in (not after the whole decode), and the reduce zeroes the counters
 * again. A plan buffer therefore serves one aiter_mla_decode at a time (in stream order, any
 * number of layers and graph replays); after a failed call, upload it again. Counters that
 * are not zero when a decode starts (two decodes on one plan at once) can make the reduce
 * merge a tile before its pieces are in. */
enum { AITER_MLA_PLAN_HEADER_INTS = 16, AITER_MLA_PLAN_MAGIC = 0x414c4d31 };

enum { /* header slots of the plan buffer (internal) */
    AITER_MLA__PH_MAGIC, AITER_MLA__PH_NUM_LISTS, AITER_MLA__PH_NUM_WORK, AITER_MLA__PH_NUM_REDUCE_TILES,
    AITER_MLA__PH_NUM_PARTIALS, AITER_MLA__PH_NUM_PARTIAL_ROWS, AITER_MLA__PH_BATCH
};

typedef struct aiter_mla_decode_plan_desc {
    int max_batch;      /* 1..2^20: most requests in one step */
    int num_heads;      /* H, 1..128 */
    int max_q_len;      /* 1..8: most query tokens of one request */
    int num_cu;         /* 1..65535: multiprocessors / CUs the decode kernel may fill (see num_lists;
                           a grid dimension holds at most 65535 of them) */
    int page_size;      /* power of two 1..256; 0 means 1 */
    int kv_granularity; /* tokens per planning block, power of two 16..4096; 0 means 64 */
    int overhead_blocks; /* fixed cost of a work item in blocks, 1..64; 0 means 2 (a piece's
                            start and end, Q's load to the merge of its o, take about two
                            blocks' time: H200, D1-fp8 2 % faster than with 1) */
} aiter_mla_decode_plan_desc;

typedef struct aiter_mla_decode_plan_info {
    aiter_mla_decode_plan_desc desc; /* with defaults resolved */
    int32_t tokens_per_tile;   /* query tokens per tile */
    int32_t num_lists;         /* work lists: num_cu / slices, at least 1, where a tile's query rows
                                  (tokens_per_tile x H) run as slices = ceil(rows / 64) blocks side
                                  by side that share its keys in the cache; the launch is num_lists
                                  x slices blocks (about num_cu) */
    int32_t max_tiles;         /* query tiles per request at most */
    int32_t max_work;          /* (max_batch + num_lists - 1) * max_tiles */
    int32_t max_reduce_tiles;  /* max_batch * max_tiles */
    int32_t max_partials;      /* split pieces at most: min(B*T + L - 1, 2(L - 1)), L = num_lists */
    int32_t max_partial_rows;  /* max_partials * tokens_per_tile */
    int64_t off_work_indptr, off_work_info, off_reduce_indptr, off_reduce_final_map,
        off_reduce_partial_map, off_reduce_counters; /* int32 offsets of the sections in the plan buffer */
    int64_t plan_ints;         /* int32 elements of the plan buffer (partial map >= 1 entry) */
    size_t workspace_bytes;    /* fp32 partial o [max_partial_rows, H, 512] + lse [.., H] */
} aiter_mla_decode_plan_info;

/* Blocks side by side that take a query tile's rows, AITER_MLA_SLICE_ROWS each (num_lists). */
AITER_MLA_HD int aiter_mla_decode_slices(const aiter_mla_decode_plan_info *info) {
    return (info->tokens_per_tile * info->desc.num_heads + AITER_MLA_SLICE_ROWS - 1) / AITER_MLA_SLICE_ROWS;
}

/* Pointers into a plan buffer and the counts of its header. */
typedef struct aiter_mla_decode_plan_view {
    int32_t num_lists, num_work, num_reduce_tiles, num_partials, num_partial_rows; /* num_lists: work lists
                                                                                       (a prefill plan's: num_cu) */
    int32_t batch; /* requests the plan was built for */
    int32_t *work_indptr, *work_info, *reduce_indptr, *reduce_final_map, *reduce_partial_map;
} aiter_mla_decode_plan_view;

AITER_MLA_API aiter_mla_status aiter_mla_decode_plan_get_info(const aiter_mla_decode_plan_desc *d,
                                                              aiter_mla_decode_plan_info *info);
/* Fill plan (host, info->plan_ints int32) from host arrays: qo_indptr [batch+1],
 * kv_indptr [batch+1], kv_last_page_lens [batch], none of them inside plan (checked). */
AITER_MLA_API aiter_mla_status aiter_mla_decode_plan_build(const aiter_mla_decode_plan_info *info,
                                                           const int32_t *qo_indptr, const int32_t *kv_indptr,
                                                           const int32_t *kv_last_page_lens, int batch,
                                                           int32_t *plan);
/* Check every invariant of a built plan against the arrays it was built from: each key of
 * each query row covered exactly once, pieces in bounds, partial rows unique and inside
 * the workspace, reduce maps consistent. Returns ERR_PLAN_INVALID with the reason. */
AITER_MLA_API aiter_mla_status aiter_mla_decode_plan_check(const aiter_mla_decode_plan_info *info,
                                                           const int32_t *qo_indptr, const int32_t *kv_indptr,
                                                           const int32_t *kv_last_page_lens, int batch,
                                                           const int32_t *plan);
/* The plan's header counts and its sections' places in plan, as info lays them out (for host
 * tools and tests). All zero when plan is NULL or info is not what
 * aiter_mla_decode_plan_get_info makes of its desc (aiter_mla_last_error says why). */
AITER_MLA_API aiter_mla_decode_plan_view aiter_mla_decode_plan_view_of(const aiter_mla_decode_plan_info *info,
                                                                       int32_t *plan);

/* ==== dense decode (SPEC 1) =============================================================
 * For request b, query row i of its q_len rows, head h:
 *   s_j = sm_scale * q_scale * kv_scale * (q . k_j) over keys j <= kv_len - q_len + i,
 *   o = softmax(s) . V (V = first 512 columns of the row, dequantised), lse = log sum exp s.
 * q_scale applies only to an fp8 q and kv_scale only to an fp8 cache (scale 1 otherwise).
 * A row that sees no key gets o = 0, lse = +inf (so does every row of an empty request:
 * the plan gives each of its tiles one empty work item); a NaN or +inf score (from a NaN or an
 * infinity in q or a key it sees) gives it NaN o and lse, here and in the references; a score
 * of -inf weighs 0, as a masked key does (FlashMLA alike; infinite or NaN V values of a key
 * that weighs 0 are outside this contract: that dim of o may come out NaN, even in a row that
 * sees no key, SPEC 1). Page ids outside
 * [0, num_pages) are skipped as if their keys were absent. kv_len = (pages - 1) * page_size
 * + last_page_len.
 * The GPU path needs kv_cache and workspace 16-byte aligned. On NVIDIA devices from sm_80 (a
 * pass of kernels.hip built for sm_90 or sm_100 with 227 KB of shared memory a block: H100,
 * H200, B200; for sm_80 with 163 KB: A100, Orin; for sm_80 to sm_89 with 99 KB: sm_86, sm_89, RTX
 * 30/40, A10, L4, L40; for sm_120, RTX 50; the last three in passes of 16 rows only), a bf16 q
 * (16-byte aligned base, strides multiples of 8 elements) over a bf16 or fp8 cache, or an
 * e4m3 q (8-byte aligned, the same strides, widened exactly to bf16 as it loads) over its fp8
 * cache, takes the tensor-core kernel (where the device runs the sm_90a pass of a build with
 * AITER_MLA_WGMMA, its wgmma variant when a query tile has more than 16 rows); everything
 * else the portable one. fp8 keys are widened
 * exactly: to bf16 on the wgmma variant and for e4m3fnuz; e4m3fn keys elsewhere (passes of
 * up to 16 rows, and every pass in builds without AITER_MLA_WGMMA) to f16, with q rows
 * scaled by powers of two into f16's range and P rounded to f16 (finer than bf16 on
 * [0, 1]). AMD builds take the
 * matrix-core (MFMA) kernel for a bf16 or f16 q (the same alignment) over a cache of q's type
 * or fp8, keys widened exactly to q's type and P rounded to it, and for an e4m3 q (8-byte
 * aligned, strides multiples of 8) over a cache of the same flavour, both widened exactly to
 * f16 and P rounded to f16; other fp8 q run the portable kernel.
 * Supported: q bf16/f16/fp8 (both flavours); cache of q's type or fp8 (both flavours,
 * per-tensor kv_scale), an fp8 q only over the same fp8 cache; o bf16/f16/f32.
 * aiter_mla_decode also runs the reduce of split pieces. */
typedef struct aiter_mla_decode_args {
    const void *q;              /* [T, H, 576] q_dtype, T = qo_indptr[batch] */
    int64_t q_stride_token;     /* 0 means H * q_stride_head (strides: at most 2^32 elements) */
    int64_t q_stride_head;      /* 0 means 576 */
    const void *kv_cache;       /* [num_pages, page_size, 576] kv_dtype */
    int64_t num_pages;          /* >= 1: pages in kv_cache (bounds page ids) */
    size_t kv_cache_bytes;      /* optional (0: not given): kv_cache's size; when given, at least
                                   num_pages x page_size rows of 576 kv_dtype values (checked: a
                                   cache of fp8 rows described as bf16 fails here) */
    const int32_t *qo_indptr;   /* [batch + 1] query tokens of each request */
    const int32_t *kv_indptr;   /* [batch + 1] pages of each request in kv_indices */
    const int32_t *kv_indices;  /* [kv_indptr[batch]] page ids */
    const int32_t *kv_last_page_lens; /* [batch] keys in each request's last page: 1..page_size
                                         (0 only for a request without pages) */
    void *o;                    /* [T, H, 512] o_dtype; rows must not overlap (the references
                                   check all T tokens, aiter_mla_decode two: T is on the device) */
    int64_t o_stride_token;     /* 0 means H * o_stride_head; >= 512 (for one token too) */
    int64_t o_stride_head;      /* 0 means 512; >= 512 when H > 1 */
    float *lse;                 /* [T, H] fp32, optional (NULL: not written) */
    int32_t *plan;              /* plan buffer (device for aiter_mla_decode, which may write
                                   its counters and leaves them zero; host for the scheduled
                                   reference; unused by aiter_mla_decode_ref); it must come
                                   from aiter_mla_decode_plan_build with this batch and these
                                   arrays (only the scheduled reference checks) */
    const aiter_mla_decode_plan_info *plan_info; /* host struct the plan was sized with */
    void *workspace;            /* info.workspace_bytes: fp32 partials (same memory space as plan) */
    size_t workspace_bytes;     /* workspace's size, >= info.workspace_bytes (checked) */
    int batch;                  /* 1..plan max_batch */
    int num_heads;              /* H, 1..128 (equal to the plan's) */
    int page_size;              /* power of two 1..256 (equal to the plan's); 0 means 1 */
    aiter_mla_dtype q_dtype;    /* DEFAULT means bf16 */
    aiter_mla_dtype kv_dtype;   /* q's type or fp8 (fp8 q: the same fp8); DEFAULT means q_dtype */
    aiter_mla_dtype o_dtype;    /* DEFAULT means q_dtype (bf16 if q is fp8) */
    float sm_scale;             /* the model's scale (DeepSeek V3: 1/sqrt(192) x mscale^2, see
                                   model_scale in the manual); 0 means 1/sqrt(576) */
    float q_scale;              /* fp8 q dequant scale; 0 means 1 */
    float kv_scale;             /* fp8 cache dequant scale; 0 means 1 (each scale below 1e30, and
                                   so is the product of those that apply) */
} aiter_mla_decode_args;

/* GPU: decode + reduce, asynchronous on stream. */
AITER_MLA_API aiter_mla_status aiter_mla_decode(const aiter_mla_decode_args *a, void *stream);
/* CPU reference on host pointers; plan, plan_info and workspace are neither read nor checked
 * (a reference of some heads may take a GPU call's arguments with another num_heads: then set
 * q_stride_token and o_stride_token to the full tensors' strides, which otherwise default to
 * this num_heads' rows and read the wrong ones). */
AITER_MLA_API aiter_mla_status aiter_mla_decode_ref(const aiter_mla_decode_args *a);
/* CPU replay of the plan (a->plan host, a->workspace host) followed by its reduce: the
 * same pieces and partials the GPU computes. */
AITER_MLA_API aiter_mla_status aiter_mla_decode_ref_scheduled(const aiter_mla_decode_args *a);

/* ==== reduce of split pieces (SPEC 1b) ==================================================
 * For reduce tile t with pieces k (rows p_k .. of the partial buffers):
 *   g = m + log sum_k exp(lse_k - m), m = max_k lse_k;  o = sum_k exp(lse_k - g) o_k;
 *   lse = g. Pieces with lse = -inf weigh 0; if all are empty: o = 0 and lse = +inf (or -inf
 * with empty_lse_neg_inf, the prefill's convention). A NaN lse (a piece with a NaN score)
 * makes the row's o and lse NaN. */
typedef struct aiter_mla_reduce_args {
    const float *partial_o;     /* [partial_rows, H, dv] */
    const float *partial_lse;   /* [partial_rows, H] */
    const int32_t *reduce_indptr;     /* [num_tiles + 1] */
    const int32_t *reduce_final_map;  /* [num_tiles, 2] (qo_start, qo_end) */
    const int32_t *reduce_partial_map;/* [reduce_indptr[num_tiles]] first partial row */
    int num_tiles;              /* tiles to visit (tiles with < 2 pieces are skipped) */
    int num_partial_rows;       /* rows in partial_o / partial_lse (bounds the maps) */
    int num_heads;              /* 1..65535 (a decode plan has at most 128, a prefill plan 65535) */
    int dv;                     /* 1..1024; 0 means 512 */
    void *o;                    /* [T, H, dv] o_dtype */
    int64_t o_stride_token, o_stride_head; /* 0 means H * o_stride_head, dv; at most 2^32;
                                              rows must not overlap (checked over the maps' rows;
                                              token stride >= dv for one token too, head stride
                                              >= dv when H > 1) */
    float *lse;                 /* [T, H], optional */
    int64_t lse_stride_token;   /* 0 means H    (lse [T, H]; prefill's [H, T] passes 1 and T) */
    int64_t lse_stride_head;    /* 0 means 1; no two rows' lse on one element */
    int empty_lse_neg_inf;      /* a row no piece saw a key for: 0 gives lse +inf (decode),
                                   1 gives -inf (prefill); 0 or 1 */
    aiter_mla_dtype o_dtype;    /* DEFAULT means bf16 */
} aiter_mla_reduce_args;

AITER_MLA_API aiter_mla_status aiter_mla_reduce_ref(const aiter_mla_reduce_args *a);

/* ==== merge of attention states (SPEC 2a) ===============================================
 * o = (w_p o_p + w_s o_s) / (w_p + w_s), w = exp(lse - max(lse_p, lse_s)); lse = +inf
 * counts as -inf. Both sides empty: o = 0, lse = -inf. A NaN lse (a NaN row of either
 * side) gives NaN o and lse. The reference computes in double;
 * the GPU version in fp32 (SPEC 8 tolerances; the infinities land exactly). o may be
 * o_prefix or o_suffix itself (a running merge: each value is read before it is written)
 * but not overlap either otherwise, nor lse_prefix or lse_suffix; lse must not overlap any
 * input or o (alternate two lse buffers); all checked. dtype is the o buffers' type: the
 * prefill's o_dtype as resolved (0 there means qkv_dtype, bf16 for fp8; 0 here means bf16,
 * so set it for f16 or f32 o). */
typedef struct aiter_mla_merge_args {
    const void *o_prefix;       /* [T, H, head_dim] dtype */
    const float *lse_prefix;    /* [H, T] */
    const void *o_suffix;       /* [T, H, head_dim] dtype */
    const float *lse_suffix;    /* [H, T] */
    void *o;                    /* [T, H, head_dim] dtype */
    float *lse;                 /* [H, T], optional */
    int64_t num_tokens;         /* T >= 0 */
    int num_heads;              /* 1..65536 */
    int head_dim;               /* 1..65536 */
    aiter_mla_dtype dtype;      /* o's type: bf16, f16 or f32; DEFAULT means bf16 */
} aiter_mla_merge_args;

AITER_MLA_API aiter_mla_status aiter_mla_merge_attn_states_ref(const aiter_mla_merge_args *a);
AITER_MLA_API aiter_mla_status aiter_mla_merge_attn_states(const aiter_mla_merge_args *a, void *stream);

/* ==== varlen prefill attention (SPEC 2, 2c) =============================================
 * For request b (query rows cu_seqlens_q[b].., key rows cu_seqlens_k[b]..), head h and
 * query row i of its sq rows: s_j = sm_scale * q_scale * k_scale * (q . k_j) over its sk
 * keys, or with causal over j <= sk - sq + i (bottom-right aligned); o = softmax(s) . v
 * (v times v_scale), lse[h, row] = log sum exp s. A row that sees no key: o = 0 and
 * lse = -inf (the value merge_attn_states treats as empty); a NaN score: NaN o and lse.
 * fp8 operands (both flavours)
 * carry per-tensor scales; with 16-bit operands the scales are not applied (but must still
 * be 0 or positive and finite).
 *
 * GPU (aiter_mla_prefill): without a plan, one block per (query tile, head, request), which
 * needs max_seqlen_q; given num_cu, the wgmma kernel launches only the blocks that fit at
 * once when that grid has more (and at most 64 query tiles a request), each taking grid
 * blocks in turn, so that its next tile's first loads overlap the end of the one before;
 * with a persistent plan (plan + plan_info + workspace, below), one block per (list, head)
 * runs that CU's work items and the reduce merges split tiles. Tensor cores (mma.sync,
 * sm_80+) take 16-byte aligned q/k/v whose strides are multiples of 16 bytes: bf16 and fp8
 * at every head-dim pair, f16 at 192/128 and 128/128 only (other f16 pairs run the portable
 * kernel); fp8 is widened exactly, to f16 with f16 products for the 192/128 and 128/128
 * pairs, else to bf16. With AITER_MLA_WGMMA, bf16, f16 and e4m3fn on those two pairs run the
 * wgmma kernel (128 query rows a block; e4m3fn takes q K^T as e4m3 products, whose sums on
 * Hopper keep about 14 bits: lse within 3e-3, o within SPEC 8's fp8 bounds; P V as e4m3
 * products too, P rounded to e4m3 after a factor 2^4); on AMD builds those two pairs run the
 * matrix-core (MFMA) kernel (64 query rows a block; bf16 and f16 products in their type,
 * fp8 widened exactly to f16, P rounded to the product type); anything else runs a portable
 * kernel. cu_seqlens live on the device and are trusted like the q/k/v/o they index (ERRORS);
 * a decreasing pair gives an empty request. */
typedef struct aiter_mla_prefill_args {
    const void *q;               /* [Tq, H, dqk] qkv_dtype */
    const void *k;               /* [Tk, H, dqk] qkv_dtype */
    const void *v;               /* [Tk, H, dv]  qkv_dtype */
    int64_t q_stride_token, q_stride_head; /* 0 means H * q_stride_head, dqk (all strides at most 2^32) */
    int64_t k_stride_token, k_stride_head; /* 0 means H * k_stride_head, dqk */
    int64_t v_stride_token, v_stride_head; /* 0 means H * v_stride_head, dv */
    const int32_t *cu_seqlens_q; /* [batch + 1] */
    const int32_t *cu_seqlens_k; /* [batch + 1] */
    void *o;                     /* [Tq, H, dv] o_dtype */
    int64_t o_stride_token, o_stride_head; /* 0 means H * o_stride_head, dv; rows must not
                                               overlap (the references check all Tq tokens,
                                               aiter_mla_prefill two: Tq is on the device; token
                                               stride >= dv for one token too, head stride >= dv
                                               when H > 1) */
    float *lse;                  /* [H, Tq] fp32, optional (Tq = cu_seqlens_q[batch]) */
    int batch;                   /* >= 1 */
    int max_seqlen_q;            /* GPU without a plan: the longest request's query rows; sizes the
                                    grid (an understated value costs time, every row is still done) */
    int num_cu;                  /* GPU without a plan, optional: the device's multiprocessors (CUs,
                                    SMs), >= 0. The wgmma kernel then launches at most num_cu blocks,
                                    each taking the grid's blocks in turn (above); a wrong count
                                    costs time, never rows. 0: a block for each grid block */
    int num_heads;               /* 1..65536 (1..65535 with a plan) */
    int dqk, dv;                 /* 64, 128, 192 or 256 each, dv <= dqk; 0 means 192 / 128 */
    int causal;                  /* 0 or 1 */
    float sm_scale;              /* the model's scale (see model_scale in the manual); 0 means
                                    1/sqrt(dqk), without YaRN's mscale^2 */
    float q_scale, k_scale, v_scale; /* fp8 only; 0 means 1 (each below 1e30, and so is
                                        sm_scale x q_scale x k_scale for fp8) */
    aiter_mla_dtype qkv_dtype;   /* bf16, f16 or fp8; DEFAULT means bf16 */
    aiter_mla_dtype o_dtype;     /* bf16, f16 or f32; DEFAULT means qkv_dtype (bf16 for fp8) */
    const int32_t *plan;         /* persistent plan (below): host for the scheduled reference,
                                    device for aiter_mla_prefill; NULL: no plan */
    const struct aiter_mla_prefill_plan_info *plan_info; /* host, with plan */
    void *workspace;             /* with plan: plan_info->workspace_bytes (fp32 partials), 16-byte
                                    aligned; NULL is accepted where that size is 0 */
    size_t workspace_bytes;      /* workspace's size, >= plan_info->workspace_bytes (checked) */
} aiter_mla_prefill_args;

/* CPU reference on host pointers; plan, plan_info and workspace are neither read nor checked. */
AITER_MLA_API aiter_mla_status aiter_mla_prefill_ref(const aiter_mla_prefill_args *a);
/* GPU: every pointer on the device except plan_info. */
AITER_MLA_API aiter_mla_status aiter_mla_prefill(const aiter_mla_prefill_args *a, void *stream);

/* ==== persistent prefill plan (SPEC 2c) ==================================================
 * Each request's query rows are cut into tiles of tile_q rows, visited zig-zag (0, n-1, 1,
 * n-2, ...). A tile's keys are the first min(sk - sq + tile_end, sk) of its request when
 * causal (all sk otherwise), counted in units of kv_granularity keys. The units are
 * spread over the CUs, each getting avg or avg + 1 (the first U % num_cu get one more),
 * walking the tiles in visit order and cutting a tile where a CU's quota runs out. Work
 * items use the decode plan's 8-int layout (SPEC 1a) with kv_start/kv_end as key rows
 * (absolute, like cu_seqlens_k), kv_offset = keys of the request after the piece, and
 * pad = q_head_range = (num_heads << 16) | 0. Split tiles write fp32 partials + lse that
 * the reduce (SPEC 1b) merges; whole tiles write o and lse directly. Reduce tile t is the
 * t-th tile in visit order. Sizes from upper bounds: tiles <= max_q_tokens / tile_q +
 * max_batch, work <= tiles + num_cu - 1, split pieces <= min(work, 2 (num_cu - 1)). The
 * plan buffer has the decode plan's layout (header, work_indptr, work_info, reduce maps),
 * at the offsets aiter_mla_prefill_plan_info gives (aiter_mla_decode_plan_view_of takes a
 * decode plan's info only). CPU planner and scheduled reference.
 * Lists on the GPU: AITER's plan gives each CU a list whose items span every head (their
 * q_head_range); aiter_mla_prefill runs a block per (list, head), so a plan with a list per
 * CU cuts nearly every tile (fp32 partials and their reduce) and leaves each block a few
 * units. Fewer lists run faster: num_cu = min(CUs, 16 x CUs / num_heads, U / 64), at least 1,
 * with tile_q = 128, where U is one head's units (the sum over the query tiles of ceil(tile
 * keys / kv_granularity)), came within 4 % of the best count on each of eleven cases
 * measured on an H200 (132 CUs; seven shapes, bf16 and fp8), and 1.06 to 2.7 times faster
 * than 132 lists of tile_q 256 (P1, 128 heads, one causal 4096 x 4096 request: 8 lists 1256
 * us, 132 lists 3036 us). Without a plan the grid
 * kernel ran faster still on six of the seven shapes (P1 1098 us) and slower on one, 16 heads
 * over a single 4096-row request (218 against 174 us on the rule's 8 lists).
 * aiter_mla_prefill_plan_fit_lists computes the count; docs/PERFORMANCE.md has the sweep. */
typedef struct aiter_mla_prefill_plan_desc {
    int max_batch;          /* 1..2^20 */
    int64_t max_q_tokens;   /* 1..2^26: query rows of a batch at most */
    int num_heads;          /* 1..65535 */
    int num_cu;             /* 1..65536: the work lists (AITER: the CUs; for aiter_mla_prefill see above) */
    int dv;                 /* 64, 128, 192 or 256, the prefill call's; 0 means 128 (sizes the workspace) */
    int tile_q;             /* power of two 16..1024; 0 means 256 (AITER's; 128 runs faster here, above) */
    int kv_granularity;     /* power of two 16..4096; 0 means 128 */
} aiter_mla_prefill_plan_desc;

typedef struct aiter_mla_prefill_plan_info {
    aiter_mla_prefill_plan_desc desc; /* with defaults resolved */
    /* bounds the buffers are sized for: query tiles (max_q_tokens / tile_q + max_batch), work
       items (tiles + num_cu - 1), split pieces (min(work, 2 (num_cu - 1))), their rows (x tile_q) */
    int32_t max_tiles, max_work, max_partials, max_partial_rows;
    /* int32 offsets into the plan buffer of work_indptr [num_cu + 1], work_info [max_work, 8],
       reduce_indptr, reduce_final_map and reduce_partial_map (as the decode plan's, above) */
    int64_t off_work_indptr, off_work_info, off_reduce_indptr, off_reduce_final_map, off_reduce_partial_map;
    int64_t plan_ints;      /* int32 elements of the plan buffer */
    size_t workspace_bytes; /* fp32 partial o [max_partial_rows, H, dv] + lse [.., H], where
                               max_partial_rows = max_partials x tile_q, and max_partials
                               grows with num_cu (work <= tiles + num_cu - 1): even a small
                               batch takes num_cu x tile_q rows (132 lists of tile_q 128, 8
                               heads, 4 requests of 467 query rows: 73 MB), one more reason
                               for fewer lists */
} aiter_mla_prefill_plan_info;

AITER_MLA_API aiter_mla_status aiter_mla_prefill_plan_get_info(const aiter_mla_prefill_plan_desc *d,
                                                               aiter_mla_prefill_plan_info *info);
/* The list count above for a batch: sets d->num_cu (its value on entry is not read) to
 * min(device_cu, 16 device_cu / num_heads, U / 64), at least 1, U from cu_seqlens_q /
 * cu_seqlens_k [batch + 1] (host) and d's tile_q and kv_granularity (set tile_q = 128 first:
 * the rule was measured with it; 0 is taken as 256, and keep d's tile_q for get_info).
 * device_cu: the device's CUs (SMs), 1..65536. d is checked
 * as aiter_mla_prefill_plan_get_info checks it, and the batch against it as
 * aiter_mla_prefill_plan_build does; on failure d is left as it was. */
AITER_MLA_API aiter_mla_status aiter_mla_prefill_plan_fit_lists(aiter_mla_prefill_plan_desc *d, int device_cu,
                                                                const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k, int batch,
                                                                int causal);
/* Fill plan (host) from cu_seqlens_q / cu_seqlens_k [batch + 1] (host, not inside plan:
 * checked). The plan holds for these cu_seqlens and this causal flag only: the prefill
 * call's must be the same. */
AITER_MLA_API aiter_mla_status aiter_mla_prefill_plan_build(const aiter_mla_prefill_plan_info *info,
                                                            const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                                                            int batch, int causal, int32_t *plan);
/* Every invariant: each (tile row, visible key) covered exactly once, pieces in bounds,
 * CU quotas avg or avg + 1, partial rows unique, reduce maps consistent. */
AITER_MLA_API aiter_mla_status aiter_mla_prefill_plan_check(const aiter_mla_prefill_plan_info *info,
                                                            const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                                                            int batch, int causal, const int32_t *plan);
/* CPU replay of a->plan (host) and its reduce, with a->workspace (host): the same pieces
 * and partials a persistent-plan kernel computes. It agrees with aiter_mla_prefill_ref
 * exactly where the plan splits no tile; split tiles' fp32 partials, merged in another
 * order, may move o's last bits and lse by fp32 rounding. */
AITER_MLA_API aiter_mla_status aiter_mla_prefill_ref_scheduled(const aiter_mla_prefill_args *a);

/* ==== KV cache write (SPEC 3) ===========================================================
 * cache[slot / block_size, slot % block_size, :] = [kv_c | k_pe] for every token whose
 * slot is in [0, num_blocks * block_size); slot -1 (padding) and out-of-range slots are
 * skipped (a slot given to two tokens ends up, on the GPU, with a mix of their rows). fp8
 * caches store e4m3(x / scale), saturating. */
typedef struct aiter_mla_kv_cache_write_args {
    const void *kv_c;           /* [num_tokens, 512] src_dtype, row stride kv_c_stride */
    int64_t kv_c_stride;        /* 0 means 512 */
    const void *k_pe;           /* [num_tokens, 64] src_dtype, row stride k_pe_stride */
    int64_t k_pe_stride;        /* 0 means 64 */
    const int64_t *slot_mapping; /* [num_tokens] int64 */
    void *kv_cache;             /* [num_blocks, block_size, 576] cache_dtype */
    int64_t num_blocks;         /* >= 1 */
    size_t kv_cache_bytes;      /* optional (0: not given): kv_cache's size, at least num_blocks x
                                   block_size rows of 576 cache_dtype values (checked) */
    int block_size;             /* 1..65536; 0 means 1 */
    int64_t num_tokens;         /* >= 0 */
    aiter_mla_dtype src_dtype;  /* bf16 or f16; DEFAULT means bf16 */
    aiter_mla_dtype cache_dtype; /* src_dtype or fp8 (from either); DEFAULT means src_dtype */
    float scale;                /* fp8 per-tensor scale; 0 means 1 */
} aiter_mla_kv_cache_write_args;

AITER_MLA_API aiter_mla_status aiter_mla_kv_cache_write_ref(const aiter_mla_kv_cache_write_args *a);
AITER_MLA_API aiter_mla_status aiter_mla_kv_cache_write(const aiter_mla_kv_cache_write_args *a, void *stream);

/* ==== sparse index conversion (SPEC 4, DeepSeek V3.2) ===================================
 * Turns each token's top-k request-local key positions into global cache slots:
 *   decode form (block_table set):  out = block_table[req, idx / BS] * BS + idx % BS
 *   prefill form (block_table NULL): out = workspace_starts[req] + idx
 * with req = req_id[t]. A negative idx, a block index at or beyond block_table_stride, a
 * negative block id, a req_id outside [0, num_requests) or a slot that does not fit int32
 * gives -1. valid_counts (optional) receives the number of entries that are not -1 per
 * row, which is FlashMLA's topk_length when the valid entries come first. The GPU version
 * takes the same arguments on device pointers; its output is bit-identical to the
 * reference's. */
typedef struct aiter_mla_sparse_index_args {
    const int32_t *indices;          /* [num_tokens, indices_stride] request-local, -1 = none */
    int64_t indices_stride;          /* 0 means topk */
    const int32_t *req_id;           /* [num_tokens] request of each token */
    const int32_t *block_table;      /* [num_requests, block_table_stride]; NULL: prefill form */
    int64_t block_table_stride;      /* >= 1 with block_table */
    int block_size;                  /* BS, 1..4096, with block_table; 0 means 64 */
    const int32_t *workspace_starts; /* [num_requests] prefill form: first row of each request */
    int num_requests;                /* >= 1 */
    int64_t num_tokens;              /* >= 0 */
    int topk;                        /* 1..2^20 */
    int32_t *out;                    /* [num_tokens, out_stride] global slots */
    int64_t out_stride;              /* 0 means topk */
    int32_t *valid_counts;           /* [num_tokens], optional */
} aiter_mla_sparse_index_args;

AITER_MLA_API aiter_mla_status aiter_mla_convert_sparse_indices_ref(const aiter_mla_sparse_index_args *a);
AITER_MLA_API aiter_mla_status aiter_mla_convert_sparse_indices(const aiter_mla_sparse_index_args *a, void *stream);

/* filter_prefill_indices (SPEC 4): split each token's indices into the part that lies in
 * its request's cached context (idx < ctx_len: kept, else -1) and the part among the new
 * tokens (idx >= ctx_len: idx - ctx_len, else -1). A req_id outside [0, num_requests) or a
 * negative ctx_len gives -1 in both outputs. CPU reference and GPU version (bit-identical). */
typedef struct aiter_mla_filter_prefill_args {
    const int32_t *indices;   /* [num_tokens, topk] request-local, -1 = none */
    const int32_t *req_id;    /* [num_tokens] */
    const int32_t *ctx_lens;  /* [num_requests] cached context length of each request */
    int num_requests;         /* >= 1 */
    int64_t num_tokens;       /* >= 0 */
    int topk;                 /* 1..2^20 */
    int32_t *context_out;     /* [num_tokens, topk] */
    int32_t *new_out;         /* [num_tokens, topk] */
} aiter_mla_filter_prefill_args;

AITER_MLA_API aiter_mla_status aiter_mla_filter_prefill_indices_ref(const aiter_mla_filter_prefill_args *a);
AITER_MLA_API aiter_mla_status aiter_mla_filter_prefill_indices(const aiter_mla_filter_prefill_args *a, void *stream);

/* FlashMLA's older sparse prefill API returns base-2 lse; this gives the natural-log one in
 * place: lse_e = lse_2 * ln 2 (infinities stay: that API's -inf for a row with no valid slot
 * stays -inf, where this library's sparse attention writes +inf). */
AITER_MLA_API void aiter_mla_lse_base2_to_natural(float *lse, int64_t n);

/* ==== fp8_ds_mla cache rows (SPEC 6, DeepSeek V3.2) ======================================
 * 656 bytes per token: bytes 0..511 = 512 fp8 values of the latent, 512..527 = four fp32
 * scales (scale i covers values 128 i .. 128 i + 127), 528..655 = 64 bf16 rope values.
 * Value = fp8 * scale. Writing, per group of 128: scale = amax / fp8_max (at least
 * FLT_MIN), or with pow2_scales the power of two 2^ceil(log2(max(amax / fp8_max, 1e-4)))
 * (taken from the float's bits, exact); values are stored as fp8(x / scale), saturating.
 * fp8_max is at least 2, so that no finite group's scale overflows (below, the largest bf16
 * values would give an infinite scale and a NaN group). A value can still read back as inf
 * where its code, rounded up, times the scale passes fp32's range (as in every reader of the
 * format): under the power-of-two rule the largest bf16 values (from 2^128 - 2^123), under
 * the ratio rule the largest when fp8_max is not itself an e4m3 value.
 * fp8_max defaults to the flavour's maximum (448 e4m3fn, 240 e4m3fnuz; vLLM's gfx942 build
 * divides by 224 for headroom: pass fp8_max = 224 to reproduce its bytes). The slots of
 * slot_mapping follow SPEC 3 (-1 and out-of-range slots are skipped; a slot given to two
 * tokens ends up, on the GPU, with a mix of their rows).
 * The writer runs on the CPU (_ref) and the GPU, with bit-identical rows; the row reader
 * is a host helper. */
enum {
    AITER_MLA_DS_MLA_ROW_BYTES = 656,
    AITER_MLA_DS_MLA_SCALES_OFFSET = 512, /* the 4 fp32 group scales */
    AITER_MLA_DS_MLA_ROPE_OFFSET = 528    /* the 64 bf16 rope values */
};

typedef struct aiter_mla_ds_mla_write_args {
    const void *kv_c;            /* [num_tokens, 512] src_dtype, row stride kv_c_stride */
    int64_t kv_c_stride;         /* 0 means 512 */
    const void *k_pe;            /* [num_tokens, 64] src_dtype, row stride k_pe_stride */
    int64_t k_pe_stride;         /* 0 means 64 */
    const int64_t *slot_mapping; /* [num_tokens] int64 */
    void *kv_cache;              /* [num_blocks, block_size, 656] bytes */
    int64_t num_blocks;          /* >= 1 */
    size_t kv_cache_bytes;       /* optional (0: not given): kv_cache's size, at least num_blocks x
                                    block_size rows of 656 bytes (checked) */
    int block_size;              /* 1..65536; 0 means 64 */
    int64_t num_tokens;          /* >= 0 */
    aiter_mla_dtype src_dtype;   /* bf16 or f16; DEFAULT means bf16 */
    aiter_mla_dtype fp8_dtype;   /* e4m3fn or e4m3fnuz; DEFAULT means e4m3fn */
    float fp8_max;               /* divisor of the amax, in [2, flavour maximum]; 0 means the
                                    flavour's maximum */
    int pow2_scales;             /* 0 or 1. 0: amax / fp8_max; 1: the power-of-two rule */
} aiter_mla_ds_mla_write_args;

AITER_MLA_API aiter_mla_status aiter_mla_ds_mla_write_ref(const aiter_mla_ds_mla_write_args *a);
AITER_MLA_API aiter_mla_status aiter_mla_ds_mla_write(const aiter_mla_ds_mla_write_args *a, void *stream);
/* One 656-byte row to 576 floats (512 dequantised latent values, then 64 rope values).
 * An unchecked helper: row and out576 must be valid; fp8_dtype DEFAULT means e4m3fn. */
AITER_MLA_API void aiter_mla_ds_mla_read_row(const void *row, aiter_mla_dtype fp8_dtype, float *out576);

/* ==== sparse MLA attention (SPEC 4) =====================================================
 * For token t, head h, over the valid entries k of its index row (the first topk_length[t]
 * when given; an entry is valid when its slot is in [0, num_slots)):
 *   s_k = sm_scale * (q . K[slot_k]),  o = sum_k exp(s_k - m) V[slot_k] /
 *         (sum_k exp(s_k - m) + exp(attn_sink[h] - m)),  m = max_k s_k,
 *   lse = log sum_k exp(s_k) (the sink does not enter it), max_logits = m.
 * Duplicate slots count once per entry. No valid entry: o = 0, lse = +inf, max_logits =
 * -inf. attn_sink NULL (or -inf entries) means no sink; +inf takes all the weight (o = 0);
 * NaN is refused by the reference (the GPU, which cannot read it, gives NaN o). A NaN or +inf
 * score (from a NaN or an infinity in q or a valid key's row, or past fp32's range: the
 * kernels' scores are fp32, and the reference's count so) makes the row's o and lse NaN,
 * never an empty row's zeros, on the GPU and in the reference alike; a -inf score weighs 0
 * (an infinite or NaN V value of a key that weighs 0 is outside this contract: that dim of o
 * may come out NaN, 0 * inf, as in the dense decode).
 * Caches: bf16 rows of 576 ([num_slots, 576]) or fp8_ds_mla rows ([num_slots, 656] bytes).
 * GPU: one block per (token, group of up to 64 heads) streams the token's slots through the decode kernels
 * (given num_cu, with more than 16 heads on sm_90a, only the blocks that fit at once, each
 * taking tokens in turn: 4096 tokens at 128 heads, 5275 -> 4990 us on an H100; tensor cores
 * for bf16 q where the decode takes them (aiter_mla_decode_args); fp8_ds_mla rows widened to
 * bf16 in shared memory: on
 * the 64-row passes of the wgmma kernel each latent value becomes bf16(e4m3 x group scale),
 * one rounding, as FlashMLA's test oracle and vLLM's fp8_ds_mla gather dequantise (FlashMLA's
 * sm90 kernel rounds the scale to bf16 first, a second rounding), which moves a score by up
 * to 2^-9 relative against the reference's exact products; the 16-row passes apply the
 * group scales to fp32 partial sums, exactly). With 65-128 heads over
 * fp8_ds_mla on sm_90a, a token's two blocks run as a cluster of two that widen each key
 * tile once between them. AMD builds run a bf16 q on the matrix-core (MFMA) decode kernel
 * (fp8_ds_mla values widened to bf16(e4m3 x group scale), one rounding), an f16 q on the
 * portable one. */
typedef struct aiter_mla_sparse_args {
    const void *q;               /* [num_tokens, H, 576] q_dtype */
    const void *kv_cache;        /* [num_slots, 576] bf16, or [num_slots, 656] bytes fp8_ds_mla */
    int64_t num_slots;           /* 1..2^31 - 1 */
    size_t kv_cache_bytes;       /* optional (0: not given): kv_cache's size, at least num_slots rows
                                    of the format cache_is_ds_mla names (checked: fp8_ds_mla rows
                                    described as bf16 ones fail here) */
    int cache_is_ds_mla;         /* 0 or 1. 0: bf16 rows; 1: fp8_ds_mla rows */
    aiter_mla_dtype ds_mla_fp8;  /* flavour of the ds_mla rows; DEFAULT means e4m3fn */
    const int32_t *indices;      /* [num_tokens, indices_stride] global slots, -1 = none: a row's
                                    first topk entries count */
    int64_t indices_stride;      /* entries between rows of indices, topk..2^31 - 1; 0 means topk */
    const int32_t *topk_length;  /* [num_tokens], optional: entries that count per row, clamped
                                    to 0..topk */
    const float *attn_sink;      /* [H], optional */
    void *o;                     /* [num_tokens, H, 512] o_dtype */
    float *lse;                  /* [num_tokens, H], optional, natural log */
    float *max_logits;           /* [num_tokens, H], optional */
    int64_t num_tokens;          /* >= 0 */
    int num_heads;               /* 1..128 */
    int topk;                    /* 1..2^20 */
    float sm_scale;              /* the model's scale (see model_scale in the manual); 0 means
                                    1/sqrt(576) */
    aiter_mla_dtype q_dtype;     /* bf16 or f16; DEFAULT means bf16 */
    aiter_mla_dtype o_dtype;     /* bf16, f16 or f32; DEFAULT means bf16 */
    int num_cu;                  /* GPU, optional: the device's multiprocessors (CUs, SMs), 0..65536.
                                    In AITER_MLA_WGMMA builds the warpgroup kernel (more than 16
                                    heads) then launches at most num_cu blocks, each taking tokens
                                    in turn; other kernels ignore it. A wrong count costs time,
                                    never rows. 0: a block for each token and head group */
    int keys_read_once;          /* GPU hint, 0 (default) or 1: no slot is read by two tokens of the
                                    call (a decode step, one token a request, no shared pages).
                                    NVIDIA's mma.sync kernel (on sm_90a: 16 heads or fewer) then
                                    copies keys with an evict-first L2 policy, so that the keys
                                    streaming through the L2 leave it before q, o and the indices.
                                    A wrong 1 costs time, never rows; the reference ignores it */
} aiter_mla_sparse_args;

AITER_MLA_API aiter_mla_status aiter_mla_sparse_attention_ref(const aiter_mla_sparse_args *a);
/* GPU: every pointer on the device, kv_cache 16-byte aligned; contents of indices /
 * topk_length are data (a slot outside [0, num_slots) is skipped). num_tokens *
 * indices_stride must stay below 2^31. */
AITER_MLA_API aiter_mla_status aiter_mla_sparse_attention(const aiter_mla_sparse_args *a, void *stream);

/* ==== context gather (SPEC 2b; also the dequantising gather of SPEC 6) ====================
 * Copies cached latent rows into a contiguous workspace, dequantised: for request b and
 * i < cu_out_rows[b+1] - cu_out_rows[b], context position p = seq_starts[b] + i (0 when
 * seq_starts is NULL) is read from block block_table[b, p / block_size], offset
 * p % block_size, and written to row cu_out_rows[b] + i of out. Chunk c of a long context
 * is seq_starts = c * C with rows max(0, min(ctx, (c + 1) * C) - c * C). A block index beyond the
 * table or a block id outside [0, num_blocks) gives a row of zeros. A 16-bit cache
 * gathered into its own dtype is copied bit for bit; everything else goes through fp32
 * (fp8 times its scale). The GPU version is bit-identical to the reference. It cannot
 * read cu_out_rows and seq_starts on the host: rows outside [0, out_rows) are not
 * written, a negative position gives zeros, and with a non-monotone cu_out_rows some
 * rows may be skipped. */
typedef struct aiter_mla_gather_cache_args {
    const void *kv_cache;        /* [num_blocks, block_size, 576] cache_dtype, or 656-byte rows */
    int64_t num_blocks;          /* >= 1 */
    size_t kv_cache_bytes;       /* optional (0: not given): kv_cache's size, at least num_blocks x
                                    block_size rows of its format (checked) */
    int block_size;              /* 1..65536; 0 means 1 (not 64, as in the V3.2 writer and index
                                    conversion: set it for a cache of fp8_ds_mla pages) */
    aiter_mla_dtype cache_dtype; /* bf16, f16 or fp8 (per-tensor scale); DEFAULT means bf16 */
    float scale;                 /* fp8 per-tensor scale; 0 means 1 */
    int cache_is_ds_mla;         /* 0 or 1. 1: fp8_ds_mla rows (cache_dtype and scale unused) */
    aiter_mla_dtype ds_mla_fp8;  /* flavour of the ds_mla rows; DEFAULT means e4m3fn */
    const int32_t *block_table;  /* [batch, block_table_stride] */
    int64_t block_table_stride;  /* >= 1 */
    const int32_t *cu_out_rows;  /* [batch + 1] first output row of each request, monotone */
    const int32_t *seq_starts;   /* [batch] optional: first context position gathered */
    int batch;                   /* >= 1 */
    void *out;                   /* [out_rows, 576] out_dtype */
    int64_t out_rows;            /* rows available in out (>= cu_out_rows[batch]) */
    aiter_mla_dtype out_dtype;   /* bf16, f16 or f32; DEFAULT means bf16 */
} aiter_mla_gather_cache_args;

AITER_MLA_API aiter_mla_status aiter_mla_gather_cache_ref(const aiter_mla_gather_cache_args *a);
AITER_MLA_API aiter_mla_status aiter_mla_gather_cache(const aiter_mla_gather_cache_args *a, void *stream);

/* ==== DeepSeek V4 sparse attention (SPEC 7) ==============================================
 * One softmax per query token over the union of two key lists: the raw tokens of its
 * sliding window (the SWA cache) and, in layers with compress ratio 4 or 128, entries of the
 * compressed cache (ratio 4: the indexer's top-k; ratio 128: every entry so far; ratio 1:
 * none). head_dim 512 = 448 nope + 64 rope, one KV head, V = the whole 512-dim key row,
 * softmax scale 512^-0.5, window W = 128, an attention sink per head. Positions: token i
 * (0-based) of a request with q_len new tokens and seq_len keys (its new tokens included)
 * is at pos = seq_len - q_len + i; it sees the raw tokens [max(0, pos - W + 1), pos] and
 * the compressed entries j < (pos + 1) / ratio. A compressed page holds 256 logical tokens,
 * so the compressed cache's page size is 256 / ratio entries (64 at ratio 4, 2 at 128).
 * Every argument struct is plain pointers and sizes, so the same struct drives the CPU
 * reference and, where there is one, the GPU launch. The writer, the gather and the index
 * builders, the attention and vLLM's workspace prefill (aiter_mla_v4_prefill) run on the GPU.
 *
 *   cache (MODEL1 pages)  aiter_mla_v4_page_bytes, _v4_cache_write(_ref) (GPU), _v4_read_row,
 *                         _v4_gather(_ref) (GPU; vLLM dequantize_and_gather_k_cache)
 *   index builders (GPU)  _v4_swa_indices(_ref), _v4_global_topk(_ref)
 *                         (compute_global_topk_ragged_indices_and_indptr), _v4_c128_indices(_ref),
 *                         _v4_combine(_ref) (combine_topk_swa_indices_ragged), _v4_workspace_rows,
 *                         _v4_copy_ragged(_ref) (_copy_ragged_to_graph_buffers)
 *   attention (GPU)       _v4_attention(_ref) (decode, or any key lists), _v4_prefill(_ref)
 *                         (vLLM's chunked prefill: gather, combine, attend per chunk)
 *
 * A decode step of one layer: aiter_mla_v4_swa_indices (SWA cache block table) and, for
 * ratio 4, aiter_mla_v4_global_topk on the indexer's output, or for ratio 128
 * aiter_mla_v4_c128_indices, give each token's two lists (ragged CSR, or dense with
 * lengths); aiter_mla_v4_copy_ragged moves ragged lists into graph-captured buffers (each
 * also as a _ref on host arrays); aiter_mla_v4_attention attends with keys = SWA cache,
 * extra_keys = compressed cache. A prefill can do the same per token (the SWA list and the
 * top-k list over the caches themselves: the same keys as vLLM's workspace, without the
 * gather), or follow vLLM's chunks in one call, aiter_mla_v4_prefill (and _ref): per chunk
 * aiter_mla_v4_gather of the compressed entries and of the raw tokens into the bf16 workspace,
 * aiter_mla_v4_combine, then aiter_mla_v4_attention with keys = the workspace rows (rows =
 * 1). On the H100 the chunked way is the faster (4 requests x 4096 tokens at 64 heads: 3990
 * against 5055 us, gathers and combine included): each key is widened from fp8 once per
 * chunk instead of once per token that lists it. */
enum {
    AITER_MLA_V4_HEAD_DIM = 512,   /* 448 nope + 64 rope; also V's width */
    AITER_MLA_V4_NOPE_DIM = 448,   /* fp8 part of a cache row */
    AITER_MLA_V4_ROPE_DIM = 64,    /* bf16 part of a cache row */
    AITER_MLA_V4_ROW_BYTES = 576,  /* 448 fp8 bytes + 64 bf16 values */
    AITER_MLA_V4_SCALE_BYTES = 8,  /* 7 UE8M0 exponents + 1 pad byte */
    AITER_MLA_V4_TOKEN_BYTES = 584,
    AITER_MLA_V4_GROUP = 64,       /* nope values per scale */
    AITER_MLA_V4_WINDOW = 128,     /* default sliding window W */
    AITER_MLA_V4_COMPRESSED_PAGE_TOKENS = 256, /* logical tokens per compressed page */
    AITER_MLA_V4_PREFILL_CHUNK = 4, /* requests per prefill chunk (vLLM's _PREFILL_CHUNK_SIZE) */
    AITER_MLA_V4_MAX_SPLITS = 64   /* most blocks sharing one token's keys (num_splits) */
};

/* ---- MODEL1 cache pages (584 bytes per token, SPEC 7) -----------------------------------
 * A page of block_size tokens is block_size rows of 576 bytes (448 fp8 nope values, then 64
 * bf16 rope values), then block_size scale records of 8 bytes (7 UE8M0 exponents, one per
 * 64 nope values: scale = 2^(byte - 127); the 8th byte is written 0), then padding up to
 * the page stride, a multiple of 576 bytes. Token slot s lives in page s / block_size, at
 * offset s % block_size. Nope value = fp8 * scale; rope values are plain bf16.
 * Writing, per group of 64 nope values: scale = 2^ceil(log2(max(amax, 1e-4) / fp8_max)),
 * taken exactly from the bits of the quotient (no log2 rounding), and the stored value is
 * fp8(clamp(x / scale, -fp8_max, fp8_max)) (NaN stays NaN). With the exact exponent
 * |x| / scale <= fp8_max for every finite x, so the clamp only catches infinities (vLLM's
 * float log2 can round the exponent down; the clamp covers that there). The exponent byte
 * saturates at 254 (amax = inf); fp8_max is at least 2, so that no finite group needs a
 * larger one (below 2, the largest bf16 values would be clamped to a fraction of themselves).
 * fp8_max defaults to the flavour's maximum: 448 for e4m3fn, 240 for e4m3fnuz. vLLM writes
 * OCP e4m3fn everywhere for the compressed cache; on gfx942 its SWA cache is fnuz, and vLLM's
 * fnuz writer divides by 224 (the headroom of its get_fp8_min_max): pass fp8_max = 224 to
 * reproduce those bytes. Readers need only the flavour; the scale is in the page. */

/* Bytes of one page: block_size * 584 rounded up to a multiple of 576 (37440 for 64
 * tokens); 0 when block_size < 1. */
AITER_MLA_API int64_t aiter_mla_v4_page_bytes(int block_size);

/* vLLM quantize_and_insert_k_cache: kv rows into the MODEL1 pages at slot_mapping. */
typedef struct aiter_mla_v4_cache_write_args {
    const void *kv;              /* [num_tokens, 512] src_dtype, row stride kv_stride:
                                    448 nope values, then 64 rope values */
    int64_t kv_stride;           /* elements; 0 means 512 */
    const int64_t *slot_mapping; /* [num_tokens] int64; -1 (padding) and slots outside
                                    [0, num_blocks * block_size) are skipped */
    void *kv_cache;              /* [num_blocks, page_stride_bytes] bytes, MODEL1 pages */
    int64_t num_blocks;          /* >= 1 */
    size_t kv_cache_bytes;       /* optional (0: not given): kv_cache's size, at least num_blocks x
                                    page_stride_bytes (checked) */
    int block_size;              /* tokens per page, 1..1024; 0 means 64 */
    int64_t page_stride_bytes;   /* >= block_size * 584; 0 means aiter_mla_v4_page_bytes */
    int64_t num_tokens;          /* >= 0 */
    aiter_mla_dtype src_dtype;   /* bf16 or f16; DEFAULT means bf16 (rope is stored bf16) */
    aiter_mla_dtype fp8_dtype;   /* e4m3fn or e4m3fnuz; DEFAULT means e4m3fn */
    float fp8_max;               /* in [2, flavour maximum]; 0 means the flavour's maximum */
} aiter_mla_v4_cache_write_args;

AITER_MLA_API aiter_mla_status aiter_mla_v4_cache_write_ref(const aiter_mla_v4_cache_write_args *a);
/* The GPU writer: bit-identical pages. A slot given to two tokens ends up with a mix of
 * their rows (as aiter_mla_ds_mla_write's). */
AITER_MLA_API aiter_mla_status aiter_mla_v4_cache_write(const aiter_mla_v4_cache_write_args *a, void *stream);

/* Token slot of a MODEL1 cache to 512 floats (448 dequantised nope values, then 64 rope
 * values). An unchecked helper: slot must be inside the cache and block_size >= 1;
 * page_stride_bytes 0 means aiter_mla_v4_page_bytes(block_size); fp8_dtype DEFAULT means
 * e4m3fn. */
AITER_MLA_API void aiter_mla_v4_read_row(const void *kv_cache, int64_t page_stride_bytes, int block_size,
                                         int64_t slot, aiter_mla_dtype fp8_dtype, float *out512);

/* vLLM dequantize_and_gather_k_cache: for request b, its trailing gather_len entries
 * (gather_lens[b], or all seq_lens[b] when gather_lens is NULL), cache positions
 * p = seq_lens[b] - gather_len + i for i < gather_len, are read through block table row b
 * and written dequantised to out[b, offset + i, 0..511]. A block index at or beyond
 * block_table_stride, or a block id outside [0, num_blocks), gives a row of zeros. Rows of
 * out outside [offset, offset + gather_len) are not written. vLLM's prefill gathers the
 * compressed cache with seq_lens / ratio entries, no gather_lens and offset 0, then the SWA
 * cache with the token seq_lens, gather_lens = q_len + min(prefix, W - 1) and offset N. */
typedef struct aiter_mla_v4_gather_args {
    const void *kv_cache;        /* [num_blocks, page_stride_bytes] MODEL1 pages */
    int64_t num_blocks;          /* >= 1 */
    size_t kv_cache_bytes;       /* optional (0: not given): kv_cache's size, at least num_blocks x
                                    page_stride_bytes (checked) */
    int block_size;              /* 1..1024; 0 means 64 */
    int64_t page_stride_bytes;   /* >= block_size * 584; 0 means aiter_mla_v4_page_bytes */
    aiter_mla_dtype fp8_dtype;   /* flavour of the pages; DEFAULT means e4m3fn */
    const int32_t *block_table;  /* [batch, block_table_stride] page ids */
    int64_t block_table_stride;  /* >= 1 */
    const int32_t *seq_lens;     /* [batch] entries in each request's cache, >= 0 */
    const int32_t *gather_lens;  /* [batch] optional: 0..seq_lens[b]; NULL means seq_lens */
    int batch;                   /* >= 1 */
    void *out;                   /* [batch, out_rows, 512] out_dtype */
    int64_t out_rows;            /* rows per request in out, >= offset + every gather_len */
    int64_t offset;              /* first row written in each request's block, >= 0 */
    aiter_mla_dtype out_dtype;   /* bf16, f16 or f32; DEFAULT means bf16 */
} aiter_mla_v4_gather_args;

AITER_MLA_API aiter_mla_status aiter_mla_v4_gather_ref(const aiter_mla_v4_gather_args *a);
/* The GPU gather: bit-identical rows. It cannot read seq_lens and gather_lens on the host:
 * a request whose seq_len is negative or whose gather_len is outside 0..seq_len writes
 * nothing, and rows past out_rows are not written (the reference fails on all three). */
AITER_MLA_API aiter_mla_status aiter_mla_v4_gather(const aiter_mla_v4_gather_args *a, void *stream);

/* ---- index builders (SPEC 7) -------------------------------------------------------------
 * Each builder makes one list of int32 entries per token and writes any combination of:
 * a dense table (row t: its entries, then -1 up to the builder's width), the lengths, and a
 * ragged CSR list (indptr[0] = 0, indptr[t + 1] = indptr[t] + lens[t], entries of token t
 * at indices[indptr[t] ..]). At least one output is needed. The reference counts the ragged
 * total first: if it exceeds capacity, ERR_BUFFER_TOO_SMALL and nothing is written. Tokens
 * marked invalid (is_valid_token[t] == 0: padding) get length 0 and an all -1 dense row.
 * An entry that cannot be resolved (block index at or beyond the block table's width,
 * negative block id, slot beyond int32) is -1 and still counts in the length (the
 * attention skips it), so lengths follow vLLM's.
 * The GPU builders (aiter_mla_v4_swa_indices, _v4_global_topk, _v4_c128_indices,
 * _v4_combine; every pointer a device pointer) write the reference's outputs bit for bit
 * in a few launches on the stream, with no host sync and no allocation (graph-capturable):
 * dense rows and lengths, then for a ragged output the lengths in indptr[1 .. T] (its
 * scratch), one scan, the entries. As the total is only known on the device, a ragged
 * total beyond capacity is not refused there: indptr is written in full (indptr[T] is the
 * true total, saturated at INT32_MAX), entries at positions >= capacity are dropped (never
 * written), and dense and lens are written as usual. The attention reads such lists within
 * capacity when its key list's capacity is set to it (rows cut there); without, it reads
 * indptr[T] entries: size capacity by the bound (the width x num_tokens). Each builder's
 * prototype says what its
 * kernel does with device data the reference would refuse. Outputs must not overlap inputs. */
typedef struct aiter_mla_v4_index_out {
    int32_t *dense;              /* [num_tokens, dense_stride], optional */
    int64_t dense_stride;        /* >= width; 0 means the width */
    int32_t *lens;               /* [num_tokens], optional */
    int32_t *indices;            /* [capacity] ragged entries, optional (with indptr) */
    int32_t *indptr;             /* [num_tokens + 1], with indices */
    int64_t capacity;            /* elements available in indices, >= 0 */
} aiter_mla_v4_index_out;

/* SWA keys of each token (vLLM _compute_swa_indices_and_lens_kernel): the raw tokens
 * [max(0, pos - W + 1), pos], oldest first, as SWA cache slots
 * block_table[req, p / block_size] * block_size + p % block_size; length
 * min(pos + 1, W). Width W. Output row r is token token_offset + r; its request is
 * token_to_req[token_offset + r] (or, with token_to_req NULL, the request whose
 * query_start_loc range holds the token). A token outside its request's range, or whose
 * request is outside [0, num_reqs), gets length 0 like a padding token. */
typedef struct aiter_mla_v4_swa_index_args {
    const int32_t *query_start_loc; /* [num_reqs + 1] first token of each request, monotone, >= 0 */
    const int32_t *seq_lens;     /* [num_reqs] keys of each request (new tokens included), >= q_len */
    const int32_t *token_to_req; /* [token_offset + num_tokens], optional */
    const uint8_t *is_valid_token; /* [token_offset + num_tokens], optional (NULL: all valid) */
    const int32_t *block_table;  /* [num_reqs, block_table_stride] SWA cache page ids */
    int64_t block_table_stride;  /* >= 1 */
    int block_size;              /* SWA cache page size, 1..1024; 0 means 64 */
    int window;                  /* W, 1..65536; 0 means 128 */
    int num_reqs;                /* >= 1 */
    int64_t token_offset;        /* first token handled (vLLM: num_decode_tokens for prefill), >= 0 */
    int64_t num_tokens;          /* >= 0 */
    aiter_mla_v4_index_out out;  /* width W */
} aiter_mla_v4_swa_index_args;

AITER_MLA_API aiter_mla_status aiter_mla_v4_swa_indices_ref(const aiter_mla_v4_swa_index_args *a);
/* The GPU builder. It cannot read query_start_loc and seq_lens on the host: a token whose
 * request's range does not hold it (query_start_loc not monotone, say) or whose request has
 * seq_len < q_len gets length 0, like a padding token (the reference refuses both). */
AITER_MLA_API aiter_mla_status aiter_mla_v4_swa_indices(const aiter_mla_v4_swa_index_args *a, void *stream);

/* compute_global_topk_ragged_indices_and_indptr (ratio 4 decode): the length of token t is
 * the number of entries >= 0 in its top-k row (0 for a padding token); its entries are
 * those request-local compressed indices, in row order, turned into compressed cache slots
 * block_table[req, idx / block_size] * block_size + idx % block_size (req =
 * token_to_req[t]; -1 when req is outside [0, num_reqs)). vLLM packs the first `length`
 * positions of the row, which is the same list when the valid entries come first (as the
 * indexer writes them); here the valid entries are packed wherever they are. Width topk.
 * Entries are taken as given, as vLLM's are: one at or past the token's (pos + 1) / ratio
 * (an entry not written yet) is listed and attended, not dropped. */
typedef struct aiter_mla_v4_topk_args {
    const int32_t *topk_indices; /* [num_tokens, topk_stride] request-local, -1 = none */
    int64_t topk_stride;         /* >= topk; 0 means topk */
    int topk;                    /* 1..2^20 */
    const int32_t *token_to_req; /* [num_tokens] */
    const uint8_t *is_valid_token; /* [num_tokens], optional (NULL: all valid) */
    const int32_t *block_table;  /* [num_reqs, block_table_stride] compressed cache page ids */
    int64_t block_table_stride;  /* >= 1 */
    int block_size;              /* entries per compressed page (256 / ratio), 1..1024; 0 means 64 */
    int num_reqs;                /* >= 1 */
    int64_t num_tokens;          /* >= 0 */
    aiter_mla_v4_index_out out;  /* width topk */
} aiter_mla_v4_topk_args;

AITER_MLA_API aiter_mla_status aiter_mla_v4_global_topk_ref(const aiter_mla_v4_topk_args *a);
/* The GPU builder. The reference refuses no device data here but the ragged capacity. */
AITER_MLA_API aiter_mla_status aiter_mla_v4_global_topk(const aiter_mla_v4_topk_args *a, void *stream);

/* Ratio-128 lists (vLLM build_c128a_topk_metadata): token t at positions[t] sees the
 * compressed entries j < n = min((positions[t] + 1) / compress_ratio, width). Global form
 * (block_table set, decode): entries are compressed cache slots through block table row
 * token_to_req[t] (-1 when that request is outside [0, num_reqs)). Local form (block_table
 * NULL, prefill): entries are j itself, the request-local indices that
 * aiter_mla_v4_combine_ref takes. Width `width` (vLLM's c128a_max_compressed); a negative
 * position gives length 0. */
typedef struct aiter_mla_v4_c128_args {
    const int64_t *positions;    /* [num_tokens] absolute position of each token */
    const int32_t *token_to_req; /* [num_tokens], global form only */
    const uint8_t *is_valid_token; /* [num_tokens], optional (NULL: all valid) */
    const int32_t *block_table;  /* [num_reqs, block_table_stride] compressed page ids; NULL: local form */
    int64_t block_table_stride;  /* >= 1 in the global form */
    int block_size;              /* entries per compressed page, 1..1024; 0 means 256 / compress_ratio
                                    (2 at ratio 128), at least 1 */
    int num_reqs;                /* >= 1 in the global form */
    int compress_ratio;          /* 1..65536; 0 means 128 */
    int width;                   /* most entries per token, 1..2^24: at least ceil(max_model_len /
                                    compress_ratio), or a token's list keeps its oldest `width` */
    int64_t num_tokens;          /* >= 0 */
    aiter_mla_v4_index_out out;  /* width `width` */
} aiter_mla_v4_c128_args;

AITER_MLA_API aiter_mla_status aiter_mla_v4_c128_indices_ref(const aiter_mla_v4_c128_args *a);
/* The GPU builder. The reference refuses no device data here but the ragged capacity. */
AITER_MLA_API aiter_mla_status aiter_mla_v4_c128_indices(const aiter_mla_v4_c128_args *a, void *stream);

/* Rows per request of the prefill workspace: M = N + window + max_num_batched_tokens, with
 * N = ceil(max_model_len / compress_ratio) compressed rows (N = 0 when compress_ratio <= 1);
 * *n_out receives N when not NULL. window 0 means 128. -1 for negative or overflowing
 * inputs. */
AITER_MLA_API int64_t aiter_mla_v4_workspace_rows(int64_t max_model_len, int compress_ratio, int window,
                                                  int64_t max_num_batched_tokens, int64_t *n_out);

/* combine_topk_swa_indices_ragged (prefill): one list per token of a chunk of num_reqs
 * requests, as rows of the chunk's workspace [num_reqs, M, 512] (request b's block starts
 * at row M * b; compressed entries at [0, N), its gathered raw tokens at [N, N + gather_len),
 * raw token p at row N + p - (seq_len - gather_len)). Token i of request b (pos = seq_len -
 * q_len + i) gets topk_len = min((pos + 1) / compress_ratio, topk) entries from the front of
 * its top-k row, then swa_len = min(pos + 1, W) raw tokens [pos - swa_len + 1, pos], oldest
 * first; length topk_len + swa_len (vLLM's combined_lens). A top-k entry j outside
 * [0, min(N, seq_len / compress_ratio)), the compressed rows actually gathered, is -1 where
 * vLLM would point at another request's row. Tokens are query_start_loc[0] ..
 * query_start_loc[num_reqs] - 1; output row r is token query_start_loc[0] + r, and
 * topk_indices row r belongs to it. Width topk + W. Refused: gather_lens outside
 * [q_len + min(prefix, W - 1), seq_len] (the window would read rows not gathered) or
 * N + gather_len > M. */
typedef struct aiter_mla_v4_combine_args {
    const int32_t *topk_indices; /* [num_tokens, topk_stride] request-local compressed entries
                                    (ratio 4: the indexer's; ratio 128: the local form of
                                    aiter_mla_v4_c128_indices_ref); unused when topk = 0 */
    int64_t topk_stride;         /* >= topk; 0 means topk */
    int topk;                    /* TOP_K, >= 0 (0 for ratio 1) */
    const int32_t *query_start_loc; /* [num_reqs + 1] the chunk's token ranges, monotone */
    const int32_t *seq_lens;     /* [num_reqs] keys incl. the new tokens, >= q_len */
    const int32_t *gather_lens;  /* [num_reqs] optional; NULL means q_len + min(prefix, W - 1) */
    int num_reqs;                /* >= 1 */
    int window;                  /* W, 1..65536; 0 means 128 */
    int compress_ratio;          /* 1..65536; 0 means 1 */
    int64_t M;                   /* workspace rows per request, >= N + every gather_len
                                    (aiter_mla_v4_workspace_rows gives vLLM's) */
    int64_t N;                   /* compressed rows at the front of each block, 0..M */
    aiter_mla_v4_index_out out;  /* width topk + W */
} aiter_mla_v4_combine_args;

AITER_MLA_API aiter_mla_status aiter_mla_v4_combine_ref(const aiter_mla_v4_combine_args *a);
/* The GPU combine. The token count query_start_loc[num_reqs] - query_start_loc[0] is read
 * on the device (none when negative); the outputs, and topk_indices when topk > 0, must
 * hold that many rows (the library cannot see them). A token whose request's range does
 * not hold it (query_start_loc not monotone), or whose request has seq_len < q_len, a
 * gather_len outside [q_len + min(prefix, W - 1), seq_len] or N + gather_len > M, gets
 * length 0 (the reference refuses all of these). */
AITER_MLA_API aiter_mla_status aiter_mla_v4_combine(const aiter_mla_v4_combine_args *a, void *stream);

/* _copy_ragged_to_graph_buffers: copy a ragged list into persistent buffers of fixed
 * capacity, so a captured graph keeps reading the same addresses; indptr bounds the reads.
 * Row r's entries are indices[indptr[r] .. indptr[r + 1]); the copy's indptr starts at 0.
 * A row longer than max_entries_per_row is an overflow: with clamp = 0 it is refused
 * (ERR_BUFFER_TOO_SMALL naming the row, nothing written); with clamp = 1 the row keeps its
 * first max_entries_per_row entries and *num_dropped (optional) counts the rest. Buffer
 * entries past the copied total are not written. */
typedef struct aiter_mla_v4_ragged_copy_args {
    const int32_t *indices;      /* [indptr[num_rows]] entries */
    const int32_t *indptr;       /* [num_rows + 1] monotone, indptr[0] >= 0 */
    int64_t num_rows;            /* >= 0 */
    int max_entries_per_row;     /* >= 1 (vLLM: W for SWA lists, c128a_max_compressed) */
    int32_t *indices_buffer;     /* [indices_buffer_capacity] persistent */
    int64_t indices_buffer_capacity; /* >= max(num_rows * max_entries_per_row, 1) */
    int32_t *indptr_buffer;      /* [indptr_buffer_capacity] persistent */
    int64_t indptr_buffer_capacity;  /* >= num_rows + 1 */
    int clamp;                   /* 0: overflow is refused; 1: long rows are cut */
    int64_t *num_dropped;        /* optional out: entries cut by clamp */
} aiter_mla_v4_ragged_copy_args;

AITER_MLA_API aiter_mla_status aiter_mla_v4_copy_ragged_ref(const aiter_mla_v4_ragged_copy_args *a);
/* The GPU copy (device pointers; num_dropped, when set, is a device int64 the kernel
 * writes): a scan of the row lengths, then the entries; no host sync, no allocation. It
 * cannot refuse what only indptr shows: a row longer than max_entries_per_row is cut as
 * with clamp = 1 (and counted in *num_dropped) whatever clamp says; a row outside
 * 0 <= indptr[r] <= indptr[r + 1] <= indptr[num_rows] (non-monotone or negative indptr),
 * or every row when indices is NULL, is copied empty. The buffers' capacities are checked
 * as by the reference, so nothing is written past them. Buffers must not overlap inputs. */
AITER_MLA_API aiter_mla_status aiter_mla_v4_copy_ragged(const aiter_mla_v4_ragged_copy_args *a, void *stream);

/* ---- attention (SPEC 7) -------------------------------------------------------------------
 * For token t, head h, over the valid entries k of its two lists (keys, then extra_keys):
 *   s_k = sm_scale * (q . K_k) (all 512 dims), m = max_k s_k,
 *   o = sum_k exp(s_k - m) K_k / (sum_k exp(s_k - m) + exp(attn_sink[h] - m)),
 *   lse = m + log sum_k exp(s_k - m) (natural log, the sink not included).
 * No valid entry: o = 0, lse = +inf (the V3.2 sparse reference's convention); a NaN or +inf
 * score (from a NaN or an infinity in q or a key): NaN o and lse; a -inf score weighs 0 (an
 * infinite or NaN value of such a key is outside this contract: that dim of o may come out
 * NaN, 0 * inf, as in the dense decode; vLLM's ROCm V4 decode kernels read a NaN key element
 * as 0, its prefill kernels do not: here a NaN in the cache shows). The sink:
 * NULL or -inf means none; a finite sink only enlarges the denominator; +inf means the
 * sink takes all the weight: o = 0 (no NaN) and lse unchanged; NaN is refused. Entries
 * count once per appearance (duplicates are not merged). */

/* One key list per token, over MODEL1 pages or over plain 512-wide rows (the prefill
 * workspace). An entry is a slot (MODEL1: page * block_size + offset) or a row number;
 * entries < 0 or >= the cache's slots are skipped. Ragged form (indptr set): token t's
 * entries are indices[indptr[t] .. indptr[t + 1]); the reference refuses an indptr that is
 * not monotone or starts below 0, and the GPU, which cannot read it on the host, takes a row
 * outside 0 <= indptr[t] < indptr[t + 1] <= indptr[T] as empty, and with capacity set, cuts
 * a row at capacity (which the reference refuses indptr[T] to pass). Dense form (indptr NULL): the first
 * lens[t] of indices[t * indices_stride ..] (lens clamped to 0..indices_stride; all
 * indices_stride when lens is NULL). A token's entries in keys and extra_keys together are
 * at most 2^31 - 1: refused from two dense strides, and from host indptrs by the reference;
 * on the GPU ragged lengths are device data, and past that bound a row's result is undefined
 * (its accesses stay inside the lists and caches). */
typedef struct aiter_mla_v4_keys {
    const void *cache;           /* MODEL1: [num_blocks, page_stride_bytes] bytes;
                                    rows: [num_blocks, 512] dtype */
    int64_t num_blocks;          /* MODEL1: pages; rows: rows; >= 1 */
    size_t cache_bytes;          /* optional (0: not given): cache's size, at least num_blocks pages
                                    of page_stride_bytes, or rows of 512 dtype values (checked) */
    int block_size;              /* MODEL1: tokens per page, 1..1024; 0 means 64 */
    int64_t page_stride_bytes;   /* MODEL1: >= block_size * 584; 0 means aiter_mla_v4_page_bytes */
    int rows;                    /* 0: MODEL1 pages; 1: plain rows */
    aiter_mla_dtype dtype;       /* MODEL1: fp8 flavour, DEFAULT e4m3fn; rows: bf16, f16 or
                                    f32, DEFAULT bf16 */
    const int32_t *indices;      /* ragged: [indptr[T]]; dense: [T, indices_stride] */
    const int32_t *indptr;       /* [T + 1] monotone, indptr[0] >= 0; NULL: dense form */
    int64_t capacity;            /* ragged form, optional (0: not given): entries indices holds,
                                    0..2^31 - 1 (a builder's out.capacity) */
    int64_t indices_stride;      /* dense form: entries per token, 1..2^31 - 1 */
    const int32_t *lens;         /* dense form, optional: [T] */
} aiter_mla_v4_keys;

typedef struct aiter_mla_v4_attention_args {
    const void *q;               /* [num_tokens, H, 512] q_dtype */
    int64_t q_stride_token;      /* 0 means H * q_stride_head */
    int64_t q_stride_head;       /* 0 means 512 */
    void *o;                     /* [num_tokens, H, 512] o_dtype; rows must not overlap */
    int64_t o_stride_token;      /* 0 means H * o_stride_head; >= 512 with several tokens */
    int64_t o_stride_head;       /* 0 means 512; >= 512 when H > 1 */
    float *lse;                  /* [num_tokens, H] fp32, optional */
    const float *attn_sink;      /* [H] fp32, optional */
    int64_t num_tokens;          /* T >= 0 */
    int num_heads;               /* H, 1..128 */
    float sm_scale;              /* > 0; 0 means 512^-0.5 */
    aiter_mla_dtype q_dtype;     /* bf16 or f16; DEFAULT means bf16 */
    aiter_mla_dtype o_dtype;     /* bf16, f16 or f32; DEFAULT means q_dtype */
    aiter_mla_v4_keys keys;      /* required: the SWA keys (decode), the workspace (prefill) */
    aiter_mla_v4_keys extra_keys; /* optional, unused while indices is NULL: the compressed keys */
    int num_splits;              /* GPU: blocks sharing each token's keys, 1..64; 0 means 1. A small
                                    batch fills the GPU with about num_cu / (num_tokens *
                                    ceil(H / 64)); more than 1 needs the workspace. The
                                    reference ignores it (and the workspace) */
    void *workspace;             /* num_splits > 1: aiter_mla_v4_attention_workspace_size bytes,
                                    4-byte aligned, device memory */
    size_t workspace_bytes;      /* workspace's size, >= what it needs (checked) */
    int num_cu;                  /* GPU, optional: the device's multiprocessors (CUs, SMs), 0..65536.
                                    In AITER_MLA_WGMMA builds the warpgroup kernel (more than 16
                                    heads) and the 16-head kernel over MODEL1 e4m3fn pages with one
                                    split then launch at most num_cu blocks, each taking tokens in
                                    turn (below); other kernels ignore it. A wrong count costs time,
                                    never rows. 0: a block for each token and head group */
    int keys_read_once;          /* GPU hint, 0 (default) or 1: no key of either list is read by two
                                    tokens of the call (a decode step, one token a request, no
                                    shared pages). NVIDIA's mma.sync and bulk-copy kernels (on
                                    sm_90a: 16 heads or fewer) then copy keys with an evict-first
                                    L2 policy, so that the keys streaming through the L2 leave it
                                    before q, o and the lists. A wrong 1 costs time, never rows;
                                    the reference and the prefill (a chunk's tokens share their
                                    workspace rows) ignore it */
    int keys_shared;             /* GPU hint, 0 (default) or 1, not with keys_read_once: the call's
                                    tokens reread each other's keys (a prefill straight from the
                                    pages: a request's tokens list the same window and entries).
                                    The warpgroup kernel (AITER_MLA_WGMMA builds, more than 16
                                    heads) then loads MODEL1 rows under an evict-normal L2
                                    policy, which keeps them for the next tokens: 4 x 4096
                                    prefill tokens took 15-17 % less time at 64 and 128 heads on
                                    an H100 (docs/PERFORMANCE.md, "keys_shared"). A decode, whose
                                    keys serve one token, runs 7-25 % slower with it: a wrong 1
                                    costs time, never rows. The reference ignores it; the
                                    prefill sets it on its chunks */
} aiter_mla_v4_attention_args;

AITER_MLA_API aiter_mla_status aiter_mla_v4_attention_ref(const aiter_mla_v4_attention_args *a);
/* The same on the GPU (every pointer on the device; graph-capturable): one block per token
 * and group of up to 64 heads (given num_cu, in AITER_MLA_WGMMA builds with more than 16
 * heads, or up to 16 over MODEL1 e4m3fn pages with one split, only the blocks that fit at
 * once, each taking tokens in turn, so that a token's q
 * loads while the one before ends: 4 x 4096 prefill tokens at 64 heads through the bf16
 * workspace, 3417 -> 2960 us on an H100), the tensor-core decode kernel where the decode
 * takes it for bf16 q (16-byte aligned rows) with both lists MODEL1 pages (16-byte aligned, page stride a multiple of
 * 16, and 8 bytes of padding after an odd block size's last scales, which the default
 * stride has) or both bf16 rows, a portable kernel otherwise (up to 16 heads over MODEL1
 * pages of e4m3fn with num_splits 1, AITER_MLA_WGMMA builds take a kernel of their own that
 * stages the keys by bulk copies: q . K as bf16 products of q's bf16 rows and the keys'
 * e4m3 values times their power-of-two scales (exact where the product is a normal bf16)
 * and bf16 rope; V and P in bf16 as elsewhere). AMD builds run the same cases on
 * the matrix-core (MFMA) decode kernel (MODEL1 pages there need no padding: the scale bytes
 * are read one by one). The device arrays are not read on
 * the host: a ragged length below zero counts as none, and a NaN sink gives NaN rows. */
AITER_MLA_API aiter_mla_status aiter_mla_v4_attention(const aiter_mla_v4_attention_args *a, void *stream);
/* Workspace of the GPU attention with num_splits > 1, from num_tokens, num_heads and
 * num_splits alone: fp32 partial o and lse of every (token, split, head), num_tokens *
 * num_splits * H * 513 * 4 bytes (0 for one split); a size past size_t (a 32-bit host) is
 * refused. */
AITER_MLA_API aiter_mla_status aiter_mla_v4_attention_workspace_size(const aiter_mla_v4_attention_args *a, size_t *bytes);

/* vLLM's chunked prefill of one layer (DeepseekV4ROCMAiterMLASparseImpl._forward_prefill):
 * requests are taken chunk_size at a time; per chunk, with M and N from
 * aiter_mla_v4_workspace_rows, (1) for ratio > 1 the compressed cache is gathered
 * (seq_len / ratio entries) into rows [0, N) of each request's workspace block, (2) the SWA
 * cache's trailing gather_len = q_len + min(prefix, W - 1) tokens into rows [N, ..), (3)
 * aiter_mla_v4_combine_ref lists each token's rows, (4) aiter_mla_v4_attention_ref attends
 * over the workspace rows. Same result as attending the caches directly (the workspace
 * rows are the dequantised cache rows; bf16 holds them exactly) while every page the keys
 * lie in is present. A key of an absent page (a block id outside [0, num_blocks)) is
 * gathered as a zero row and still listed, so here it counts with score 0 and value 0;
 * the SWA and top-k lists over the pages give it -1, and the attention skips it. */
typedef struct aiter_mla_v4_prefill_args {
    aiter_mla_v4_attention_args attn; /* q, o, lse, attn_sink, strides, num_heads, sm_scale,
                                         dtypes; num_tokens, keys and extra_keys are set per
                                         chunk (leave them 0). GPU call: num_cu as for the
                                         attention; num_splits > 1 needs attn.workspace for the
                                         largest chunk's tokens */
    int batch;                   /* prefill requests, >= 1 */
    const int32_t *query_start_loc; /* [batch + 1] monotone; request b's token i is row
                                       query_start_loc[b] - query_start_loc[0] + i of q and o */
    const int32_t *query_start_loc_host; /* GPU call only: [batch + 1], query_start_loc's values
                                       in host memory (vLLM's query_start_loc_cpu), which place
                                       each chunk's tokens; the reference ignores it */
    const int32_t *seq_lens;     /* [batch] keys incl. the new tokens, >= q_len */
    int compress_ratio;          /* 1 (SWA only) or more (4, 128); 0 means 1 */
    int window;                  /* W, 1..65536; 0 means 128 */
    int64_t max_model_len;       /* >= every seq_len (sizes N) */
    int64_t max_num_batched_tokens; /* >= the batch's tokens (sizes M and the lists) */
    int chunk_size;              /* requests per chunk, 1..65536; 0 means 4 */
    const int32_t *topk_indices; /* [T, topk_stride] request-local compressed entries of each
                                    token (ratio 4: the indexer's; ratio 128: the local form of
                                    aiter_mla_v4_c128_indices_ref); ratio > 1 only */
    int64_t topk_stride;         /* >= topk; 0 means topk */
    int topk;                    /* TOP_K, >= 1 when compress_ratio > 1 (unused otherwise) */
    const void *swa_cache;       /* [swa_num_blocks, page stride] MODEL1 pages */
    int64_t swa_num_blocks;      /* >= 1 */
    size_t swa_cache_bytes;      /* optional (0: not given): swa_cache's size, at least
                                    swa_num_blocks pages of their stride (checked) */
    int swa_block_size;          /* 1..1024; 0 means 64 */
    int64_t swa_page_stride_bytes; /* >= swa_block_size x 584; 0 means aiter_mla_v4_page_bytes(swa_block_size) */
    aiter_mla_dtype swa_fp8_dtype; /* DEFAULT means e4m3fn; pass e4m3fnuz for vLLM's gfx942 SWA cache */
    const int32_t *swa_block_table; /* [batch, swa_block_table_stride] */
    int64_t swa_block_table_stride; /* >= 1 */
    const void *compressed_cache; /* ratio > 1: [compressed_num_blocks, page stride] MODEL1 pages */
    int64_t compressed_num_blocks; /* >= 1 when ratio > 1 */
    size_t compressed_cache_bytes; /* optional (0: not given): compressed_cache's size, at least
                                    compressed_num_blocks pages of their stride (checked) */
    int compressed_block_size;   /* 1..1024; 0 means 256 / compress_ratio (at least 1) */
    int64_t compressed_page_stride_bytes; /* >= block size x 584; 0 means aiter_mla_v4_page_bytes(block size) */
    aiter_mla_dtype compressed_fp8_dtype; /* DEFAULT means e4m3fn */
    const int32_t *compressed_block_table; /* [batch, compressed_block_table_stride] */
    int64_t compressed_block_table_stride; /* >= 1 when ratio > 1 */
    aiter_mla_dtype workspace_dtype; /* bf16, f16 or f32; DEFAULT means bf16 (vLLM's) */
    void *workspace;             /* aiter_mla_v4_prefill_workspace_size bytes, 4-byte aligned
                                    (device memory for the GPU call); not over attn.q, which
                                    the gathers would overwrite before the attention reads it,
                                    nor over any other array (checked, as attn.workspace is) */
    size_t workspace_bytes;      /* workspace's size, >= aiter_mla_v4_prefill_workspace_size (checked) */
} aiter_mla_v4_prefill_args;

/* Bytes of workspace the prefill needs, from the sizing fields only (chunk_size,
 * compress_ratio, window, max_model_len, max_num_batched_tokens, topk, workspace_dtype):
 * chunk_size * M rows of 512 plus the chunk's request data and index lists; a size past
 * size_t (a 32-bit host) is refused. */
AITER_MLA_API aiter_mla_status aiter_mla_v4_prefill_workspace_size(const aiter_mla_v4_prefill_args *a, size_t *bytes);
AITER_MLA_API aiter_mla_status aiter_mla_v4_prefill_ref(const aiter_mla_v4_prefill_args *a);
/* The same on the GPU, the four steps of each chunk enqueued on the stream (one small launch
 * first that derives the chunk's gather lengths from query_start_loc and seq_lens on the
 * device); no host sync, no allocation. Every pointer is a device pointer except
 * query_start_loc_host, which must hold query_start_loc's values: the host reads only it
 * (to check it and to place each chunk's tokens in q, o, lse and topk_indices). Device data
 * the host cannot check is data, not a fault: nothing is read or written outside the
 * buffers and every token's o and lse are written; a request whose seq_len is below its
 * q_len gathers nothing and its tokens get o = 0 and lse = +inf; where the device's
 * query_start_loc disagrees with the host copy, its offsets (clamped into the chunk) say
 * which request each of the chunk's tokens belongs to. attn's num_cu passes to
 * aiter_mla_v4_attention (give the device's multiprocessors). */
AITER_MLA_API aiter_mla_status aiter_mla_v4_prefill(const aiter_mla_v4_prefill_args *a, void *stream);

/* ---- which kernel a call takes ----------------------------------------------------------
 * The attention ops pick their GPU kernel from the arguments (dtypes, alignment and strides,
 * rows per tile) and, on NVIDIA, the pass of kernels.hip the current device runs (the
 * runtime's answer for the build's targets; no image for it: the portable kernel, whose
 * launch then fails with the runtime's error) and the shared memory a block of it may take
 * (no more than AITER_MLA_MAX_SMEM_PER_BLOCK where kernels.hip is built with it: 101376 in a
 * build for compute_80 or compute_89 picks, on a larger GPU, what sm_86 or sm_89 devices take).
 * These report that pick without
 * launching anything, after the same checks as the call (bad arguments get the call's status
 * and message, but for the op's name, and *kernel is left as it was): for logs, and for tests
 * that hold each kernel to its own bound. Device arrays are not read. With no tokens (sparse,
 * V4), where the call launches nothing, they report the kernel a call with tokens would take.
 * AITER_MLA_NO_GPU builds report AITER_MLA_KERNEL_NONE. */
typedef enum aiter_mla_kernel {
    AITER_MLA_KERNEL_NONE = 0, /* no GPU kernel: a build without kernels.hip */
    AITER_MLA_KERNEL_PORTABLE, /* scalar fp32 kernels: any dtype, alignment or stride */
    AITER_MLA_KERNEL_MMA16,    /* NVIDIA mma.sync, 16 query rows a pass: on sm_90 and sm_100 (up
                                  to 16 per tile; BULK16's cases excepted), and every tile on
                                  sm_80 to sm_89 and sm_120 (A100: 163 KB of shared memory a
                                  block; RTX, A10, L4, L40: 99 KB) */
    AITER_MLA_KERNEL_MMA,      /* NVIDIA mma.sync: 64-row decode passes on sm_90 (builds without
                                  AITER_MLA_WGMMA); prefill from sm_80 (with AITER_MLA_WGMMA:
                                  its other head dims, bf16 and fp8 only, and e4m3fnuz) */
    AITER_MLA_KERNEL_WGMMA,    /* NVIDIA sm_90a warpgroup kernels (AITER_MLA_WGMMA builds): 64-row
                                  passes; prefill at head dims 192/128 and 128/128 (e4m3fn as e4m3
                                  products) */
    AITER_MLA_KERNEL_MFMA,     /* AMD matrix cores (gfx90a, gfx94x, gfx950; emulated elsewhere) */
    AITER_MLA_KERNEL_BULK16    /* NVIDIA sm_90a, AITER_MLA_WGMMA builds: the 16-row kernel that stages
                                  keys by bulk copies, for the decode's passes of up to 16 rows
                                  over a per-tensor e4m3fn cache, and V4 attention with up to 16
                                  heads over MODEL1 pages of e4m3fn in both lists, num_splits 1
                                  (where the tensor cores take the call at all: a bf16 q, aligned) */
} aiter_mla_kernel;
/* "portable", "mma16", "mma", "wgmma", "mfma", "bulk16", "none"; "?" for other values. */
AITER_MLA_API const char *aiter_mla_kernel_name(aiter_mla_kernel k);
AITER_MLA_API aiter_mla_status aiter_mla_decode_kernel(const aiter_mla_decode_args *a, aiter_mla_kernel *kernel);
AITER_MLA_API aiter_mla_status aiter_mla_sparse_attention_kernel(const aiter_mla_sparse_args *a, aiter_mla_kernel *kernel);
AITER_MLA_API aiter_mla_status aiter_mla_prefill_kernel(const aiter_mla_prefill_args *a, aiter_mla_kernel *kernel);
AITER_MLA_API aiter_mla_status aiter_mla_v4_attention_kernel(const aiter_mla_v4_attention_args *a, aiter_mla_kernel *kernel);

#ifdef __cplusplus
}
#endif

/* ======================================================================================
 * Internal helpers shared by the CPU reference and the kernels (one definition each).
 * ====================================================================================== */
/* Block id of entry blk of a block-table row of `stride` >= 1 entries, or -1 when blk lies
 * outside the row or the id outside [0, num_blocks). Branch-free on purpose: the row is read
 * at blk, or at 0 when blk is outside it, and the answer selected after, so that a GPU
 * thread's lookups of many positions need no branch around each. */
AITER_MLA_HD int32_t aiter_mla__block_id(const int32_t *row, int64_t stride, int64_t blk, int64_t num_blocks) {
    const int in_row = blk >= 0 && blk < stride;
    const int32_t id = row[in_row ? blk : 0];
    return in_row && id >= 0 && id < num_blocks ? id : -1;
}
/* Slot of position t through one block-table row of `stride` >= 1 blocks of k tokens: -1 for
 * a negative t, a negative block id, a block beyond the row, or int32 overflow. Branch-free
 * like aiter_mla__block_id. */
AITER_MLA_HD int32_t aiter_mla__expand_one(const int32_t *row, int64_t stride, int32_t t, int k) {
    /* All in 32 bits, the cheap kind on GPUs (what depends on the row or k alone a compiler
     * hoists out of a loop over positions): for t >= 0, blk = t / k and r = t % k (unsigned
     * division, the cheaper one); no block from 2^31 on is reachable, so the row's length
     * counts up to that; with INT32_MAX = q k + rem, id k + r fits int32 exactly when
     * id < q, or id == q and r <= rem (a negative id is above q as unsigned). */
    const uint32_t u = (uint32_t)t, blk = u / (uint32_t)k, r = u % (uint32_t)k;
    const uint32_t reach = stride < ((int64_t)1 << 31) ? (uint32_t)stride : (uint32_t)1 << 31;
    const uint32_t q = (uint32_t)INT32_MAX / (uint32_t)k, rem = (uint32_t)INT32_MAX % (uint32_t)k;
    const int in_row = t >= 0 && blk < reach;
    const uint32_t id = (uint32_t)row[in_row ? blk : 0]; /* branch-free like aiter_mla__block_id */
    const int fits = id < q || (id == q && r <= rem);
    return in_row && fits ? (int32_t)(id * (uint32_t)k + r) : -1;
}
/* The same through row req of a table of num_reqs >= 1 rows of `stride` entries: -1 also for
 * a req outside [0, num_reqs). Branch-free too: an unknown request reads row 0 and drops
 * the answer. */
AITER_MLA_HD int32_t aiter_mla__table_slot(const int32_t *table, int64_t stride, int64_t num_reqs, int32_t req, int32_t t, int k) {
    const int known = req >= 0 && req < num_reqs;
    const int32_t s = aiter_mla__expand_one(table + (known ? req : 0) * stride, stride, t, k);
    return known ? s : -1;
}

/* Keys of request b: (pages - 1) * page_size + last page, 0 when it has no page. */
AITER_MLA_HD int64_t aiter_mla__kv_len(int32_t pages, int32_t last_page_len, int page_size) {
    return pages > 0 ? (int64_t)(pages - 1) * page_size + last_page_len : 0;
}

/* KV cache write of column col (0..575) of token t: [kv_c | k_pe] -> cache dtype. */
AITER_MLA_HD void aiter_mla__kv_write_elem(const aiter_mla_kv_cache_write_args *a, int64_t t, int col) {
    int64_t slot = a->slot_mapping[t];
    float x;
    if (slot < 0 || slot >= a->num_blocks * a->block_size) return; /* padding or out of range: skipped */
    x = col < AITER_MLA_LATENT_DIM ? aiter_mla_load_f32(a->kv_c, t * a->kv_c_stride + col, a->src_dtype)
                                   : aiter_mla_load_f32(a->k_pe, t * a->k_pe_stride + col - AITER_MLA_LATENT_DIM, a->src_dtype);
    if (a->cache_dtype == AITER_MLA_FP8_E4M3FN || a->cache_dtype == AITER_MLA_FP8_E4M3FNUZ) x /= a->scale;
    aiter_mla_store_f32(a->kv_cache, slot * AITER_MLA_HEAD_DIM + col, a->cache_dtype, x);
}

/* An fp8 value times its scale: the one dequantisation of the fp8 caches (per-tensor,
 * fp8_ds_mla, MODEL1). A NaN comes out as the one quiet NaN 0x7fc00000: hosts keep an
 * operand's NaN payload through a product, GPUs do not, and the outputs must match bit
 * for bit. */
AITER_MLA_HD float aiter_mla__dequant_fp8(uint8_t code, float scale, aiter_mla_dtype fp8) {
    const float x = aiter_mla_fp8_to_f32(code, fp8) * scale;
    return x == x ? x : aiter_mla__bits_f32(0x7fc00000u);
}
/* Biased fp32 exponent of the least power of two >= r, for r positive and normal (+inf: 255).
 * Read off the float's bits rather than through log2f/exp2f, whose last-bit accuracy
 * differs between C libraries and GPUs; the power-of-two scale rules of SPEC 6 and 7. */
AITER_MLA_HD uint32_t aiter_mla__pow2_ceil_exponent(float r) {
    const uint32_t u = aiter_mla__f32_bits(r), e = u >> 23;
    return e + (e < 255u && (u & 0x7fffffu) != 0u);
}

/* DeepSeek V4 MODEL1 pages (SPEC 7). UE8M0 exponent byte to its scale 2^(b - 127): b = 0
 * is the subnormal 2^-127, b = 255 overflows to +inf (as 2^128 does in fp32). */
AITER_MLA_HD float aiter_mla__ue8m0_to_f32(uint8_t b) {
    return aiter_mla__bits_f32(b == 0 ? 0x00400000u : (uint32_t)b << 23);
}
/* Exponent byte of 2^ceil(log2(max(amax, 1e-4) / fp8_max)), exact from the quotient's bits:
 * its biased exponent, plus one when the mantissa is not zero; 254 at most (amax = inf).
 * A NaN amax counts as 0. fp8_max must be in [2, 448]: every finite amax then gives at most 254. */
AITER_MLA_HD uint8_t aiter_mla__ue8m0_encode(float amax, float fp8_max) {
    const uint32_t e = aiter_mla__pow2_ceil_exponent((amax > 1e-4f ? amax : 1e-4f) / fp8_max);
    return (uint8_t)(e > 254u ? 254u : e);
}
/* Byte offset in a MODEL1 page of the 576-byte row (448 fp8 + 64 bf16) of the token at
 * offset pos: rows come first, one after another. */
AITER_MLA_HD int64_t aiter_mla__v4_row_at(int pos) { return (int64_t)pos * AITER_MLA_V4_ROW_BYTES; }
/* Byte offset in a MODEL1 page of block_size tokens of the 8-byte scale record (7 UE8M0
 * exponents + a pad byte) of the token at offset pos: the records follow all of the rows. */
AITER_MLA_HD int64_t aiter_mla__v4_scales_at(int block_size, int pos) {
    return (int64_t)block_size * AITER_MLA_V4_ROW_BYTES + (int64_t)pos * AITER_MLA_V4_SCALE_BYTES;
}
/* Element d (0..511) of the token at offset pos of a MODEL1 page. */
AITER_MLA_HD float aiter_mla__v4_load(const unsigned char *page, int block_size, int pos, int d, aiter_mla_dtype fp8) {
    const unsigned char *row = page + aiter_mla__v4_row_at(pos);
    uint16_t h;
    if (d < AITER_MLA_V4_NOPE_DIM)
        return aiter_mla__dequant_fp8(row[d], aiter_mla__ue8m0_to_f32(page[aiter_mla__v4_scales_at(block_size, pos) + d / AITER_MLA_V4_GROUP]),
                                      fp8);
    AITER_MLA__MEMCPY(&h, row + AITER_MLA_V4_NOPE_DIM + 2 * (d - AITER_MLA_V4_NOPE_DIM), 2);
    return aiter_mla_bf16_to_f32(h);
}
/* clamp(v, -fp8_max, fp8_max), NaN kept. */
AITER_MLA_HD float aiter_mla__v4_clamp(float v, float fp8_max) { return v > fp8_max ? fp8_max : v < -fp8_max ? -fp8_max : v; }
/* One nope value of a MODEL1 row: fp8(clamp(x / scale, -fp8_max, fp8_max)). */
AITER_MLA_HD uint8_t aiter_mla__v4_quant(float x, float scale, float fp8_max, aiter_mla_dtype fp8) {
    return aiter_mla_f32_to_fp8(aiter_mla__v4_clamp(x / scale, fp8_max), fp8);
}
/* Quantise one 512-value row (src elements src_off ..) into offset pos of a MODEL1 page. */
AITER_MLA_HD void aiter_mla__v4_write_token(unsigned char *page, int block_size, int pos, const void *src, int64_t src_off,
                                            aiter_mla_dtype src_dtype, aiter_mla_dtype fp8, float fp8_max) {
    unsigned char *row = page + aiter_mla__v4_row_at(pos);
    unsigned char *sc = page + aiter_mla__v4_scales_at(block_size, pos);
    int g, i;
    for (g = 0; g < AITER_MLA_V4_NOPE_DIM / AITER_MLA_V4_GROUP; g++) {
        float amax = 0.0f, scale;
        for (i = 0; i < AITER_MLA_V4_GROUP; i++) {
            const float x = fabsf(aiter_mla_load_f32(src, src_off + g * AITER_MLA_V4_GROUP + i, src_dtype));
            if (x > amax) amax = x;
        }
        sc[g] = aiter_mla__ue8m0_encode(amax, fp8_max);
        scale = aiter_mla__ue8m0_to_f32(sc[g]);
        for (i = 0; i < AITER_MLA_V4_GROUP; i++)
            row[g * AITER_MLA_V4_GROUP + i] =
                aiter_mla__v4_quant(aiter_mla_load_f32(src, src_off + g * AITER_MLA_V4_GROUP + i, src_dtype), scale, fp8_max, fp8);
    }
    sc[AITER_MLA_V4_SCALE_BYTES - 1] = 0;
    for (i = 0; i < AITER_MLA_V4_ROPE_DIM; i++) {
        const uint16_t h = aiter_mla_f32_to_bf16(aiter_mla_load_f32(src, src_off + AITER_MLA_V4_NOPE_DIM + i, src_dtype));
        AITER_MLA__MEMCPY(row + AITER_MLA_V4_NOPE_DIM + 2 * i, &h, 2);
    }
}
/* Token t of num_tokens: its entries of a V4 key list (SPEC 7), how many, *start their first
 * index into k->indices; 0 when the list is unused. A ragged row that is not inside
 * [0, indptr[num_tokens]] (the entries indices holds) counts as none, and one past capacity
 * (when given) is cut there: the GPU cannot refuse a non-monotone indptr or one past capacity
 * (the reference refuses both first). */
AITER_MLA_HD int64_t aiter_mla__v4_keys_of(const aiter_mla_v4_keys *k, int64_t t, int64_t num_tokens, int64_t *start) {
    int64_t n;
    *start = 0;
    if (!k->indices) return 0;
    if (k->indptr) {
        int64_t end = k->indptr[t + 1];
        *start = k->indptr[t];
        if (*start < 0 || end > k->indptr[num_tokens]) return 0;
        if (k->capacity > 0 && end > k->capacity) end = k->capacity; /* a builder's overflow */
        n = end - *start;
        return n > 0 ? n : 0;
    }
    *start = t * k->indices_stride;
    n = k->indices_stride;
    if (k->lens) n = k->lens[t] < 0 ? 0 : k->lens[t] < n ? k->lens[t] : n;
    return n;
}
/* Where entry e of a key list lies: its MODEL1 page (*pos: the offset in the page) or its
 * row (*pos = 0); NULL for an absent entry (negative, or past the cache). */
AITER_MLA_HD const unsigned char *aiter_mla__v4_key_at(const aiter_mla_v4_keys *k, int32_t e, int *pos) {
    *pos = 0;
    if (e < 0) return NULL;
    if (k->rows)
        return e < k->num_blocks ? (const unsigned char *)k->cache +
                                       (int64_t)e * AITER_MLA_V4_HEAD_DIM * (k->dtype == AITER_MLA_F32 ? 4 : 2)
                                 : NULL;
    if (e / k->block_size >= k->num_blocks) return NULL;
    *pos = e % k->block_size;
    return (const unsigned char *)k->cache + (int64_t)(e / k->block_size) * k->page_stride_bytes;
}
/* Element d (0..511) of the key row that aiter_mla__v4_key_at found. */
AITER_MLA_HD float aiter_mla__v4_key_elem(const aiter_mla_v4_keys *k, const unsigned char *at, int pos, int d) {
    return k->rows ? aiter_mla_load_f32(at, d, k->dtype) : aiter_mla__v4_load(at, k->block_size, pos, d, k->dtype);
}

/* DeepSeek V4 index builders (SPEC 7): each builder's list of one token in closed form (a
 * length, then entry k from a few per-token values), used by the reference's emitter and by
 * the kernels. Data the references refuse (a request range that does not hold the token,
 * seq_len < q_len, gather_len out of range, a non-monotone indptr) gives an empty list, so
 * the kernels, which cannot refuse, stay inside the buffers whatever the device arrays hold. */

/* The request whose [qsl[b], qsl[b + 1]) holds token tok (qsl monotone), or -1. Any qsl
 * gives some b in -1 .. num_reqs - 1 in log2(num_reqs) steps; callers check that b holds tok. */
AITER_MLA_HD int32_t aiter_mla__v4_find_req(const int32_t *qsl, int num_reqs, int64_t tok) {
    int32_t lo = 0, hi = num_reqs + 1; /* first index in [0, num_reqs] with qsl > tok */
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (qsl[mid] > tok) hi = mid;
        else lo = mid + 1;
    }
    return lo >= 1 && lo <= num_reqs ? lo - 1 : -1;
}
/* Absolute position seq_len - q_len + (tok - qsl[b]) of token tok in request b, or -1 when
 * b's range does not hold tok or seq_len < q_len. */
AITER_MLA_HD int64_t aiter_mla__v4_token_pos(const int32_t *qsl, const int32_t *seq_lens, int32_t b, int64_t tok) {
    const int64_t q0 = qsl[b], q_len = (int64_t)qsl[b + 1] - q0, seq_len = seq_lens[b];
    if (tok < q0 || tok - q0 >= q_len || seq_len < q_len) return -1;
    return seq_len - q_len + (tok - q0);
}
/* (pos + 1) / ratio for pos >= 0, without overflow: compressed entries a token sees (at ratio 1
 * and pos INT64_MAX, INT64_MAX: callers cap it by a width). */
AITER_MLA_HD int64_t aiter_mla__v4_compressed_seen(int64_t pos, int ratio) {
    const int64_t q = pos / ratio;
    return q + (q < INT64_MAX && pos % ratio == ratio - 1);
}

/* SWA: output row r's length; *req its request, *first its oldest raw position. */
AITER_MLA_HD int32_t aiter_mla__v4_swa_token(const aiter_mla_v4_swa_index_args *a, int64_t r, int32_t *req, int32_t *first) {
    const int64_t tok = a->token_offset + r;
    int64_t pos;
    int32_t b;
    *req = -1;
    *first = 0;
    if (a->is_valid_token && !a->is_valid_token[tok]) return 0;
    b = a->token_to_req ? a->token_to_req[tok] : aiter_mla__v4_find_req(a->query_start_loc, a->num_reqs, tok);
    if (b < 0 || b >= a->num_reqs) return 0;
    pos = aiter_mla__v4_token_pos(a->query_start_loc, a->seq_lens, b, tok);
    if (pos < 0) return 0;
    *req = b;
    *first = (int32_t)(pos - a->window + 1 > 0 ? pos - a->window + 1 : 0);
    return (int32_t)(pos - *first + 1);
}
/* SWA: the cache slot of raw position p of request req. */
AITER_MLA_HD int32_t aiter_mla__v4_swa_entry(const aiter_mla_v4_swa_index_args *a, int32_t req, int32_t p) {
    return aiter_mla__expand_one(a->block_table + (int64_t)req * a->block_table_stride, a->block_table_stride, p, a->block_size);
}

/* Top-k: entry idx >= 0 of a row of request req as a compressed cache slot. The row keeps
 * its entries >= 0 in order (none for a padding token). */
AITER_MLA_HD int32_t aiter_mla__v4_topk_slot(const aiter_mla_v4_topk_args *a, int32_t req, int32_t idx) {
    return aiter_mla__table_slot(a->block_table, a->block_table_stride, a->num_reqs, req, idx, a->block_size);
}

/* Ratio 128: token t's length; *req its request (global form). */
AITER_MLA_HD int32_t aiter_mla__v4_c128_token(const aiter_mla_v4_c128_args *a, int64_t t, int32_t *req) {
    const int64_t pos = a->positions[t];
    int64_t n;
    *req = a->block_table ? a->token_to_req[t] : -1;
    if ((a->is_valid_token && !a->is_valid_token[t]) || pos < 0) return 0;
    n = aiter_mla__v4_compressed_seen(pos, a->compress_ratio);
    return (int32_t)(n < a->width ? n : a->width);
}
/* Ratio 128: entry j (local form: j itself; global form: its slot through request req's row). */
AITER_MLA_HD int32_t aiter_mla__v4_c128_entry(const aiter_mla_v4_c128_args *a, int32_t req, int32_t j) {
    return a->block_table ? aiter_mla__table_slot(a->block_table, a->block_table_stride, a->num_reqs, req, j, a->block_size) : j;
}

/* Trailing raw tokens gathered for request b of a combine (or of a prefill chunk); with
 * gather_lens NULL the least the window needs, q_len + min(prefix, W - 1). */
AITER_MLA_HD int32_t aiter_mla__v4_gather_len(const int32_t *gather_lens, int b, int32_t q_len, int32_t seq_len, int window) {
    const int32_t prefix = seq_len - q_len;
    return gather_lens ? gather_lens[b] : q_len + (prefix < window - 1 ? prefix : window - 1);
}
/* A prefill chunk's request (SPEC 7): the raw tokens its workspace gathers and its compressed
 * entries, -1 (nothing gathered) where the lengths contradict each other, which the reference's
 * validation rules out and the GPU call's device arrays may still hold. */
AITER_MLA_HD void aiter_mla__v4_prefill_lens(int32_t q_len, int32_t seq_len, int window, int ratio, int32_t *gather_len,
                                             int32_t *compressed_len) {
    *gather_len = q_len >= 0 && seq_len >= q_len ? aiter_mla__v4_gather_len(NULL, 0, q_len, seq_len, window) : -1;
    *compressed_len = seq_len >= 0 ? seq_len / ratio : -1;
}
/* Combine: what entry k of a token needs. */
typedef struct aiter_mla__v4_combine_tok {
    int64_t base;     /* the request's first workspace row, M * b */
    int64_t ncomp;    /* its gathered compressed rows, min(N, seq_len / ratio) */
    int64_t swa_row;  /* the workspace row of its oldest SWA entry */
    int32_t topk_len; /* top-k entries before the SWA ones */
} aiter_mla__v4_combine_tok;
/* Combine: output row r's length (0 also when its request's gather_len is outside
 * [q_len + min(prefix, W - 1), seq_len] or N + gather_len > M). */
AITER_MLA_HD int32_t aiter_mla__v4_combine_token(const aiter_mla_v4_combine_args *a, int64_t r, aiter_mla__v4_combine_tok *k) {
    const int64_t tok = (int64_t)a->query_start_loc[0] + r;
    const int32_t b = aiter_mla__v4_find_req(a->query_start_loc, a->num_reqs, tok);
    const int64_t pos = b < 0 ? -1 : aiter_mla__v4_token_pos(a->query_start_loc, a->seq_lens, b, tok);
    int32_t q_len, seq_len, g;
    int64_t swa_len;
    k->base = k->ncomp = k->swa_row = 0;
    k->topk_len = 0;
    if (pos < 0) return 0;
    q_len = a->query_start_loc[b + 1] - a->query_start_loc[b]; /* <= seq_len here: no overflow */
    seq_len = a->seq_lens[b];
    g = aiter_mla__v4_gather_len(a->gather_lens, b, q_len, seq_len, a->window);
    if (g < aiter_mla__v4_gather_len(NULL, b, q_len, seq_len, a->window) || g > seq_len || a->N + g > a->M) return 0;
    swa_len = pos + 1 < a->window ? pos + 1 : a->window;
    k->base = a->M * b;
    k->ncomp = seq_len / a->compress_ratio < a->N ? seq_len / a->compress_ratio : a->N;
    k->swa_row = k->base + a->N + (pos - swa_len + 1) - (seq_len - g);
    if (a->topk > 0) {
        const int64_t seen = aiter_mla__v4_compressed_seen(pos, a->compress_ratio);
        k->topk_len = (int32_t)(seen < a->topk ? seen : a->topk);
    }
    return k->topk_len + (int32_t)swa_len;
}
/* Combine: entry i of output row r: a top-k entry j as the row base + j (-1 outside the
 * gathered compressed rows), then the SWA rows, oldest first. */
AITER_MLA_HD int32_t aiter_mla__v4_combine_entry(const aiter_mla_v4_combine_args *a, int64_t r, const aiter_mla__v4_combine_tok *k,
                                                 int32_t i) {
    if (i < k->topk_len) {
        const int32_t j = a->topk_indices[r * a->topk_stride + i];
        return j >= 0 && j < k->ncomp ? (int32_t)(k->base + j) : -1;
    }
    return (int32_t)(k->swa_row + (i - k->topk_len));
}

/* Ragged copy: entries of row r taken, at most max_entries_per_row (*cut counts the rest);
 * 0 for a row outside 0 <= indptr[r] <= indptr[r + 1] <= indptr[num_rows], and with indices
 * NULL (which the reference allows only when there is no entry). */
AITER_MLA_HD int32_t aiter_mla__v4_copy_len(const aiter_mla_v4_ragged_copy_args *a, int64_t r, int64_t *cut) {
    const int32_t lo = a->indptr[r], hi = a->indptr[r + 1];
    *cut = 0;
    if (!a->indices || lo < 0 || hi < lo || hi > a->indptr[a->num_rows]) return 0;
    if (hi - lo <= a->max_entries_per_row) return hi - lo;
    *cut = hi - lo - a->max_entries_per_row;
    return a->max_entries_per_row;
}

/* Sparse index conversion of one entry (SPEC 4): request-local idx of request req to a
 * global slot, -1 for every case the struct comment lists. */
AITER_MLA_HD int32_t aiter_mla__sparse_slot(const aiter_mla_sparse_index_args *a, int32_t req, int32_t idx) {
    /* Branch-free like aiter_mla__table_slot (idx < 0 gives -1 there): an unknown request
     * reads request 0's start and drops the answer. */
    const int known = req >= 0 && req < a->num_requests;
    int64_t slot;
    if (a->block_table)
        return aiter_mla__table_slot(a->block_table, a->block_table_stride, a->num_requests, req, idx, a->block_size);
    slot = (int64_t)a->workspace_starts[known ? req : 0] + idx;
    return known && idx >= 0 && slot >= 0 && slot <= INT32_MAX ? (int32_t)slot : -1;
}

/* Context length of request req for filter_prefill_indices, -1 when req is unknown. */
AITER_MLA_HD int32_t aiter_mla__filter_ctx_len(const aiter_mla_filter_prefill_args *a, int32_t req) {
    return req >= 0 && req < a->num_requests ? a->ctx_lens[req] : -1;
}
/* filter_prefill_indices of one entry, given its request's context length (-1 when the
 * request is unknown): the context part and the new-token part. */
AITER_MLA_HD void aiter_mla__filter_split(int32_t idx, int32_t ctx, int32_t *context, int32_t *fresh) {
    const int known = idx >= 0 && ctx >= 0; /* -1 entries and unknown requests stay -1 */
    *context = known && idx < ctx ? idx : -1;
    *fresh = known && idx >= ctx ? idx - ctx : -1;
}

/* RN(x / s) without a division, given y = RN(1/s), for x of at most 11 significant bits (a
 * bf16 or f16 value) while no intermediate underflows: q = RN(x y), then once q = RN(q -
 * RN(q s - x) y), the residual exact by FMA. One step suffices for such x (checked over every
 * pair of significands: 2^30 for bf16's, 2^33 for f16's, against every binary32 s; the
 * quotient is scale invariant), where x of 24 bits need a second (Markstein). The residual
 * is taken as q s - x, so that x = -0 gives -0. The GPU writers' quotient (three
 * instructions; a division costs ~10 and a range check); the references divide. */
AITER_MLA_HD float aiter_mla__quotient16(float x, float s, float y) {
    const float q = x * y;
    return fmaf(-fmaf(q, s, -x), y, q);
}
/* fp8_ds_mla scale of a group of 128 values from r = amax / fp8_max (SPEC 6; the GPU writer
 * divides its own way, to the same r). */
AITER_MLA_HD float aiter_mla__ds_mla_scale_of_ratio(float r, int pow2) {
    if (pow2) /* exponent 255 is +inf, as 2^128 would be */
        return aiter_mla__bits_f32(aiter_mla__pow2_ceil_exponent(r > 1e-4f ? r : 1e-4f) << 23);
    return r >= 1.17549435e-38f ? r : 1.17549435e-38f; /* FLT_MIN; also NaN */
}
/* fp8_ds_mla scale of a group of 128 values whose largest magnitude is amax (SPEC 6). */
AITER_MLA_HD float aiter_mla__ds_mla_scale(float amax, float fp8_max, int pow2) {
    return aiter_mla__ds_mla_scale_of_ratio(amax / fp8_max, pow2);
}
/* One latent value of an fp8_ds_mla row: fp8(x / scale), saturating. */
AITER_MLA_HD uint8_t aiter_mla__ds_mla_quant(float x, float scale, aiter_mla_dtype fp8) {
    return aiter_mla_f32_to_fp8(x / scale, fp8);
}
/* Value d (0..575) of a 656-byte fp8_ds_mla row: latent values dequantised with their
 * group's scale, then the bf16 rope values. */
AITER_MLA_HD float aiter_mla__ds_mla_value(const unsigned char *row, int d, aiter_mla_dtype fp8) {
    if (d < AITER_MLA_LATENT_DIM) {
        float scale;
        AITER_MLA__MEMCPY(&scale, row + AITER_MLA_DS_MLA_SCALES_OFFSET + 4 * (d / 128), 4);
        return aiter_mla__dequant_fp8(row[d], scale, fp8);
    } else {
        uint16_t h;
        AITER_MLA__MEMCPY(&h, row + AITER_MLA_DS_MLA_ROPE_OFFSET + 2 * (d - AITER_MLA_LATENT_DIM), 2);
        return aiter_mla_bf16_to_f32(h);
    }
}

/* Cache slot of context position pos of request b in the context gather (SPEC 2b), or -1
 * (a row of zeros): negative position, block index beyond the table, block id outside
 * [0, num_blocks). */
AITER_MLA_HD int64_t aiter_mla__gather_slot(const aiter_mla_gather_cache_args *a, int b, int64_t pos) {
    int32_t id;
    if (pos < 0) return -1;
    id = aiter_mla__block_id(a->block_table + (int64_t)b * a->block_table_stride, a->block_table_stride, pos / a->block_size,
                             a->num_blocks);
    return id >= 0 ? (int64_t)id * a->block_size + pos % a->block_size : -1;
}
/* Value d of gathered row `dst` from cache slot `slot` (-1: zeros) into out. A 16-bit
 * cache gathered into its own dtype is copied bit for bit (NaN payloads included). */
AITER_MLA_HD void aiter_mla__gather_elem(const aiter_mla_gather_cache_args *a, int64_t slot, int64_t dst, int d) {
    const int64_t o = dst * AITER_MLA_HEAD_DIM + d;
    float x;
    if (slot < 0) {
        x = 0.0f;
    } else if (a->cache_is_ds_mla) {
        x = aiter_mla__ds_mla_value((const unsigned char *)a->kv_cache + slot * AITER_MLA_DS_MLA_ROW_BYTES, d, a->ds_mla_fp8);
    } else if (a->cache_dtype == a->out_dtype) {
        ((uint16_t *)a->out)[o] = ((const uint16_t *)a->kv_cache)[slot * AITER_MLA_HEAD_DIM + d];
        return;
    } else if (a->cache_dtype == AITER_MLA_FP8_E4M3FN || a->cache_dtype == AITER_MLA_FP8_E4M3FNUZ) {
        x = aiter_mla__dequant_fp8(((const uint8_t *)a->kv_cache)[slot * AITER_MLA_HEAD_DIM + d], a->scale, a->cache_dtype);
    } else {
        x = aiter_mla_load_f32(a->kv_cache, slot * AITER_MLA_HEAD_DIM + d, a->cache_dtype);
    }
    aiter_mla_store_f32(a->out, o, a->out_dtype, x);
}

/* ======================================================================================
 * Internal: launchers implemented in kernels.hip. Each takes arguments whose defaults are
 * already resolved and validated, launches asynchronously, and returns the native error
 * code (0 = success). Not part of the public API. A link that reports these symbols (or
 * aiter_mla__native_error_string) missing lacks kernels.o: link it, or build without a GPU
 * by defining AITER_MLA_NO_GPU beside AITER_MLA_IMPLEMENTATION.
 * ====================================================================================== */
#ifdef __cplusplus
extern "C" {
#endif
/* The attention launchers, given kernel != NULL, only write the kernel they would launch there. */
int aiter_mla__launch_decode(const aiter_mla_decode_args *a, const aiter_mla_decode_plan_info *info,
                             aiter_mla_kernel *kernel, void *stream);
int aiter_mla__launch_head_pad(const aiter_mla_head_pad_args *a, int unpad, void *stream);
int aiter_mla__launch_expand_page_indices(const aiter_mla_expand_page_indices_args *a, void *stream);
int aiter_mla__launch_kv_cache_write(const aiter_mla_kv_cache_write_args *a, void *stream);
int aiter_mla__launch_prefill(const aiter_mla_prefill_args *a, aiter_mla_kernel *kernel, void *stream);
int aiter_mla__launch_sparse(const aiter_mla_sparse_args *a, aiter_mla_kernel *kernel, void *stream);
int aiter_mla__launch_convert_sparse_indices(const aiter_mla_sparse_index_args *a, void *stream);
int aiter_mla__launch_filter_prefill_indices(const aiter_mla_filter_prefill_args *a, void *stream);
int aiter_mla__launch_ds_mla_write(const aiter_mla_ds_mla_write_args *a, void *stream);
int aiter_mla__launch_gather_cache(const aiter_mla_gather_cache_args *a, void *stream);
int aiter_mla__launch_merge_attn_states(const aiter_mla_merge_args *a, void *stream);
int aiter_mla__launch_v4_cache_write(const aiter_mla_v4_cache_write_args *a, void *stream);
int aiter_mla__launch_v4_gather(const aiter_mla_v4_gather_args *a, void *stream);
int aiter_mla__launch_v4_attention(const aiter_mla_v4_attention_args *a, aiter_mla_kernel *kernel, void *stream);
int aiter_mla__launch_v4_swa_indices(const aiter_mla_v4_swa_index_args *a, void *stream);
int aiter_mla__launch_v4_global_topk(const aiter_mla_v4_topk_args *a, void *stream);
int aiter_mla__launch_v4_c128_indices(const aiter_mla_v4_c128_args *a, void *stream);
int aiter_mla__launch_v4_combine(const aiter_mla_v4_combine_args *a, void *stream);
int aiter_mla__launch_v4_copy_ragged(const aiter_mla_v4_ragged_copy_args *a, void *stream);
int aiter_mla__launch_v4_prefill_lens(const int32_t *query_start_loc, const int32_t *seq_lens, int num_reqs, int32_t tokens,
                                      int window, int compress_ratio, int32_t *chunk_qsl, int32_t *gather_lens,
                                      int32_t *compressed_lens, void *stream);
const char *aiter_mla__native_error_string(int code);
#ifdef __cplusplus
}
#endif
#endif /* AITER_MLA_H */

/* ======================================================================================
 * IMPLEMENTATION
 * ====================================================================================== */
#if defined(AITER_MLA_IMPLEMENTATION) && !defined(AITER_MLA__IMPLEMENTED)
#define AITER_MLA__IMPLEMENTED

#include <float.h>
#include <stdarg.h>
#include <stdio.h>

#ifndef AITER_MLA_ASSERT
#include <assert.h>
#define AITER_MLA_ASSERT(c) assert(c)
#endif
#if defined(AITER_MLA_MALLOC) != defined(AITER_MLA_FREE)
#error "define both AITER_MLA_MALLOC and AITER_MLA_FREE, or neither"
#endif
#ifndef AITER_MLA_MALLOC
#include <stdlib.h>
#define AITER_MLA_MALLOC(n) malloc(n)
#define AITER_MLA_FREE(p) free(p)
#endif

#if defined(__cplusplus) && __cplusplus >= 201103L
#define AITER_MLA__TLS thread_local
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__STDC_NO_THREADS__)
#define AITER_MLA__TLS _Thread_local
#elif defined(_MSC_VER)
#define AITER_MLA__TLS __declspec(thread)
#else
#define AITER_MLA__TLS __thread
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors -------------------------------------------------------------------------- */
static AITER_MLA__TLS char aiter_mla__error[320];

AITER_MLA_API const char *aiter_mla_status_string(aiter_mla_status s) {
    static const char *const text[] = {
#define AITER_MLA__TEXT(name, str) str,
        AITER_MLA_STATUS_LIST(AITER_MLA__TEXT)
#undef AITER_MLA__TEXT
    };
    if ((int)s < 0 || (int)s >= (int)AITER_MLA_STATUS_COUNT) return "unknown status";
    return text[s];
}

AITER_MLA_API const char *aiter_mla_last_error(void) { return aiter_mla__error; }

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static aiter_mla_status aiter_mla__fail(aiter_mla_status s, const char *fmt, ...);
/* A failure path kept out of the hot loops that call it. */
#if defined(__GNUC__) || defined(__clang__)
#define AITER_MLA__COLD __attribute__((cold, noinline))
#else
#define AITER_MLA__COLD
#endif
/* The failure st of a call that `op` made on the caller's behalf, as op reports it: "op:
 * context: <the inner message>". OK passes through. */
static aiter_mla_status aiter_mla__fail_within(const char *op, aiter_mla_status st, const char *context) {
    char why[sizeof aiter_mla__error];
    if (st == AITER_MLA_OK) return st;
    memcpy(why, aiter_mla__error, sizeof why);
    if (st == AITER_MLA_ERR_OUT_OF_MEMORY) context = "its check"; /* not a fault of the arguments */
    return aiter_mla__fail(st, "%s: %s: %s", op, context, why);
}

static aiter_mla_status aiter_mla__fail(aiter_mla_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(aiter_mla__error, sizeof aiter_mla__error, fmt, ap);
    va_end(ap);
    return s;
}

/* Field checks: `op` names the operation; pre (a prefix: "", "keys.", "swa_", "attn.", ...)
 * and field name the field in the message. */
static aiter_mla_status aiter_mla__check_range(const char *op, int64_t v, int64_t lo, int64_t hi, const char *pre,
                                               const char *field) {
    if (v < lo && hi > ((int64_t)1 << 30)) /* a bound that large only keeps sizes in range: not worth naming */
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: %s%s = %lld is below %lld", op, pre, field, (long long)v,
                               (long long)lo);
    if (v < lo || v > hi)
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: %s%s = %lld is outside %lld..%lld", op, pre, field,
                               (long long)v, (long long)lo, (long long)hi);
    return AITER_MLA_OK;
}
/* A scale or softmax factor: positive and finite (below 1e30; where a kernel multiplies
 * several, aiter_mla__check_scale_product bounds the product too). */
static aiter_mla_status aiter_mla__check_scale(const char *op, float v, const char *pre, const char *field) {
    if (!(v > 0.0f && v < 1e30f))
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: %s%s = %g is not positive and finite", op, pre, field, v);
    return AITER_MLA_OK;
}
/* The scales a kernel folds into one fp32 score factor (`fields` names them), whose product in
 * double must stay below 1e30 too: each one alone may, and their fp32 product could overflow. */
static aiter_mla_status aiter_mla__check_scale_product(const char *op, double product, const char *fields) {
    if (!(product < 1e30))
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: %s = %g is not below 1e30 (the score factor they make)", op,
                               fields, product);
    return AITER_MLA_OK;
}
static aiter_mla_status aiter_mla__check_need(const char *op, const void *p, const char *pre, const char *field) {
    if (!p) return aiter_mla__fail(AITER_MLA_ERR_NULL_POINTER, "%s: %s%s is NULL", op, pre, field);
    return AITER_MLA_OK;
}
/* (an 8-byte element's is the host ABI's alignment of int64_t: 4 on i386, where C puts them there) */
typedef struct aiter_mla__int64_slot {
    char c;
    int64_t x;
} aiter_mla__int64_slot;
/* The alignment an array's elements need: that of their 2-, 4- or 8-byte type, else 1. */
static unsigned aiter_mla__elem_align(uint64_t elem_bytes) {
    return elem_bytes == 8                     ? (unsigned)offsetof(aiter_mla__int64_slot, x)
           : elem_bytes == 2 || elem_bytes == 4 ? (unsigned)elem_bytes
                                                : 1u;
}
/* An array's base at its elements' alignment (NULL passes: absence is aiter_mla__check_need's
 * to judge): a 2-byte value at an odd address faults on the GPU and is undefined behaviour in
 * C, so such a pointer is bad input, named before the call reads or writes through it. */
static aiter_mla_status aiter_mla__check_elems_aligned(const char *op, const void *p, unsigned align, const char *pre,
                                                       const char *field) {
    if (!p || (uintptr_t)p % align == 0) return AITER_MLA_OK;
    return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: %s%s is not %u-byte aligned, as its elements need", op, pre, field,
                           align);
}
/* The alignment the elements of typed pointer ptr need (its pointee's size; not for void *). */
#define AITER_MLA__ELEMS_ALIGN(ptr) aiter_mla__elem_align(sizeof *(ptr))
/* Their shorthands for unprefixed fields, returning on failure. NEED_ARRAY: a typed array,
 * present and at its elements' alignment, checked where the call first reads it (a host index
 * array its validation reads: a misaligned int32_t * read is undefined behaviour); ARRAY_ALIGNED:
 * the alignment alone, where NULL is allowed (an optional array) or was refused earlier. */
#define AITER_MLA__NEED(op, ptr, name) AITER_MLA__CHECK(aiter_mla__check_need(op, (const void *)(ptr), "", name))
#define AITER_MLA__ARRAY_ALIGNED(op, ptr, name) \
    AITER_MLA__CHECK(aiter_mla__check_elems_aligned(op, (const void *)(ptr), AITER_MLA__ELEMS_ALIGN(ptr), "", name))
#define AITER_MLA__NEED_ARRAY(op, ptr, name)     \
    do {                                         \
        AITER_MLA__NEED(op, ptr, name);          \
        AITER_MLA__ARRAY_ALIGNED(op, ptr, name); \
    } while (0)
#define AITER_MLA__RANGE(op, val, lo, hi, name) \
    AITER_MLA__CHECK(aiter_mla__check_range(op, (int64_t)(val), (int64_t)(lo), (int64_t)(hi), "", name))
#define AITER_MLA__SCALE(op, val, name) AITER_MLA__CHECK(aiter_mla__check_scale(op, val, "", name))
#define AITER_MLA__POW2(op, val, lo, hi, name)                                                     \
    do {                                                                                           \
        AITER_MLA__RANGE(op, val, lo, hi, name);                                                   \
        if (((val) & ((val) - 1)) != 0)                                                            \
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: %s = %d is not a power of two", \
                                   op, name, (int)(val));                                          \
    } while (0)
/* Strides above 2^32 elements are refused: row * stride then stays far inside int64. */
#define AITER_MLA__MAX_STRIDE ((int64_t)1 << 32)
/* A token stride left at 0 becomes num_heads * the head stride, under the same bound as a
 * stride given (a valid head stride times many heads can pass it). */
static aiter_mla_status aiter_mla__default_token_stride(const char *op, const char *pre, const char *field, int64_t *stride,
                                                       int64_t heads, int64_t head_stride, const char *head_field) {
    if (*stride) return AITER_MLA_OK;
    if (heads * head_stride > AITER_MLA__MAX_STRIDE)
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                               "%s: %s%s = 0 means num_heads x %s%s = %lld x %lld, above 2^32: set %s%s", op, pre, field, pre,
                               head_field, (long long)heads, (long long)head_stride, pre, field);
    *stride = heads * head_stride;
    return AITER_MLA_OK;
}
#define AITER_MLA__MAX_PREFILL_HEADS 65535 /* heads of a prefill plan and its reduce: the prefill kernels take heads along grid y */
#define AITER_MLA__CHECK(expr) do { aiter_mla_status st_ = (expr); if (st_ != AITER_MLA_OK) return st_; } while (0)
/* A paged cache of num_blocks pages of block_size slots: each in range, and slot * 1024 (a row's
 * values or bytes, with room) inside int64. */
static aiter_mla_status aiter_mla__check_cache_slots(const char *op, int64_t num_blocks, int64_t block_size) {
    AITER_MLA__RANGE(op, num_blocks, 1, INT64_MAX / (1 << 20), "num_blocks");
    AITER_MLA__RANGE(op, block_size, 1, 1 << 16, "block_size");
    AITER_MLA__RANGE(op, num_blocks * block_size, 1, INT64_MAX / 1024, "num_blocks * block_size");
    return AITER_MLA_OK;
}

/* A plan header's count (the plan checkers): in 0..cap, the capacity its info sized. */
static aiter_mla_status aiter_mla__plan_count(const char *op, const char *field, int64_t count, int64_t cap, const char *cap_field) {
    if (count < 0 || count > cap)
        return aiter_mla__fail(AITER_MLA_ERR_PLAN_INVALID, "%s: the plan header's %s = %lld is outside 0..%s = %lld", op, field,
                               (long long)count, cap_field, (long long)cap);
    return AITER_MLA_OK;
}
/* Whether two of the rows of len elements at t * st + h * sh (0 <= t < tokens, 0 <= h < heads;
 * strides >= 0) share an element; it sets *dt, *dh to how far apart (in tokens, heads) two such
 * rows are. tokens -1 (a count not known here) is checked as two tokens. For each head distance
 * the token distance that brings the rows closest is one of two, so this costs `heads` steps,
 * and none for the usual layouts (token-major or head-major with room for every row). */
/* Whether the byte ranges [a, a + na) and [b, b + nb) share a byte (no sum that can wrap). */
static int aiter_mla__bytes_overlap(const void *a, uintptr_t na, const void *b, uintptr_t nb) {
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    if (!na || !nb) return 0;
    return x <= y ? y - x < na : x - y < nb;
}

/* n elements of elem_bytes bytes, saturated at UINTPTR_MAX (a size no buffer reaches). */
static uintptr_t aiter_mla__bytes_of(uint64_t n, uint64_t elem_bytes) {
    return elem_bytes && n > (uint64_t)UINTPTR_MAX / elem_bytes ? UINTPTR_MAX : (uintptr_t)(n * elem_bytes);
}

/* An array a call reads or writes: where, how many bytes (0 or a NULL p: nothing to overlap),
 * the alignment its elements need (that of their 2-, 4- or 8-byte type, else 1) and its field's
 * name. */
typedef struct aiter_mla__span {
    const void *p;
    uintptr_t bytes;
    unsigned align;
    const char *name;
} aiter_mla__span;

/* A span's base at its elements' alignment. */
static aiter_mla_status aiter_mla__check_span_aligned(const char *op, const aiter_mla__span *s) {
    return aiter_mla__check_elems_aligned(op, s->p, s->align, "", s->name);
}
/* The arrays a call names, before any work: each at its elements' alignment, and no output
 * sharing a byte with an input or an earlier output (the call would read what it has already
 * written: an index array rewritten under the loop that follows it, a length grown past its
 * buffer), so such arrays are bad input, named before any write. */
static aiter_mla_status aiter_mla__check_arrays(const char *op, const aiter_mla__span *outs, int n_out, const aiter_mla__span *ins,
                                                int n_in) {
    int i, j;
    for (i = 0; i < n_in; i++) AITER_MLA__CHECK(aiter_mla__check_span_aligned(op, &ins[i]));
    for (i = 0; i < n_out; i++) AITER_MLA__CHECK(aiter_mla__check_span_aligned(op, &outs[i]));
    for (i = 0; i < n_out; i++)
        for (j = 0; j < n_in + i; j++) {
            const aiter_mla__span *x = j < n_in ? &ins[j] : &outs[j - n_in];
            if (outs[i].p && x->p && aiter_mla__bytes_overlap(outs[i].p, outs[i].bytes, x->p, x->bytes))
                return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                                       "%s: %s overlaps %s (an output may not share memory with an input or another output)", op,
                                       outs[i].name, x->name);
        }
    return AITER_MLA_OK;
}
/* The span of n elements of elem_bytes at p (none for n <= 0). */
static aiter_mla__span aiter_mla__span_of(const void *p, int64_t n, uint64_t elem_bytes, const char *name) {
    aiter_mla__span s;
    s.p = p;
    s.bytes = n > 0 ? aiter_mla__bytes_of((uint64_t)n, elem_bytes) : 0;
    s.align = aiter_mla__elem_align(elem_bytes);
    s.name = name;
    return s;
}
/* The span of n rows of row_bytes at p whose elements are elem_bytes (1: bytes, or rows of a
 * mixed format). */
static aiter_mla__span aiter_mla__span_rows(const void *p, int64_t n, uint64_t row_bytes, uint64_t elem_bytes, const char *name) {
    aiter_mla__span s = aiter_mla__span_of(p, n, row_bytes, name);
    s.align = aiter_mla__elem_align(elem_bytes);
    return s;
}
/* The span of a region of `bytes` bytes at p whose contents need `align` (a workspace of fp32
 * partials: 4; rows of a byte format: 1). */
static aiter_mla__span aiter_mla__span_bytes(const void *p, int64_t bytes, unsigned align, const char *name) {
    aiter_mla__span s = aiter_mla__span_of(p, bytes, 1, name);
    s.align = align;
    return s;
}
/* The span of a strided array, from its first element to past its last: tokens x heads rows
 * of len elements, strides in elements (all >= 0, as resolved); none for no rows. */
static aiter_mla__span aiter_mla__span_strided(const void *p, int64_t tokens, int64_t heads, int64_t st, int64_t sh, int64_t len,
                                               uint64_t elem_bytes, const char *name) {
    aiter_mla__span s;
    s.p = p;
    s.bytes = tokens <= 0 || heads <= 0 ? 0
                                        : aiter_mla__bytes_of((uint64_t)(tokens - 1) * (uint64_t)st +
                                                                  (uint64_t)(heads - 1) * (uint64_t)sh + (uint64_t)len,
                                                              elem_bytes);
    s.align = aiter_mla__elem_align(elem_bytes);
    s.name = name;
    return s;
}

static int aiter_mla__rows_overlap(int64_t st, int64_t sh, int64_t heads, int64_t tokens, int64_t len, int64_t *dt, int64_t *dh) {
    const int64_t tmax = tokens < 0 ? 1 : tokens - 1; /* the largest token distance */
    int64_t h;
    *dt = *dh = 0;
    if (tokens == 0) return 0;
    if (heads > 1 && sh < len) return *dh = 1, 1;
    if (tmax >= 1 && st < len) return *dt = 1, 1;
    if (st >= (heads - 1) * sh + len || !st || (sh - len) / st >= tmax) return 0; /* one kind of row nested in the other */
    for (h = 1; h < heads; h++) {
        const int64_t x = h * sh, below = -(x / st); /* token distances around -x / st */
        int64_t c;
        for (c = below - 1; c <= below; c++) {
            const int64_t t = c < -tmax ? -tmax : c > tmax ? tmax : c, at = t * st + x;
            if ((at < 0 ? -at : at) < len) return *dt = t, *dh = h, 1;
        }
    }
    return 0;
}
/* An output's rows of dv values for `heads` heads over `tokens` tokens (-1: not known here, as
 * in device arrays, checked as two) at resolved strides st, sh: rows that overlap would have
 * some elements written twice (on a GPU, by racing blocks), so they are refused
 * (st_defaulted: o_stride_token was 0, for the message). The references check again with
 * their host token count once their indptrs are sound. */
static aiter_mla_status aiter_mla__check_o_rows(const char *op, const char *pre, int64_t st, int64_t sh, int st_defaulted,
                                                int64_t heads, int64_t tokens, int64_t dv) {
    int64_t dt, dh;
    if (!aiter_mla__rows_overlap(st, sh, heads, tokens, dv, &dt, &dh)) return AITER_MLA_OK;
    if (!dt) /* a token's heads */
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: %so_stride_head = %lld is below the row's %lld values: heads' o rows would overlap",
                               op, pre, (long long)sh, (long long)dv);
    if (!dh) /* a head's tokens */
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: %so_stride_token = %lld%s is below the row's %lld values: tokens' o rows would overlap",
                               op, pre, (long long)st, st_defaulted ? " (0: num_heads x o_stride_head)" : "", (long long)dv);
    return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                           "%s: %so_stride_token = %lld and %so_stride_head = %lld put the o rows of (token t, head h) "
                           "and (token t%+lld, head h%+lld) less than the row's %lld values apart: they would overlap",
                           op, pre, (long long)st, pre, (long long)sh, (long long)dt, (long long)dh, (long long)dv);
}
/* An output's row strides (o_stride_token, o_stride_head, with prefix pre in messages), resolved
 * in place: each within 2^32; 0 means dv for the head stride and heads x that for the token
 * stride; then aiter_mla__check_o_rows over `tokens` tokens. */
static aiter_mla_status aiter_mla__resolve_o_rows(const char *op, const char *pre, int64_t *st, int64_t *sh, int64_t heads, int64_t tokens,
                                                  int64_t dv) {
    const int st_defaulted = *st == 0;
    AITER_MLA__CHECK(aiter_mla__check_range(op, *st, 0, AITER_MLA__MAX_STRIDE, pre, "o_stride_token"));
    AITER_MLA__CHECK(aiter_mla__check_range(op, *sh, 0, AITER_MLA__MAX_STRIDE, pre, "o_stride_head"));
    if (!*sh) *sh = dv;
    AITER_MLA__CHECK(aiter_mla__default_token_stride(op, pre, "o_stride_token", st, heads, *sh, "o_stride_head"));
    return aiter_mla__check_o_rows(op, pre, *st, *sh, st_defaulted, heads, tokens, dv);
}

static aiter_mla_status aiter_mla__gpu_result(const char *op, int native) {
#ifdef AITER_MLA_NO_GPU
    (void)native;
    return aiter_mla__fail(AITER_MLA_ERR_NO_GPU, "%s: built with AITER_MLA_NO_GPU", op);
#else
    if (native == 0) return AITER_MLA_OK;
    return aiter_mla__fail(AITER_MLA_ERR_LAUNCH, "%s: kernel launch failed: %s (%d)", op,
                           aiter_mla__native_error_string(native), native);
#endif
}
/* A GPU call with no work: OK, or ERR_NO_GPU in a build without GPU support, so that every GPU
 * entry point of such a build answers alike, whatever its arguments' sizes. */
static aiter_mla_status aiter_mla__nothing_to_launch(const char *op) { return aiter_mla__gpu_result(op, 0); }
/* Without a GPU the launch is still compiled, but only as sizeof's unevaluated operand: its
 * arguments (the stream among them) count as used and keep their type checks, and nothing
 * calls, or needs a definition of, the launcher. */
#ifdef AITER_MLA_NO_GPU
#define AITER_MLA__LAUNCH(op, call) ((void)sizeof(call), aiter_mla__gpu_result(op, 0))
#else
#define AITER_MLA__LAUNCH(op, call) aiter_mla__gpu_result(op, (call))
#endif
/* An attention launch, or with kernel != NULL only its kernel (the launcher wrote it; NONE
 * without a GPU). */
static aiter_mla_status aiter_mla__launch_or_pick(const char *op, aiter_mla_kernel *kernel, int native) {
    if (!kernel) return aiter_mla__gpu_result(op, native);
#ifdef AITER_MLA_NO_GPU
    *kernel = AITER_MLA_KERNEL_NONE;
#endif
    return AITER_MLA_OK;
}
#ifdef AITER_MLA_NO_GPU
#define AITER_MLA__LAUNCH_OR_PICK(op, kernel, call) ((void)sizeof(call), aiter_mla__launch_or_pick(op, kernel, 0))
#else
#define AITER_MLA__LAUNCH_OR_PICK(op, kernel, call) aiter_mla__launch_or_pick(op, kernel, (call))
#endif

AITER_MLA_API const char *aiter_mla_kernel_name(aiter_mla_kernel k) {
    switch (k) {
    case AITER_MLA_KERNEL_NONE: return "none";
    case AITER_MLA_KERNEL_PORTABLE: return "portable";
    case AITER_MLA_KERNEL_MMA16: return "mma16";
    case AITER_MLA_KERNEL_MMA: return "mma";
    case AITER_MLA_KERNEL_BULK16: return "bulk16";
    case AITER_MLA_KERNEL_WGMMA: return "wgmma";
    case AITER_MLA_KERNEL_MFMA: return "mfma";
    default: return "?";
    }
}

/* ---- dtypes -------------------------------------------------------------------------- */
AITER_MLA_API size_t aiter_mla_dtype_size(aiter_mla_dtype t) { return aiter_mla__dtype_bytes(t); }

AITER_MLA_API const char *aiter_mla_dtype_name(aiter_mla_dtype t) {
    switch (t) {
    case AITER_MLA_DTYPE_DEFAULT: return "default";
    case AITER_MLA_BF16: return "bf16";
    case AITER_MLA_F16: return "f16";
    case AITER_MLA_F32: return "f32";
    case AITER_MLA_FP8_E4M3FN: return "fp8_e4m3fn";
    case AITER_MLA_FP8_E4M3FNUZ: return "fp8_e4m3fnuz";
    default: return "invalid";
    }
}

static int aiter_mla__is_fp8(aiter_mla_dtype t) { return t == AITER_MLA_FP8_E4M3FN || t == AITER_MLA_FP8_E4M3FNUZ; }
static int aiter_mla__is_16bit(aiter_mla_dtype t) { return t == AITER_MLA_BF16 || t == AITER_MLA_F16; }
/* Outputs (and V4 key rows, workspaces) are bf16, f16 or f32; pre and field name the dtype field in
 * the message. */
static aiter_mla_status aiter_mla__check_out_dtype(const char *op, aiter_mla_dtype t, const char *pre, const char *field) {
    if (aiter_mla__is_16bit(t) || t == AITER_MLA_F32) return AITER_MLA_OK;
    return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED, "%s: %s%s %s is not bf16, f16 or f32", op, pre, field, aiter_mla_dtype_name(t));
}
/* A GPU pointer argument aligned to `align` bytes (a power of two). */
static aiter_mla_status aiter_mla__check_aligned(const char *op, const void *p, unsigned align, const char *field) {
    if (((uintptr_t)p & (align - 1u)) != 0)
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: %s is not %u-byte aligned", op, field, align);
    return AITER_MLA_OK;
}
/* The caller's workspace (field `field`, its size `field`_bytes) when `need` bytes of it are
 * needed (`what` names them): present, at least that large, and those bytes not running past
 * the end of the address space (no buffer does; the calls derive pointers into them before
 * the overlap checks, and such a pointer would wrap). */
static aiter_mla_status aiter_mla__check_workspace(const char *op, const char *field, const void *ws, uint64_t bytes, uint64_t need,
                                                   const char *what) {
    if (need == 0) return AITER_MLA_OK;
    AITER_MLA__NEED(op, ws, field);
    if (bytes < need)
        return aiter_mla__fail(AITER_MLA_ERR_BUFFER_TOO_SMALL, "%s: %s_bytes = %llu, %s need %llu", op, field,
                               (unsigned long long)bytes, what, (unsigned long long)need);
    if (need - 1 > (uint64_t)(UINTPTR_MAX - (uintptr_t)ws))
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: %s at %p and the %llu bytes %s need run past the end of the address space",
                               op, field, ws, (unsigned long long)need, what);
    return AITER_MLA_OK;
}
/* Bytes of a cache row: fp8_ds_mla's 656, or 576 values of dtype. */
static int64_t aiter_mla__cache_row_bytes(int ds_mla, aiter_mla_dtype dtype) {
    return ds_mla ? (int64_t)AITER_MLA_DS_MLA_ROW_BYTES : AITER_MLA_HEAD_DIM * (int64_t)aiter_mla_dtype_size(dtype);
}
/* A cache's optional size (given; 0: not given) against the units x unit_bytes its other
 * fields describe (units, unit_bytes >= 1): smaller is refused, so that a format left unset (fp8
 * or fp8_ds_mla rows described as bf16 ones) or a count too large fails here instead of
 * reading or writing past the buffer. units_desc names the fields behind the product (pre
 * prefixes it as it does field). */
static int aiter_mla__cache_bytes_fit(size_t given, int64_t units, int64_t unit_bytes) {
    return given == 0 || (uint64_t)given / (uint64_t)unit_bytes >= (uint64_t)units;
}
static aiter_mla_status aiter_mla__check_cache_bytes(const char *op, const char *pre, const char *field, size_t given, int64_t units,
                                                     int64_t unit_bytes, const char *units_desc) {
    if (aiter_mla__cache_bytes_fit(given, units, unit_bytes)) return AITER_MLA_OK;
    return aiter_mla__fail(AITER_MLA_ERR_BUFFER_TOO_SMALL, "%s: %s%s = %llu is less than %s%s: %lld x %lld bytes", op, pre, field,
                           (unsigned long long)given, pre, units_desc, (long long)units, (long long)unit_bytes);
}
/* Host indptr arrays start at >= 0 and never decrease. Start and step are separate checks so a
 * scan that checks other fields per step keeps its order of failures; `pre` prefixes `field`. */
static aiter_mla_status aiter_mla__indptr_start(const char *op, const int32_t *p, const char *pre, const char *field) {
    if (p[0] >= 0) return AITER_MLA_OK;
    return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: %s%s[0] = %d is negative", op, pre, field, p[0]);
}
/* (apart and cold: formatted inline, the message's arguments cost a batch-256 plan 8 %) */
static AITER_MLA__COLD aiter_mla_status aiter_mla__indptr_decreases(const char *op, const int32_t *p, int64_t i, const char *pre,
                                                                    const char *field) {
    return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: %s%s decreases: %s%s[%lld] = %d < %s%s[%lld] = %d", op, pre, field,
                           pre, field, (long long)i + 1, p[i + 1], pre, field, (long long)i, p[i]);
}
static aiter_mla_status aiter_mla__indptr_step(const char *op, const int32_t *p, int64_t i, const char *pre,
                                               const char *field) {
    return p[i + 1] >= p[i] ? AITER_MLA_OK : aiter_mla__indptr_decreases(op, p, i, pre, field);
}
static int64_t aiter_mla__cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
/* A planner's constant divisor (keys per step, rows per tile): a shift where it is a power of
 * two, as it nearly always is. The 64-bit divides the shifts replace took about 40 % of a
 * batch-256 decode plan's build time. Numerators are >= 0. */
typedef struct aiter_mla__divisor {
    int64_t d;
    int shift; /* log2(d), or -1 where d is not a power of two */
} aiter_mla__divisor;
static aiter_mla__divisor aiter_mla__divisor_of(int64_t d) {
    aiter_mla__divisor r;
    r.d = d;
    r.shift = -1;
    if (d > 0 && (d & (d - 1)) == 0)
        for (r.shift = 0; ((int64_t)1 << r.shift) < d; r.shift++) {}
    return r;
}
static int64_t aiter_mla__cdiv_by(int64_t a, aiter_mla__divisor d) {
    return d.shift >= 0 ? (a + d.d - 1) >> d.shift : aiter_mla__cdiv(a, d.d);
}
static int64_t aiter_mla__min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t aiter_mla__max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* ---- head padding -------------------------------------------------------------------- */
AITER_MLA_API int aiter_mla_num_heads_is_valid(int h) {
    if (h <= 0) return 0;
    return h >= 16 ? h % 16 == 0 : 16 % h == 0;
}
AITER_MLA_API int aiter_mla_padded_num_heads(int h) { return aiter_mla__padded_heads(h); }

static aiter_mla_status aiter_mla__head_pad_resolve(const char *op, const aiter_mla_head_pad_args *in, int unpad,
                                                    aiter_mla_head_pad_args *a) {
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    if (!a->head_dim) a->head_dim = AITER_MLA_HEAD_DIM;
    if (a->dtype == AITER_MLA_DTYPE_DEFAULT) a->dtype = AITER_MLA_BF16;
    AITER_MLA__RANGE(op, a->num_tokens, 0, INT32_MAX, "num_tokens");
    AITER_MLA__RANGE(op, a->head_dim, 1, 65536, "head_dim");
    if (!aiter_mla_num_heads_is_valid(a->num_heads))
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                               "%s: num_heads = %d is neither a divisor nor a multiple of 16", op, a->num_heads);
    if (!aiter_mla_dtype_size(a->dtype))
        return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED, "%s: dtype %d is not a known dtype", op, (int)a->dtype);
    { /* the padded tensor's bytes stay under 2^62: every offset into either tensor is computed
         in int64, and so are the GPU's element counts rounded up to blocks and its grid-stride steps */
        const int64_t row_bytes = (int64_t)aiter_mla_padded_num_heads(a->num_heads) * a->head_dim * (int64_t)aiter_mla_dtype_size(a->dtype);
        if (a->num_tokens > ((int64_t)1 << 62) / row_bytes)
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                                   "%s: num_tokens = %lld tokens of %lld bytes (max(num_heads, 16) x head_dim x element size) pass 2^62",
                                   op, (long long)a->num_tokens, (long long)row_bytes);
    }
    if (a->num_tokens > 0) {
        /* each head row is read and written once, in no set order: rows of one tensor over the
         * other's would be read after they were written (with H >= 16 both are one layout, so
         * src == dst moves nothing and is allowed) */
        const int64_t el = (int64_t)aiter_mla_dtype_size(a->dtype) * a->head_dim * a->num_tokens;
        const int64_t padded = el * aiter_mla_padded_num_heads(a->num_heads), plain = el * a->num_heads;
        const aiter_mla__span src = aiter_mla__span_of(a->src, 0, aiter_mla_dtype_size(a->dtype), "src"),
                              dst = aiter_mla__span_of(a->dst, 0, aiter_mla_dtype_size(a->dtype), "dst");
        AITER_MLA__NEED(op, a->src, "src");
        AITER_MLA__NEED(op, a->dst, "dst");
        AITER_MLA__CHECK(aiter_mla__check_span_aligned(op, &src));
        AITER_MLA__CHECK(aiter_mla__check_span_aligned(op, &dst));
        if (aiter_mla__bytes_overlap(a->src, (uintptr_t)(unpad ? padded : plain), a->dst, (uintptr_t)(unpad ? plain : padded)) &&
            !(a->src == a->dst && a->num_heads >= 16))
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                                   "%s: dst overlaps src (padding runs in place only with num_heads >= 16 and dst == src)", op);
    }
    return AITER_MLA_OK;
}

static void aiter_mla__head_pad_host(const aiter_mla_head_pad_args *a, int unpad) {
    int hp = aiter_mla_padded_num_heads(a->num_heads), rep = hp / a->num_heads;
    int src_h = unpad ? hp : a->num_heads, dst_h = unpad ? a->num_heads : hp;
    size_t row = (size_t)a->head_dim * aiter_mla_dtype_size(a->dtype);
    int64_t t;
    int h;
    if (a->dst == a->src) return; /* in place (num_heads >= 16, no padding): nothing moves, and memcpy may not copy onto itself */
    for (t = 0; t < a->num_tokens; t++)
        for (h = 0; h < dst_h; h++) {
            int sh = unpad ? h * rep : h / rep;
            memcpy((char *)a->dst + ((size_t)t * (size_t)dst_h + (size_t)h) * row,
                   (const char *)a->src + ((size_t)t * (size_t)src_h + (size_t)sh) * row, row);
        }
}

AITER_MLA_API aiter_mla_status aiter_mla_pad_q_ref(const aiter_mla_head_pad_args *in) {
    aiter_mla_head_pad_args a;
    AITER_MLA__CHECK(aiter_mla__head_pad_resolve("pad_q", in, 0, &a));
    aiter_mla__head_pad_host(&a, 0);
    return AITER_MLA_OK;
}
AITER_MLA_API aiter_mla_status aiter_mla_unpad_o_ref(const aiter_mla_head_pad_args *in) {
    aiter_mla_head_pad_args a;
    AITER_MLA__CHECK(aiter_mla__head_pad_resolve("unpad_o", in, 1, &a));
    aiter_mla__head_pad_host(&a, 1);
    return AITER_MLA_OK;
}
AITER_MLA_API aiter_mla_status aiter_mla_pad_q(const aiter_mla_head_pad_args *in, void *stream) {
    aiter_mla_head_pad_args a;
    AITER_MLA__CHECK(aiter_mla__head_pad_resolve("pad_q", in, 0, &a));
    if (a.num_tokens == 0) return aiter_mla__nothing_to_launch("pad_q");
    return AITER_MLA__LAUNCH("pad_q", aiter_mla__launch_head_pad(&a, 0, stream));
}
AITER_MLA_API aiter_mla_status aiter_mla_unpad_o(const aiter_mla_head_pad_args *in, void *stream) {
    aiter_mla_head_pad_args a;
    AITER_MLA__CHECK(aiter_mla__head_pad_resolve("unpad_o", in, 1, &a));
    if (a.num_tokens == 0) return aiter_mla__nothing_to_launch("unpad_o");
    return AITER_MLA__LAUNCH("unpad_o", aiter_mla__launch_head_pad(&a, 1, stream));
}

/* ---- page-index expansion ------------------------------------------------------------ */
static aiter_mla_status aiter_mla__expand_resolve(const char *op, const aiter_mla_expand_page_indices_args *in,
                                                  aiter_mla_expand_page_indices_args *a) {
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    if (!a->kernel_block_size) a->kernel_block_size = 1;
    AITER_MLA__RANGE(op, a->batch, 0, INT32_MAX - 1, "batch");
    AITER_MLA__POW2(op, a->kernel_block_size, 1, AITER_MLA_MAX_PAGE_SIZE, "kernel_block_size");
    AITER_MLA__RANGE(op, a->block_table_stride, 1, AITER_MLA__MAX_STRIDE, "block_table_stride");
    AITER_MLA__RANGE(op, a->page_indices_capacity, 0, INT32_MAX, "page_indices_capacity");
    if (a->batch == 0) return AITER_MLA_OK;
    AITER_MLA__NEED(op, a->block_table, "block_table");
    AITER_MLA__NEED(op, a->cu_num_tokens, "cu_num_tokens");
    AITER_MLA__NEED(op, a->seq_lens, "seq_lens");
    AITER_MLA__NEED(op, a->page_indices, "page_indices");
    { /* the output against what later requests read (host sizes: the GPU call checks them too) */
        const aiter_mla__span ins[3] = {aiter_mla__span_of(a->block_table, a->batch * a->block_table_stride, 4, "block_table"),
                                        aiter_mla__span_of(a->cu_num_tokens, (int64_t)a->batch + 1, 4, "cu_num_tokens"),
                                        aiter_mla__span_of(a->seq_lens, a->batch, 4, "seq_lens")};
        const aiter_mla__span out = aiter_mla__span_of(a->page_indices, a->page_indices_capacity, 4, "page_indices");
        return aiter_mla__check_arrays(op, &out, 1, ins, 3);
    }
}

AITER_MLA_API aiter_mla_status aiter_mla_expand_page_indices_ref(const aiter_mla_expand_page_indices_args *in) {
    const char *op = "expand_page_indices";
    aiter_mla_expand_page_indices_args a;
    int r;
    AITER_MLA__CHECK(aiter_mla__expand_resolve(op, in, &a));
    for (r = 0; r < a.batch; r++) {
        int64_t start = a.cu_num_tokens[r], n = a.seq_lens[r];
        if (n < 0)
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: seq_lens[%d] = %lld is negative", op, r, (long long)n);
        if (start < 0 || a.cu_num_tokens[r + 1] < start + n)
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                                   "%s: cu_num_tokens[%d..%d] = %d..%d does not hold seq_lens[%d] = %lld", op, r, r + 1,
                                   a.cu_num_tokens[r], a.cu_num_tokens[r + 1], r, (long long)n);
        if (a.cu_num_tokens[r + 1] > a.page_indices_capacity)
            return aiter_mla__fail(AITER_MLA_ERR_BUFFER_TOO_SMALL, "%s: cu_num_tokens[%d] = %d exceeds page_indices_capacity = %lld",
                                   op, r + 1, a.cu_num_tokens[r + 1], (long long)a.page_indices_capacity);
    }
    for (r = 0; r < a.batch; r++) {
        int32_t t;
        for (t = 0; t < a.seq_lens[r]; t++)
            a.page_indices[a.cu_num_tokens[r] + t] =
                aiter_mla__expand_one(a.block_table + (int64_t)r * a.block_table_stride, a.block_table_stride, t,
                                      a.kernel_block_size);
    }
    return AITER_MLA_OK;
}

AITER_MLA_API aiter_mla_status aiter_mla_expand_page_indices(const aiter_mla_expand_page_indices_args *in, void *stream) {
    aiter_mla_expand_page_indices_args a;
    AITER_MLA__CHECK(aiter_mla__expand_resolve("expand_page_indices", in, &a));
    if (a.batch == 0) return aiter_mla__nothing_to_launch("expand_page_indices");
    return AITER_MLA__LAUNCH("expand_page_indices", aiter_mla__launch_expand_page_indices(&a, stream));
}

/* ---- decode metadata ----------------------------------------------------------------- */
AITER_MLA_API aiter_mla_status aiter_mla_decode_metadata_build(const aiter_mla_decode_metadata_args *in) {
    const char *op = "decode_metadata";
    aiter_mla_decode_metadata_args a;
    int b, ps, qlen;
    int64_t pages = 0, tokens = 0;
    AITER_MLA__NEED(op, in, "args");
    a = *in;
    ps = a.page_size ? a.page_size : 1;
    qlen = a.q_len ? a.q_len : 1;
    AITER_MLA__RANGE(op, a.batch, 1, INT32_MAX - 1, "batch");
    AITER_MLA__POW2(op, ps, 1, AITER_MLA_MAX_PAGE_SIZE, "page_size");
    AITER_MLA__RANGE(op, a.block_table_stride, 0, AITER_MLA__MAX_STRIDE, "block_table_stride");
    AITER_MLA__RANGE(op, a.kv_indices_capacity, 0, INT64_MAX, "kv_indices_capacity");
    AITER_MLA__NEED(op, a.block_table, "block_table");
    AITER_MLA__NEED_ARRAY(op, a.seq_lens, "seq_lens"); /* it and q_lens are read in the sizing below */
    AITER_MLA__NEED(op, a.qo_indptr, "qo_indptr");
    AITER_MLA__NEED(op, a.kv_indptr, "kv_indptr");
    AITER_MLA__NEED(op, a.kv_indices, "kv_indices");
    AITER_MLA__NEED(op, a.kv_last_page_lens, "kv_last_page_lens");
    AITER_MLA__ARRAY_ALIGNED(op, a.q_lens, "q_lens");
    if (!a.q_lens) AITER_MLA__RANGE(op, qlen, 1, AITER_MLA_MAX_Q_LEN, "q_len");
    for (b = 0; b < a.batch; b++) {
        int64_t n = a.seq_lens[b], q = a.q_lens ? a.q_lens[b] : qlen, p;
        if (n < 0)
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: seq_lens[%d] = %lld is negative", op, b, (long long)n);
        if (q < 0 || q > AITER_MLA_MAX_Q_LEN)
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: q_lens[%d] = %lld is outside 0..%d", op, b,
                                   (long long)q, AITER_MLA_MAX_Q_LEN);
        p = aiter_mla__cdiv(n, ps);
        if (p > a.block_table_stride)
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                                   "%s: seq_lens[%d] = %lld needs %lld pages of page_size = %d%s, more than block_table_stride = %lld",
                                   op, b, (long long)n, (long long)p, ps, a.page_size ? "" : " (0 means 1)",
                                   (long long)a.block_table_stride);
        pages += p;
        tokens += q;
    }
    if (pages > a.kv_indices_capacity)
        return aiter_mla__fail(AITER_MLA_ERR_BUFFER_TOO_SMALL, "%s: kv_indices needs %lld entries, kv_indices_capacity = %lld",
                               op, (long long)pages, (long long)a.kv_indices_capacity);
    if (pages > INT32_MAX)
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: seq_lens add up to more than 2^31 pages", op);
    if (tokens > INT32_MAX)
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: %s add up to more than 2^31 query tokens", op,
                               a.q_lens ? "q_lens" : "batch x q_len");
    {
        const aiter_mla__span ins[3] = {aiter_mla__span_of(a.block_table, a.batch * a.block_table_stride, 4, "block_table"),
                                        aiter_mla__span_of(a.seq_lens, a.batch, 4, "seq_lens"),
                                        aiter_mla__span_of(a.q_lens, a.batch, 4, "q_lens")};
        const aiter_mla__span outs[4] = {aiter_mla__span_of(a.qo_indptr, a.batch + 1, 4, "qo_indptr"),
                                         aiter_mla__span_of(a.kv_indptr, a.batch + 1, 4, "kv_indptr"),
                                         aiter_mla__span_of(a.kv_indices, pages, 4, "kv_indices"),
                                         aiter_mla__span_of(a.kv_last_page_lens, a.batch, 4, "kv_last_page_lens")};
        AITER_MLA__CHECK(aiter_mla__check_arrays(op, outs, 4, ins, 3));
    }
    a.qo_indptr[0] = 0;
    a.kv_indptr[0] = 0;
    for (b = 0; b < a.batch; b++) {
        int32_t n = a.seq_lens[b], p = (int32_t)aiter_mla__cdiv(n, ps);
        a.qo_indptr[b + 1] = a.qo_indptr[b] + (a.q_lens ? a.q_lens[b] : qlen);
        a.kv_indptr[b + 1] = a.kv_indptr[b] + p;
        memcpy(a.kv_indices + a.kv_indptr[b], a.block_table + (int64_t)b * a.block_table_stride, (size_t)p * sizeof(int32_t));
        a.kv_last_page_lens[b] = p ? n - (p - 1) * ps : 0;
    }
    return AITER_MLA_OK;
}

/* ---- split-KV decode plan ------------------------------------------------------------ */

/* n bytes into *bytes, or 0 where they pass size_t: a workspace's size, computed in 64 bits,
 * fits size_t on 64-bit hosts for every argument in range but not on 32-bit ones, where each
 * size query refuses it (its message naming the parts) rather than return a wrapped size. */
static int aiter_mla__size_fits(uint64_t n, size_t *bytes) {
    if (n > (uint64_t)SIZE_MAX) return 0;
    *bytes = (size_t)n;
    return 1;
}
/* A plan's workspace, rows x heads x (dv + 1) floats, into *bytes. */
static aiter_mla_status aiter_mla__workspace_bytes(const char *op, int64_t rows, int heads, int dv, size_t *bytes) {
    const uint64_t n = (uint64_t)rows * (uint64_t)heads * (uint64_t)(dv + 1) * sizeof(float);
    if (!aiter_mla__size_fits(n, bytes))
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                               "%s: the workspace (%lld partial rows x %d heads x %d floats, %llu bytes) passes size_t on this host",
                               op, (long long)rows, heads, dv + 1, (unsigned long long)n);
    return AITER_MLA_OK;
}

AITER_MLA_API aiter_mla_status aiter_mla_decode_plan_get_info(const aiter_mla_decode_plan_desc *din,
                                                              aiter_mla_decode_plan_info *info) {
    const char *op = "decode_plan";
    aiter_mla_decode_plan_desc d;
    int64_t tiles, work, reduce_tiles, partials, rows;
    AITER_MLA__NEED(op, din, "desc");
    AITER_MLA__NEED(op, info, "info");
    d = *din;
    if (!d.page_size) d.page_size = 1;
    if (!d.kv_granularity) d.kv_granularity = 64;
    if (!d.overhead_blocks) d.overhead_blocks = 2;
    AITER_MLA__RANGE(op, d.max_batch, 1, 1 << 20, "max_batch");
    AITER_MLA__RANGE(op, d.num_heads, 1, AITER_MLA_MAX_HEADS, "num_heads");
    AITER_MLA__RANGE(op, d.max_q_len, 1, AITER_MLA_MAX_Q_LEN, "max_q_len");
    AITER_MLA__RANGE(op, d.num_cu, 1, 65535, "num_cu"); /* its lists can be a grid's y dimension */
    AITER_MLA__POW2(op, d.page_size, 1, AITER_MLA_MAX_PAGE_SIZE, "page_size");
    AITER_MLA__POW2(op, d.kv_granularity, 16, 4096, "kv_granularity");
    AITER_MLA__RANGE(op, d.overhead_blocks, 1, 64, "overhead_blocks");
    memset(info, 0, sizeof *info);
    info->desc = d;
    info->tokens_per_tile = (int32_t)aiter_mla__min64(d.max_q_len, aiter_mla__max64(1, AITER_MLA_SLICE_ROWS / d.num_heads));
    /* a tile's slices run as blocks side by side, a work list per that many CUs (as many lists
       as CUs, with the slices in two waves, measured D3 7 % slower) */
    info->num_lists = (int32_t)aiter_mla__max64(1, d.num_cu / aiter_mla_decode_slices(info));
    tiles = aiter_mla__cdiv(d.max_q_len, info->tokens_per_tile);
    work = ((int64_t)d.max_batch + info->num_lists - 1) * tiles;
    reduce_tiles = (int64_t)d.max_batch * tiles;
    partials = aiter_mla__min64(reduce_tiles + info->num_lists - 1, 2 * ((int64_t)info->num_lists - 1));
    rows = partials * info->tokens_per_tile;
    info->max_tiles = (int32_t)tiles;
    info->max_work = (int32_t)work;
    info->max_reduce_tiles = (int32_t)reduce_tiles;
    info->max_partials = (int32_t)partials;
    info->max_partial_rows = (int32_t)rows;
    info->off_work_indptr = AITER_MLA_PLAN_HEADER_INTS;
    info->off_work_info = info->off_work_indptr + info->num_lists + 1;
    info->off_reduce_indptr = info->off_work_info + work * AITER_MLA_WORK_INTS;
    info->off_reduce_final_map = info->off_reduce_indptr + reduce_tiles + 1;
    info->off_reduce_partial_map = info->off_reduce_final_map + 2 * reduce_tiles;
    info->off_reduce_counters = info->off_reduce_partial_map + aiter_mla__max64(partials, 1);
    info->plan_ints = info->off_reduce_counters + 2 * rows;
    return aiter_mla__workspace_bytes(op, rows, d.num_heads, AITER_MLA_LATENT_DIM, &info->workspace_bytes);
}

/* The fields of a plan info that its get_info sets: X(field) for each (the checks below). */
#define AITER_MLA__DECODE_INFO_FIELDS(X)                                                                            \
    X(desc.max_batch) X(desc.num_heads) X(desc.max_q_len) X(desc.num_cu) X(desc.page_size) X(desc.kv_granularity) \
    X(desc.overhead_blocks) X(tokens_per_tile) X(num_lists) X(max_tiles) X(max_work) X(max_reduce_tiles)          \
    X(max_partials) X(max_partial_rows) X(off_work_indptr) X(off_work_info) X(off_reduce_indptr)                 \
    X(off_reduce_final_map) X(off_reduce_partial_map) X(off_reduce_counters) X(plan_ints) X(workspace_bytes)
#define AITER_MLA__PREFILL_INFO_FIELDS(X)                                                                           \
    X(desc.max_batch) X(desc.max_q_tokens) X(desc.num_heads) X(desc.num_cu) X(desc.dv) X(desc.tile_q)             \
    X(desc.kv_granularity) X(max_tiles) X(max_work) X(max_partials) X(max_partial_rows) X(off_work_indptr)         \
    X(off_work_info) X(off_reduce_indptr) X(off_reduce_final_map) X(off_reduce_partial_map) X(plan_ints)           \
    X(workspace_bytes)
/* info (given) against f (what get_info makes of info's desc): the first field that differs. */
#define AITER_MLA__FIRST_DIFF(x) if (!field && f.x != info->x) field = #x;

/* The info must be what get_info makes of its desc (a stale or hand-made one is refused). */
static aiter_mla_status aiter_mla__plan_info_check(const char *op, const aiter_mla_decode_plan_info *info) {
    aiter_mla_decode_plan_info f;
    aiter_mla_status st;
    const char *field = NULL;
    AITER_MLA__NEED(op, info, "plan_info");
    if ((st = aiter_mla_decode_plan_get_info(&info->desc, &f)) != AITER_MLA_OK)
        return aiter_mla__fail_within(op, st, "plan_info.desc is not valid");
    AITER_MLA__DECODE_INFO_FIELDS(AITER_MLA__FIRST_DIFF)
    if (field)
        return aiter_mla__fail(AITER_MLA_ERR_PLAN_MISMATCH,
                               "%s: plan_info.%s differs from what aiter_mla_decode_plan_get_info makes of its desc", op, field);
    return AITER_MLA_OK;
}

/* The view of a plan whose info is checked (aiter_mla__plan_info_check). */
static aiter_mla_decode_plan_view aiter_mla__plan_view(const aiter_mla_decode_plan_info *info, int32_t *plan) {
    aiter_mla_decode_plan_view v;
    memset(&v, 0, sizeof v);
    v.num_lists = plan[AITER_MLA__PH_NUM_LISTS];
    v.num_work = plan[AITER_MLA__PH_NUM_WORK];
    v.num_reduce_tiles = plan[AITER_MLA__PH_NUM_REDUCE_TILES];
    v.num_partials = plan[AITER_MLA__PH_NUM_PARTIALS];
    v.num_partial_rows = plan[AITER_MLA__PH_NUM_PARTIAL_ROWS];
    v.batch = plan[AITER_MLA__PH_BATCH];
    v.work_indptr = plan + info->off_work_indptr;
    v.work_info = plan + info->off_work_info;
    v.reduce_indptr = plan + info->off_reduce_indptr;
    v.reduce_final_map = plan + info->off_reduce_final_map;
    v.reduce_partial_map = plan + info->off_reduce_partial_map;
    return v;
}
AITER_MLA_API aiter_mla_decode_plan_view aiter_mla_decode_plan_view_of(const aiter_mla_decode_plan_info *info,
                                                                       int32_t *plan) {
    aiter_mla_decode_plan_view v;
    memset(&v, 0, sizeof v);
    if (!plan) {
        aiter_mla__fail(AITER_MLA_ERR_NULL_POINTER, "decode_plan_view_of: plan is NULL");
        return v;
    }
    return aiter_mla__plan_info_check("decode_plan_view_of", info) == AITER_MLA_OK ? aiter_mla__plan_view(info, plan) : v;
}

/* Host arrays a plan is built from: indptrs start at >= 0 and never decrease, q_len fits
 * the plan, last pages hold 1..page_size keys. */
static aiter_mla_status aiter_mla__plan_inputs_check(const char *op, const aiter_mla_decode_plan_info *info,
                                                     const int32_t *qo, const int32_t *kvp, const int32_t *last,
                                                     int batch) {
    int b;
    AITER_MLA__NEED_ARRAY(op, qo, "qo_indptr");
    AITER_MLA__NEED_ARRAY(op, kvp, "kv_indptr");
    AITER_MLA__NEED_ARRAY(op, last, "kv_last_page_lens");
    AITER_MLA__RANGE(op, batch, 1, INT32_MAX - 1, "batch");
    if (batch > info->desc.max_batch)
        return aiter_mla__fail(AITER_MLA_ERR_PLAN_MISMATCH, "%s: batch = %d exceeds the plan's max_batch = %d", op, batch,
                               info->desc.max_batch);
    AITER_MLA__CHECK(aiter_mla__indptr_start(op, qo, "", "qo_indptr"));
    AITER_MLA__CHECK(aiter_mla__indptr_start(op, kvp, "", "kv_indptr"));
    for (b = 0; b < batch; b++) {
        int64_t pages = (int64_t)kvp[b + 1] - kvp[b];
        AITER_MLA__CHECK(aiter_mla__indptr_step(op, qo, b, "", "qo_indptr"));
        AITER_MLA__CHECK(aiter_mla__indptr_step(op, kvp, b, "", "kv_indptr"));
        if (qo[b + 1] - qo[b] > info->desc.max_q_len)
            return aiter_mla__fail(AITER_MLA_ERR_PLAN_MISMATCH,
                                   "%s: request %d has q_len = %d, more than the plan's max_q_len = %d", op, b,
                                   qo[b + 1] - qo[b], info->desc.max_q_len);
        if (pages > 0 && (last[b] < 1 || last[b] > info->desc.page_size))
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                                   "%s: kv_last_page_lens[%d] = %d is outside 1..page_size = %d (0 only for a request without pages%s%s)",
                                   op, b, last[b], info->desc.page_size,
                                   info->desc.page_size == 1 ? "; a page_size of 0 means 1" : "",
                                   last[b] > info->desc.page_size && last[b] <= AITER_MLA_MAX_PAGE_SIZE
                                       ? "; were the metadata built with another page_size?"
                                       : "");
        if (pages * info->desc.page_size > INT32_MAX)
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                                   "%s: kv_indptr gives request %d %lld pages of page_size = %d: their slots (pages x page_size) "
                                   "exceed 2^31 - 1", op, b, (long long)pages, info->desc.page_size);
    }
    return AITER_MLA_OK;
}

/* Shared by the decode and prefill planners: the state of a plan under construction. */
typedef struct aiter_mla__plan_builder {
    aiter_mla_decode_plan_view v; /* sections of the plan buffer */
    int32_t nwork, npieces, nrows, unit, max_partials, max_partial_rows;
} aiter_mla__plan_builder;

/* Close query tile `unit` (rows qs..qe) whose pieces are work items first..nwork-1: record
 * its rows and, when it was split, give each piece fp32 partial rows and list them. */
static void aiter_mla__plan_close_tile(aiter_mla__plan_builder *pb, int32_t qs, int32_t qe, int32_t first) {
    int32_t i;
    pb->v.reduce_final_map[2 * pb->unit] = qs;
    pb->v.reduce_final_map[2 * pb->unit + 1] = qe;
    if (pb->nwork - first > 1)
        for (i = first; i < pb->nwork; i++) {
            AITER_MLA_ASSERT(pb->npieces < pb->max_partials && pb->nrows + (qe - qs) <= pb->max_partial_rows);
            pb->v.work_info[(int64_t)i * AITER_MLA_WORK_INTS + 1] = pb->nrows;
            pb->v.reduce_partial_map[pb->npieces++] = pb->nrows;
            pb->nrows += qe - qs;
        }
    pb->v.reduce_indptr[++pb->unit] = pb->npieces;
}

/* Close the remaining CUs, repeat the last reduce_indptr value over the unused tiles and
 * write the header. */
static void aiter_mla__plan_finish(aiter_mla__plan_builder *pb, int32_t *plan, int cu, int ncu, int32_t max_tiles, int batch) {
    int32_t t;
    while (cu < ncu) pb->v.work_indptr[++cu] = pb->nwork;
    for (t = pb->unit + 1; t <= max_tiles; t++) pb->v.reduce_indptr[t] = pb->npieces;
    plan[AITER_MLA__PH_MAGIC] = AITER_MLA_PLAN_MAGIC;
    plan[AITER_MLA__PH_NUM_LISTS] = ncu;
    plan[AITER_MLA__PH_NUM_WORK] = pb->nwork;
    plan[AITER_MLA__PH_NUM_REDUCE_TILES] = pb->unit;
    plan[AITER_MLA__PH_NUM_PARTIALS] = pb->npieces;
    plan[AITER_MLA__PH_NUM_PARTIAL_ROWS] = pb->nrows;
    plan[AITER_MLA__PH_BATCH] = batch;
}

/* Sections of a plan buffer from its offsets (both plan kinds share the layout). */
static aiter_mla__plan_builder aiter_mla__plan_begin(int32_t *plan, int64_t plan_ints, int64_t off_work_indptr,
                                                     int64_t off_work_info, int64_t off_reduce_indptr,
                                                     int64_t off_reduce_final_map, int64_t off_reduce_partial_map,
                                                     int32_t max_partials, int32_t max_partial_rows) {
    aiter_mla__plan_builder pb;
    memset(&pb, 0, sizeof pb);
    memset(plan, 0, (size_t)plan_ints * sizeof(int32_t));
    pb.v.work_indptr = plan + off_work_indptr;
    pb.v.work_info = plan + off_work_info;
    pb.v.reduce_indptr = plan + off_reduce_indptr;
    pb.v.reduce_final_map = plan + off_reduce_final_map;
    pb.v.reduce_partial_map = plan + off_reduce_partial_map;
    pb.max_partials = max_partials;
    pb.max_partial_rows = max_partial_rows;
    return pb;
}

/* A list whose last piece is one of a split tile's runs that piece first (its other split
 * piece, if any, is already first: the list's start continues a tile). A split tile's pieces
 * then end early in their lists, and the reduce, which on the warpgroup kernel merges a tile as
 * soon as its pieces are counted in, has them merged before the decode's last lists end, not
 * after: D3 0.6-0.8 % faster, D3-fp8 0.3 %, D3-fp8q 0.9 % (means of four runs on each of two
 * H200s; D4 and D6 within their spread). The mma kernels count their pieces too where the
 * reduce is the narrow one, which this order made pay (D1-p1, D2-p1, D1-fp8 1-2 % faster).
 * Each tile's pieces stay in KV order across the lists, as the reduce map lists them. */
static void aiter_mla__plan_split_piece_first(aiter_mla_decode_plan_view *v, int num_lists) {
    int c;
    for (c = 0; c < num_lists; c++) {
        int32_t *first = v->work_info + (int64_t)v->work_indptr[c] * AITER_MLA_WORK_INTS, moved[AITER_MLA_WORK_INTS];
        const int32_t items = v->work_indptr[c + 1] - v->work_indptr[c];
        int32_t *last = first + (int64_t)(items - 1) * AITER_MLA_WORK_INTS;
        if (items < 2 || last[1] < 0) continue; /* partial_qo_loc -1: a whole tile */
        memcpy(moved, last, sizeof moved);
        memmove(first + AITER_MLA_WORK_INTS, first, (size_t)(items - 1) * AITER_MLA_WORK_INTS * sizeof(int32_t));
        memcpy(first, moved, sizeof moved);
    }
}

/* The payload of a list that opens with `work_left` blocks of work for its `lists` (itself and
 * the ones after it): an even share of the work and of the overheads of the lists - 1 cuts to
 * come, and, where a step costs bps blocks, half a step, since a cut rounded down to whole steps
 * falls short by half a step on average (what it leaves, the next lists' shares take up; a whole
 * step's margin made every list overfill and left the last lists short). */
static int64_t aiter_mla__list_payload(int64_t work_left, int lists, int ovh, int64_t bps) {
    return aiter_mla__cdiv(work_left + (int64_t)(lists - 1) * ovh, lists) + bps / 2;
}

AITER_MLA_API aiter_mla_status aiter_mla_decode_plan_build(const aiter_mla_decode_plan_info *info,
                                                           const int32_t *qo, const int32_t *kvp, const int32_t *last,
                                                           int batch, int32_t *plan) {
    const char *op = "decode_plan_build";
    aiter_mla__plan_builder pb;
    aiter_mla__divisor rows_div, step_div;
    int ps, tpt, ncu, ovh, b, cu = 0;
    int64_t sp, bps, total = 0, work_left, remaining, cost;
    AITER_MLA__CHECK(aiter_mla__plan_info_check(op, info));
    AITER_MLA__NEED_ARRAY(op, plan, "plan");
    AITER_MLA__CHECK(aiter_mla__plan_inputs_check(op, info, qo, kvp, last, batch));
    { /* the build zeroes the plan, then reads the lengths again */
        const aiter_mla__span ins[3] = {aiter_mla__span_of(qo, (int64_t)batch + 1, 4, "qo_indptr"),
                                        aiter_mla__span_of(kvp, (int64_t)batch + 1, 4, "kv_indptr"),
                                        aiter_mla__span_of(last, batch, 4, "kv_last_page_lens")};
        const aiter_mla__span out = aiter_mla__span_of(plan, info->plan_ints, 4, "plan");
        AITER_MLA__CHECK(aiter_mla__check_arrays(op, &out, 1, ins, 3));
    }
    ps = info->desc.page_size;
    tpt = info->tokens_per_tile;
    ncu = info->num_lists;
    ovh = info->desc.overhead_blocks;
    /* Cuts fall on steps of max(page, kv_granularity) keys: sp pages, costing bps blocks. */
    sp = aiter_mla__max64(1, info->desc.kv_granularity / ps);
    bps = aiter_mla__max64(1, ps / info->desc.kv_granularity);
    rows_div = aiter_mla__divisor_of(tpt);
    step_div = aiter_mla__divisor_of(sp);

    for (b = 0; b < batch; b++)
        total += aiter_mla__cdiv_by(qo[b + 1] - qo[b], rows_div) * (aiter_mla__cdiv_by(kvp[b + 1] - kvp[b], step_div) * bps + ovh);
    /* A list holds up to its payload, its share of the work left (list_payload), taken anew as
     * each list opens; the last list takes the rest, whatever it is. A payload fixed at the start
     * (the mean rounded up, an overhead, a step less a block) ran ahead of the mean by the
     * rounding on every list and left the last lists short: D1's plan (132 lists) had an empty
     * last list. Over 3000 random plans the busiest list is never costlier than with the fixed
     * payload, and up to 20 % cheaper (small plans); GPU rows unchanged (docs/PERFORMANCE.md). */
    work_left = total;
    remaining = aiter_mla__list_payload(work_left, ncu, ovh, bps);

    pb = aiter_mla__plan_begin(plan, info->plan_ints, info->off_work_indptr, info->off_work_info, info->off_reduce_indptr,
                               info->off_reduce_final_map, info->off_reduce_partial_map, info->max_partials,
                               info->max_partial_rows);
    for (b = 0; b < batch; b++) {
        int32_t q_len = qo[b + 1] - qo[b], pages = kvp[b + 1] - kvp[b], qs, qe;
        int64_t kv_len = aiter_mla__kv_len(pages, last[b], ps);
        for (qs = qo[b]; qs < qo[b + 1]; qs = qe) { /* qs = qe, not qs + tpt: no overflow near INT32_MAX */
            int32_t first = pb.nwork, page = 0;
            qe = (int32_t)aiter_mla__min64((int64_t)qs + tpt, qo[b + 1]);
            for (;;) {
                int64_t left = aiter_mla__cdiv_by(pages - page, step_div), take = left; /* in steps */
                int32_t end;
                int32_t *w;
                if (cu < ncu - 1 && left * bps + ovh > remaining) {
                    take = bps == 1 ? remaining - ovh : (remaining - ovh) / bps;
                    if (take <= 0) { /* this CU is full: close it */
                        pb.v.work_indptr[++cu] = pb.nwork;
                        remaining = aiter_mla__list_payload(work_left, ncu - cu, ovh, bps);
                        continue;
                    }
                    /* a causal tail shorter than q_len is not left alone */
                    if (kv_len - (page + take * sp) * ps < q_len) take = left;
                }
                end = (int32_t)aiter_mla__min64(pages, page + take * sp);
                AITER_MLA_ASSERT(pb.nwork < info->max_work);
                w = pb.v.work_info + (int64_t)pb.nwork * AITER_MLA_WORK_INTS;
                w[0] = b;
                w[1] = -1;
                w[2] = qs;
                w[3] = qe;
                w[4] = kvp[b] + page;
                w[5] = kvp[b] + end;
                w[6] = (int32_t)(kv_len - aiter_mla__min64(kv_len, (int64_t)end * ps));
                w[7] = 0;
                pb.nwork++;
                cost = take * bps + ovh;
                remaining -= cost;
                work_left -= cost;
                page = end;
                if (page >= pages) break;
                pb.v.work_indptr[++cu] = pb.nwork; /* the cut filled this CU */
                work_left += ovh;                  /* and made a piece more */
                remaining = aiter_mla__list_payload(work_left, ncu - cu, ovh, bps);
            }
            aiter_mla__plan_close_tile(&pb, qs, qe, first);
        }
    }
    aiter_mla__plan_finish(&pb, plan, cu, ncu, info->max_reduce_tiles, batch);
    aiter_mla__plan_split_piece_first(&pb.v, ncu);
    return AITER_MLA_OK;
}

#define AITER_MLA__BAD_PLAN(...) do { st = aiter_mla__fail(AITER_MLA_ERR_PLAN_INVALID, __VA_ARGS__); goto done; } while (0)

AITER_MLA_API aiter_mla_status aiter_mla_decode_plan_check(const aiter_mla_decode_plan_info *info,
                                                           const int32_t *qo, const int32_t *kvp, const int32_t *last,
                                                           int batch, const int32_t *plan) {
    const char *op = "decode_plan_check";
    aiter_mla_decode_plan_view v;
    aiter_mla_status st = AITER_MLA_OK;
    int32_t *unit_base = NULL, *covered, *pieces;
    unsigned char *row_used;
    int64_t units = 0, i, u;
    int b, c, tpt, ps;
    AITER_MLA__CHECK(aiter_mla__plan_info_check(op, info));
    AITER_MLA__NEED_ARRAY(op, plan, "plan");
    AITER_MLA__CHECK(aiter_mla__plan_inputs_check(op, info, qo, kvp, last, batch));
    v = aiter_mla__plan_view(info, (int32_t *)plan);
    tpt = info->tokens_per_tile;
    ps = info->desc.page_size;
    if (plan[AITER_MLA__PH_MAGIC] != AITER_MLA_PLAN_MAGIC)
        return aiter_mla__fail(AITER_MLA_ERR_PLAN_INVALID, "%s: plan header has no magic (not built?)", op);
    if (v.num_lists != info->num_lists || v.batch != batch)
        return aiter_mla__fail(AITER_MLA_ERR_PLAN_INVALID,
                               "%s: plan was built for %d work lists, batch %d (info: %d lists; called with batch %d)", op,
                               v.num_lists, v.batch, info->num_lists, batch);
    AITER_MLA__CHECK(aiter_mla__plan_count(op, "num_work", v.num_work, info->max_work, "max_work"));
    AITER_MLA__CHECK(aiter_mla__plan_count(op, "num_partials", v.num_partials, info->max_partials, "max_partials"));
    AITER_MLA__CHECK(aiter_mla__plan_count(op, "num_partial_rows", v.num_partial_rows, info->max_partial_rows, "max_partial_rows"));
    AITER_MLA__CHECK(aiter_mla__plan_count(op, "num_reduce_tiles", v.num_reduce_tiles, info->max_reduce_tiles, "max_reduce_tiles"));

    /* unit (query tile) numbering: unit_base[b] is the first tile of request b */
    unit_base = (int32_t *)AITER_MLA_MALLOC(((size_t)batch + 1 + 2 * (size_t)info->max_reduce_tiles) * sizeof(int32_t) +
                                            (size_t)info->max_partial_rows + 1);
    if (!unit_base) return aiter_mla__fail(AITER_MLA_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    covered = unit_base + batch + 1;
    pieces = covered + info->max_reduce_tiles;
    row_used = (unsigned char *)(pieces + info->max_reduce_tiles);
    memset(covered, 0, 2 * (size_t)info->max_reduce_tiles * sizeof(int32_t));
    memset(row_used, 0, (size_t)info->max_partial_rows + 1);
    for (b = 0; b < batch; b++) {
        unit_base[b] = (int32_t)units;
        units += aiter_mla__cdiv(qo[b + 1] - qo[b], tpt);
    }
    unit_base[batch] = (int32_t)units;
    if (units != v.num_reduce_tiles) AITER_MLA__BAD_PLAN("%s: %d reduce tiles, expected %lld", op, v.num_reduce_tiles, (long long)units);

    /* reduce_indptr: starts at 0, monotone, ends at num_partials, tail repeats */
    if (v.reduce_indptr[0] != 0) AITER_MLA__BAD_PLAN("%s: reduce_indptr[0] = %d", op, v.reduce_indptr[0]);
    for (u = 0; u < info->max_reduce_tiles; u++) {
        if (v.reduce_indptr[u + 1] < v.reduce_indptr[u])
            AITER_MLA__BAD_PLAN("%s: reduce_indptr decreases at %lld", op, (long long)u);
        if (u >= units && v.reduce_indptr[u + 1] != v.reduce_indptr[u])
            AITER_MLA__BAD_PLAN("%s: reduce_indptr tail entry %lld does not repeat the last value", op, (long long)u + 1);
    }
    if (v.reduce_indptr[units] != v.num_partials)
        AITER_MLA__BAD_PLAN("%s: reduce_indptr ends at %d, num_partials = %d", op, v.reduce_indptr[units], v.num_partials);

    /* work_indptr: starts at 0, monotone, ends at num_work */
    if (v.work_indptr[0] != 0 || v.work_indptr[v.num_lists] != v.num_work)
        AITER_MLA__BAD_PLAN("%s: work_indptr does not span 0..num_work", op);
    for (c = 0; c < v.num_lists; c++)
        if (v.work_indptr[c + 1] < v.work_indptr[c]) AITER_MLA__BAD_PLAN("%s: work_indptr decreases at list %d", op, c);

    /* every piece: a known tile, contiguous with the previous piece of its tile (so the
     * keys of every row are covered exactly once, in KV order), offsets consistent */
    for (i = 0; i < v.num_work; i++) {
        const int32_t *w = v.work_info + i * AITER_MLA_WORK_INTS;
        int32_t wb = w[0], loc = w[1], qs = w[2], qe = w[3], ks = w[4], ke = w[5], off = w[6], k, pages;
        int64_t kv_len, end_tok;
        if (wb < 0 || wb >= batch) AITER_MLA__BAD_PLAN("%s: work %lld has batch_idx %d", op, (long long)i, wb);
        if (qs < qo[wb] || qs >= qo[wb + 1] || (qs - qo[wb]) % tpt || qe != (int32_t)aiter_mla__min64((int64_t)qs + tpt, qo[wb + 1]))
            AITER_MLA__BAD_PLAN("%s: work %lld has query rows %d..%d, not a tile of request %d", op, (long long)i, qs, qe, wb);
        k = (qs - qo[wb]) / tpt;
        u = unit_base[wb] + k;
        pages = kvp[wb + 1] - kvp[wb];
        kv_len = aiter_mla__kv_len(pages, last[wb], ps);
        if (ks != kvp[wb] + covered[u] || ke < ks || ke > kvp[wb + 1] || (ke == ks && pages > 0))
            AITER_MLA__BAD_PLAN("%s: work %lld covers pages %d..%d of request %d, expected a start at %d and an end by %d "
                                "(a plan built from other kv_indptr?)",
                                op, (long long)i, ks, ke, wb, kvp[wb] + covered[u], kvp[wb + 1]);
        end_tok = aiter_mla__min64(kv_len, (int64_t)(ke - kvp[wb]) * ps);
        if (off != kv_len - end_tok)
            AITER_MLA__BAD_PLAN("%s: work %lld has kv_offset %d, expected %lld", op, (long long)i, off, (long long)(kv_len - end_tok));
        covered[u] = ke - kvp[wb];
        if (loc >= 0) {
            int32_t j = v.reduce_indptr[u] + pieces[u], r;
            if (j >= v.reduce_indptr[u + 1] || v.reduce_partial_map[j] != loc)
                AITER_MLA__BAD_PLAN("%s: work %lld (partial row %d) is not piece %d of reduce tile %lld", op,
                                    (long long)i, loc, pieces[u], (long long)u);
            if ((int64_t)loc + (qe - qs) > v.num_partial_rows)
                AITER_MLA__BAD_PLAN("%s: work %lld partial rows %d.. pass num_partial_rows", op, (long long)i, loc);
            for (r = loc; r < loc + (qe - qs); r++) {
                if (row_used[r]) AITER_MLA__BAD_PLAN("%s: partial row %d is used twice", op, r);
                row_used[r] = 1;
            }
        } else if (loc != -1) {
            AITER_MLA__BAD_PLAN("%s: work %lld has partial_qo_loc %d", op, (long long)i, loc);
        }
        pieces[u]++;
    }
    for (b = 0; b < batch; b++)
        for (u = unit_base[b]; u < unit_base[b + 1]; u++) {
            int32_t np = v.reduce_indptr[u + 1] - v.reduce_indptr[u];
            int32_t qs = (int32_t)(qo[b] + (u - unit_base[b]) * tpt);
            if (covered[u] != kvp[b + 1] - kvp[b] || pieces[u] == 0)
                AITER_MLA__BAD_PLAN("%s: tile %lld of request %d covers %d of %d pages", op, (long long)u, b, covered[u],
                                    kvp[b + 1] - kvp[b]);
            if (np != (pieces[u] > 1 ? pieces[u] : 0))
                AITER_MLA__BAD_PLAN("%s: reduce tile %lld lists %d pieces, has %d", op, (long long)u, np, pieces[u]);
            if (v.reduce_final_map[2 * u] != qs || v.reduce_final_map[2 * u + 1] != (int32_t)aiter_mla__min64((int64_t)qs + tpt, qo[b + 1]))
                AITER_MLA__BAD_PLAN("%s: reduce_final_map of tile %lld is wrong", op, (long long)u);
        }
    /* an unsplit piece with partial rows would go unreduced */
    for (i = 0; i < v.num_work; i++) {
        const int32_t *w = v.work_info + i * AITER_MLA_WORK_INTS;
        u = unit_base[w[0]] + (w[2] - qo[w[0]]) / tpt;
        if ((pieces[u] > 1) != (w[1] >= 0))
            AITER_MLA__BAD_PLAN("%s: work %lld: partial_qo_loc %d but its tile has %d pieces", op, (long long)i, w[1], pieces[u]);
    }
    for (i = 0; i < 2 * (int64_t)info->max_partial_rows; i++)
        if (plan[info->off_reduce_counters + i] != 0)
            AITER_MLA__BAD_PLAN("%s: reduce_counters[%lld] = %d, not zero", op, (long long)i, plan[info->off_reduce_counters + i]);
done:
    AITER_MLA_FREE(unit_base);
    return st;
}

/* One step of the online softmax shared by the CPU references: fold score s into the
 * running max m and sum l; returns the new key's weight, *alpha the rescale of what came
 * before (0 for the first key). A score of -inf weighs 0 (as masked keys do on the GPU); a
 * NaN or +inf score makes l NaN, which the finishes below pass on to o and lse
 * (aiter_mla__has_keys). A score past fp32's range counts as +-inf, as the kernels' fp32
 * scores do (else a row the GPU gives NaN would get lse +inf, the empty row's mark, here). */
static double aiter_mla__fp32_range(double s) { return s > FLT_MAX ? HUGE_VAL : s < -FLT_MAX ? -HUGE_VAL : s; }
static double aiter_mla__online_softmax(double score, double *m, double *l, double *alpha) {
    const double s = aiter_mla__fp32_range(score), mn = s > *m ? s : *m, mu = mn == -HUGE_VAL ? 0.0 : mn, p = exp(s - mu);
    *alpha = exp(*m - mu);
    *l = *l * *alpha + p;
    *m = mn;
    return p;
}

/* A row's softmax sum l is 0 when no key counted (an empty row: o 0, lse +-inf by the
 * output's convention) and NaN when a score was NaN or +inf (a NaN or inf in q or a key): then o and
 * lse are NaN, as on the GPU, never an empty row's zeros. */
static int aiter_mla__has_keys(double l) { return l != 0.0; }
/* A finished row's lse from its softmax totals (m, the max; l, the sum): `empty` when it saw
 * no key (the finishes of every reference). */
static double aiter_mla__row_lse(double m, double l, double empty) { return aiter_mla__has_keys(l) ? m + log(l) : empty; }

/* ---- dense decode -------------------------------------------------------------------- */
/* Validate the args and resolve every default into *a (the one place defaults live).
 * need_plan: the GPU path and the scheduled reference need plan, plan_info, workspace. */

static aiter_mla_status aiter_mla__decode_resolve(const char *op, const aiter_mla_decode_args *in,
                                                  aiter_mla_decode_args *a, int need_plan) {
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    AITER_MLA__NEED(op, a->q, "q");
    AITER_MLA__NEED(op, a->kv_cache, "kv_cache");
    AITER_MLA__NEED(op, a->o, "o");
    AITER_MLA__NEED(op, a->qo_indptr, "qo_indptr");
    AITER_MLA__NEED(op, a->kv_indptr, "kv_indptr");
    AITER_MLA__NEED(op, a->kv_indices, "kv_indices");
    AITER_MLA__NEED(op, a->kv_last_page_lens, "kv_last_page_lens");
    if (!a->page_size) a->page_size = 1;
    AITER_MLA__RANGE(op, a->batch, 1, INT32_MAX - 1, "batch");
    AITER_MLA__RANGE(op, a->num_heads, 1, AITER_MLA_MAX_HEADS, "num_heads");
    AITER_MLA__POW2(op, a->page_size, 1, AITER_MLA_MAX_PAGE_SIZE, "page_size");
    AITER_MLA__RANGE(op, a->num_pages, 1, INT64_MAX / (AITER_MLA_MAX_PAGE_SIZE * AITER_MLA_HEAD_DIM), "num_pages");
    AITER_MLA__RANGE(op, a->q_stride_token, 0, AITER_MLA__MAX_STRIDE, "q_stride_token");
    AITER_MLA__RANGE(op, a->q_stride_head, 0, AITER_MLA__MAX_STRIDE, "q_stride_head");
    if (!a->q_stride_head) a->q_stride_head = AITER_MLA_HEAD_DIM;
    AITER_MLA__CHECK(aiter_mla__default_token_stride(op, "", "q_stride_token", &a->q_stride_token, a->num_heads,
                                                     a->q_stride_head, "q_stride_head"));
    AITER_MLA__CHECK(aiter_mla__resolve_o_rows(op, "", &a->o_stride_token, &a->o_stride_head, a->num_heads, -1, AITER_MLA_LATENT_DIM));

    if (a->q_dtype == AITER_MLA_DTYPE_DEFAULT) a->q_dtype = AITER_MLA_BF16;
    if (!aiter_mla__is_16bit(a->q_dtype) && !aiter_mla__is_fp8(a->q_dtype))
        return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED, "%s: q_dtype %s is not bf16, f16 or fp8", op,
                               aiter_mla_dtype_name(a->q_dtype));
    if (a->kv_dtype == AITER_MLA_DTYPE_DEFAULT) a->kv_dtype = a->q_dtype;
    if (aiter_mla__is_fp8(a->q_dtype) ? a->kv_dtype != a->q_dtype
                                      : (a->kv_dtype != a->q_dtype && !aiter_mla__is_fp8(a->kv_dtype)))
        return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED,
                               "%s: kv_dtype %s with q_dtype %s: the cache must be q's type or fp8 (fp8 q needs the same fp8 cache)",
                               op, aiter_mla_dtype_name(a->kv_dtype), aiter_mla_dtype_name(a->q_dtype));
    AITER_MLA__CHECK(aiter_mla__check_cache_bytes(op, "", "kv_cache_bytes", a->kv_cache_bytes, a->num_pages * a->page_size,
                                                  aiter_mla__cache_row_bytes(0, a->kv_dtype),
                                                  "num_pages x page_size rows of 576 kv_dtype values"));
    if (a->o_dtype == AITER_MLA_DTYPE_DEFAULT) a->o_dtype = aiter_mla__is_fp8(a->q_dtype) ? AITER_MLA_BF16 : a->q_dtype;
    AITER_MLA__CHECK(aiter_mla__check_out_dtype(op, a->o_dtype, "", "o_dtype"));
    if (a->sm_scale == 0.0f) a->sm_scale = 0.041666666666666664f; /* 1/sqrt(576) */
    if (a->q_scale == 0.0f) a->q_scale = 1.0f;
    if (a->kv_scale == 0.0f) a->kv_scale = 1.0f;
    AITER_MLA__SCALE(op, a->sm_scale, "sm_scale");
    AITER_MLA__SCALE(op, a->q_scale, "q_scale");
    AITER_MLA__SCALE(op, a->kv_scale, "kv_scale");
    if (aiter_mla__is_fp8(a->q_dtype)) /* then the cache is fp8 too */
        AITER_MLA__CHECK(aiter_mla__check_scale_product(op, (double)a->sm_scale * a->q_scale * a->kv_scale,
                                                        "sm_scale x q_scale x kv_scale"));
    else if (aiter_mla__is_fp8(a->kv_dtype))
        AITER_MLA__CHECK(aiter_mla__check_scale_product(op, (double)a->sm_scale * a->kv_scale, "sm_scale x kv_scale"));

    if (!need_plan) return AITER_MLA_OK;
    AITER_MLA__NEED(op, a->plan, "plan");
    AITER_MLA__CHECK(aiter_mla__plan_info_check(op, a->plan_info));
    if (a->num_heads != a->plan_info->desc.num_heads)
        return aiter_mla__fail(AITER_MLA_ERR_PLAN_MISMATCH, "%s: num_heads = %d but the plan was sized for %d", op,
                               a->num_heads, a->plan_info->desc.num_heads);
    if (a->page_size != a->plan_info->desc.page_size)
        return aiter_mla__fail(AITER_MLA_ERR_PLAN_MISMATCH, "%s: page_size = %d%s but the plan was sized for %d", op,
                               a->page_size, in->page_size ? "" : " (0 means 1)", a->plan_info->desc.page_size);
    if (a->batch > a->plan_info->desc.max_batch)
        return aiter_mla__fail(AITER_MLA_ERR_PLAN_MISMATCH, "%s: batch = %d exceeds the plan's max_batch = %d", op,
                               a->batch, a->plan_info->desc.max_batch);
    return aiter_mla__check_workspace(op, "workspace", a->workspace, a->workspace_bytes, a->plan_info->workspace_bytes,
                                      "the plan's partials");
}

/* Query rows [qs, qe) of request b against its keys [tok0, tok1), in double precision.
 * partial_row < 0: write final o (o_dtype) and lse (+inf when a row sees no key);
 * otherwise write fp32 partials at partial_row.. (lse -inf when a row sees no key). */
static void aiter_mla__ref_rows(const aiter_mla_decode_args *a, int b, int32_t qs, int32_t qe, int64_t tok0,
                                int64_t tok1, int32_t partial_row, float *part_o, float *part_lse) {
    const int ps = a->page_size, H = a->num_heads, L = AITER_MLA_LATENT_DIM, D = AITER_MLA_HEAD_DIM;
    const int32_t q_len = a->qo_indptr[b + 1] - a->qo_indptr[b], pages = a->kv_indptr[b + 1] - a->kv_indptr[b];
    const int64_t kv_len = aiter_mla__kv_len(pages, a->kv_last_page_lens[b], ps);
    const int kv_fp8 = aiter_mla__is_fp8(a->kv_dtype);
    const double v_scale = kv_fp8 ? a->kv_scale : 1.0;
    const double s_scale = (double)a->sm_scale * (aiter_mla__is_fp8(a->q_dtype) ? a->q_scale : 1.0f) * v_scale;
    double qv[AITER_MLA_HEAD_DIM], acc[AITER_MLA_LATENT_DIM];
    int32_t row;
    int h, d;
    for (row = qs; row < qe; row++)
        for (h = 0; h < H; h++) {
            int64_t i = row - a->qo_indptr[b], j, jend = aiter_mla__min64(tok1, kv_len - q_len + i + 1);
            double m = -HUGE_VAL, l = 0.0, lse;
            for (d = 0; d < D; d++) qv[d] = aiter_mla_load_f32(a->q, row * a->q_stride_token + h * a->q_stride_head + d, a->q_dtype);
            for (d = 0; d < L; d++) acc[d] = 0.0;
            for (j = tok0; j < jend; j++) {
                int32_t page = a->kv_indices[a->kv_indptr[b] + j / ps];
                int64_t base;
                double s = 0.0, alpha, p;
                if (page < 0 || page >= a->num_pages) continue; /* absent key */
                base = ((int64_t)page * ps + j % ps) * D;
                for (d = 0; d < D; d++) s += qv[d] * aiter_mla_load_f32(a->kv_cache, base + d, a->kv_dtype);
                s *= s_scale;
                p = aiter_mla__online_softmax(s, &m, &l, &alpha);
                for (d = 0; d < L; d++) acc[d] = acc[d] * alpha + p * v_scale * aiter_mla_load_f32(a->kv_cache, base + d, a->kv_dtype);
            }
            lse = aiter_mla__row_lse(m, l, partial_row < 0 ? HUGE_VAL : -HUGE_VAL);
            if (partial_row < 0) {
                for (d = 0; d < L; d++)
                    aiter_mla_store_f32(a->o, row * a->o_stride_token + h * a->o_stride_head + d, a->o_dtype,
                                        aiter_mla__has_keys(l) ? (float)(acc[d] / l) : 0.0f);
                if (a->lse) a->lse[(int64_t)row * H + h] = (float)lse;
            } else {
                int64_t pr = (int64_t)(partial_row + row - qs) * H + h;
                for (d = 0; d < L; d++) part_o[pr * L + d] = aiter_mla__has_keys(l) ? (float)(acc[d] / l) : 0.0f;
                part_lse[pr] = (float)lse;
            }
        }
}

/* Host arrays of the paged addressing, as the reference reads them. */
static aiter_mla_status aiter_mla__decode_arrays_check(const char *op, const aiter_mla_decode_args *a) {
    aiter_mla_decode_plan_info any;
    memset(&any, 0, sizeof any);
    any.desc.max_batch = a->batch;
    any.desc.max_q_len = INT32_MAX;
    any.desc.page_size = a->page_size;
    return aiter_mla__plan_inputs_check(op, &any, a->qo_indptr, a->kv_indptr, a->kv_last_page_lens, a->batch);
}

/* Which call an attention's overlap check serves: its reference, its scheduled replay (a plan
 * and a workspace on the host), or its GPU launch (only what the host can size). */
typedef enum { AITER_MLA__CALL_REF, AITER_MLA__CALL_SCHEDULED, AITER_MLA__CALL_GPU } aiter_mla__call_kind;

/* What a decode writes against what it reads (other blocks read q after a block's first
 * writes). REF: o and lse; SCHEDULED: also the workspace's partials, the plan read; GPU: the
 * partials and the plan (whose counters it writes), against the cache, the indptrs and last
 * pages (q, o, lse and kv_indices hang on device indptrs).
 * The host calls come after decode_arrays_check, so their indptrs are sound. */
static aiter_mla_status aiter_mla__decode_disjoint(const char *op, const aiter_mla_decode_args *a, aiter_mla__call_kind call) {
    const int host = call != AITER_MLA__CALL_GPU;
    /* the plain reference reads no plan and no workspace: neither is sized nor held to an alignment */
    const int64_t plan_ints = call != AITER_MLA__CALL_REF ? a->plan_info->plan_ints : 0,
                  ws_bytes = call != AITER_MLA__CALL_REF ? (int64_t)a->plan_info->workspace_bytes : 0;
    const int64_t B = a->batch, T = host ? a->qo_indptr[a->batch] : 0;
    const aiter_mla__span ins[7] = {aiter_mla__span_strided(a->q, T, a->num_heads, a->q_stride_token, a->q_stride_head,
                                                            AITER_MLA_HEAD_DIM, aiter_mla_dtype_size(a->q_dtype), "q"),
                                    aiter_mla__span_rows(a->kv_cache, a->num_pages * a->page_size,
                                                         (uint64_t)aiter_mla__cache_row_bytes(0, a->kv_dtype),
                                                         aiter_mla_dtype_size(a->kv_dtype), "kv_cache"),
                                    aiter_mla__span_of(a->qo_indptr, B + 1, 4, "qo_indptr"),
                                    aiter_mla__span_of(a->kv_indptr, B + 1, 4, "kv_indptr"),
                                    aiter_mla__span_of(a->kv_indices, host ? a->kv_indptr[a->batch] : 0, 4, "kv_indices"),
                                    aiter_mla__span_of(a->kv_last_page_lens, B, 4, "kv_last_page_lens"),
                                    aiter_mla__span_of(call == AITER_MLA__CALL_SCHEDULED ? a->plan : NULL, plan_ints, 4, "plan")};
    const aiter_mla__span outs[4] = {
        aiter_mla__span_strided(a->o, T, a->num_heads, a->o_stride_token, a->o_stride_head, AITER_MLA_LATENT_DIM,
                                aiter_mla_dtype_size(a->o_dtype), "o"),
        aiter_mla__span_of(a->lse, T * a->num_heads, 4, "lse"),
        aiter_mla__span_bytes(call != AITER_MLA__CALL_REF ? a->workspace : NULL, ws_bytes, 4, "workspace"), /* fp32 partials */
        aiter_mla__span_of(call == AITER_MLA__CALL_GPU ? a->plan : NULL, plan_ints, 4, "plan")};
    if (host) /* o's rows over every token (resolve checked two) */
        AITER_MLA__CHECK(aiter_mla__check_o_rows(op, "", a->o_stride_token, a->o_stride_head, 0, a->num_heads, T, AITER_MLA_LATENT_DIM));
    return aiter_mla__check_arrays(op, outs, 4, ins, 7);
}

AITER_MLA_API aiter_mla_status aiter_mla_decode_ref(const aiter_mla_decode_args *in) {
    const char *op = "decode_ref";
    aiter_mla_decode_args a;
    int b;
    AITER_MLA__CHECK(aiter_mla__decode_resolve(op, in, &a, 0));
    AITER_MLA__CHECK(aiter_mla__decode_arrays_check(op, &a));
    AITER_MLA__CHECK(aiter_mla__decode_disjoint(op, &a, AITER_MLA__CALL_REF));
    for (b = 0; b < a.batch; b++)
        aiter_mla__ref_rows(&a, b, a.qo_indptr[b], a.qo_indptr[b + 1], 0, INT64_MAX, -1, NULL, NULL);
    return AITER_MLA_OK;
}

AITER_MLA_API aiter_mla_status aiter_mla_decode_ref_scheduled(const aiter_mla_decode_args *in) {
    const char *op = "decode_ref_scheduled";
    aiter_mla_decode_args a;
    aiter_mla_decode_plan_view v;
    aiter_mla_reduce_args r;
    float *part_o, *part_lse;
    int64_t i;
    AITER_MLA__CHECK(aiter_mla__decode_resolve(op, in, &a, 1));
    /* the host arrays the plan's check reads, held to their alignment as this call's own (the
       check's refusal would read as a plan that does not fit) */
    AITER_MLA__ARRAY_ALIGNED(op, a.plan, "plan");
    AITER_MLA__ARRAY_ALIGNED(op, a.qo_indptr, "qo_indptr");
    AITER_MLA__ARRAY_ALIGNED(op, a.kv_indptr, "kv_indptr");
    AITER_MLA__ARRAY_ALIGNED(op, a.kv_last_page_lens, "kv_last_page_lens");
    AITER_MLA__CHECK(aiter_mla__fail_within(
        op, aiter_mla_decode_plan_check(a.plan_info, a.qo_indptr, a.kv_indptr, a.kv_last_page_lens, a.batch, a.plan),
        "the plan does not fit these arrays (rebuild it with aiter_mla_decode_plan_build)"));
    AITER_MLA__CHECK(aiter_mla__decode_disjoint(op, &a, AITER_MLA__CALL_SCHEDULED));
    v = aiter_mla__plan_view(a.plan_info, (int32_t *)a.plan);
    part_o = (float *)a.workspace;
    part_lse = part_o ? part_o + (int64_t)a.plan_info->max_partial_rows * a.num_heads * AITER_MLA_LATENT_DIM : NULL;
    for (i = 0; i < v.num_work; i++) {
        const int32_t *w = v.work_info + i * AITER_MLA_WORK_INTS;
        int b = w[0];
        int32_t pages = a.kv_indptr[b + 1] - a.kv_indptr[b];
        int64_t kv_len = aiter_mla__kv_len(pages, a.kv_last_page_lens[b], a.page_size);
        int64_t tok0 = (int64_t)(w[4] - a.kv_indptr[b]) * a.page_size;
        aiter_mla__ref_rows(&a, b, w[2], w[3], tok0, kv_len - w[6], w[1], part_o, part_lse);
    }
    memset(&r, 0, sizeof r);
    r.partial_o = part_o;
    r.partial_lse = part_lse;
    r.reduce_indptr = v.reduce_indptr;
    r.reduce_final_map = v.reduce_final_map;
    r.reduce_partial_map = v.reduce_partial_map;
    r.num_tiles = v.num_reduce_tiles;
    r.num_partial_rows = a.plan_info->max_partial_rows;
    r.num_heads = a.num_heads;
    r.o = a.o;
    r.o_stride_token = a.o_stride_token;
    r.o_stride_head = a.o_stride_head;
    r.lse = a.lse;
    r.o_dtype = a.o_dtype;
    if (v.num_partials == 0) return AITER_MLA_OK;
    return aiter_mla_reduce_ref(&r);
}

/* The decode's launch, or with kernel != NULL its kernel (aiter_mla_decode_kernel). */
static aiter_mla_status aiter_mla__decode_call(const char *op, const aiter_mla_decode_args *in, aiter_mla_kernel *kernel,
                                               void *stream) {
    aiter_mla_decode_args a;
    AITER_MLA__CHECK(aiter_mla__decode_resolve(op, in, &a, 1));
    AITER_MLA__CHECK(aiter_mla__check_aligned(op, a.kv_cache, 16, "kv_cache"));
    AITER_MLA__CHECK(aiter_mla__check_aligned(op, a.workspace, 16, "workspace"));
    AITER_MLA__CHECK(aiter_mla__decode_disjoint(op, &a, AITER_MLA__CALL_GPU));
    return AITER_MLA__LAUNCH_OR_PICK(op, kernel, aiter_mla__launch_decode(&a, a.plan_info, kernel, stream));
}
AITER_MLA_API aiter_mla_status aiter_mla_decode(const aiter_mla_decode_args *in, void *stream) {
    return aiter_mla__decode_call("decode", in, NULL, stream);
}
AITER_MLA_API aiter_mla_status aiter_mla_decode_kernel(const aiter_mla_decode_args *in, aiter_mla_kernel *kernel) {
    AITER_MLA__NEED("decode_kernel", kernel, "kernel");
    return aiter_mla__decode_call("decode_kernel", in, kernel, NULL);
}

/* ---- reduce -------------------------------------------------------------------------- */
AITER_MLA_API aiter_mla_status aiter_mla_reduce_ref(const aiter_mla_reduce_args *in) {
    const char *op = "reduce_ref";
    aiter_mla_reduce_args a;
    int t, h, d, rows = 0; /* rows: the tiles' row count, max of their ends */
    int64_t dt, dh;
    AITER_MLA__NEED(op, in, "args");
    a = *in;
    if (!a.dv) a.dv = AITER_MLA_LATENT_DIM;
    if (a.o_dtype == AITER_MLA_DTYPE_DEFAULT) a.o_dtype = AITER_MLA_BF16;
    AITER_MLA__RANGE(op, a.num_tiles, 0, INT32_MAX - 1, "num_tiles");
    AITER_MLA__RANGE(op, a.num_heads, 1, AITER_MLA__MAX_PREFILL_HEADS, "num_heads");
    AITER_MLA__RANGE(op, a.empty_lse_neg_inf, 0, 1, "empty_lse_neg_inf");
    AITER_MLA__RANGE(op, a.dv, 1, 1024, "dv");
    AITER_MLA__CHECK(aiter_mla__check_out_dtype(op, a.o_dtype, "", "o_dtype"));
    AITER_MLA__RANGE(op, a.num_partial_rows, 0, INT32_MAX, "num_partial_rows");
    AITER_MLA__RANGE(op, a.lse_stride_token, 0, AITER_MLA__MAX_STRIDE, "lse_stride_token");
    AITER_MLA__RANGE(op, a.lse_stride_head, 0, AITER_MLA__MAX_STRIDE, "lse_stride_head");
    if (!a.lse_stride_head) a.lse_stride_head = 1;
    if (!a.lse_stride_token) a.lse_stride_token = a.num_heads;
    AITER_MLA__CHECK(aiter_mla__resolve_o_rows(op, "", &a.o_stride_token, &a.o_stride_head, a.num_heads, -1, a.dv));
    if (a.num_tiles == 0) return AITER_MLA_OK;
    AITER_MLA__NEED(op, a.partial_o, "partial_o");
    AITER_MLA__NEED(op, a.partial_lse, "partial_lse");
    AITER_MLA__NEED_ARRAY(op, a.reduce_indptr, "reduce_indptr"); /* the maps are read in the checks below */
    AITER_MLA__NEED_ARRAY(op, a.reduce_final_map, "reduce_final_map");
    AITER_MLA__NEED_ARRAY(op, a.reduce_partial_map, "reduce_partial_map");
    AITER_MLA__NEED(op, a.o, "o");
    AITER_MLA__CHECK(aiter_mla__indptr_start(op, a.reduce_indptr, "", "reduce_indptr"));
    for (t = 0; t < a.num_tiles; t++) /* monotone first: then no tile's pieces pass the map's end */
        AITER_MLA__CHECK(aiter_mla__indptr_step(op, a.reduce_indptr, t, "", "reduce_indptr"));
    for (t = 0; t < a.num_tiles; t++) { /* every index the reduce will follow, before any write */
        int32_t k0 = a.reduce_indptr[t], k1 = a.reduce_indptr[t + 1], qs = a.reduce_final_map[2 * t],
                qe = a.reduce_final_map[2 * t + 1], k;
        if (k1 - k0 < 2) continue;
        if (qs < 0 || qe < qs)
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: reduce_final_map[%d] = (%d, %d) is not a row range",
                                   op, t, qs, qe);
        for (k = k0; k < k1; k++)
            if (a.reduce_partial_map[k] < 0 || (int64_t)a.reduce_partial_map[k] + (qe - qs) > a.num_partial_rows)
                return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                                       "%s: reduce_partial_map[%d] = %d with %d rows passes num_partial_rows = %d", op, k,
                                       a.reduce_partial_map[k], qe - qs, a.num_partial_rows);
        if (qe > rows) rows = qe;
    }
    AITER_MLA__CHECK(aiter_mla__check_o_rows(op, "", a.o_stride_token, a.o_stride_head, !in->o_stride_token, a.num_heads, rows, a.dv));
    if (a.lse && aiter_mla__rows_overlap(a.lse_stride_token, a.lse_stride_head, a.num_heads, rows, 1, &dt, &dh))
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                               "%s: lse_stride_token = %lld and lse_stride_head = %lld put the lse of (token t, head h) and "
                               "(token t%+lld, head h%+lld) on one element (%d tokens)",
                               op, (long long)a.lse_stride_token, (long long)a.lse_stride_head, (long long)dt, (long long)dh, rows);
    { /* o and lse against the maps and partials the loop below reads after its first writes */
        const int64_t prow = (int64_t)a.num_partial_rows * a.num_heads;
        const aiter_mla__span ins[5] = {aiter_mla__span_of(a.reduce_indptr, (int64_t)a.num_tiles + 1, 4, "reduce_indptr"),
                                        aiter_mla__span_of(a.reduce_final_map, 2 * (int64_t)a.num_tiles, 4, "reduce_final_map"),
                                        aiter_mla__span_of(a.reduce_partial_map, a.reduce_indptr[a.num_tiles], 4, "reduce_partial_map"),
                                        aiter_mla__span_of(a.partial_o, prow * a.dv, 4, "partial_o"),
                                        aiter_mla__span_of(a.partial_lse, prow, 4, "partial_lse")};
        aiter_mla__span outs[2];
        outs[0] = aiter_mla__span_strided(a.o, rows, a.num_heads, a.o_stride_token, a.o_stride_head, a.dv,
                                          aiter_mla_dtype_size(a.o_dtype), "o");
        outs[1] = aiter_mla__span_strided(a.lse, rows, a.num_heads, a.lse_stride_token, a.lse_stride_head, 1, 4, "lse");
        AITER_MLA__CHECK(aiter_mla__check_arrays(op, outs, 2, ins, 5));
    }
    for (t = 0; t < a.num_tiles; t++) {
        int32_t k0 = a.reduce_indptr[t], k1 = a.reduce_indptr[t + 1], qs = a.reduce_final_map[2 * t], row, k;
        if (k1 - k0 < 2) continue;
        for (row = qs; row < a.reduce_final_map[2 * t + 1]; row++)
            for (h = 0; h < a.num_heads; h++) {
                double m = -HUGE_VAL, sum = 0.0, g;
                for (k = k0; k < k1; k++) {
                    double l = a.partial_lse[((int64_t)a.reduce_partial_map[k] + row - qs) * a.num_heads + h];
                    if (l > m || l != l) m = l; /* a NaN piece makes the row NaN, not empty */
                }
                if (m == -HUGE_VAL) { /* every piece empty */
                    for (d = 0; d < a.dv; d++) aiter_mla_store_f32(a.o, row * a.o_stride_token + h * a.o_stride_head + d, a.o_dtype, 0.0f);
                    if (a.lse) a.lse[row * a.lse_stride_token + h * a.lse_stride_head] = (float)(a.empty_lse_neg_inf ? -HUGE_VAL : HUGE_VAL);
                    continue;
                }
                for (k = k0; k < k1; k++)
                    sum += exp(a.partial_lse[((int64_t)a.reduce_partial_map[k] + row - qs) * a.num_heads + h] - m);
                g = m + log(sum);
                for (d = 0; d < a.dv; d++) {
                    double o = 0.0;
                    for (k = k0; k < k1; k++) {
                        int64_t pr = ((int64_t)a.reduce_partial_map[k] + row - qs) * a.num_heads + h;
                        o += exp(a.partial_lse[pr] - g) * a.partial_o[pr * a.dv + d];
                    }
                    aiter_mla_store_f32(a.o, row * a.o_stride_token + h * a.o_stride_head + d, a.o_dtype, (float)o);
                }
                if (a.lse) a.lse[row * a.lse_stride_token + h * a.lse_stride_head] = (float)g;
            }
    }
    return AITER_MLA_OK;
}

/* ---- merge of attention states ------------------------------------------------------- */
static aiter_mla_status aiter_mla__merge_resolve(const char *op, const aiter_mla_merge_args *in, aiter_mla_merge_args *a) {
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    if (a->dtype == AITER_MLA_DTYPE_DEFAULT) a->dtype = AITER_MLA_BF16;
    AITER_MLA__RANGE(op, a->num_tokens, 0, INT32_MAX, "num_tokens");
    AITER_MLA__RANGE(op, a->num_heads, 1, 65536, "num_heads");
    AITER_MLA__RANGE(op, a->head_dim, 1, 65536, "head_dim");
    AITER_MLA__CHECK(aiter_mla__check_out_dtype(op, a->dtype, "", "dtype"));
    if (a->num_tokens == 0) return AITER_MLA_OK;
    AITER_MLA__NEED(op, a->o_prefix, "o_prefix");
    AITER_MLA__NEED(op, a->lse_prefix, "lse_prefix");
    AITER_MLA__NEED(op, a->o_suffix, "o_suffix");
    AITER_MLA__NEED(op, a->lse_suffix, "lse_suffix");
    AITER_MLA__NEED(op, a->o, "o");
    { /* o may be an o input itself (a running merge: each value is read before it is written),
         so that input drops out (lse against o covers its bytes); lse, written by one lane while
         others of its row may still read the inputs, overlaps nothing */
        const int64_t rows = a->num_tokens * a->num_heads; /* < 2^47 */
        const uint64_t o_row = (uint64_t)a->head_dim * aiter_mla_dtype_size(a->dtype);
        const uint64_t el = aiter_mla_dtype_size(a->dtype);
        const aiter_mla__span ins[4] = {aiter_mla__span_rows(a->o_prefix == a->o ? NULL : a->o_prefix, rows, o_row, el, "o_prefix"),
                                        aiter_mla__span_rows(a->o_suffix == a->o ? NULL : a->o_suffix, rows, o_row, el, "o_suffix"),
                                        aiter_mla__span_of(a->lse_prefix, rows, 4, "lse_prefix"),
                                        aiter_mla__span_of(a->lse_suffix, rows, 4, "lse_suffix")};
        const aiter_mla__span outs[2] = {aiter_mla__span_rows(a->o, rows, o_row, el, "o"), aiter_mla__span_of(a->lse, rows, 4, "lse")};
        return aiter_mla__check_arrays(op, outs, 2, ins, 4);
    }
}

AITER_MLA_API aiter_mla_status aiter_mla_merge_attn_states_ref(const aiter_mla_merge_args *in) {
    aiter_mla_merge_args a;
    int64_t t;
    int h, d;
    AITER_MLA__CHECK(aiter_mla__merge_resolve("merge_attn_states_ref", in, &a));
    for (t = 0; t < a.num_tokens; t++)
        for (h = 0; h < a.num_heads; h++) {
            double lp = a.lse_prefix[(int64_t)h * a.num_tokens + t], ls = a.lse_suffix[(int64_t)h * a.num_tokens + t], m, wp, ws;
            int64_t base = (t * a.num_heads + h) * a.head_dim;
            if (lp == HUGE_VAL) lp = -HUGE_VAL; /* +inf marks an empty side */
            if (ls == HUGE_VAL) ls = -HUGE_VAL;
            m = lp != lp || ls != ls ? lp + ls : lp > ls ? lp : ls; /* a NaN side: NaN o and lse */
            wp = m == -HUGE_VAL ? 0.0 : exp(lp - m);
            ws = m == -HUGE_VAL ? 0.0 : exp(ls - m);
            for (d = 0; d < a.head_dim; d++) {
                double o = m == -HUGE_VAL ? 0.0
                                          : (wp * aiter_mla_load_f32(a.o_prefix, base + d, a.dtype) +
                                             ws * aiter_mla_load_f32(a.o_suffix, base + d, a.dtype)) / (wp + ws);
                aiter_mla_store_f32(a.o, base + d, a.dtype, (float)o);
            }
            if (a.lse) a.lse[(int64_t)h * a.num_tokens + t] = (float)(m == -HUGE_VAL ? m : m + log(wp + ws));
        }
    return AITER_MLA_OK;
}

AITER_MLA_API aiter_mla_status aiter_mla_merge_attn_states(const aiter_mla_merge_args *in, void *stream) {
    aiter_mla_merge_args a;
    AITER_MLA__CHECK(aiter_mla__merge_resolve("merge_attn_states", in, &a));
    if (a.num_tokens == 0) return aiter_mla__nothing_to_launch("merge_attn_states");
    return AITER_MLA__LAUNCH("merge_attn_states", aiter_mla__launch_merge_attn_states(&a, stream));
}

/* ---- KV cache write ------------------------------------------------------------------ */
/* A cache writer's cache (rows of row_bytes, elements of cache_elem bytes) against the rows and
 * slots it reads after its first write (num_tokens rows of kv_c and of k_pe, k_pe NULL for
 * none). Every size is a host field, so the reference and the GPU call check the same spans. */
static aiter_mla_status aiter_mla__writer_disjoint(const char *op, const void *cache, int64_t rows, uint64_t row_bytes,
                                                   uint64_t cache_elem, const int64_t *slot_mapping, int64_t num_tokens, const void *kv_c,
                                                   int64_t kv_c_stride, int kv_c_len, const void *k_pe, int64_t k_pe_stride,
                                                   aiter_mla_dtype src_dtype) {
    const uint64_t elem = aiter_mla_dtype_size(src_dtype);
    aiter_mla__span ins[3];
    const aiter_mla__span out = aiter_mla__span_rows(cache, rows, row_bytes, cache_elem, "kv_cache");
    ins[0] = aiter_mla__span_of(slot_mapping, num_tokens, 8, "slot_mapping");
    ins[1] = aiter_mla__span_strided(kv_c, num_tokens, 1, kv_c_stride, 0, kv_c_len, elem, k_pe ? "kv_c" : "kv");
    ins[2] = aiter_mla__span_strided(k_pe, num_tokens, 1, k_pe_stride, 0, AITER_MLA_HEAD_DIM - AITER_MLA_LATENT_DIM, elem, "k_pe");
    return aiter_mla__check_arrays(op, &out, 1, ins, 3);
}

static aiter_mla_status aiter_mla__kv_write_resolve(const char *op, const aiter_mla_kv_cache_write_args *in,
                                                    aiter_mla_kv_cache_write_args *a) {
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    if (!a->kv_c_stride) a->kv_c_stride = AITER_MLA_LATENT_DIM;
    if (!a->k_pe_stride) a->k_pe_stride = AITER_MLA_ROPE_DIM;
    if (!a->block_size) a->block_size = 1;
    if (a->src_dtype == AITER_MLA_DTYPE_DEFAULT) a->src_dtype = AITER_MLA_BF16;
    if (a->cache_dtype == AITER_MLA_DTYPE_DEFAULT) a->cache_dtype = a->src_dtype;
    if (a->scale == 0.0f) a->scale = 1.0f;
    AITER_MLA__RANGE(op, a->num_tokens, 0, INT32_MAX, "num_tokens");
    AITER_MLA__CHECK(aiter_mla__check_cache_slots(op, a->num_blocks, a->block_size));
    AITER_MLA__RANGE(op, a->kv_c_stride, AITER_MLA_LATENT_DIM, AITER_MLA__MAX_STRIDE, "kv_c_stride");
    AITER_MLA__RANGE(op, a->k_pe_stride, AITER_MLA_ROPE_DIM, AITER_MLA__MAX_STRIDE, "k_pe_stride");
    if (!aiter_mla__is_16bit(a->src_dtype))
        return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED, "%s: src_dtype %s is not bf16 or f16", op, aiter_mla_dtype_name(a->src_dtype));
    if (a->cache_dtype != a->src_dtype && !aiter_mla__is_fp8(a->cache_dtype))
        return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED, "%s: cache_dtype %s is neither src_dtype %s nor fp8", op,
                               aiter_mla_dtype_name(a->cache_dtype), aiter_mla_dtype_name(a->src_dtype));
    AITER_MLA__CHECK(aiter_mla__check_cache_bytes(op, "", "kv_cache_bytes", a->kv_cache_bytes, a->num_blocks * a->block_size,
                                                  aiter_mla__cache_row_bytes(0, a->cache_dtype),
                                                  "num_blocks x block_size rows of 576 cache_dtype values"));
    AITER_MLA__SCALE(op, a->scale, "scale");
    if (a->num_tokens == 0) return AITER_MLA_OK;
    AITER_MLA__NEED(op, a->kv_c, "kv_c");
    AITER_MLA__NEED(op, a->k_pe, "k_pe");
    AITER_MLA__NEED(op, a->slot_mapping, "slot_mapping");
    AITER_MLA__NEED(op, a->kv_cache, "kv_cache");
    return aiter_mla__writer_disjoint(op, a->kv_cache, a->num_blocks * a->block_size,
                                      (uint64_t)aiter_mla__cache_row_bytes(0, a->cache_dtype), aiter_mla_dtype_size(a->cache_dtype),
                                      a->slot_mapping, a->num_tokens, a->kv_c, a->kv_c_stride, AITER_MLA_LATENT_DIM, a->k_pe,
                                      a->k_pe_stride, a->src_dtype);
}

AITER_MLA_API aiter_mla_status aiter_mla_kv_cache_write_ref(const aiter_mla_kv_cache_write_args *in) {
    aiter_mla_kv_cache_write_args a;
    int64_t t;
    int c;
    AITER_MLA__CHECK(aiter_mla__kv_write_resolve("kv_cache_write_ref", in, &a));
    for (t = 0; t < a.num_tokens; t++)
        for (c = 0; c < AITER_MLA_HEAD_DIM; c++) aiter_mla__kv_write_elem(&a, t, c);
    return AITER_MLA_OK;
}

AITER_MLA_API aiter_mla_status aiter_mla_kv_cache_write(const aiter_mla_kv_cache_write_args *in, void *stream) {
    aiter_mla_kv_cache_write_args a;
    AITER_MLA__CHECK(aiter_mla__kv_write_resolve("kv_cache_write", in, &a));
    if (a.num_tokens == 0) return aiter_mla__nothing_to_launch("kv_cache_write");
    return AITER_MLA__LAUNCH("kv_cache_write", aiter_mla__launch_kv_cache_write(&a, stream));
}

/* ---- sparse index conversion ---------------------------------------------------------- */
static aiter_mla_status aiter_mla__sparse_index_resolve(const char *op, const aiter_mla_sparse_index_args *in,
                                                        aiter_mla_sparse_index_args *a) {
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    if (!a->indices_stride) a->indices_stride = a->topk;
    if (!a->out_stride) a->out_stride = a->topk;
    if (!a->block_size) a->block_size = 64;
    AITER_MLA__RANGE(op, a->num_tokens, 0, INT32_MAX, "num_tokens");
    AITER_MLA__RANGE(op, a->topk, 1, 1 << 20, "topk");
    AITER_MLA__RANGE(op, a->num_requests, 1, INT32_MAX, "num_requests");
    AITER_MLA__RANGE(op, a->indices_stride, a->topk, AITER_MLA__MAX_STRIDE, "indices_stride");
    AITER_MLA__RANGE(op, a->out_stride, a->topk, AITER_MLA__MAX_STRIDE, "out_stride");
    if (a->block_table) {
        AITER_MLA__RANGE(op, a->block_table_stride, 1, AITER_MLA__MAX_STRIDE, "block_table_stride");
        AITER_MLA__RANGE(op, a->block_size, 1, 4096, "block_size");
    } else {
        AITER_MLA__NEED(op, a->workspace_starts, "workspace_starts (or block_table)");
    }
    if (a->num_tokens == 0) return AITER_MLA_OK;
    AITER_MLA__NEED(op, a->indices, "indices");
    AITER_MLA__NEED(op, a->req_id, "req_id");
    AITER_MLA__NEED(op, a->out, "out");
    { /* the outputs against what later tokens read (host sizes: the GPU call checks them too) */
        const aiter_mla__span ins[4] = {aiter_mla__span_of(a->indices, a->num_tokens * a->indices_stride, 4, "indices"),
                                        aiter_mla__span_of(a->req_id, a->num_tokens, 4, "req_id"),
                                        aiter_mla__span_of(a->block_table, a->block_table ? a->num_requests * a->block_table_stride : 0,
                                                           4, "block_table"),
                                        aiter_mla__span_of(a->block_table ? NULL : a->workspace_starts, a->num_requests, 4,
                                                           "workspace_starts")};
        const aiter_mla__span outs[2] = {aiter_mla__span_of(a->out, a->num_tokens * a->out_stride, 4, "out"),
                                         aiter_mla__span_of(a->valid_counts, a->num_tokens, 4, "valid_counts")};
        return aiter_mla__check_arrays(op, outs, 2, ins, 4);
    }
}

AITER_MLA_API aiter_mla_status aiter_mla_convert_sparse_indices_ref(const aiter_mla_sparse_index_args *in) {
    aiter_mla_sparse_index_args a;
    int64_t t;
    int i;
    AITER_MLA__CHECK(aiter_mla__sparse_index_resolve("convert_sparse_indices_ref", in, &a));
    for (t = 0; t < a.num_tokens; t++) {
        int32_t valid = 0;
        for (i = 0; i < a.topk; i++) {
            const int32_t slot = aiter_mla__sparse_slot(&a, a.req_id[t], a.indices[t * a.indices_stride + i]);
            a.out[t * a.out_stride + i] = slot;
            valid += slot >= 0;
        }
        if (a.valid_counts) a.valid_counts[t] = valid;
    }
    return AITER_MLA_OK;
}

AITER_MLA_API aiter_mla_status aiter_mla_convert_sparse_indices(const aiter_mla_sparse_index_args *in, void *stream) {
    aiter_mla_sparse_index_args a;
    AITER_MLA__CHECK(aiter_mla__sparse_index_resolve("convert_sparse_indices", in, &a));
    if (a.num_tokens == 0) return aiter_mla__nothing_to_launch("convert_sparse_indices");
    return AITER_MLA__LAUNCH("convert_sparse_indices", aiter_mla__launch_convert_sparse_indices(&a, stream));
}

static aiter_mla_status aiter_mla__filter_resolve(const char *op, const aiter_mla_filter_prefill_args *in,
                                                  aiter_mla_filter_prefill_args *a) {
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    AITER_MLA__RANGE(op, a->num_tokens, 0, INT32_MAX, "num_tokens");
    AITER_MLA__RANGE(op, a->topk, 1, 1 << 20, "topk");
    AITER_MLA__RANGE(op, a->num_requests, 1, INT32_MAX, "num_requests");
    if (a->num_tokens == 0) return AITER_MLA_OK;
    AITER_MLA__NEED(op, a->indices, "indices");
    AITER_MLA__NEED(op, a->req_id, "req_id");
    AITER_MLA__NEED(op, a->ctx_lens, "ctx_lens");
    AITER_MLA__NEED(op, a->context_out, "context_out");
    AITER_MLA__NEED(op, a->new_out, "new_out");
    { /* the outputs against what later tokens read (host sizes: the GPU call checks them too) */
        const aiter_mla__span ins[3] = {aiter_mla__span_of(a->indices, a->num_tokens * a->topk, 4, "indices"),
                                        aiter_mla__span_of(a->req_id, a->num_tokens, 4, "req_id"),
                                        aiter_mla__span_of(a->ctx_lens, a->num_requests, 4, "ctx_lens")};
        const aiter_mla__span outs[2] = {aiter_mla__span_of(a->context_out, a->num_tokens * a->topk, 4, "context_out"),
                                         aiter_mla__span_of(a->new_out, a->num_tokens * a->topk, 4, "new_out")};
        return aiter_mla__check_arrays(op, outs, 2, ins, 3);
    }
}

AITER_MLA_API aiter_mla_status aiter_mla_filter_prefill_indices_ref(const aiter_mla_filter_prefill_args *in) {
    aiter_mla_filter_prefill_args a;
    int64_t t;
    int i;
    AITER_MLA__CHECK(aiter_mla__filter_resolve("filter_prefill_indices_ref", in, &a));
    for (t = 0; t < a.num_tokens; t++) {
        const int32_t ctx = aiter_mla__filter_ctx_len(&a, a.req_id[t]);
        for (i = 0; i < a.topk; i++)
            aiter_mla__filter_split(a.indices[t * a.topk + i], ctx, &a.context_out[t * a.topk + i], &a.new_out[t * a.topk + i]);
    }
    return AITER_MLA_OK;
}

AITER_MLA_API aiter_mla_status aiter_mla_filter_prefill_indices(const aiter_mla_filter_prefill_args *in, void *stream) {
    aiter_mla_filter_prefill_args a;
    AITER_MLA__CHECK(aiter_mla__filter_resolve("filter_prefill_indices", in, &a));
    if (a.num_tokens == 0) return aiter_mla__nothing_to_launch("filter_prefill_indices");
    return AITER_MLA__LAUNCH("filter_prefill_indices", aiter_mla__launch_filter_prefill_indices(&a, stream));
}

AITER_MLA_API void aiter_mla_lse_base2_to_natural(float *lse, int64_t n) {
    int64_t i;
    if (!lse) return;
    for (i = 0; i < n; i++) lse[i] *= 0.69314718055994531f; /* +-inf times ln 2 stays +-inf */
}

/* ---- fp8_ds_mla rows ------------------------------------------------------------------ */
static aiter_mla_status aiter_mla__ds_mla_resolve(const char *op, const aiter_mla_ds_mla_write_args *in,
                                                  aiter_mla_ds_mla_write_args *a) {
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    if (!a->kv_c_stride) a->kv_c_stride = AITER_MLA_LATENT_DIM;
    if (!a->k_pe_stride) a->k_pe_stride = AITER_MLA_ROPE_DIM;
    if (!a->block_size) a->block_size = 64;
    if (a->src_dtype == AITER_MLA_DTYPE_DEFAULT) a->src_dtype = AITER_MLA_BF16;
    if (a->fp8_dtype == AITER_MLA_DTYPE_DEFAULT) a->fp8_dtype = AITER_MLA_FP8_E4M3FN;
    if (a->fp8_max == 0.0f) a->fp8_max = aiter_mla_fp8_max(a->fp8_dtype);
    AITER_MLA__RANGE(op, a->num_tokens, 0, INT32_MAX, "num_tokens");
    AITER_MLA__CHECK(aiter_mla__check_cache_slots(op, a->num_blocks, a->block_size));
    AITER_MLA__RANGE(op, a->kv_c_stride, AITER_MLA_LATENT_DIM, AITER_MLA__MAX_STRIDE, "kv_c_stride");
    AITER_MLA__RANGE(op, a->k_pe_stride, AITER_MLA_ROPE_DIM, AITER_MLA__MAX_STRIDE, "k_pe_stride");
    AITER_MLA__RANGE(op, a->pow2_scales, 0, 1, "pow2_scales");
    AITER_MLA__CHECK(aiter_mla__check_cache_bytes(op, "", "kv_cache_bytes", a->kv_cache_bytes, a->num_blocks * a->block_size,
                                                  AITER_MLA_DS_MLA_ROW_BYTES, "num_blocks x block_size fp8_ds_mla rows"));
    if (!aiter_mla__is_16bit(a->src_dtype))
        return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED, "%s: src_dtype %s is not bf16 or f16", op, aiter_mla_dtype_name(a->src_dtype));
    if (!aiter_mla__is_fp8(a->fp8_dtype))
        return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED, "%s: fp8_dtype %s is not an fp8 flavour", op, aiter_mla_dtype_name(a->fp8_dtype));
    /* from 2 up, amax / fp8_max and its power-of-two ceiling stay finite for every finite bf16
     * amax (bf16's largest is 2^128 - 2^120: halved, 2^127 - 2^119, whose ceiling 2^127 is
     * finite), so no finite group reads back as inf * 0 = NaN */
    if (!(a->fp8_max >= 2.0f && a->fp8_max <= aiter_mla_fp8_max(a->fp8_dtype)))
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: fp8_max = %g is outside [2, %g] (below 2 a finite group's scale can overflow)",
                               op, a->fp8_max, aiter_mla_fp8_max(a->fp8_dtype));
    if (a->num_tokens == 0) return AITER_MLA_OK;
    AITER_MLA__NEED(op, a->kv_c, "kv_c");
    AITER_MLA__NEED(op, a->k_pe, "k_pe");
    AITER_MLA__NEED(op, a->slot_mapping, "slot_mapping");
    AITER_MLA__NEED(op, a->kv_cache, "kv_cache");
    return aiter_mla__writer_disjoint(op, a->kv_cache, a->num_blocks * a->block_size, AITER_MLA_DS_MLA_ROW_BYTES, 1, a->slot_mapping,
                                      a->num_tokens, a->kv_c, a->kv_c_stride, AITER_MLA_LATENT_DIM, a->k_pe, a->k_pe_stride,
                                      a->src_dtype);
}

AITER_MLA_API aiter_mla_status aiter_mla_ds_mla_write_ref(const aiter_mla_ds_mla_write_args *in) {
    aiter_mla_ds_mla_write_args a;
    int64_t t;
    int g, i;
    AITER_MLA__CHECK(aiter_mla__ds_mla_resolve("ds_mla_write_ref", in, &a));
    for (t = 0; t < a.num_tokens; t++) {
        const int64_t slot = a.slot_mapping[t];
        unsigned char *row;
        if (slot < 0 || slot >= a.num_blocks * a.block_size) continue; /* padding or out of range */
        row = (unsigned char *)a.kv_cache + slot * AITER_MLA_DS_MLA_ROW_BYTES;
        for (g = 0; g < 4; g++) {
            float amax = 0.0f, scale;
            for (i = 0; i < 128; i++) {
                float x = fabsf(aiter_mla_load_f32(a.kv_c, t * a.kv_c_stride + g * 128 + i, a.src_dtype));
                if (x > amax) amax = x; /* NaN never wins */
            }
            scale = aiter_mla__ds_mla_scale(amax, a.fp8_max, a.pow2_scales);
            memcpy(row + AITER_MLA_DS_MLA_SCALES_OFFSET + 4 * g, &scale, 4);
            for (i = 0; i < 128; i++)
                row[g * 128 + i] =
                    aiter_mla__ds_mla_quant(aiter_mla_load_f32(a.kv_c, t * a.kv_c_stride + g * 128 + i, a.src_dtype), scale, a.fp8_dtype);
        }
        for (i = 0; i < AITER_MLA_ROPE_DIM; i++) {
            uint16_t h = aiter_mla_f32_to_bf16(aiter_mla_load_f32(a.k_pe, t * a.k_pe_stride + i, a.src_dtype));
            memcpy(row + AITER_MLA_DS_MLA_ROPE_OFFSET + 2 * i, &h, 2);
        }
    }
    return AITER_MLA_OK;
}

AITER_MLA_API aiter_mla_status aiter_mla_ds_mla_write(const aiter_mla_ds_mla_write_args *in, void *stream) {
    aiter_mla_ds_mla_write_args a;
    AITER_MLA__CHECK(aiter_mla__ds_mla_resolve("ds_mla_write", in, &a));
    if (a.num_tokens == 0) return aiter_mla__nothing_to_launch("ds_mla_write");
    return AITER_MLA__LAUNCH("ds_mla_write", aiter_mla__launch_ds_mla_write(&a, stream));
}

AITER_MLA_API void aiter_mla_ds_mla_read_row(const void *row, aiter_mla_dtype fp8_dtype, float *out) {
    int d;
    if (fp8_dtype == AITER_MLA_DTYPE_DEFAULT) fp8_dtype = AITER_MLA_FP8_E4M3FN;
    for (d = 0; d < AITER_MLA_HEAD_DIM; d++) out[d] = aiter_mla__ds_mla_value((const unsigned char *)row, d, fp8_dtype);
}

/* ---- sparse MLA attention ----------------------------------------------------------------- */
/* Last step of the sparse references (V3.2 and V4) for one row and head:
 * o = acc / (l + exp(sink - m)), 0 when no key was seen (l = 0) and 0 (no NaN) when the
 * sink is +inf; lse = m + log l (+inf when no key); max_logits = m. sink -inf: none. A NaN
 * score (l NaN) gives NaN o and lse (aiter_mla__has_keys). */
static void aiter_mla__sparse_finish(const double *acc, int dv, double m, double l, double sink, void *o, int64_t o_off,
                                     aiter_mla_dtype o_dtype, float *lse, float *max_logits) {
    const double den = aiter_mla__has_keys(l) ? l + (sink == -HUGE_VAL ? 0.0 : exp(sink - m)) : 0.0;
    int d;
    for (d = 0; d < dv; d++) aiter_mla_store_f32(o, o_off + d, o_dtype, aiter_mla__has_keys(den) ? (float)(acc[d] / den) : 0.0f);
    if (lse) *lse = (float)aiter_mla__row_lse(m, l, HUGE_VAL);
    if (max_logits) *max_logits = (float)m;
}

/* Validate and resolve the defaults of sparse attention args (the one place they live). */
static aiter_mla_status aiter_mla__sparse_resolve(const char *op, const aiter_mla_sparse_args *in, aiter_mla_sparse_args *out) {
    aiter_mla_sparse_args a;
    AITER_MLA__NEED(op, in, "args");
    a = *in;
    if (a.sm_scale == 0.0f) a.sm_scale = 0.041666666666666664f;
    if (a.q_dtype == AITER_MLA_DTYPE_DEFAULT) a.q_dtype = AITER_MLA_BF16;
    if (a.o_dtype == AITER_MLA_DTYPE_DEFAULT) a.o_dtype = AITER_MLA_BF16;
    if (a.ds_mla_fp8 == AITER_MLA_DTYPE_DEFAULT) a.ds_mla_fp8 = AITER_MLA_FP8_E4M3FN;
    AITER_MLA__RANGE(op, a.num_tokens, 0, INT32_MAX, "num_tokens");
    AITER_MLA__RANGE(op, a.num_heads, 1, AITER_MLA_MAX_HEADS, "num_heads");
    AITER_MLA__RANGE(op, a.topk, 1, 1 << 20, "topk");
    if (!a.indices_stride) a.indices_stride = a.topk;
    AITER_MLA__RANGE(op, a.indices_stride, a.topk, INT32_MAX, "indices_stride");
    AITER_MLA__RANGE(op, a.num_slots, 1, INT32_MAX, "num_slots");
    AITER_MLA__RANGE(op, a.num_cu, 0, 65536, "num_cu"); /* used only by the GPU, wrong anywhere */
    AITER_MLA__RANGE(op, a.keys_read_once, 0, 1, "keys_read_once");
    if (!aiter_mla__is_16bit(a.q_dtype))
        return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED, "%s: q_dtype %s is not bf16 or f16", op, aiter_mla_dtype_name(a.q_dtype));
    AITER_MLA__CHECK(aiter_mla__check_out_dtype(op, a.o_dtype, "", "o_dtype"));
    AITER_MLA__RANGE(op, a.cache_is_ds_mla, 0, 1, "cache_is_ds_mla");
    if (a.cache_is_ds_mla && !aiter_mla__is_fp8(a.ds_mla_fp8))
        return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED, "%s: ds_mla_fp8 %s is not an fp8 flavour", op, aiter_mla_dtype_name(a.ds_mla_fp8));
    AITER_MLA__CHECK(aiter_mla__check_cache_bytes(
        op, "", "kv_cache_bytes", a.kv_cache_bytes, a.num_slots, aiter_mla__cache_row_bytes(a.cache_is_ds_mla, AITER_MLA_BF16),
        a.cache_is_ds_mla ? "num_slots fp8_ds_mla rows (cache_is_ds_mla = 1)" : "num_slots bf16 rows of 576 values (cache_is_ds_mla = 0)"));
    AITER_MLA__SCALE(op, a.sm_scale, "sm_scale");
    if (a.num_tokens > 0) {
        AITER_MLA__NEED(op, a.q, "q");
        AITER_MLA__NEED(op, a.kv_cache, "kv_cache");
        AITER_MLA__NEED(op, a.indices, "indices");
        AITER_MLA__NEED(op, a.o, "o");
    }
    *out = a;
    return AITER_MLA_OK;
}

/* Sparse attention's outputs against what later tokens read (every size is a host field, so
 * the GPU call checks the same spans). */
static aiter_mla_status aiter_mla__sparse_disjoint(const char *op, const aiter_mla_sparse_args *a) {
    const int64_t rows = a->num_tokens * a->num_heads;
    const aiter_mla__span ins[5] = {
        aiter_mla__span_of(a->q, rows * AITER_MLA_HEAD_DIM, aiter_mla_dtype_size(a->q_dtype), "q"),
        aiter_mla__span_rows(a->kv_cache, a->num_slots, (uint64_t)aiter_mla__cache_row_bytes(a->cache_is_ds_mla, AITER_MLA_BF16),
                             a->cache_is_ds_mla ? 1 : 2, "kv_cache"),
        aiter_mla__span_of(a->indices, a->num_tokens * a->indices_stride, 4, "indices"),
        aiter_mla__span_of(a->topk_length, a->num_tokens, 4, "topk_length"),
        aiter_mla__span_of(a->attn_sink, a->num_heads, 4, "attn_sink")};
    const aiter_mla__span outs[3] = {aiter_mla__span_of(a->o, rows * AITER_MLA_LATENT_DIM, aiter_mla_dtype_size(a->o_dtype), "o"),
                                     aiter_mla__span_of(a->lse, rows, 4, "lse"),
                                     aiter_mla__span_of(a->max_logits, rows, 4, "max_logits")};
    return aiter_mla__check_arrays(op, outs, 3, ins, 5);
}

AITER_MLA_API aiter_mla_status aiter_mla_sparse_attention_ref(const aiter_mla_sparse_args *in) {
    aiter_mla_sparse_args a;
    float keys[AITER_MLA_HEAD_DIM];
    int64_t t;
    int h, k, d;
    AITER_MLA__CHECK(aiter_mla__sparse_resolve("sparse_attention_ref", in, &a));
    AITER_MLA__CHECK(aiter_mla__sparse_disjoint("sparse_attention_ref", &a));
    if (a.attn_sink) /* host memory here (the GPU call cannot read it) */
        for (h = 0; h < a.num_heads; h++)
            if (a.attn_sink[h] != a.attn_sink[h])
                return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "sparse_attention_ref: attn_sink[%d] is NaN", h);
    for (t = 0; t < a.num_tokens; t++) {
        int n = a.topk;
        if (a.topk_length) n = a.topk_length[t] < 0 ? 0 : a.topk_length[t] < a.topk ? a.topk_length[t] : a.topk;
        for (h = 0; h < a.num_heads; h++) {
            const int64_t qrow = (t * a.num_heads + h) * AITER_MLA_HEAD_DIM;
            double m = -HUGE_VAL, l = 0.0, acc[AITER_MLA_LATENT_DIM], sink;
            for (d = 0; d < AITER_MLA_LATENT_DIM; d++) acc[d] = 0.0;
            for (k = 0; k < n; k++) {
                const int32_t slot = a.indices[t * a.indices_stride + k];
                double s = 0.0, alpha, p;
                if (slot < 0 || slot >= a.num_slots) continue; /* absent */
                if (a.cache_is_ds_mla)
                    aiter_mla_ds_mla_read_row((const unsigned char *)a.kv_cache + (int64_t)slot * AITER_MLA_DS_MLA_ROW_BYTES,
                                              a.ds_mla_fp8, keys);
                else
                    for (d = 0; d < AITER_MLA_HEAD_DIM; d++)
                        keys[d] = aiter_mla_load_f32(a.kv_cache, (int64_t)slot * AITER_MLA_HEAD_DIM + d, AITER_MLA_BF16);
                for (d = 0; d < AITER_MLA_HEAD_DIM; d++) s += (double)aiter_mla_load_f32(a.q, qrow + d, a.q_dtype) * keys[d];
                s *= a.sm_scale;
                p = aiter_mla__online_softmax(s, &m, &l, &alpha);
                for (d = 0; d < AITER_MLA_LATENT_DIM; d++) acc[d] = acc[d] * alpha + p * keys[d];
            }
            sink = a.attn_sink ? a.attn_sink[h] : -HUGE_VAL;
            aiter_mla__sparse_finish(acc, AITER_MLA_LATENT_DIM, m, l, sink, a.o, (t * a.num_heads + h) * AITER_MLA_LATENT_DIM,
                                     a.o_dtype, a.lse ? a.lse + t * a.num_heads + h : NULL,
                                     a.max_logits ? a.max_logits + t * a.num_heads + h : NULL);
        }
    }
    return AITER_MLA_OK;
}

/* Sparse attention's launch, or with kernel != NULL its kernel (no tokens: the one a call
 * with tokens would take). */
static aiter_mla_status aiter_mla__sparse_call(const char *op, const aiter_mla_sparse_args *in, aiter_mla_kernel *kernel,
                                               void *stream) {
    aiter_mla_sparse_args a;
    AITER_MLA__CHECK(aiter_mla__sparse_resolve(op, in, &a));
    if (a.num_tokens * a.indices_stride > INT32_MAX)
        return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED, "%s: num_tokens * indices_stride = %lld exceeds 2^31 - 1 (split the batch)",
                               op, (long long)(a.num_tokens * a.indices_stride));
    AITER_MLA__CHECK(aiter_mla__sparse_disjoint(op, &a)); /* with no tokens too: the reference and the query check it */
    if (a.num_tokens == 0 && !kernel) return aiter_mla__nothing_to_launch(op);
    if (a.num_tokens > 0) AITER_MLA__CHECK(aiter_mla__check_aligned(op, a.kv_cache, 16, "kv_cache"));
    return AITER_MLA__LAUNCH_OR_PICK(op, kernel, aiter_mla__launch_sparse(&a, kernel, stream));
}
AITER_MLA_API aiter_mla_status aiter_mla_sparse_attention(const aiter_mla_sparse_args *in, void *stream) {
    return aiter_mla__sparse_call("sparse_attention", in, NULL, stream);
}
AITER_MLA_API aiter_mla_status aiter_mla_sparse_attention_kernel(const aiter_mla_sparse_args *in, aiter_mla_kernel *kernel) {
    AITER_MLA__NEED("sparse_attention_kernel", kernel, "kernel");
    return aiter_mla__sparse_call("sparse_attention_kernel", in, kernel, NULL);
}

/* ---- context gather ---------------------------------------------------------------------- */
static aiter_mla_status aiter_mla__gather_resolve(const char *op, const aiter_mla_gather_cache_args *in,
                                                  aiter_mla_gather_cache_args *a) {
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    if (!a->block_size) a->block_size = 1;
    if (a->cache_dtype == AITER_MLA_DTYPE_DEFAULT) a->cache_dtype = AITER_MLA_BF16;
    if (a->ds_mla_fp8 == AITER_MLA_DTYPE_DEFAULT) a->ds_mla_fp8 = AITER_MLA_FP8_E4M3FN;
    if (a->out_dtype == AITER_MLA_DTYPE_DEFAULT) a->out_dtype = AITER_MLA_BF16;
    if (a->scale == 0.0f) a->scale = 1.0f;
    AITER_MLA__RANGE(op, a->batch, 1, INT32_MAX - 1, "batch");
    AITER_MLA__CHECK(aiter_mla__check_cache_slots(op, a->num_blocks, a->block_size));
    AITER_MLA__RANGE(op, a->block_table_stride, 1, AITER_MLA__MAX_STRIDE, "block_table_stride");
    AITER_MLA__RANGE(op, a->out_rows, 0, INT32_MAX, "out_rows");
    AITER_MLA__RANGE(op, a->cache_is_ds_mla, 0, 1, "cache_is_ds_mla");
    if (a->cache_is_ds_mla ? !aiter_mla__is_fp8(a->ds_mla_fp8)
                           : !aiter_mla__is_16bit(a->cache_dtype) && !aiter_mla__is_fp8(a->cache_dtype))
        return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED, "%s: %s %s is not supported", op,
                               a->cache_is_ds_mla ? "ds_mla_fp8" : "cache_dtype",
                               aiter_mla_dtype_name(a->cache_is_ds_mla ? a->ds_mla_fp8 : a->cache_dtype));
    AITER_MLA__CHECK(aiter_mla__check_cache_bytes(
        op, "", "kv_cache_bytes", a->kv_cache_bytes, a->num_blocks * a->block_size,
        aiter_mla__cache_row_bytes(a->cache_is_ds_mla, a->cache_dtype),
        a->cache_is_ds_mla ? "num_blocks x block_size fp8_ds_mla rows (cache_is_ds_mla = 1)"
                           : "num_blocks x block_size rows of 576 cache_dtype values (cache_is_ds_mla = 0)"));
    AITER_MLA__CHECK(aiter_mla__check_out_dtype(op, a->out_dtype, "", "out_dtype"));
    AITER_MLA__SCALE(op, a->scale, "scale");
    AITER_MLA__NEED(op, a->kv_cache, "kv_cache");
    AITER_MLA__NEED(op, a->block_table, "block_table");
    AITER_MLA__NEED(op, a->cu_out_rows, "cu_out_rows");
    AITER_MLA__NEED(op, a->out, "out");
    { /* out, all out_rows of it (host sizes: the GPU call checks them too), against what later
         requests read */
        const aiter_mla__span ins[4] = {
            aiter_mla__span_rows(a->kv_cache, a->num_blocks * a->block_size,
                                 (uint64_t)aiter_mla__cache_row_bytes(a->cache_is_ds_mla, a->cache_dtype),
                                 a->cache_is_ds_mla ? 1 : aiter_mla_dtype_size(a->cache_dtype), "kv_cache"),
            aiter_mla__span_of(a->block_table, a->batch * a->block_table_stride, 4, "block_table"),
            aiter_mla__span_of(a->cu_out_rows, (int64_t)a->batch + 1, 4, "cu_out_rows"),
            aiter_mla__span_of(a->seq_starts, a->batch, 4, "seq_starts")};
        const aiter_mla__span out =
            aiter_mla__span_rows(a->out, a->out_rows, AITER_MLA_HEAD_DIM * aiter_mla_dtype_size(a->out_dtype),
                                 aiter_mla_dtype_size(a->out_dtype), "out");
        return aiter_mla__check_arrays(op, &out, 1, ins, 4);
    }
}

AITER_MLA_API aiter_mla_status aiter_mla_gather_cache_ref(const aiter_mla_gather_cache_args *in) {
    const char *op = "gather_cache_ref";
    aiter_mla_gather_cache_args a;
    int b, d;
    AITER_MLA__CHECK(aiter_mla__gather_resolve(op, in, &a));
    AITER_MLA__CHECK(aiter_mla__indptr_start(op, a.cu_out_rows, "", "cu_out_rows"));
    for (b = 0; b < a.batch; b++) {
        AITER_MLA__CHECK(aiter_mla__indptr_step(op, a.cu_out_rows, b, "", "cu_out_rows"));
        if (a.seq_starts && a.seq_starts[b] < 0)
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: seq_starts[%d] = %d is negative", op, b, a.seq_starts[b]);
    }
    if (a.cu_out_rows[a.batch] > a.out_rows)
        return aiter_mla__fail(AITER_MLA_ERR_BUFFER_TOO_SMALL, "%s: cu_out_rows[%d] = %d exceeds out_rows = %lld", op,
                               a.batch, a.cu_out_rows[a.batch], (long long)a.out_rows);
    for (b = 0; b < a.batch; b++) {
        int32_t i;
        for (i = 0; i < a.cu_out_rows[b + 1] - a.cu_out_rows[b]; i++) {
            const int64_t slot = aiter_mla__gather_slot(&a, b, (int64_t)(a.seq_starts ? a.seq_starts[b] : 0) + i);
            for (d = 0; d < AITER_MLA_HEAD_DIM; d++) aiter_mla__gather_elem(&a, slot, (int64_t)a.cu_out_rows[b] + i, d);
        }
    }
    return AITER_MLA_OK;
}

AITER_MLA_API aiter_mla_status aiter_mla_gather_cache(const aiter_mla_gather_cache_args *in, void *stream) {
    aiter_mla_gather_cache_args a;
    AITER_MLA__CHECK(aiter_mla__gather_resolve("gather_cache", in, &a));
    if (a.out_rows == 0) return aiter_mla__nothing_to_launch("gather_cache");
    return AITER_MLA__LAUNCH("gather_cache", aiter_mla__launch_gather_cache(&a, stream));
}

/* ---- varlen prefill attention --------------------------------------------------------------- */
/* A prefill head dim (field `name`): 64, 128, 192 or 256; another value fails with status st. */
static aiter_mla_status aiter_mla__check_prefill_dim(const char *op, int d, const char *name, aiter_mla_status st) {
    if (d == 64 || d == 128 || d == 192 || d == 256) return AITER_MLA_OK;
    return aiter_mla__fail(st, "%s: %s = %d is not 64, 128, 192 or 256", op, name, d);
}

/* Host cu_seqlens_q and cu_seqlens_k are aligned, start at >= 0 and never decrease (the
 * reference and the planner check them alike). */
static aiter_mla_status aiter_mla__cu_seqlens_check(const char *op, const int32_t *cq, const int32_t *ck, int batch) {
    int b;
    AITER_MLA__ARRAY_ALIGNED(op, cq, "cu_seqlens_q"); /* both present (the callers' checks) */
    AITER_MLA__ARRAY_ALIGNED(op, ck, "cu_seqlens_k");
    AITER_MLA__CHECK(aiter_mla__indptr_start(op, cq, "", "cu_seqlens_q"));
    AITER_MLA__CHECK(aiter_mla__indptr_start(op, ck, "", "cu_seqlens_k"));
    for (b = 0; b < batch; b++) {
        AITER_MLA__CHECK(aiter_mla__indptr_step(op, cq, b, "", "cu_seqlens_q"));
        AITER_MLA__CHECK(aiter_mla__indptr_step(op, ck, b, "", "cu_seqlens_k"));
    }
    return AITER_MLA_OK;
}

/* Validate and resolve the defaults of prefill args into *out (the one place they live). */
/* host_arrays: cu_seqlens are host memory and their contents are checked (CPU paths). */
static aiter_mla_status aiter_mla__prefill_resolve(const char *op, const aiter_mla_prefill_args *in,
                                                   aiter_mla_prefill_args *out, int host_arrays) {
    aiter_mla_prefill_args a;
    AITER_MLA__NEED(op, in, "args");
    a = *in;
    if (!a.dqk) a.dqk = 192;
    if (!a.dv) a.dv = 128;
    if (a.qkv_dtype == AITER_MLA_DTYPE_DEFAULT) a.qkv_dtype = AITER_MLA_BF16;
    if (a.o_dtype == AITER_MLA_DTYPE_DEFAULT) a.o_dtype = aiter_mla__is_fp8(a.qkv_dtype) ? AITER_MLA_BF16 : a.qkv_dtype;
    if (a.sm_scale == 0.0f) a.sm_scale = (float)(1.0 / sqrt((double)a.dqk));
    if (a.q_scale == 0.0f) a.q_scale = 1.0f;
    if (a.k_scale == 0.0f) a.k_scale = 1.0f;
    if (a.v_scale == 0.0f) a.v_scale = 1.0f;
    AITER_MLA__RANGE(op, a.batch, 1, INT32_MAX - 1, "batch");
    AITER_MLA__RANGE(op, a.num_heads, 1, 65536, "num_heads");
    AITER_MLA__RANGE(op, a.num_cu, 0, 65536, "num_cu"); /* used only by the GPU without a plan, wrong anywhere */
    AITER_MLA__RANGE(op, a.causal, 0, 1, "causal");
    AITER_MLA__CHECK(aiter_mla__check_prefill_dim(op, a.dqk, "dqk", AITER_MLA_ERR_UNSUPPORTED));
    AITER_MLA__CHECK(aiter_mla__check_prefill_dim(op, a.dv, "dv", AITER_MLA_ERR_UNSUPPORTED));
    if (a.dv > a.dqk)
        return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED, "%s: dv = %d is more than dqk = %d", op, a.dv, a.dqk);
    if (!aiter_mla__is_16bit(a.qkv_dtype) && !aiter_mla__is_fp8(a.qkv_dtype))
        return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED, "%s: qkv_dtype %s is not bf16, f16 or fp8", op,
                               aiter_mla_dtype_name(a.qkv_dtype));
    AITER_MLA__CHECK(aiter_mla__check_out_dtype(op, a.o_dtype, "", "o_dtype"));
    AITER_MLA__SCALE(op, a.sm_scale, "sm_scale");
    AITER_MLA__SCALE(op, a.q_scale, "q_scale");
    AITER_MLA__SCALE(op, a.k_scale, "k_scale");
    AITER_MLA__SCALE(op, a.v_scale, "v_scale");
    if (aiter_mla__is_fp8(a.qkv_dtype))
        AITER_MLA__CHECK(aiter_mla__check_scale_product(op, (double)a.sm_scale * a.q_scale * a.k_scale, "sm_scale x q_scale x k_scale"));
    AITER_MLA__RANGE(op, a.q_stride_token, 0, AITER_MLA__MAX_STRIDE, "q_stride_token");
    AITER_MLA__RANGE(op, a.q_stride_head, 0, AITER_MLA__MAX_STRIDE, "q_stride_head");
    AITER_MLA__RANGE(op, a.k_stride_token, 0, AITER_MLA__MAX_STRIDE, "k_stride_token");
    AITER_MLA__RANGE(op, a.k_stride_head, 0, AITER_MLA__MAX_STRIDE, "k_stride_head");
    AITER_MLA__RANGE(op, a.v_stride_token, 0, AITER_MLA__MAX_STRIDE, "v_stride_token");
    AITER_MLA__RANGE(op, a.v_stride_head, 0, AITER_MLA__MAX_STRIDE, "v_stride_head");
    if (!a.q_stride_head) a.q_stride_head = a.dqk;
    AITER_MLA__CHECK(aiter_mla__default_token_stride(op, "", "q_stride_token", &a.q_stride_token, a.num_heads,
                                                     a.q_stride_head, "q_stride_head"));
    if (!a.k_stride_head) a.k_stride_head = a.dqk;
    AITER_MLA__CHECK(aiter_mla__default_token_stride(op, "", "k_stride_token", &a.k_stride_token, a.num_heads,
                                                     a.k_stride_head, "k_stride_head"));
    if (!a.v_stride_head) a.v_stride_head = a.dv;
    AITER_MLA__CHECK(aiter_mla__default_token_stride(op, "", "v_stride_token", &a.v_stride_token, a.num_heads,
                                                     a.v_stride_head, "v_stride_head"));
    AITER_MLA__CHECK(aiter_mla__resolve_o_rows(op, "", &a.o_stride_token, &a.o_stride_head, a.num_heads, -1, a.dv));
    AITER_MLA__NEED(op, a.q, "q");
    AITER_MLA__NEED(op, a.k, "k");
    AITER_MLA__NEED(op, a.v, "v");
    AITER_MLA__NEED(op, a.o, "o");
    AITER_MLA__NEED(op, a.cu_seqlens_q, "cu_seqlens_q");
    AITER_MLA__NEED(op, a.cu_seqlens_k, "cu_seqlens_k");
    if (!host_arrays) {
        *out = a;
        return AITER_MLA_OK;
    }
    AITER_MLA__CHECK(aiter_mla__cu_seqlens_check(op, a.cu_seqlens_q, a.cu_seqlens_k, a.batch));
    *out = a;
    return AITER_MLA_OK;
}

/* Query rows [r0, r1) (request-local) of request b, all heads, against its keys [j0, j1)
 * (request-local) under the causal rule. partial_row < 0: write o and lse ([H, Tq], -inf
 * for a row with no key); else fp32 partials at partial_row + (row - r0) (lse -inf too). */
static void aiter_mla__prefill_rows(const aiter_mla_prefill_args *a, int b, int32_t r0, int32_t r1, int64_t j0, int64_t j1,
                                    int32_t partial_row, float *part_o, float *part_lse) {
    const int q8 = aiter_mla__is_fp8(a->qkv_dtype);
    const double s_scale = (double)a->sm_scale * (q8 ? (double)a->q_scale * a->k_scale : 1.0), vs = q8 ? a->v_scale : 1.0;
    const int32_t q0 = a->cu_seqlens_q[b], sq = a->cu_seqlens_q[b + 1] - q0, k0 = a->cu_seqlens_k[b],
                  sk = a->cu_seqlens_k[b + 1] - k0;
    const int64_t tq = a->cu_seqlens_q[a->batch];
    double qv[256], acc[256];
    int32_t i;
    int h, d;
    for (i = r0; i < r1; i++)
        for (h = 0; h < a->num_heads; h++) {
            const int64_t jend = aiter_mla__min64(j1, a->causal ? (int64_t)sk - sq + i + 1 : sk);
            double m = -HUGE_VAL, l = 0.0;
            float lse;
            int64_t j;
            for (d = 0; d < a->dqk; d++)
                qv[d] = aiter_mla_load_f32(a->q, (int64_t)(q0 + i) * a->q_stride_token + h * a->q_stride_head + d, a->qkv_dtype);
            for (d = 0; d < a->dv; d++) acc[d] = 0.0;
            for (j = j0; j < jend; j++) {
                const int64_t kr = (k0 + j) * a->k_stride_token + h * a->k_stride_head;
                const int64_t vr = (k0 + j) * a->v_stride_token + h * a->v_stride_head;
                double s = 0.0, alpha, p;
                for (d = 0; d < a->dqk; d++) s += qv[d] * aiter_mla_load_f32(a->k, kr + d, a->qkv_dtype);
                s *= s_scale;
                p = aiter_mla__online_softmax(s, &m, &l, &alpha);
                for (d = 0; d < a->dv; d++) acc[d] = acc[d] * alpha + p * vs * aiter_mla_load_f32(a->v, vr + d, a->qkv_dtype);
            }
            lse = (float)aiter_mla__row_lse(m, l, -HUGE_VAL);
            if (partial_row < 0) {
                for (d = 0; d < a->dv; d++)
                    aiter_mla_store_f32(a->o, (int64_t)(q0 + i) * a->o_stride_token + h * a->o_stride_head + d, a->o_dtype,
                                        aiter_mla__has_keys(l) ? (float)(acc[d] / l) : 0.0f);
                if (a->lse) a->lse[(int64_t)h * tq + q0 + i] = lse;
            } else {
                const int64_t pr = (int64_t)(partial_row + i - r0) * a->num_heads + h;
                for (d = 0; d < a->dv; d++) part_o[pr * a->dv + d] = aiter_mla__has_keys(l) ? (float)(acc[d] / l) : 0.0f;
                part_lse[pr] = lse;
            }
        }
}

/* What a prefill writes against what it reads after its first writes: k, v, cu_seqlens and
 * the plan (q may be o: a row's q is read before its o is written). REF: o and lse;
 * SCHEDULED: also the workspace's partials; GPU: with a plan, the partials against the plan
 * and cu_seqlens (o, lse, k and v hang on device cu_seqlens), and every array's alignment.
 * The host calls come after the cu_seqlens checks. */
static aiter_mla_status aiter_mla__prefill_disjoint(const char *op, const aiter_mla_prefill_args *a, aiter_mla__call_kind call) {
    const int host = call != AITER_MLA__CALL_GPU;
    const int planned = call != AITER_MLA__CALL_REF && a->plan; /* the reference and the plan-less call read neither */
    const int64_t tq = host ? a->cu_seqlens_q[a->batch] : 0, tk = host ? a->cu_seqlens_k[a->batch] : 0;
    const uint64_t qkv = aiter_mla_dtype_size(a->qkv_dtype);
    const aiter_mla__span ins[6] = {
        aiter_mla__span_strided(a->q, tq, a->num_heads, a->q_stride_token, a->q_stride_head, a->dqk, qkv, "q"),
        aiter_mla__span_of(a->cu_seqlens_q, (int64_t)a->batch + 1, 4, "cu_seqlens_q"),
        aiter_mla__span_of(a->cu_seqlens_k, (int64_t)a->batch + 1, 4, "cu_seqlens_k"),
        aiter_mla__span_strided(a->k, tk, a->num_heads, a->k_stride_token, a->k_stride_head, a->dqk, qkv, "k"),
        aiter_mla__span_strided(a->v, tk, a->num_heads, a->v_stride_token, a->v_stride_head, a->dv, qkv, "v"),
        aiter_mla__span_of(planned ? a->plan : NULL, planned ? a->plan_info->plan_ints : 0, 4, "plan")};
    const aiter_mla__span outs[3] = {
        aiter_mla__span_strided(a->o, tq, a->num_heads, a->o_stride_token, a->o_stride_head, a->dv, aiter_mla_dtype_size(a->o_dtype),
                                "o"),
        aiter_mla__span_of(a->lse, tq * a->num_heads, 4, "lse"),
        aiter_mla__span_bytes(planned ? a->workspace : NULL, planned ? (int64_t)a->plan_info->workspace_bytes : 0, 4,
                              "workspace")}; /* fp32 partials */
    if (host) /* o's rows over every token (resolve checked two) */
        AITER_MLA__CHECK(aiter_mla__check_o_rows(op, "", a->o_stride_token, a->o_stride_head, 0, a->num_heads, tq, a->dv));
    return aiter_mla__check_arrays(op, outs, 3, ins, 6);
}

AITER_MLA_API aiter_mla_status aiter_mla_prefill_ref(const aiter_mla_prefill_args *in) {
    aiter_mla_prefill_args a;
    int b;
    AITER_MLA__CHECK(aiter_mla__prefill_resolve("prefill_ref", in, &a, 1));
    AITER_MLA__CHECK(aiter_mla__prefill_disjoint("prefill_ref", &a, AITER_MLA__CALL_REF));
    for (b = 0; b < a.batch; b++)
        aiter_mla__prefill_rows(&a, b, 0, a.cu_seqlens_q[b + 1] - a.cu_seqlens_q[b], 0, INT64_MAX, -1, NULL, NULL);
    return AITER_MLA_OK;
}

/* ---- persistent prefill plan ------------------------------------------------------------- */
/* get_info's work, its messages after op */
static aiter_mla_status aiter_mla__prefill_plan_get_info(const char *op, const aiter_mla_prefill_plan_desc *din,
                                                         aiter_mla_prefill_plan_info *info) {
    aiter_mla_prefill_plan_desc d;
    int64_t tiles, work, partials;
    AITER_MLA__NEED(op, din, "desc");
    AITER_MLA__NEED(op, info, "info");
    d = *din;
    if (!d.dv) d.dv = 128;
    if (!d.tile_q) d.tile_q = 256;
    if (!d.kv_granularity) d.kv_granularity = 128;
    AITER_MLA__RANGE(op, d.max_batch, 1, 1 << 20, "max_batch");
    AITER_MLA__RANGE(op, d.max_q_tokens, 1, 1 << 26, "max_q_tokens");
    AITER_MLA__RANGE(op, d.num_heads, 1, AITER_MLA__MAX_PREFILL_HEADS, "num_heads");
    AITER_MLA__RANGE(op, d.num_cu, 1, 65536, "num_cu");
    /* the prefill call's own rule: a plan for any other dv fits no call */
    AITER_MLA__CHECK(aiter_mla__check_prefill_dim(op, d.dv, "dv", AITER_MLA_ERR_INVALID_ARGUMENT));
    AITER_MLA__POW2(op, d.tile_q, 16, 1024, "tile_q");
    AITER_MLA__POW2(op, d.kv_granularity, 16, 4096, "kv_granularity");
    memset(info, 0, sizeof *info);
    info->desc = d;
    tiles = d.max_q_tokens / d.tile_q + d.max_batch;
    work = tiles + d.num_cu - 1;
    partials = aiter_mla__min64(work, 2 * ((int64_t)d.num_cu - 1));
    info->max_tiles = (int32_t)tiles;
    info->max_work = (int32_t)work;
    info->max_partials = (int32_t)partials;
    info->max_partial_rows = (int32_t)(partials * d.tile_q);
    info->off_work_indptr = AITER_MLA_PLAN_HEADER_INTS;
    info->off_work_info = info->off_work_indptr + d.num_cu + 1;
    info->off_reduce_indptr = info->off_work_info + work * AITER_MLA_WORK_INTS;
    info->off_reduce_final_map = info->off_reduce_indptr + tiles + 1;
    info->off_reduce_partial_map = info->off_reduce_final_map + 2 * tiles;
    info->plan_ints = info->off_reduce_partial_map + aiter_mla__max64(partials, 1);
    return aiter_mla__workspace_bytes(op, info->max_partial_rows, d.num_heads, d.dv, &info->workspace_bytes);
}
AITER_MLA_API aiter_mla_status aiter_mla_prefill_plan_get_info(const aiter_mla_prefill_plan_desc *d,
                                                               aiter_mla_prefill_plan_info *info) {
    return aiter_mla__prefill_plan_get_info("prefill_plan", d, info);
}

/* plan_info is what aiter_mla_prefill_plan_get_info makes of its desc (every offset and
 * bound the builder, the checker and the launch trust). */
static aiter_mla_status aiter_mla__prefill_plan_info_check(const char *op, const aiter_mla_prefill_plan_info *info) {
    aiter_mla_prefill_plan_info f;
    aiter_mla_status st;
    const char *field = NULL;
    AITER_MLA__NEED(op, info, "plan_info");
    if ((st = aiter_mla_prefill_plan_get_info(&info->desc, &f)) != AITER_MLA_OK)
        return aiter_mla__fail_within(op, st, "plan_info.desc is not valid");
    AITER_MLA__PREFILL_INFO_FIELDS(AITER_MLA__FIRST_DIFF)
    if (field)
        return aiter_mla__fail(AITER_MLA_ERR_PLAN_MISMATCH,
                               "%s: plan_info.%s differs from what aiter_mla_prefill_plan_get_info makes of its desc", op, field);
    return AITER_MLA_OK;
}

static aiter_mla_status aiter_mla__prefill_plan_inputs(const char *op, const aiter_mla_prefill_plan_info *info,
                                                       const int32_t *cq, const int32_t *ck, int batch, int causal) {
    AITER_MLA__CHECK(aiter_mla__prefill_plan_info_check(op, info));
    AITER_MLA__NEED(op, cq, "cu_seqlens_q");
    AITER_MLA__NEED(op, ck, "cu_seqlens_k");
    AITER_MLA__RANGE(op, batch, 1, INT32_MAX - 1, "batch");
    AITER_MLA__RANGE(op, causal, 0, 1, "causal");
    if (batch > info->desc.max_batch)
        return aiter_mla__fail(AITER_MLA_ERR_PLAN_MISMATCH, "%s: batch = %d exceeds the plan's max_batch = %d", op, batch,
                               info->desc.max_batch);
    AITER_MLA__CHECK(aiter_mla__cu_seqlens_check(op, cq, ck, batch));
    if ((int64_t)cq[batch] - cq[0] > info->desc.max_q_tokens)
        return aiter_mla__fail(AITER_MLA_ERR_PLAN_MISMATCH, "%s: %d query rows (cu_seqlens_q) exceed the plan's max_q_tokens = %lld",
                               op, cq[batch] - cq[0], (long long)info->desc.max_q_tokens);
    return AITER_MLA_OK;
}

/* Tile k (0-based) of the n tiles of a request in zig-zag visit order: 0, n-1, 1, n-2, ... */
static int32_t aiter_mla__zigzag(int32_t k, int32_t n) { return k % 2 ? n - 1 - k / 2 : k / 2; }

/* Keys a tile's rows may see: the first min(sk - sq + tile_end, sk) when causal. */
static int64_t aiter_mla__tile_keys(int32_t sq, int32_t sk, int32_t tile_end, int causal) {
    return causal ? aiter_mla__max64(0, aiter_mla__min64((int64_t)sk - sq + tile_end, sk)) : sk;
}

/* One head's kv units of a batch: the sum over its query tiles of ceil(tile keys / gran). */
static int64_t aiter_mla__prefill_units(const int32_t *cq, const int32_t *ck, int batch, int causal, int32_t tq, int32_t gran) {
    int64_t total = 0;
    int b;
    for (b = 0; b < batch; b++) {
        const int32_t sq = cq[b + 1] - cq[b], sk = ck[b + 1] - ck[b];
        int32_t t;
        for (t = 0; t * tq < sq; t++)
            total += aiter_mla__cdiv(aiter_mla__tile_keys(sq, sk, (int32_t)aiter_mla__min64((int64_t)(t + 1) * tq, sq), causal), gran);
    }
    return total;
}

AITER_MLA_API aiter_mla_status aiter_mla_prefill_plan_fit_lists(aiter_mla_prefill_plan_desc *d, int device_cu, const int32_t *cq,
                                                                const int32_t *ck, int batch, int causal) {
    const char *op = "prefill_plan_fit_lists";
    aiter_mla_prefill_plan_desc with_cus;
    aiter_mla_prefill_plan_info info;
    int64_t lists;
    AITER_MLA__NEED(op, d, "desc");
    AITER_MLA__RANGE(op, device_cu, 1, 65536, "device_cu");
    with_cus = *d;
    with_cus.num_cu = device_cu;
    AITER_MLA__CHECK(aiter_mla__prefill_plan_get_info(op, &with_cus, &info));
    AITER_MLA__CHECK(aiter_mla__prefill_plan_inputs(op, &info, cq, ck, batch, causal));
    lists = aiter_mla__min64(16LL * device_cu / info.desc.num_heads,
                             aiter_mla__prefill_units(cq, ck, batch, causal, info.desc.tile_q, info.desc.kv_granularity) / 64);
    d->num_cu = (int)aiter_mla__max64(1, aiter_mla__min64(device_cu, lists));
    return AITER_MLA_OK;
}

AITER_MLA_API aiter_mla_status aiter_mla_prefill_plan_build(const aiter_mla_prefill_plan_info *info, const int32_t *cq,
                                                            const int32_t *ck, int batch, int causal, int32_t *plan) {
    const char *op = "prefill_plan_build";
    aiter_mla__plan_builder pb;
    const int32_t tq = info ? info->desc.tile_q : 0, gran = info ? info->desc.kv_granularity : 0;
    int64_t total, avg, rem, quota;
    int b, cu = 0, ncu;
    AITER_MLA__CHECK(aiter_mla__prefill_plan_inputs(op, info, cq, ck, batch, causal));
    AITER_MLA__NEED_ARRAY(op, plan, "plan");
    { /* the build zeroes the plan, then reads the lengths again */
        const aiter_mla__span ins[2] = {aiter_mla__span_of(cq, (int64_t)batch + 1, 4, "cu_seqlens_q"),
                                        aiter_mla__span_of(ck, (int64_t)batch + 1, 4, "cu_seqlens_k")};
        const aiter_mla__span out = aiter_mla__span_of(plan, info->plan_ints, 4, "plan");
        AITER_MLA__CHECK(aiter_mla__check_arrays(op, &out, 1, ins, 2));
    }
    ncu = info->desc.num_cu;
    total = aiter_mla__prefill_units(cq, ck, batch, causal, tq, gran);
    avg = total / ncu;
    rem = total % ncu;
    quota = avg + (rem > 0);
    pb = aiter_mla__plan_begin(plan, info->plan_ints, info->off_work_indptr, info->off_work_info, info->off_reduce_indptr,
                               info->off_reduce_final_map, info->off_reduce_partial_map, info->max_partials,
                               info->max_partial_rows);
    for (b = 0; b < batch; b++) {
        const int32_t sq = cq[b + 1] - cq[b], sk = ck[b + 1] - ck[b], n = (int32_t)aiter_mla__cdiv(sq, tq);
        int32_t k;
        for (k = 0; k < n; k++) {
            const int32_t t = aiter_mla__zigzag(k, n), r0 = t * tq, r1 = (int32_t)aiter_mla__min64((int64_t)r0 + tq, sq);
            const int64_t keys = aiter_mla__tile_keys(sq, sk, r1, causal);
            int64_t left = aiter_mla__cdiv(keys, gran), done = 0; /* units */
            const int32_t first = pb.nwork;
            do {
                int64_t take = left;
                int32_t *w;
                if (left > 0 && quota == 0 && cu < ncu - 1) { /* this CU is full: the next one */
                    pb.v.work_indptr[++cu] = pb.nwork;
                    quota = avg + (cu < rem);
                    continue;
                }
                if (cu < ncu - 1 && take > quota) take = quota;
                AITER_MLA_ASSERT(pb.nwork < info->max_work);
                w = pb.v.work_info + (int64_t)pb.nwork++ * AITER_MLA_WORK_INTS;
                w[0] = b;
                w[1] = -1;
                w[2] = cq[b] + r0;
                w[3] = cq[b] + r1;
                w[4] = ck[b] + (int32_t)aiter_mla__min64(done * gran, keys);
                w[5] = ck[b] + (int32_t)aiter_mla__min64((done + take) * gran, keys);
                w[6] = sk - (w[5] - ck[b]);
                w[7] = (int32_t)((uint32_t)info->desc.num_heads << 16);
                done += take;
                left -= take;
                quota -= aiter_mla__min64(take, quota);
            } while (left > 0);
            aiter_mla__plan_close_tile(&pb, cq[b] + r0, cq[b] + r1, first);
        }
    }
    aiter_mla__plan_finish(&pb, plan, cu, ncu, info->max_tiles, batch);
    return AITER_MLA_OK;
}


AITER_MLA_API aiter_mla_status aiter_mla_prefill_plan_check(const aiter_mla_prefill_plan_info *info, const int32_t *cq,
                                                            const int32_t *ck, int batch, int causal, const int32_t *plan) {
    const char *op = "prefill_plan_check";
    aiter_mla_status st = AITER_MLA_OK;
    const int32_t *wi, *wp, *ri, *fm, *pm;
    int32_t tq, gran, nwork, ntiles, npieces, nrows, u = 0, w = 0, c;
    int64_t total, avg, rem, *cu_units = NULL;
    unsigned char *row_used;
    int b;
    AITER_MLA__CHECK(aiter_mla__prefill_plan_inputs(op, info, cq, ck, batch, causal));
    AITER_MLA__NEED_ARRAY(op, plan, "plan");
    tq = info->desc.tile_q;
    gran = info->desc.kv_granularity;
    nwork = plan[AITER_MLA__PH_NUM_WORK];
    ntiles = plan[AITER_MLA__PH_NUM_REDUCE_TILES];
    npieces = plan[AITER_MLA__PH_NUM_PARTIALS];
    nrows = plan[AITER_MLA__PH_NUM_PARTIAL_ROWS];
    if (plan[AITER_MLA__PH_MAGIC] != AITER_MLA_PLAN_MAGIC)
        return aiter_mla__fail(AITER_MLA_ERR_PLAN_INVALID, "%s: plan header has no magic (not built?)", op);
    if (plan[AITER_MLA__PH_NUM_LISTS] != info->desc.num_cu || plan[AITER_MLA__PH_BATCH] != batch)
        return aiter_mla__fail(AITER_MLA_ERR_PLAN_INVALID,
                               "%s: plan was built for %d work lists, batch %d (info: %d lists; called with batch %d)", op,
                               plan[AITER_MLA__PH_NUM_LISTS], plan[AITER_MLA__PH_BATCH], info->desc.num_cu, batch);
    AITER_MLA__CHECK(aiter_mla__plan_count(op, "num_work", nwork, info->max_work, "max_work"));
    AITER_MLA__CHECK(aiter_mla__plan_count(op, "num_reduce_tiles", ntiles, info->max_tiles, "max_tiles"));
    AITER_MLA__CHECK(aiter_mla__plan_count(op, "num_partials", npieces, info->max_partials, "max_partials"));
    AITER_MLA__CHECK(aiter_mla__plan_count(op, "num_partial_rows", nrows, info->max_partial_rows, "max_partial_rows"));
    wp = plan + info->off_work_indptr;
    wi = plan + info->off_work_info;
    ri = plan + info->off_reduce_indptr;
    fm = plan + info->off_reduce_final_map;
    pm = plan + info->off_reduce_partial_map;
    cu_units = (int64_t *)AITER_MLA_MALLOC(sizeof(int64_t) * (size_t)info->desc.num_cu + (size_t)info->max_partial_rows + 1);
    if (!cu_units) return aiter_mla__fail(AITER_MLA_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    row_used = (unsigned char *)(cu_units + info->desc.num_cu);
    memset(cu_units, 0, sizeof(int64_t) * (size_t)info->desc.num_cu);
    memset(row_used, 0, (size_t)info->max_partial_rows + 1);
    if (wp[0] != 0 || wp[info->desc.num_cu] != nwork) AITER_MLA__BAD_PLAN("%s: work_indptr does not span 0..num_work", op);
    for (c = 0; c < info->desc.num_cu; c++)
        if (wp[c + 1] < wp[c]) AITER_MLA__BAD_PLAN("%s: work_indptr decreases at CU %d", op, c);
    if (ri[0] != 0) AITER_MLA__BAD_PLAN("%s: reduce_indptr[0] = %d", op, ri[0]);
    /* the items, in order, must be the tiles in visit order, each split into contiguous pieces */
    c = 0;
    for (b = 0; b < batch; b++) {
        const int32_t sq = cq[b + 1] - cq[b], sk = ck[b + 1] - ck[b], n = (int32_t)aiter_mla__cdiv(sq, tq);
        int32_t k;
        for (k = 0; k < n; k++, u++) {
            const int32_t t = aiter_mla__zigzag(k, n), r0 = t * tq, r1 = (int32_t)aiter_mla__min64((int64_t)r0 + tq, sq);
            const int64_t keys = aiter_mla__tile_keys(sq, sk, r1, causal);
            int64_t at = 0;
            int32_t first = w, j;
            if (u >= ntiles) AITER_MLA__BAD_PLAN("%s: the plan has %d tiles, the batch more", op, ntiles);
            if (fm[2 * u] != cq[b] + r0 || fm[2 * u + 1] != cq[b] + r1)
                AITER_MLA__BAD_PLAN("%s: reduce_final_map of tile %d is not rows %d..%d", op, u, cq[b] + r0, cq[b] + r1);
            do {
                const int32_t *x = wi + (int64_t)w * AITER_MLA_WORK_INTS;
                if (w >= nwork) AITER_MLA__BAD_PLAN("%s: tile %d is not fully covered", op, u);
                while (c < info->desc.num_cu && wp[c + 1] <= w) c++;
                if (x[0] != b || x[2] != cq[b] + r0 || x[3] != cq[b] + r1 || x[4] != ck[b] + at || x[5] < x[4] ||
                    x[5] > ck[b] + keys || x[6] != sk - (x[5] - ck[b]) || x[7] != (int32_t)((uint32_t)info->desc.num_heads << 16))
                    AITER_MLA__BAD_PLAN("%s: work %d does not continue tile %d of request %d at key %lld", op, w, u, b, (long long)at);
                if (x[5] == x[4] && keys > 0) AITER_MLA__BAD_PLAN("%s: work %d is empty inside tile %d", op, w, u);
                if ((x[5] - ck[b]) % gran != 0 && x[5] - ck[b] != keys)
                    AITER_MLA__BAD_PLAN("%s: work %d ends at key %d, not on a kv_granularity boundary", op, w, x[5] - ck[b]);
                cu_units[c] += aiter_mla__cdiv(x[5] - ck[b], gran) - at / gran;
                at = x[5] - ck[b];
                w++;
            } while (at < keys);
            if (ri[u + 1] < ri[u] || ri[u + 1] > npieces)
                AITER_MLA__BAD_PLAN("%s: reduce_indptr[%d..%d] leaves 0..num_partials", op, u, u + 1);
            if (w - first > 1) { /* split: partial rows unique, listed in the reduce map in order */
                if (ri[u + 1] - ri[u] != w - first) AITER_MLA__BAD_PLAN("%s: reduce tile %d lists %d pieces, has %d", op, u, ri[u + 1] - ri[u], w - first);
                for (j = first; j < w; j++) {
                    const int32_t loc = wi[(int64_t)j * AITER_MLA_WORK_INTS + 1];
                    int32_t r;
                    if (loc < 0 || (int64_t)loc + (r1 - r0) > nrows || pm[ri[u] + j - first] != loc)
                        AITER_MLA__BAD_PLAN("%s: piece %d of tile %d has partial row %d", op, j - first, u, loc);
                    for (r = loc; r < loc + (r1 - r0); r++) {
                        if (row_used[r]) AITER_MLA__BAD_PLAN("%s: partial row %d is used twice", op, r);
                        row_used[r] = 1;
                    }
                }
            } else if (ri[u + 1] != ri[u] || wi[(int64_t)first * AITER_MLA_WORK_INTS + 1] != -1) {
                AITER_MLA__BAD_PLAN("%s: whole tile %d has partial rows or reduce entries", op, u);
            }
        }
    }
    if (u != ntiles) AITER_MLA__BAD_PLAN("%s: the tiles number %d, the header's num_reduce_tiles %d", op, u, ntiles);
    if (w != nwork) AITER_MLA__BAD_PLAN("%s: the work items number %d, the header's num_work %d", op, w, nwork);
    if (ri[u] != npieces) AITER_MLA__BAD_PLAN("%s: reduce_indptr ends at %d, the header's num_partials is %d", op, ri[u], npieces);
    total = aiter_mla__prefill_units(cq, ck, batch, causal, tq, gran);
    avg = total / info->desc.num_cu;
    rem = total % info->desc.num_cu;
    for (c = 0; c < info->desc.num_cu; c++) /* every CU gets exactly its share */
        if (cu_units[c] != avg + (c < rem))
            AITER_MLA__BAD_PLAN("%s: CU %d has %lld units, its share is %lld", op, c, (long long)cu_units[c], (long long)(avg + (c < rem)));
done:
    AITER_MLA_FREE(cu_units);
    return st;
}

/* The plan fields of prefill args: plan_info agrees with the args, the workspace fits. */
static aiter_mla_status aiter_mla__prefill_plan_args(const char *op, const aiter_mla_prefill_args *a) {
    const aiter_mla_prefill_plan_info *info = a->plan_info;
    AITER_MLA__NEED(op, a->plan, "plan");
    AITER_MLA__CHECK(aiter_mla__prefill_plan_info_check(op, info));
    if (info->desc.num_heads != a->num_heads || info->desc.dv != a->dv)
        return aiter_mla__fail(AITER_MLA_ERR_PLAN_MISMATCH, "%s: num_heads %d / dv %d differ from the plan's %d / %d", op,
                               a->num_heads, a->dv, info->desc.num_heads, info->desc.dv);
    if (a->batch > info->desc.max_batch)
        return aiter_mla__fail(AITER_MLA_ERR_PLAN_MISMATCH, "%s: batch = %d exceeds the plan's max_batch = %d", op, a->batch,
                               info->desc.max_batch);
    return aiter_mla__check_workspace(op, "workspace", a->workspace, a->workspace_bytes, info->workspace_bytes, "the plan's partials");
}

/* The prefill's launch, or with kernel != NULL its kernel (aiter_mla_prefill_kernel). */
static aiter_mla_status aiter_mla__prefill_call(const char *op, const aiter_mla_prefill_args *in, aiter_mla_kernel *kernel,
                                                void *stream) {
    aiter_mla_prefill_args a;
    AITER_MLA__CHECK(aiter_mla__prefill_resolve(op, in, &a, 0));
    if (a.plan) {
        AITER_MLA__CHECK(aiter_mla__prefill_plan_args(op, &a));
        AITER_MLA__CHECK(aiter_mla__check_aligned(op, a.workspace, 16, "workspace"));
    } else {
        AITER_MLA__RANGE(op, a.max_seqlen_q, 1, INT32_MAX, "max_seqlen_q");
    }
    AITER_MLA__CHECK(aiter_mla__prefill_disjoint(op, &a, AITER_MLA__CALL_GPU));
    return AITER_MLA__LAUNCH_OR_PICK(op, kernel, aiter_mla__launch_prefill(&a, kernel, stream));
}
AITER_MLA_API aiter_mla_status aiter_mla_prefill(const aiter_mla_prefill_args *in, void *stream) {
    return aiter_mla__prefill_call("prefill", in, NULL, stream);
}
AITER_MLA_API aiter_mla_status aiter_mla_prefill_kernel(const aiter_mla_prefill_args *in, aiter_mla_kernel *kernel) {
    AITER_MLA__NEED("prefill_kernel", kernel, "kernel");
    return aiter_mla__prefill_call("prefill_kernel", in, kernel, NULL);
}

AITER_MLA_API aiter_mla_status aiter_mla_prefill_ref_scheduled(const aiter_mla_prefill_args *in) {
    const char *op = "prefill_ref_scheduled";
    aiter_mla_prefill_args a;
    aiter_mla_reduce_args r;
    const aiter_mla_prefill_plan_info *info;
    float *part_o, *part_lse;
    int32_t i, nwork;
    AITER_MLA__CHECK(aiter_mla__prefill_resolve(op, in, &a, 1));
    AITER_MLA__CHECK(aiter_mla__prefill_plan_args(op, &a));
    AITER_MLA__ARRAY_ALIGNED(op, a.plan, "plan"); /* as this call's own: the plan's check reads it */
    info = a.plan_info;
    AITER_MLA__CHECK(aiter_mla__fail_within(op, aiter_mla_prefill_plan_check(info, a.cu_seqlens_q, a.cu_seqlens_k, a.batch, a.causal, a.plan),
                                            "the plan does not fit these arrays (rebuild it with aiter_mla_prefill_plan_build for "
                                            "these cu_seqlens and this causal flag)"));
    AITER_MLA__CHECK(aiter_mla__prefill_disjoint(op, &a, AITER_MLA__CALL_SCHEDULED));
    part_o = (float *)a.workspace;
    part_lse = part_o ? part_o + (int64_t)info->max_partial_rows * a.num_heads * a.dv : NULL;
    nwork = a.plan[AITER_MLA__PH_NUM_WORK];
    for (i = 0; i < nwork; i++) {
        const int32_t *w = a.plan + info->off_work_info + (int64_t)i * AITER_MLA_WORK_INTS;
        const int b = w[0];
        aiter_mla__prefill_rows(&a, b, w[2] - a.cu_seqlens_q[b], w[3] - a.cu_seqlens_q[b], w[4] - a.cu_seqlens_k[b],
                                w[5] - a.cu_seqlens_k[b], w[1], part_o, part_lse);
    }
    if (a.plan[AITER_MLA__PH_NUM_PARTIALS] == 0) return AITER_MLA_OK;
    memset(&r, 0, sizeof r);
    r.partial_o = part_o;
    r.partial_lse = part_lse;
    r.reduce_indptr = a.plan + info->off_reduce_indptr;
    r.reduce_final_map = a.plan + info->off_reduce_final_map;
    r.reduce_partial_map = a.plan + info->off_reduce_partial_map;
    r.num_tiles = a.plan[AITER_MLA__PH_NUM_REDUCE_TILES];
    r.num_partial_rows = info->max_partial_rows;
    r.num_heads = a.num_heads;
    r.dv = a.dv;
    r.o = a.o;
    r.o_stride_token = a.o_stride_token;
    r.o_stride_head = a.o_stride_head;
    r.lse = a.lse;
    r.lse_stride_token = 1;
    r.lse_stride_head = a.cu_seqlens_q[a.batch];
    r.empty_lse_neg_inf = 1;
    r.o_dtype = a.o_dtype;
    return aiter_mla_reduce_ref(&r);
}

#undef AITER_MLA__BAD_PLAN

/* ======================================================================================
 * DeepSeek V4 sparse attention (SPEC 7): MODEL1 pages, index builders, attention
 * ====================================================================================== */
AITER_MLA_API int64_t aiter_mla_v4_page_bytes(int block_size) {
    if (block_size < 1) return 0;
    return aiter_mla__cdiv((int64_t)block_size * AITER_MLA_V4_TOKEN_BYTES, AITER_MLA_V4_ROW_BYTES) * AITER_MLA_V4_ROW_BYTES;
}

/* A MODEL1 cache's description: resolves block_size (0 means default_bs), the page stride
 * and the flavour; pre prefixes the field names, dtype_field names the flavour's field. */
static aiter_mla_status aiter_mla__v4_pages_resolve(const char *op, const char *pre, int64_t num_blocks, int *block_size,
                                                    int64_t *stride, aiter_mla_dtype *fp8, const char *dtype_field,
                                                    int default_bs, size_t bytes, const char *bytes_field) {
    if (!*block_size) *block_size = default_bs;
    if (*fp8 == AITER_MLA_DTYPE_DEFAULT) *fp8 = AITER_MLA_FP8_E4M3FN;
    AITER_MLA__CHECK(aiter_mla__check_range(op, num_blocks, 1, INT32_MAX, pre, "num_blocks"));
    AITER_MLA__CHECK(aiter_mla__check_range(op, *block_size, 1, 1024, pre, "block_size"));
    if (!*stride) *stride = aiter_mla_v4_page_bytes(*block_size);
    AITER_MLA__CHECK(aiter_mla__check_range(op, *stride, (int64_t)*block_size * AITER_MLA_V4_TOKEN_BYTES, AITER_MLA__MAX_STRIDE,
                                         pre, "page_stride_bytes"));
    if (!aiter_mla__cache_bytes_fit(bytes, num_blocks, *stride)) {
        /* the page's token count named too: a block_size left at its default is the likely fault */
        char units[96];
        snprintf(units, sizeof units, "num_blocks pages of page_stride_bytes (pages of block_size = %d tokens)", *block_size);
        return aiter_mla__check_cache_bytes(op, pre, bytes_field, bytes, num_blocks, *stride, units);
    }
    if (!aiter_mla__is_fp8(*fp8))
        return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED, "%s: %s%s %s is not an fp8 flavour", op, pre, dtype_field,
                               aiter_mla_dtype_name(*fp8));
    return AITER_MLA_OK;
}

/* ---- MODEL1 writer, reader, gather ------------------------------------------------------- */
static aiter_mla_status aiter_mla__v4_write_resolve(const char *op, const aiter_mla_v4_cache_write_args *in,
                                                    aiter_mla_v4_cache_write_args *a) {
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    if (!a->kv_stride) a->kv_stride = AITER_MLA_V4_HEAD_DIM;
    if (a->src_dtype == AITER_MLA_DTYPE_DEFAULT) a->src_dtype = AITER_MLA_BF16;
    AITER_MLA__CHECK(aiter_mla__v4_pages_resolve(op, "", a->num_blocks, &a->block_size, &a->page_stride_bytes, &a->fp8_dtype,
                                                 "fp8_dtype", 64, a->kv_cache_bytes, "kv_cache_bytes"));
    if (a->fp8_max == 0.0f) a->fp8_max = aiter_mla_fp8_max(a->fp8_dtype);
    AITER_MLA__RANGE(op, a->num_tokens, 0, INT32_MAX, "num_tokens");
    AITER_MLA__RANGE(op, a->kv_stride, AITER_MLA_V4_HEAD_DIM, AITER_MLA__MAX_STRIDE, "kv_stride");
    if (!aiter_mla__is_16bit(a->src_dtype))
        return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED, "%s: src_dtype %s is not bf16 or f16", op, aiter_mla_dtype_name(a->src_dtype));
    if (!(a->fp8_max >= 2.0f && a->fp8_max <= aiter_mla_fp8_max(a->fp8_dtype)))
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                               "%s: fp8_max = %g is outside [2, %g] (below 2 a finite group's scale passes the exponent byte's 254)", op,
                               a->fp8_max, aiter_mla_fp8_max(a->fp8_dtype));
    if (a->num_tokens == 0) return AITER_MLA_OK;
    AITER_MLA__NEED(op, a->kv, "kv");
    AITER_MLA__NEED(op, a->slot_mapping, "slot_mapping");
    AITER_MLA__NEED(op, a->kv_cache, "kv_cache");
    return aiter_mla__writer_disjoint(op, a->kv_cache, a->num_blocks, (uint64_t)a->page_stride_bytes, 1, a->slot_mapping,
                                      a->num_tokens, a->kv, a->kv_stride, AITER_MLA_V4_HEAD_DIM, NULL, 0, a->src_dtype);
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_cache_write_ref(const aiter_mla_v4_cache_write_args *in) {
    aiter_mla_v4_cache_write_args a;
    int64_t t, slots;
    AITER_MLA__CHECK(aiter_mla__v4_write_resolve("v4_cache_write_ref", in, &a));
    slots = a.num_blocks * a.block_size;
    for (t = 0; t < a.num_tokens; t++) {
        const int64_t slot = a.slot_mapping[t];
        if (slot < 0 || slot >= slots) continue; /* padding or out of range */
        aiter_mla__v4_write_token((unsigned char *)a.kv_cache + slot / a.block_size * a.page_stride_bytes, a.block_size,
                                  (int)(slot % a.block_size), a.kv, t * a.kv_stride, a.src_dtype, a.fp8_dtype, a.fp8_max);
    }
    return AITER_MLA_OK;
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_cache_write(const aiter_mla_v4_cache_write_args *in, void *stream) {
    aiter_mla_v4_cache_write_args a;
    AITER_MLA__CHECK(aiter_mla__v4_write_resolve("v4_cache_write", in, &a));
    if (a.num_tokens == 0) return aiter_mla__nothing_to_launch("v4_cache_write");
    return AITER_MLA__LAUNCH("v4_cache_write", aiter_mla__launch_v4_cache_write(&a, stream));
}

AITER_MLA_API void aiter_mla_v4_read_row(const void *kv_cache, int64_t page_stride_bytes, int block_size, int64_t slot,
                                         aiter_mla_dtype fp8_dtype, float *out) {
    const unsigned char *page;
    int d;
    if (fp8_dtype == AITER_MLA_DTYPE_DEFAULT) fp8_dtype = AITER_MLA_FP8_E4M3FN;
    if (!page_stride_bytes) page_stride_bytes = aiter_mla_v4_page_bytes(block_size);
    page = (const unsigned char *)kv_cache + slot / block_size * page_stride_bytes;
    for (d = 0; d < AITER_MLA_V4_HEAD_DIM; d++) out[d] = aiter_mla__v4_load(page, block_size, (int)(slot % block_size), d, fp8_dtype);
}

static aiter_mla_status aiter_mla__v4_gather_resolve(const char *op, const aiter_mla_v4_gather_args *in,
                                                     aiter_mla_v4_gather_args *a) {
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    if (a->out_dtype == AITER_MLA_DTYPE_DEFAULT) a->out_dtype = AITER_MLA_BF16;
    AITER_MLA__CHECK(aiter_mla__v4_pages_resolve(op, "", a->num_blocks, &a->block_size, &a->page_stride_bytes, &a->fp8_dtype,
                                                 "fp8_dtype", 64, a->kv_cache_bytes, "kv_cache_bytes"));
    AITER_MLA__RANGE(op, a->batch, 1, INT32_MAX - 1, "batch");
    AITER_MLA__RANGE(op, a->block_table_stride, 1, AITER_MLA__MAX_STRIDE, "block_table_stride");
    AITER_MLA__RANGE(op, a->out_rows, 0, INT32_MAX, "out_rows");
    AITER_MLA__RANGE(op, a->offset, 0, a->out_rows, "offset");
    AITER_MLA__CHECK(aiter_mla__check_out_dtype(op, a->out_dtype, "", "out_dtype"));
    { /* out's bytes fit int64: every offset into it is computed in it */
        const int64_t row_bytes = AITER_MLA_V4_HEAD_DIM * (int64_t)aiter_mla_dtype_size(a->out_dtype);
        if (a->out_rows > 0 && a->batch > INT64_MAX / row_bytes / a->out_rows)
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                                   "%s: batch x out_rows = %d x %lld rows of %lld bytes (512 x element size) pass int64", op,
                                   a->batch, (long long)a->out_rows, (long long)row_bytes);
    }
    AITER_MLA__NEED(op, a->kv_cache, "kv_cache");
    AITER_MLA__NEED(op, a->block_table, "block_table");
    AITER_MLA__NEED(op, a->seq_lens, "seq_lens");
    AITER_MLA__NEED(op, a->out, "out");
    { /* out against what later requests read (host sizes: the GPU call checks them too) */
        const aiter_mla__span ins[4] = {aiter_mla__span_of(a->kv_cache, a->num_blocks * a->page_stride_bytes, 1, "kv_cache"),
                                        aiter_mla__span_of(a->block_table, a->batch * a->block_table_stride, 4, "block_table"),
                                        aiter_mla__span_of(a->seq_lens, a->batch, 4, "seq_lens"),
                                        aiter_mla__span_of(a->gather_lens, a->batch, 4, "gather_lens")};
        const aiter_mla__span out =
            aiter_mla__span_rows(a->out, a->batch * a->out_rows, AITER_MLA_V4_HEAD_DIM * aiter_mla_dtype_size(a->out_dtype),
                                 aiter_mla_dtype_size(a->out_dtype), "out");
        return aiter_mla__check_arrays(op, &out, 1, ins, 4);
    }
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_gather(const aiter_mla_v4_gather_args *in, void *stream) {
    aiter_mla_v4_gather_args a;
    AITER_MLA__CHECK(aiter_mla__v4_gather_resolve("v4_gather", in, &a));
    if (a.out_rows == a.offset) return aiter_mla__nothing_to_launch("v4_gather"); /* no row can be written */
    return AITER_MLA__LAUNCH("v4_gather", aiter_mla__launch_v4_gather(&a, stream));
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_gather_ref(const aiter_mla_v4_gather_args *in) {
    const char *op = "v4_gather_ref";
    aiter_mla_v4_gather_args a;
    int b, d;
    AITER_MLA__CHECK(aiter_mla__v4_gather_resolve(op, in, &a));
    for (b = 0; b < a.batch; b++) {
        const int32_t s = a.seq_lens[b], g = a.gather_lens ? a.gather_lens[b] : s;
        if (s < 0) return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: seq_lens[%d] = %d is negative", op, b, s);
        if (g < 0 || g > s)
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: gather_lens[%d] = %d is outside 0..seq_lens[%d] = %d", op,
                                   b, g, b, s);
        if (a.offset + g > a.out_rows)
            return aiter_mla__fail(AITER_MLA_ERR_BUFFER_TOO_SMALL, "%s: offset %lld + %d rows of request %d pass out_rows = %lld",
                                   op, (long long)a.offset, g, b, (long long)a.out_rows);
    }
    for (b = 0; b < a.batch; b++) {
        const int32_t s = a.seq_lens[b], g = a.gather_lens ? a.gather_lens[b] : s;
        int32_t i;
        for (i = 0; i < g; i++) {
            const int32_t p = s - g + i;
            const int32_t id = aiter_mla__block_id(a.block_table + (int64_t)b * a.block_table_stride, a.block_table_stride,
                                                   p / a.block_size, a.num_blocks);
            const int64_t dst = ((int64_t)b * a.out_rows + a.offset + i) * AITER_MLA_V4_HEAD_DIM;
            const unsigned char *page = id < 0 ? NULL : (const unsigned char *)a.kv_cache + (int64_t)id * a.page_stride_bytes;
            for (d = 0; d < AITER_MLA_V4_HEAD_DIM; d++) /* absent: zeros */
                aiter_mla_store_f32(a.out, dst + d, a.out_dtype,
                                    page ? aiter_mla__v4_load(page, a.block_size, p % a.block_size, d, a.fp8_dtype) : 0.0f);
        }
    }
    return AITER_MLA_OK;
}

/* ---- index builders ----------------------------------------------------------------------- */
static aiter_mla_status aiter_mla__v4_out_check(const char *op, aiter_mla_v4_index_out *o, int64_t width) {
    if (!o->dense && !o->lens && !o->indices && !o->indptr)
        return aiter_mla__fail(AITER_MLA_ERR_NULL_POINTER,
                               "%s: out has no output (out.dense, out.lens, or out.indices with out.indptr)", op);
    if (o->indices && !o->indptr) return aiter_mla__fail(AITER_MLA_ERR_NULL_POINTER, "%s: out.indptr is NULL (out.indices is set)", op);
    if (o->indptr && !o->indices) return aiter_mla__fail(AITER_MLA_ERR_NULL_POINTER, "%s: out.indices is NULL (out.indptr is set)", op);
    if (!o->dense_stride) o->dense_stride = width;
    AITER_MLA__CHECK(aiter_mla__check_range(op, o->dense_stride, width, AITER_MLA__MAX_STRIDE, "out.", "dense_stride"));
    AITER_MLA__CHECK(aiter_mla__check_range(op, o->capacity, 0, INT64_MAX, "out.", "capacity"));
    return AITER_MLA_OK;
}

/* Fills row with token r's entries (at most the width), returns how many. */
typedef int32_t (*aiter_mla__v4_row_fn)(const void *ctx, int64_t r, int32_t *row);

/* A builder's outputs against the n_in arrays ins its rows read, and each other: the ragged
 * entries as all out.capacity of them; num_tokens -1 (a count only the device knows) leaves
 * out the outputs sized by it, but for indptr[0], which is written whatever the count (the
 * kernels after it would read it, or an input it overwrote, to size their work). Every
 * builder's reference and GPU call check it alike. */
static aiter_mla_status aiter_mla__v4_out_disjoint(const char *op, const aiter_mla_v4_index_out *out, int64_t num_tokens,
                                                   const aiter_mla__span *ins, int n_in) {
    const aiter_mla__span outs[4] = {aiter_mla__span_of(out->dense, num_tokens * out->dense_stride, 4, "out.dense"),
                                     aiter_mla__span_of(out->lens, num_tokens, 4, "out.lens"),
                                     aiter_mla__span_of(out->indices, out->capacity, 4, "out.indices"),
                                     aiter_mla__span_of(out->indptr, num_tokens < 0 ? 1 : num_tokens + 1, 4, "out.indptr")};
    return aiter_mla__check_arrays(op, outs, 4, ins, n_in);
}

/* The one writer of every builder's outputs (already checked for overlaps): count the ragged
 * total first (nothing is written when it exceeds the capacity), then dense rows (-1 padded),
 * lengths and CSR. */
static aiter_mla_status aiter_mla__v4_emit(const char *op, const aiter_mla_v4_index_out *out, int64_t num_tokens, int64_t width,
                                           aiter_mla__v4_row_fn fn, const void *ctx) {
    int32_t *row = (int32_t *)AITER_MLA_MALLOC((size_t)width * sizeof(int32_t));
    int64_t r, total = 0;
    if (!row) return aiter_mla__fail(AITER_MLA_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    if (out->indices) {
        for (r = 0; r < num_tokens; r++) total += fn(ctx, r, row);
        if (total > out->capacity || total > INT32_MAX) {
            AITER_MLA_FREE(row);
            return aiter_mla__fail(AITER_MLA_ERR_BUFFER_TOO_SMALL, "%s: the lists hold %lld entries, out.capacity = %lld", op,
                                   (long long)total, (long long)out->capacity);
        }
    }
    if (out->indices) out->indptr[0] = 0;
    total = 0;
    for (r = 0; r < num_tokens; r++) {
        const int32_t n = fn(ctx, r, row);
        int64_t k;
        if (out->dense)
            for (k = 0; k < width; k++) out->dense[r * out->dense_stride + k] = k < n ? row[k] : -1;
        if (out->lens) out->lens[r] = n;
        if (out->indices) {
            memcpy(out->indices + total, row, (size_t)n * sizeof(int32_t));
            total += n;
            out->indptr[r + 1] = (int32_t)total;
        }
    }
    AITER_MLA_FREE(row);
    return AITER_MLA_OK;
}

/* query_start_loc and seq_lens (present) aligned, query_start_loc monotone from >= 0, every
 * request's seq_len >= its q_len. */
static aiter_mla_status aiter_mla__v4_requests_check(const char *op, const int32_t *qsl, const int32_t *seq_lens, int n) {
    int b;
    AITER_MLA__ARRAY_ALIGNED(op, qsl, "query_start_loc");
    AITER_MLA__ARRAY_ALIGNED(op, seq_lens, "seq_lens");
    AITER_MLA__CHECK(aiter_mla__indptr_start(op, qsl, "", "query_start_loc"));
    for (b = 0; b < n; b++) {
        AITER_MLA__CHECK(aiter_mla__indptr_step(op, qsl, b, "", "query_start_loc"));
        if (seq_lens[b] < qsl[b + 1] - qsl[b])
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: seq_lens[%d] = %d is less than the request's q_len = %d",
                                   op, b, seq_lens[b], qsl[b + 1] - qsl[b]);
    }
    return AITER_MLA_OK;
}

/* The reference's rows: the shared closed forms above, written out. */
static int32_t aiter_mla__v4_swa_row(const void *ctx, int64_t r, int32_t *row) {
    const aiter_mla_v4_swa_index_args *a = (const aiter_mla_v4_swa_index_args *)ctx;
    int32_t req, first, i;
    const int32_t n = aiter_mla__v4_swa_token(a, r, &req, &first);
    for (i = 0; i < n; i++) row[i] = aiter_mla__v4_swa_entry(a, req, first + i);
    return n;
}

static aiter_mla_status aiter_mla__v4_swa_resolve(const char *op, const aiter_mla_v4_swa_index_args *in,
                                                  aiter_mla_v4_swa_index_args *a) {
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    if (!a->block_size) a->block_size = 64;
    if (!a->window) a->window = AITER_MLA_V4_WINDOW;
    AITER_MLA__RANGE(op, a->num_reqs, 1, INT32_MAX - 1, "num_reqs");
    AITER_MLA__RANGE(op, a->block_size, 1, 1024, "block_size");
    AITER_MLA__RANGE(op, a->window, 1, 65536, "window");
    AITER_MLA__RANGE(op, a->block_table_stride, 1, AITER_MLA__MAX_STRIDE, "block_table_stride");
    AITER_MLA__RANGE(op, a->num_tokens, 0, INT32_MAX, "num_tokens");
    AITER_MLA__RANGE(op, a->token_offset, 0, INT32_MAX - a->num_tokens, "token_offset");
    AITER_MLA__CHECK(aiter_mla__v4_out_check(op, &a->out, a->window));
    AITER_MLA__NEED(op, a->query_start_loc, "query_start_loc");
    AITER_MLA__NEED(op, a->seq_lens, "seq_lens");
    AITER_MLA__NEED(op, a->block_table, "block_table");
    {
        const int64_t toks = a->token_offset + a->num_tokens;
        const aiter_mla__span ins[5] = {aiter_mla__span_of(a->query_start_loc, (int64_t)a->num_reqs + 1, 4, "query_start_loc"),
                                        aiter_mla__span_of(a->seq_lens, a->num_reqs, 4, "seq_lens"),
                                        aiter_mla__span_of(a->token_to_req, toks, 4, "token_to_req"),
                                        aiter_mla__span_of(a->is_valid_token, toks, 1, "is_valid_token"),
                                        aiter_mla__span_of(a->block_table, a->num_reqs * a->block_table_stride, 4, "block_table")};
        return aiter_mla__v4_out_disjoint(op, &a->out, a->num_tokens, ins, 5);
    }
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_swa_indices_ref(const aiter_mla_v4_swa_index_args *in) {
    const char *op = "v4_swa_indices_ref";
    aiter_mla_v4_swa_index_args a;
    AITER_MLA__CHECK(aiter_mla__v4_swa_resolve(op, in, &a));
    AITER_MLA__CHECK(aiter_mla__v4_requests_check(op, a.query_start_loc, a.seq_lens, a.num_reqs));
    return aiter_mla__v4_emit(op, &a.out, a.num_tokens, a.window, aiter_mla__v4_swa_row, &a);
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_swa_indices(const aiter_mla_v4_swa_index_args *in, void *stream) {
    aiter_mla_v4_swa_index_args a;
    AITER_MLA__CHECK(aiter_mla__v4_swa_resolve("v4_swa_indices", in, &a));
    if (a.num_tokens == 0 && !a.out.indptr) /* a ragged output still gets indptr[0] */
        return aiter_mla__nothing_to_launch("v4_swa_indices");
    return AITER_MLA__LAUNCH("v4_swa_indices", aiter_mla__launch_v4_swa_indices(&a, stream));
}

static int32_t aiter_mla__v4_topk_row(const void *ctx, int64_t t, int32_t *row) {
    const aiter_mla_v4_topk_args *a = (const aiter_mla_v4_topk_args *)ctx;
    const int32_t req = a->token_to_req[t];
    int32_t n = 0, k;
    if (a->is_valid_token && !a->is_valid_token[t]) return 0;
    for (k = 0; k < a->topk; k++) {
        const int32_t idx = a->topk_indices[t * a->topk_stride + k];
        if (idx >= 0) row[n++] = aiter_mla__v4_topk_slot(a, req, idx);
    }
    return n;
}

static aiter_mla_status aiter_mla__v4_topk_resolve(const char *op, const aiter_mla_v4_topk_args *in, aiter_mla_v4_topk_args *a) {
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    if (!a->topk_stride) a->topk_stride = a->topk;
    if (!a->block_size) a->block_size = 64;
    AITER_MLA__RANGE(op, a->topk, 1, 1 << 20, "topk");
    AITER_MLA__RANGE(op, a->topk_stride, a->topk, AITER_MLA__MAX_STRIDE, "topk_stride");
    AITER_MLA__RANGE(op, a->num_reqs, 1, INT32_MAX - 1, "num_reqs");
    AITER_MLA__RANGE(op, a->block_size, 1, 1024, "block_size");
    AITER_MLA__RANGE(op, a->block_table_stride, 1, AITER_MLA__MAX_STRIDE, "block_table_stride");
    AITER_MLA__RANGE(op, a->num_tokens, 0, INT32_MAX, "num_tokens");
    AITER_MLA__CHECK(aiter_mla__v4_out_check(op, &a->out, a->topk));
    AITER_MLA__NEED(op, a->topk_indices, "topk_indices");
    AITER_MLA__NEED(op, a->token_to_req, "token_to_req");
    AITER_MLA__NEED(op, a->block_table, "block_table");
    {
        const aiter_mla__span ins[4] = {aiter_mla__span_of(a->topk_indices, a->num_tokens * a->topk_stride, 4, "topk_indices"),
                                        aiter_mla__span_of(a->token_to_req, a->num_tokens, 4, "token_to_req"),
                                        aiter_mla__span_of(a->is_valid_token, a->num_tokens, 1, "is_valid_token"),
                                        aiter_mla__span_of(a->block_table, a->num_reqs * a->block_table_stride, 4, "block_table")};
        return aiter_mla__v4_out_disjoint(op, &a->out, a->num_tokens, ins, 4);
    }
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_global_topk_ref(const aiter_mla_v4_topk_args *in) {
    const char *op = "v4_global_topk_ref";
    aiter_mla_v4_topk_args a;
    AITER_MLA__CHECK(aiter_mla__v4_topk_resolve(op, in, &a));
    return aiter_mla__v4_emit(op, &a.out, a.num_tokens, a.topk, aiter_mla__v4_topk_row, &a);
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_global_topk(const aiter_mla_v4_topk_args *in, void *stream) {
    aiter_mla_v4_topk_args a;
    AITER_MLA__CHECK(aiter_mla__v4_topk_resolve("v4_global_topk", in, &a));
    if (a.num_tokens == 0 && !a.out.indptr) return aiter_mla__nothing_to_launch("v4_global_topk");
    return AITER_MLA__LAUNCH("v4_global_topk", aiter_mla__launch_v4_global_topk(&a, stream));
}

static int32_t aiter_mla__v4_c128_row(const void *ctx, int64_t t, int32_t *row) {
    const aiter_mla_v4_c128_args *a = (const aiter_mla_v4_c128_args *)ctx;
    int32_t req, j;
    const int32_t n = aiter_mla__v4_c128_token(a, t, &req);
    for (j = 0; j < n; j++) row[j] = aiter_mla__v4_c128_entry(a, req, j);
    return n;
}

/* Entries per compressed page at a compress ratio (ratio >= 1): a page holds 256 logical
 * tokens, and at least one entry. */
static int aiter_mla__v4_compressed_block_size(int ratio) {
    return ratio < AITER_MLA_V4_COMPRESSED_PAGE_TOKENS ? AITER_MLA_V4_COMPRESSED_PAGE_TOKENS / ratio : 1;
}
static aiter_mla_status aiter_mla__v4_c128_resolve(const char *op, const aiter_mla_v4_c128_args *in, aiter_mla_v4_c128_args *a) {
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    if (!a->compress_ratio) a->compress_ratio = 128;
    AITER_MLA__RANGE(op, a->compress_ratio, 1, 65536, "compress_ratio");
    if (!a->block_size) a->block_size = aiter_mla__v4_compressed_block_size(a->compress_ratio);
    AITER_MLA__RANGE(op, a->width, 1, 1 << 24, "width");
    AITER_MLA__RANGE(op, a->num_tokens, 0, INT32_MAX, "num_tokens");
    if (a->block_table) {
        AITER_MLA__RANGE(op, a->num_reqs, 1, INT32_MAX - 1, "num_reqs");
        AITER_MLA__RANGE(op, a->block_size, 1, 1024, "block_size");
        AITER_MLA__RANGE(op, a->block_table_stride, 1, AITER_MLA__MAX_STRIDE, "block_table_stride");
        AITER_MLA__NEED(op, a->token_to_req, "token_to_req");
    }
    AITER_MLA__CHECK(aiter_mla__v4_out_check(op, &a->out, a->width));
    AITER_MLA__NEED(op, a->positions, "positions");
    {
        const aiter_mla__span ins[4] = {aiter_mla__span_of(a->positions, a->num_tokens, 8, "positions"),
                                        aiter_mla__span_of(a->block_table ? a->token_to_req : NULL, a->num_tokens, 4, "token_to_req"),
                                        aiter_mla__span_of(a->is_valid_token, a->num_tokens, 1, "is_valid_token"),
                                        aiter_mla__span_of(a->block_table, a->block_table ? a->num_reqs * a->block_table_stride : 0, 4,
                                                           "block_table")};
        return aiter_mla__v4_out_disjoint(op, &a->out, a->num_tokens, ins, 4);
    }
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_c128_indices_ref(const aiter_mla_v4_c128_args *in) {
    const char *op = "v4_c128_indices_ref";
    aiter_mla_v4_c128_args a;
    AITER_MLA__CHECK(aiter_mla__v4_c128_resolve(op, in, &a));
    return aiter_mla__v4_emit(op, &a.out, a.num_tokens, a.width, aiter_mla__v4_c128_row, &a);
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_c128_indices(const aiter_mla_v4_c128_args *in, void *stream) {
    aiter_mla_v4_c128_args a;
    AITER_MLA__CHECK(aiter_mla__v4_c128_resolve("v4_c128_indices", in, &a));
    if (a.num_tokens == 0 && !a.out.indptr) return aiter_mla__nothing_to_launch("v4_c128_indices");
    return AITER_MLA__LAUNCH("v4_c128_indices", aiter_mla__launch_v4_c128_indices(&a, stream));
}

AITER_MLA_API int64_t aiter_mla_v4_workspace_rows(int64_t max_model_len, int compress_ratio, int window,
                                                  int64_t max_num_batched_tokens, int64_t *n_out) {
    int64_t n;
    if (!window) window = AITER_MLA_V4_WINDOW;
    if (n_out) *n_out = -1;
    if (max_model_len < 0 || max_model_len > INT32_MAX || max_num_batched_tokens < 0 || max_num_batched_tokens > INT32_MAX ||
        window < 0)
        return -1;
    n = compress_ratio <= 1 ? 0 : aiter_mla__cdiv(max_model_len, compress_ratio);
    if (n_out) *n_out = n;
    return n + window + max_num_batched_tokens;
}

static int32_t aiter_mla__v4_combine_row(const void *ctx, int64_t r, int32_t *row) {
    const aiter_mla_v4_combine_args *a = (const aiter_mla_v4_combine_args *)ctx;
    aiter_mla__v4_combine_tok k;
    int32_t i;
    const int32_t n = aiter_mla__v4_combine_token(a, r, &k);
    for (i = 0; i < n; i++) row[i] = aiter_mla__v4_combine_entry(a, r, &k, i);
    return n;
}

/* The combine's outputs against what it reads, for num_tokens tokens (-1: the count is on the
 * device, so the GPU call checks the arrays sized by requests alone). */
static aiter_mla_status aiter_mla__v4_combine_disjoint(const char *op, const aiter_mla_v4_combine_args *a, int64_t num_tokens) {
    const aiter_mla__span ins[4] = {aiter_mla__span_of(a->topk ? a->topk_indices : NULL, num_tokens * a->topk_stride, 4, "topk_indices"),
                                    aiter_mla__span_of(a->query_start_loc, (int64_t)a->num_reqs + 1, 4, "query_start_loc"),
                                    aiter_mla__span_of(a->seq_lens, a->num_reqs, 4, "seq_lens"),
                                    aiter_mla__span_of(a->gather_lens, a->num_reqs, 4, "gather_lens")};
    return aiter_mla__v4_out_disjoint(op, &a->out, num_tokens, ins, 4);
}

static aiter_mla_status aiter_mla__v4_combine_resolve(const char *op, const aiter_mla_v4_combine_args *in,
                                                      aiter_mla_v4_combine_args *a) {
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    if (!a->window) a->window = AITER_MLA_V4_WINDOW;
    if (!a->compress_ratio) a->compress_ratio = 1;
    if (!a->topk_stride) a->topk_stride = a->topk;
    AITER_MLA__RANGE(op, a->num_reqs, 1, INT32_MAX - 1, "num_reqs");
    AITER_MLA__RANGE(op, a->topk, 0, 1 << 20, "topk");
    AITER_MLA__RANGE(op, a->topk_stride, a->topk, AITER_MLA__MAX_STRIDE, "topk_stride");
    AITER_MLA__RANGE(op, a->window, 1, 65536, "window");
    AITER_MLA__RANGE(op, a->compress_ratio, 1, 65536, "compress_ratio");
    AITER_MLA__RANGE(op, a->M, 1, INT32_MAX, "M");
    AITER_MLA__RANGE(op, a->N, 0, a->M, "N");
    if (a->M * a->num_reqs > INT32_MAX)
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: M * num_reqs = %lld rows do not fit int32 entries", op,
                               (long long)(a->M * a->num_reqs));
    AITER_MLA__CHECK(aiter_mla__v4_out_check(op, &a->out, (int64_t)a->topk + a->window));
    AITER_MLA__NEED(op, a->query_start_loc, "query_start_loc");
    AITER_MLA__NEED(op, a->seq_lens, "seq_lens");
    if (a->topk > 0) AITER_MLA__NEED(op, a->topk_indices, "topk_indices");
    return aiter_mla__v4_combine_disjoint(op, a, -1);
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_combine_ref(const aiter_mla_v4_combine_args *in) {
    const char *op = "v4_combine_ref";
    aiter_mla_v4_combine_args a;
    int64_t num_tokens;
    int b;
    AITER_MLA__CHECK(aiter_mla__v4_combine_resolve(op, in, &a));
    AITER_MLA__CHECK(aiter_mla__v4_requests_check(op, a.query_start_loc, a.seq_lens, a.num_reqs));
    num_tokens = (int64_t)a.query_start_loc[a.num_reqs] - a.query_start_loc[0];
    for (b = 0; b < a.num_reqs; b++) {
        const int32_t q_len = a.query_start_loc[b + 1] - a.query_start_loc[b], seq_len = a.seq_lens[b];
        const int32_t lo = aiter_mla__v4_gather_len(NULL, b, q_len, seq_len, a.window);
        const int32_t g = aiter_mla__v4_gather_len(a.gather_lens, b, q_len, seq_len, a.window);
        if (g < lo || g > seq_len)
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                                   "%s: gather_lens[%d] = %d is outside q_len + min(prefix, W - 1) = %d .. seq_len = %d", op, b,
                                   g, lo, seq_len);
        if (a.N + g > a.M)
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: N = %lld + %d gathered rows of request %d pass M = %lld",
                                   op, (long long)a.N, g, b, (long long)a.M);
    }
    AITER_MLA__CHECK(aiter_mla__v4_combine_disjoint(op, &a, num_tokens));
    return aiter_mla__v4_emit(op, &a.out, num_tokens, (int64_t)a.topk + a.window, aiter_mla__v4_combine_row, &a);
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_combine(const aiter_mla_v4_combine_args *in, void *stream) {
    aiter_mla_v4_combine_args a;
    AITER_MLA__CHECK(aiter_mla__v4_combine_resolve("v4_combine", in, &a));
    /* the token count is device data: always launched */
    return AITER_MLA__LAUNCH("v4_combine", aiter_mla__launch_v4_combine(&a, stream));
}

/* The copy's buffers against what it reads: the entries as `entries` (indptr[num_rows], read
 * on the host; -1 where only the device can read it, so that they are left out). */
static aiter_mla_status aiter_mla__v4_copy_disjoint(const char *op, const aiter_mla_v4_ragged_copy_args *a, int64_t entries) {
    const aiter_mla__span ins[2] = {aiter_mla__span_of(a->indices, entries, 4, "indices"),
                                    aiter_mla__span_of(a->indptr, a->num_rows + 1, 4, "indptr")};
    const aiter_mla__span outs[3] = {aiter_mla__span_of(a->indices_buffer, a->indices_buffer_capacity, 4, "indices_buffer"),
                                     aiter_mla__span_of(a->indptr_buffer, a->num_rows + 1, 4, "indptr_buffer"),
                                     aiter_mla__span_of(a->num_dropped, 1, 8, "num_dropped")};
    return aiter_mla__check_arrays(op, outs, 3, ins, 2);
}

static aiter_mla_status aiter_mla__v4_copy_resolve(const char *op, const aiter_mla_v4_ragged_copy_args *in,
                                                   aiter_mla_v4_ragged_copy_args *a) {
    int64_t need;
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    AITER_MLA__RANGE(op, a->num_rows, 0, INT32_MAX - 1, "num_rows");
    AITER_MLA__RANGE(op, a->max_entries_per_row, 1, INT32_MAX, "max_entries_per_row");
    AITER_MLA__RANGE(op, a->clamp, 0, 1, "clamp");
    need = aiter_mla__max64(a->num_rows * a->max_entries_per_row, 1);
    if (a->indptr_buffer_capacity < a->num_rows + 1)
        return aiter_mla__fail(AITER_MLA_ERR_BUFFER_TOO_SMALL, "%s: indptr_buffer_capacity = %lld, %lld rows need %lld", op,
                               (long long)a->indptr_buffer_capacity, (long long)a->num_rows, (long long)a->num_rows + 1);
    if (a->indices_buffer_capacity < need)
        return aiter_mla__fail(AITER_MLA_ERR_BUFFER_TOO_SMALL, "%s: indices_buffer_capacity = %lld is less than %lld rows x %d",
                               op, (long long)a->indices_buffer_capacity, (long long)a->num_rows, a->max_entries_per_row);
    AITER_MLA__NEED(op, a->indptr, "indptr");
    AITER_MLA__NEED(op, a->indptr_buffer, "indptr_buffer");
    AITER_MLA__NEED(op, a->indices_buffer, "indices_buffer");
    return aiter_mla__v4_copy_disjoint(op, a, -1); /* the reference reads indptr only after this */
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_copy_ragged_ref(const aiter_mla_v4_ragged_copy_args *in) {
    const char *op = "v4_copy_ragged_ref";
    aiter_mla_v4_ragged_copy_args a;
    int64_t r, out = 0, dropped = 0;
    AITER_MLA__CHECK(aiter_mla__v4_copy_resolve(op, in, &a));
    AITER_MLA__CHECK(aiter_mla__indptr_start(op, a.indptr, "", "indptr"));
    for (r = 0; r < a.num_rows; r++) {
        AITER_MLA__CHECK(aiter_mla__indptr_step(op, a.indptr, r, "", "indptr"));
        if (!a.clamp && a.indptr[r + 1] - a.indptr[r] > a.max_entries_per_row)
            return aiter_mla__fail(AITER_MLA_ERR_BUFFER_TOO_SMALL, "%s: row %lld has %d entries, more than max_entries_per_row = %d",
                                   op, (long long)r, a.indptr[r + 1] - a.indptr[r], a.max_entries_per_row);
    }
    if (a.indptr[a.num_rows] > a.indptr[0]) AITER_MLA__NEED(op, a.indices, "indices");
    AITER_MLA__CHECK(aiter_mla__v4_copy_disjoint(op, &a, a.indptr[a.num_rows]));
    a.indptr_buffer[0] = 0;
    for (r = 0; r < a.num_rows; r++) {
        int64_t cut;
        const int32_t n = aiter_mla__v4_copy_len(&a, r, &cut);
        if (n > 0) memmove(a.indices_buffer + out, a.indices + a.indptr[r], (size_t)n * sizeof(int32_t));
        out += n;
        dropped += cut;
        a.indptr_buffer[r + 1] = (int32_t)out;
    }
    if (a.num_dropped) *a.num_dropped = dropped;
    return AITER_MLA_OK;
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_copy_ragged(const aiter_mla_v4_ragged_copy_args *in, void *stream) {
    aiter_mla_v4_ragged_copy_args a;
    AITER_MLA__CHECK(aiter_mla__v4_copy_resolve("v4_copy_ragged", in, &a));
    /* indptr_buffer[0] and num_dropped are written even for no rows */
    return AITER_MLA__LAUNCH("v4_copy_ragged", aiter_mla__launch_v4_copy_ragged(&a, stream));
}

/* ---- attention ------------------------------------------------------------------------------- */
/* A key list: unused (optional and no indices) or every field resolved and checked. */
static aiter_mla_status aiter_mla__v4_keys_resolve(const char *op, const char *pre, aiter_mla_v4_keys *k, int required) {
    if (!required && !k->indices) return AITER_MLA_OK;
    /* the pointers first: a list set without its cache names the cache, not its size */
    AITER_MLA__CHECK(aiter_mla__check_need(op, k->cache, pre, "cache"));
    AITER_MLA__CHECK(aiter_mla__check_need(op, k->indices, pre, "indices"));
    AITER_MLA__CHECK(aiter_mla__check_range(op, k->rows, 0, 1, pre, "rows"));
    if (k->rows) {
        if (k->dtype == AITER_MLA_DTYPE_DEFAULT) k->dtype = AITER_MLA_BF16;
        AITER_MLA__CHECK(aiter_mla__check_range(op, k->num_blocks, 1, INT32_MAX, pre, "num_blocks"));
        AITER_MLA__CHECK(aiter_mla__check_out_dtype(op, k->dtype, pre, "dtype"));
        AITER_MLA__CHECK(aiter_mla__check_cache_bytes(op, pre, "cache_bytes", k->cache_bytes, k->num_blocks,
                                                      AITER_MLA_V4_HEAD_DIM * (int64_t)aiter_mla_dtype_size(k->dtype),
                                                      "num_blocks rows of 512 dtype values"));
    } else {
        AITER_MLA__CHECK(aiter_mla__v4_pages_resolve(op, pre, k->num_blocks, &k->block_size, &k->page_stride_bytes, &k->dtype,
                                                     "dtype", 64, k->cache_bytes, "cache_bytes"));
    }
    if (!k->indptr) return aiter_mla__check_range(op, k->indices_stride, 1, INT32_MAX, pre, "indices_stride");
    return aiter_mla__check_range(op, k->capacity, 0, INT32_MAX, pre, "capacity");
}

/* The arrays the host reads in resolved args (host memory), each at its elements' alignment:
 * attn_sink has no NaN and each used ragged list's indptr is monotone from >= 0 (keys: with
 * the key lists, whose lens beside no indptr are read too). */
static aiter_mla_status aiter_mla__v4_attn_host_arrays(const char *op, const char *pre, const aiter_mla_v4_attention_args *a,
                                                       int keys) {
    int64_t t;
    int h, i;
    AITER_MLA__CHECK(aiter_mla__check_elems_aligned(op, a->attn_sink, AITER_MLA__ELEMS_ALIGN(a->attn_sink), pre, "attn_sink"));
    if (a->attn_sink)
        for (h = 0; h < a->num_heads; h++)
            if (a->attn_sink[h] != a->attn_sink[h])
                return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: %sattn_sink[%d] is NaN", op, pre, h);
    for (i = 0; keys && i < 2; i++) {
        const aiter_mla_v4_keys *k = i ? &a->extra_keys : &a->keys;
        const char *kpre = i ? "extra_keys." : "keys.";
        if (!k->indices) continue;
        if (!k->indptr) { /* its lens (optional) give the counts */
            AITER_MLA__CHECK(aiter_mla__check_elems_aligned(op, k->lens, AITER_MLA__ELEMS_ALIGN(k->lens), kpre, "lens"));
            continue;
        }
        AITER_MLA__CHECK(aiter_mla__check_elems_aligned(op, k->indptr, AITER_MLA__ELEMS_ALIGN(k->indptr), kpre, "indptr"));
        AITER_MLA__CHECK(aiter_mla__indptr_start(op, k->indptr, kpre, "indptr"));
        for (t = 0; t < a->num_tokens; t++) AITER_MLA__CHECK(aiter_mla__indptr_step(op, k->indptr, t, kpre, "indptr"));
        if (k->capacity > 0 && k->indptr[a->num_tokens] > k->capacity)
            return aiter_mla__fail(AITER_MLA_ERR_BUFFER_TOO_SMALL, "%s: %sindptr[%lld] = %d is past %scapacity = %lld", op, kpre,
                                   (long long)a->num_tokens, (int)k->indptr[a->num_tokens], kpre, (long long)k->capacity);
    }
    for (t = 0; keys && t < a->num_tokens; t++) {
        int64_t s0, s1;
        const int64_t n = aiter_mla__v4_keys_of(&a->keys, t, a->num_tokens, &s0) +
                          aiter_mla__v4_keys_of(&a->extra_keys, t, a->num_tokens, &s1);
        if (n > INT32_MAX)
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                                   "%s: token %lld's keys and extra_keys hold %lld entries (at most 2^31 - 1 a token)", op,
                                   (long long)t, (long long)n);
    }
    return AITER_MLA_OK;
}

/* Validate the args, resolve every default (pre prefixes the field names: "" or "attn.");
 * with_keys: also the key lists (the prefill sets them per chunk); host_arrays: the arrays
 * are host memory, so attn_sink and the ragged indptr are checked too. */
static aiter_mla_status aiter_mla__v4_attn_resolve(const char *op, const char *pre, const aiter_mla_v4_attention_args *in,
                                                   aiter_mla_v4_attention_args *a, int with_keys, int host_arrays) {
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    AITER_MLA__CHECK(aiter_mla__check_range(op, a->num_heads, 1, AITER_MLA_MAX_HEADS, pre, "num_heads"));
    AITER_MLA__CHECK(aiter_mla__check_range(op, a->num_tokens, 0, INT32_MAX, pre, "num_tokens"));
    AITER_MLA__CHECK(aiter_mla__check_range(op, a->q_stride_token, 0, AITER_MLA__MAX_STRIDE, pre, "q_stride_token"));
    AITER_MLA__CHECK(aiter_mla__check_range(op, a->q_stride_head, 0, AITER_MLA__MAX_STRIDE, pre, "q_stride_head"));
    if (!a->q_stride_head) a->q_stride_head = AITER_MLA_V4_HEAD_DIM;
    AITER_MLA__CHECK(aiter_mla__default_token_stride(op, pre, "q_stride_token", &a->q_stride_token, a->num_heads,
                                                     a->q_stride_head, "q_stride_head"));
    AITER_MLA__CHECK(aiter_mla__resolve_o_rows(op, pre, &a->o_stride_token, &a->o_stride_head, a->num_heads, a->num_tokens,
                                               AITER_MLA_V4_HEAD_DIM));
    if (a->q_dtype == AITER_MLA_DTYPE_DEFAULT) a->q_dtype = AITER_MLA_BF16;
    if (a->o_dtype == AITER_MLA_DTYPE_DEFAULT) a->o_dtype = a->q_dtype;
    if (!aiter_mla__is_16bit(a->q_dtype))
        return aiter_mla__fail(AITER_MLA_ERR_UNSUPPORTED, "%s: %sq_dtype %s is not bf16 or f16", op, pre, aiter_mla_dtype_name(a->q_dtype));
    AITER_MLA__CHECK(aiter_mla__check_out_dtype(op, a->o_dtype, pre, "o_dtype"));
    AITER_MLA__CHECK(aiter_mla__check_range(op, a->num_splits, 0, AITER_MLA_V4_MAX_SPLITS, pre, "num_splits"));
    if (!a->num_splits) a->num_splits = 1;
    AITER_MLA__CHECK(aiter_mla__check_range(op, a->num_cu, 0, 65536, pre, "num_cu")); /* used only by the GPU, wrong anywhere */
    AITER_MLA__CHECK(aiter_mla__check_range(op, a->keys_read_once, 0, 1, pre, "keys_read_once"));
    AITER_MLA__CHECK(aiter_mla__check_range(op, a->keys_shared, 0, 1, pre, "keys_shared"));
    if (a->keys_read_once && a->keys_shared)
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: %skeys_read_once and %skeys_shared are both 1 (a call's keys are read once or shared)",
                               op, pre, pre);
    if (a->sm_scale == 0.0f) a->sm_scale = 0.044194173824159216f; /* 512^-0.5 */
    AITER_MLA__CHECK(aiter_mla__check_scale(op, a->sm_scale, pre, "sm_scale"));
    if (with_keys) {
        AITER_MLA__CHECK(aiter_mla__v4_keys_resolve(op, "keys.", &a->keys, 1));
        AITER_MLA__CHECK(aiter_mla__v4_keys_resolve(op, "extra_keys.", &a->extra_keys, 0));
        if (a->keys.indices && !a->keys.indptr && a->extra_keys.indices && !a->extra_keys.indptr &&
            a->keys.indices_stride + a->extra_keys.indices_stride > INT32_MAX)
            return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                                   "%s: %skeys.indices_stride + %sextra_keys.indices_stride = %lld is past 2^31 - 1 (a token's keys)",
                                   op, pre, pre, (long long)(a->keys.indices_stride + a->extra_keys.indices_stride));
    }
    if (host_arrays) AITER_MLA__CHECK(aiter_mla__v4_attn_host_arrays(op, pre, a, with_keys));
    if (a->num_tokens == 0) return AITER_MLA_OK;
    AITER_MLA__CHECK(aiter_mla__check_need(op, a->q, pre, "q"));
    AITER_MLA__CHECK(aiter_mla__check_need(op, a->o, pre, "o"));
    return AITER_MLA_OK;
}

/* Every token against its two lists: each key row is read once per token and folded into
 * the online softmax of every head; the sparse references' finish writes o and lse. */
static aiter_mla_status aiter_mla__v4_attend(const char *op, const aiter_mla_v4_attention_args *a) {
    const int H = a->num_heads, D = AITER_MLA_V4_HEAD_DIM;
    double *acc, *qv, *m, *l;
    float row[AITER_MLA_V4_HEAD_DIM];
    int64_t t;
    if (a->num_tokens == 0) return AITER_MLA_OK;
    acc = (double *)AITER_MLA_MALLOC((size_t)H * (size_t)(2 * D + 2) * sizeof(double));
    if (!acc) return aiter_mla__fail(AITER_MLA_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    qv = acc + (int64_t)H * D;
    m = qv + (int64_t)H * D;
    l = m + H;
    for (t = 0; t < a->num_tokens; t++) {
        int h, d, src;
        for (h = 0; h < H; h++) {
            m[h] = -HUGE_VAL;
            l[h] = 0.0;
            for (d = 0; d < D; d++) {
                acc[(int64_t)h * D + d] = 0.0;
                qv[(int64_t)h * D + d] = aiter_mla_load_f32(a->q, t * a->q_stride_token + h * a->q_stride_head + d, a->q_dtype);
            }
        }
        for (src = 0; src < 2; src++) {
            const aiter_mla_v4_keys *k = src ? &a->extra_keys : &a->keys;
            int64_t start, e;
            const int64_t n = aiter_mla__v4_keys_of(k, t, a->num_tokens, &start);
            for (e = 0; e < n; e++) {
                int pos;
                const unsigned char *at = aiter_mla__v4_key_at(k, k->indices[start + e], &pos);
                if (!at) continue; /* absent */
                for (d = 0; d < D; d++) row[d] = aiter_mla__v4_key_elem(k, at, pos, d);
                for (h = 0; h < H; h++) {
                    const double *qh = qv + (int64_t)h * D;
                    double *ah = acc + (int64_t)h * D, s = 0.0, alpha, p;
                    for (d = 0; d < D; d++) s += qh[d] * row[d];
                    p = aiter_mla__online_softmax(s * a->sm_scale, &m[h], &l[h], &alpha);
                    for (d = 0; d < D; d++) ah[d] = ah[d] * alpha + p * row[d];
                }
            }
        }
        for (h = 0; h < H; h++)
            aiter_mla__sparse_finish(acc + (int64_t)h * D, D, m[h], l[h], a->attn_sink ? a->attn_sink[h] : -HUGE_VAL, a->o,
                                     t * a->o_stride_token + h * a->o_stride_head, a->o_dtype,
                                     a->lse ? a->lse + t * H + h : NULL, NULL);
    }
    AITER_MLA_FREE(acc);
    return AITER_MLA_OK;
}

/* Bytes of the GPU attention's split partials (64 bits: they may pass a 32-bit size_t). */
static uint64_t aiter_mla__v4_attn_workspace(const aiter_mla_v4_attention_args *a) {
    return a->num_splits > 1 ? (uint64_t)a->num_tokens * (uint64_t)a->num_splits * (uint64_t)a->num_heads * (AITER_MLA_V4_HEAD_DIM + 1) * 4u
                             : 0u;
}
/* The outputs (o, lse; with `partials`, the GPU's split partials in the workspace) against
 * what the call reads: q, both lists' arrays and caches, the sink. A ragged list's entries count as indptr[T] with `ragged` (its indptr read on the
 * host and checked), else as its capacity (none when not given); without, only host fields size the spans, which is what
 * the GPU call checks and what the reference checks before it reads any array. An unused
 * list's fields are not resolved and count for nothing. */
static aiter_mla_status aiter_mla__v4_attention_disjoint(const char *op, const aiter_mla_v4_attention_args *a, int ragged,
                                                         int partials) {
    static const char *const names[2][4] = {{"keys.indptr", "keys.lens", "keys.indices", "keys.cache"},
                                            {"extra_keys.indptr", "extra_keys.lens", "extra_keys.indices", "extra_keys.cache"}};
    const int64_t T = a->num_tokens;
    aiter_mla__span ins[10], outs[3];
    int i;
    for (i = 0; i < 2; i++) {
        const aiter_mla_v4_keys *k = i ? &a->extra_keys : &a->keys;
        const int used = k->indices != NULL;
        const int64_t cache_bytes = !used    ? 0
                                    : k->rows ? k->num_blocks * AITER_MLA_V4_HEAD_DIM * (k->dtype == AITER_MLA_F32 ? 4 : 2)
                                              : k->num_blocks * k->page_stride_bytes;
        /* a list's arrays that the call does not read (all of an unused list, lens beside an
           indptr) are neither sized nor held to an alignment */
        ins[i * 4] = aiter_mla__span_of(used ? k->indptr : NULL, T + 1, 4, names[i][0]);
        ins[i * 4 + 1] = aiter_mla__span_of(used && !k->indptr ? k->lens : NULL, T, 4, names[i][1]);
        ins[i * 4 + 2] = aiter_mla__span_of(k->indices,
                                            !used        ? 0
                                            : !k->indptr ? T * k->indices_stride
                                            : ragged     ? k->indptr[T]
                                                         : k->capacity,
                                            4, names[i][2]);
        ins[i * 4 + 3] = aiter_mla__span_bytes(used ? k->cache : NULL, cache_bytes,
                                               k->rows ? (k->dtype == AITER_MLA_F32 ? 4u : 2u) : 1u, names[i][3]);
    }
    ins[8] = aiter_mla__span_of(a->attn_sink, a->num_heads, 4, "attn_sink");
    ins[9] = aiter_mla__span_strided(a->q, T, a->num_heads, a->q_stride_token, a->q_stride_head, AITER_MLA_V4_HEAD_DIM,
                                     aiter_mla_dtype_size(a->q_dtype), "q");
    outs[0] = aiter_mla__span_strided(a->o, T, a->num_heads, a->o_stride_token, a->o_stride_head, AITER_MLA_V4_HEAD_DIM,
                                      aiter_mla_dtype_size(a->o_dtype), "o");
    outs[1] = aiter_mla__span_of(a->lse, T * a->num_heads, 4, "lse");
    outs[2] = aiter_mla__span_bytes(partials && T > 0 ? a->workspace : NULL, partials ? (int64_t)aiter_mla__v4_attn_workspace(a) : 0, 4,
                                    "workspace"); /* fp32 partials; none without tokens */
    return aiter_mla__check_arrays(op, outs, 3, ins, 10);
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_attention_ref(const aiter_mla_v4_attention_args *in) {
    const char *op = "v4_attention_ref";
    aiter_mla_v4_attention_args a;
    AITER_MLA__CHECK(aiter_mla__v4_attn_resolve(op, "", in, &a, 1, 0));
    AITER_MLA__CHECK(aiter_mla__v4_attention_disjoint(op, &a, 0, 0)); /* before the arrays are read */
    AITER_MLA__CHECK(aiter_mla__v4_attn_host_arrays(op, "", &a, 1));
    AITER_MLA__CHECK(aiter_mla__v4_attention_disjoint(op, &a, 1, 0));
    return aiter_mla__v4_attend(op, &a);
}

/* The split partials are indexed by int32 rows (token * splits + split): the size query and
 * the launch refuse the same products. */
static aiter_mla_status aiter_mla__v4_splits_fit(const char *op, const aiter_mla_v4_attention_args *a) {
    if (a->num_splits > 1 && (int64_t)a->num_tokens * a->num_splits > INT32_MAX)
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: num_tokens * num_splits = %lld does not fit int32", op,
                               (long long)((int64_t)a->num_tokens * a->num_splits));
    return AITER_MLA_OK;
}

/* The GPU attention's splits (resolved args; field names the workspace): they fit int32 rows
 * and, past one, have a 4-byte aligned workspace for their partials (`what`). */
static aiter_mla_status aiter_mla__v4_splits_check(const char *op, const char *field, const aiter_mla_v4_attention_args *a,
                                                   const char *what) {
    AITER_MLA__CHECK(aiter_mla__v4_splits_fit(op, a));
    if (a->num_splits <= 1) return AITER_MLA_OK;
    AITER_MLA__CHECK(aiter_mla__check_workspace(op, field, a->workspace, a->workspace_bytes, aiter_mla__v4_attn_workspace(a), what));
    return aiter_mla__check_aligned(op, a->workspace, 4, field);
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_attention_workspace_size(const aiter_mla_v4_attention_args *in, size_t *bytes) {
    const char *op = "v4_attention_workspace_size";
    aiter_mla_v4_attention_args a;
    AITER_MLA__NEED(op, in, "args");
    AITER_MLA__NEED(op, bytes, "bytes");
    a = *in; /* the sizing fields only */
    AITER_MLA__RANGE(op, a.num_heads, 1, AITER_MLA_MAX_HEADS, "num_heads");
    AITER_MLA__RANGE(op, a.num_tokens, 0, INT32_MAX, "num_tokens");
    AITER_MLA__RANGE(op, a.num_splits, 0, AITER_MLA_V4_MAX_SPLITS, "num_splits");
    AITER_MLA__CHECK(aiter_mla__v4_splits_fit(op, &a));
    if (!aiter_mla__size_fits(aiter_mla__v4_attn_workspace(&a), bytes))
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                               "%s: the splits' partials (%lld tokens x %d splits x %d heads x %d floats, %llu bytes) pass size_t on this host",
                               op, (long long)a.num_tokens, a.num_splits, a.num_heads, AITER_MLA_V4_HEAD_DIM + 1,
                               (unsigned long long)aiter_mla__v4_attn_workspace(&a));
    return AITER_MLA_OK;
}

/* V4 attention's launch, or with kernel != NULL its kernel (no tokens: the one a call with
 * tokens would take). */
static aiter_mla_status aiter_mla__v4_attention_call(const char *op, const aiter_mla_v4_attention_args *in,
                                                     aiter_mla_kernel *kernel, void *stream) {
    aiter_mla_v4_attention_args a;
    AITER_MLA__CHECK(aiter_mla__v4_attn_resolve(op, "", in, &a, 1, 0));
    if (a.num_tokens > 0) AITER_MLA__CHECK(aiter_mla__v4_splits_check(op, "workspace", &a, "the splits' partials"));
    AITER_MLA__CHECK(aiter_mla__v4_attention_disjoint(op, &a, 0, 1)); /* with no tokens too, as the reference and the query */
    if (a.num_tokens == 0 && !kernel) return aiter_mla__nothing_to_launch(op);
    return AITER_MLA__LAUNCH_OR_PICK(op, kernel, aiter_mla__launch_v4_attention(&a, kernel, stream));
}
AITER_MLA_API aiter_mla_status aiter_mla_v4_attention(const aiter_mla_v4_attention_args *in, void *stream) {
    return aiter_mla__v4_attention_call("v4_attention", in, NULL, stream);
}
AITER_MLA_API aiter_mla_status aiter_mla_v4_attention_kernel(const aiter_mla_v4_attention_args *in, aiter_mla_kernel *kernel) {
    AITER_MLA__NEED("v4_attention_kernel", kernel, "kernel");
    return aiter_mla__v4_attention_call("v4_attention_kernel", in, kernel, NULL);
}

/* ---- chunked prefill ------------------------------------------------------------------------ */
/* The sizing fields (defaults resolved into *a): M, N, the entries per token of the lists
 * and the workspace bytes. */
static aiter_mla_status aiter_mla__v4_prefill_sizes(const char *op, aiter_mla_v4_prefill_args *a, int64_t *M, int64_t *N,
                                                    int64_t *width, uint64_t *bytes) {
    int64_t rows;
    if (!a->chunk_size) a->chunk_size = AITER_MLA_V4_PREFILL_CHUNK;
    if (!a->compress_ratio) a->compress_ratio = 1;
    if (!a->window) a->window = AITER_MLA_V4_WINDOW;
    if (a->workspace_dtype == AITER_MLA_DTYPE_DEFAULT) a->workspace_dtype = AITER_MLA_BF16;
    AITER_MLA__RANGE(op, a->chunk_size, 1, 1 << 16, "chunk_size");
    AITER_MLA__RANGE(op, a->compress_ratio, 1, 65536, "compress_ratio");
    AITER_MLA__RANGE(op, a->window, 1, 65536, "window");
    AITER_MLA__RANGE(op, a->max_model_len, 1, INT32_MAX, "max_model_len");
    AITER_MLA__RANGE(op, a->max_num_batched_tokens, 1, INT32_MAX, "max_num_batched_tokens");
    if (a->compress_ratio > 1) {
        if (!a->topk_stride) a->topk_stride = a->topk;
        AITER_MLA__RANGE(op, a->topk, 1, 1 << 20, "topk");
        AITER_MLA__RANGE(op, a->topk_stride, a->topk, AITER_MLA__MAX_STRIDE, "topk_stride");
    }
    AITER_MLA__CHECK(aiter_mla__check_out_dtype(op, a->workspace_dtype, "", "workspace_dtype"));
    *M = aiter_mla_v4_workspace_rows(a->max_model_len, a->compress_ratio, a->window, a->max_num_batched_tokens, N);
    if (*M * a->chunk_size > INT32_MAX)
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                               "%s: chunk_size x M = %d x %lld workspace rows do not fit int32 (M: aiter_mla_v4_workspace_rows "
                               "of max_model_len, compress_ratio, window, max_num_batched_tokens)",
                               op, a->chunk_size, (long long)*M);
    *width = (a->compress_ratio > 1 ? a->topk : 0) + (int64_t)a->window;
    if (a->max_num_batched_tokens * *width > INT32_MAX) /* a chunk's lists, indexed by an int32 indptr */
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                               "%s: max_num_batched_tokens x (topk + window) = %lld x %lld list entries do not fit int32", op,
                               (long long)a->max_num_batched_tokens, (long long)*width);
    rows = *M * a->chunk_size;
    *bytes = (uint64_t)rows * AITER_MLA_V4_HEAD_DIM * aiter_mla_dtype_size(a->workspace_dtype) +
             sizeof(int32_t) * (uint64_t)(3 * (int64_t)a->chunk_size + 1 + a->max_num_batched_tokens + 1 +
                                          a->max_num_batched_tokens * *width);
    return AITER_MLA_OK;
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_prefill_workspace_size(const aiter_mla_v4_prefill_args *in, size_t *bytes) {
    const char *op = "v4_prefill_workspace_size";
    aiter_mla_v4_prefill_args a;
    int64_t M, N, width;
    uint64_t n;
    AITER_MLA__NEED(op, in, "args");
    AITER_MLA__NEED(op, bytes, "bytes");
    a = *in;
    AITER_MLA__CHECK(aiter_mla__v4_prefill_sizes(op, &a, &M, &N, &width, &n));
    if (!aiter_mla__size_fits(n, bytes))
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT,
                               "%s: the workspace (chunk_size x M = %d x %lld key rows and %lld list entries a token, %llu bytes) "
                               "passes size_t on this host",
                               op, a.chunk_size, (long long)M, (long long)width, (unsigned long long)n);
    return AITER_MLA_OK;
}

/* A prefill resolved: the args with defaults, the sizes, and the workspace's parts after the
 * rows (per chunk: each request's gathered raw tokens and compressed entries, the chunk's
 * token offsets from its first token, then the combine's ragged lists). */
typedef struct aiter_mla__v4_prefill {
    aiter_mla_v4_prefill_args a;
    int64_t M, N, width, tokens;
    int64_t workspace_need; /* bytes of the workspace the call uses (workspace_bytes may say more) */
    int64_t split_bytes; /* the GPU attention's split partials in attn.workspace, for the largest chunk (else 0) */
    int32_t *gather_lens, *compressed_lens, *chunk_qsl, *indptr, *lists; /* [chunk_size] x 2, [chunk_size + 1],
                                                                            [max_num_batched_tokens + 1], the entries */
} aiter_mla__v4_prefill;

/* Every check either form makes: the reference (gpu = 0) checks query_start_loc and seq_lens,
 * host arrays; the GPU call reads only query_start_loc_host on the host. */
static aiter_mla_status aiter_mla__v4_prefill_resolve(const char *op, const aiter_mla_v4_prefill_args *in, int gpu,
                                                      aiter_mla__v4_prefill *r) {
    aiter_mla_v4_prefill_args *a = &r->a;
    aiter_mla_v4_attention_args at;
    const int32_t *qsl;
    uint64_t bytes; /* the workspace's, checked against workspace_bytes before any pointer into it is formed */
    int b;
    AITER_MLA__NEED(op, in, "args");
    *a = *in;
    r->split_bytes = 0;
    AITER_MLA__CHECK(aiter_mla__v4_prefill_sizes(op, a, &r->M, &r->N, &r->width, &bytes));
    r->workspace_need = (int64_t)bytes; /* below 2^63: int32 row and entry counts */
    AITER_MLA__RANGE(op, a->batch, 1, INT32_MAX - 1, "batch");
    AITER_MLA__CHECK(aiter_mla__v4_pages_resolve(op, "swa_", a->swa_num_blocks, &a->swa_block_size, &a->swa_page_stride_bytes,
                                                 &a->swa_fp8_dtype, "fp8_dtype", 64, a->swa_cache_bytes, "cache_bytes"));
    AITER_MLA__RANGE(op, a->swa_block_table_stride, 1, AITER_MLA__MAX_STRIDE, "swa_block_table_stride");
    AITER_MLA__NEED(op, a->query_start_loc, "query_start_loc");
    if (gpu) AITER_MLA__NEED_ARRAY(op, a->query_start_loc_host, "query_start_loc_host"); /* read below */
    AITER_MLA__NEED(op, a->seq_lens, "seq_lens");
    AITER_MLA__NEED(op, a->swa_cache, "swa_cache");
    AITER_MLA__NEED(op, a->swa_block_table, "swa_block_table");
    if (a->compress_ratio > 1) {
        AITER_MLA__CHECK(aiter_mla__v4_pages_resolve(op, "compressed_", a->compressed_num_blocks, &a->compressed_block_size,
                                                     &a->compressed_page_stride_bytes, &a->compressed_fp8_dtype, "fp8_dtype",
                                                     aiter_mla__v4_compressed_block_size(a->compress_ratio),
                                                     a->compressed_cache_bytes, "cache_bytes"));
        AITER_MLA__RANGE(op, a->compressed_block_table_stride, 1, AITER_MLA__MAX_STRIDE, "compressed_block_table_stride");
        AITER_MLA__NEED(op, a->compressed_cache, "compressed_cache");
        AITER_MLA__NEED(op, a->compressed_block_table, "compressed_block_table");
        AITER_MLA__NEED(op, a->topk_indices, "topk_indices");
    }
    if (gpu) {
        qsl = a->query_start_loc_host;
        AITER_MLA__CHECK(aiter_mla__indptr_start(op, qsl, "", "query_start_loc_host"));
        for (b = 0; b < a->batch; b++) AITER_MLA__CHECK(aiter_mla__indptr_step(op, qsl, b, "", "query_start_loc_host"));
    } else {
        qsl = a->query_start_loc;
        AITER_MLA__CHECK(aiter_mla__v4_requests_check(op, qsl, a->seq_lens, a->batch));
        for (b = 0; b < a->batch; b++)
            if (a->seq_lens[b] > a->max_model_len)
                return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: seq_lens[%d] = %d exceeds max_model_len = %lld", op, b,
                                       a->seq_lens[b], (long long)a->max_model_len);
    }
    r->tokens = (int64_t)qsl[a->batch] - qsl[0];
    if (r->tokens > a->max_num_batched_tokens)
        return aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "%s: the batch has %lld tokens, more than max_num_batched_tokens = %lld",
                               op, (long long)r->tokens, (long long)a->max_num_batched_tokens);
    a->attn.num_tokens = r->tokens;
    AITER_MLA__CHECK(aiter_mla__v4_attn_resolve(op, "attn.", &a->attn, &at, 0, !gpu));
    a->attn = at;
    if (r->tokens == 0) return AITER_MLA_OK;
    AITER_MLA__CHECK(aiter_mla__check_workspace(op, "workspace", a->workspace, a->workspace_bytes, bytes, "the prefill's key rows and lists"));
    AITER_MLA__CHECK(aiter_mla__check_aligned(op, a->workspace, 4, "workspace"));
    if (gpu) { /* the GPU attention's splits, checked once for the largest chunk before anything runs */
        int64_t cs;
        at.num_tokens = 0;
        for (cs = 0; cs < a->batch; cs += a->chunk_size) {
            const int64_t end = cs + a->chunk_size < a->batch ? cs + a->chunk_size : a->batch;
            if (qsl[end] - qsl[cs] > at.num_tokens) at.num_tokens = qsl[end] - qsl[cs];
        }
        AITER_MLA__CHECK(aiter_mla__v4_splits_check(op, "attn.workspace", &at, "the largest chunk's split partials"));
        r->split_bytes = (int64_t)aiter_mla__v4_attn_workspace(&at);
    }
    r->gather_lens = (int32_t *)((char *)a->workspace +
                                 (size_t)r->M * (size_t)a->chunk_size * AITER_MLA_V4_HEAD_DIM * aiter_mla_dtype_size(a->workspace_dtype));
    r->compressed_lens = r->gather_lens + a->chunk_size;
    r->chunk_qsl = r->compressed_lens + a->chunk_size;
    r->indptr = r->chunk_qsl + a->chunk_size + 1;
    r->lists = r->indptr + a->max_num_batched_tokens + 1;
    return AITER_MLA_OK;
}

/* A chunk's gather from one cache's pages, its block table from request cs's row. */
static void aiter_mla__v4_gather_pages(aiter_mla_v4_gather_args *g, const void *cache, int64_t num_blocks, int block_size,
                                       int64_t page_stride_bytes, aiter_mla_dtype fp8_dtype, const int32_t *block_table,
                                       int64_t block_table_stride, int cs) {
    g->kv_cache = cache;
    g->num_blocks = num_blocks;
    g->block_size = block_size;
    g->page_stride_bytes = page_stride_bytes;
    g->fp8_dtype = fp8_dtype;
    g->block_table = block_table + (int64_t)cs * block_table_stride;
    g->block_table_stride = block_table_stride;
}

/* The steps of the chunk of n requests from request cs (its tokens: rows row0 .. row0 +
 * tokens of q and o; chunk_qsl: its query_start_loc as the combine reads it): (1) the
 * compressed gather, (2) the SWA gather, (3) the combine, (4) the attention. */
static void aiter_mla__v4_prefill_chunk(const aiter_mla__v4_prefill *r, int cs, int n, int64_t row0, int64_t tokens,
                                        const int32_t *chunk_qsl, aiter_mla_v4_gather_args *gc, aiter_mla_v4_gather_args *gs,
                                        aiter_mla_v4_combine_args *c, aiter_mla_v4_attention_args *at) {
    const aiter_mla_v4_prefill_args *a = &r->a;
    memset(gc, 0, sizeof *gc);
    gc->batch = n;
    gc->out = a->workspace;
    gc->out_rows = r->M;
    gc->out_dtype = a->workspace_dtype;
    *gs = *gc;
    if (a->compress_ratio > 1) /* (1) compressed entries to rows [0, N) (ratio > 1: the tables are given) */
        aiter_mla__v4_gather_pages(gc, a->compressed_cache, a->compressed_num_blocks, a->compressed_block_size,
                                   a->compressed_page_stride_bytes, a->compressed_fp8_dtype, a->compressed_block_table,
                                   a->compressed_block_table_stride, cs);
    gc->seq_lens = r->compressed_lens;
    /* (2) the window's raw tokens to rows [N, N + gather_len) */
    aiter_mla__v4_gather_pages(gs, a->swa_cache, a->swa_num_blocks, a->swa_block_size, a->swa_page_stride_bytes,
                               a->swa_fp8_dtype, a->swa_block_table, a->swa_block_table_stride, cs);
    gs->seq_lens = a->seq_lens + cs;
    gs->gather_lens = r->gather_lens;
    gs->offset = r->N;
    memset(c, 0, sizeof *c); /* (3) each token's rows */
    if (a->compress_ratio > 1) {
        c->topk_indices = a->topk_indices + row0 * a->topk_stride;
        c->topk_stride = a->topk_stride;
        c->topk = a->topk;
    }
    c->query_start_loc = chunk_qsl;
    c->seq_lens = a->seq_lens + cs;
    c->gather_lens = r->gather_lens;
    c->num_reqs = n;
    c->window = a->window;
    c->compress_ratio = a->compress_ratio;
    c->M = r->M;
    c->N = r->N;
    c->out.indices = r->lists;
    c->out.indptr = r->indptr;
    c->out.capacity = a->max_num_batched_tokens * r->width;
    *at = a->attn; /* (4) attend over the workspace rows */
    at->q = (const char *)a->attn.q + (size_t)(row0 * a->attn.q_stride_token) * aiter_mla_dtype_size(a->attn.q_dtype);
    at->o = (char *)a->attn.o + (size_t)(row0 * a->attn.o_stride_token) * aiter_mla_dtype_size(a->attn.o_dtype);
    at->lse = a->attn.lse ? a->attn.lse + row0 * a->attn.num_heads : NULL;
    at->num_tokens = tokens;
    at->keys_read_once = 0; /* a chunk's tokens share its workspace rows */
    at->keys_shared = 1;    /* ... and reread them (the kept loads take MODEL1 rows alone) */
    memset(&at->keys, 0, sizeof at->keys);
    memset(&at->extra_keys, 0, sizeof at->extra_keys);
    at->keys.cache = a->workspace;
    at->keys.num_blocks = (int64_t)n * r->M;
    at->keys.rows = 1;
    at->keys.dtype = a->workspace_dtype;
    at->keys.indices = r->lists;
    at->keys.indptr = r->indptr;
}

/* Both forms: the chunks in turn, each one's request data (the reference's from the host
 * arrays; the GPU call's by one launch from the device arrays), then its four steps. */
static aiter_mla_status aiter_mla__v4_prefill_run(const char *op, const aiter_mla_v4_prefill_args *in, int gpu, void *stream) {
    aiter_mla__v4_prefill r;
    int64_t c0;
    AITER_MLA__CHECK(aiter_mla__v4_prefill_resolve(op, in, gpu, &r));
    if (r.tokens > 0) { /* the outputs (workspace, o, lse; the GPU's split partials) against what the call reads:
                           host sizes, so both calls */
        const aiter_mla_v4_prefill_args *a = &r.a;
        const int64_t ratio = a->compress_ratio > 1, T = r.tokens;
        const aiter_mla__span ins[9] = {
            aiter_mla__span_strided(a->attn.q, T, a->attn.num_heads, a->attn.q_stride_token, a->attn.q_stride_head,
                                    AITER_MLA_V4_HEAD_DIM, aiter_mla_dtype_size(a->attn.q_dtype), "attn.q"),
            aiter_mla__span_of(a->query_start_loc, (int64_t)a->batch + 1, 4, "query_start_loc"),
            aiter_mla__span_of(a->seq_lens, a->batch, 4, "seq_lens"),
            aiter_mla__span_of(ratio ? a->topk_indices : NULL, ratio ? T * a->topk_stride : 0, 4, "topk_indices"), /* ratio 1: unread */
            aiter_mla__span_of(a->swa_cache, a->swa_num_blocks * a->swa_page_stride_bytes, 1, "swa_cache"),
            aiter_mla__span_of(a->swa_block_table, a->batch * a->swa_block_table_stride, 4, "swa_block_table"),
            aiter_mla__span_of(ratio ? a->compressed_cache : NULL, ratio ? a->compressed_num_blocks * a->compressed_page_stride_bytes : 0,
                               1, "compressed_cache"),
            aiter_mla__span_of(ratio ? a->compressed_block_table : NULL, ratio ? a->batch * a->compressed_block_table_stride : 0, 4,
                               "compressed_block_table"),
            aiter_mla__span_of(a->attn.attn_sink, a->attn.num_heads, 4, "attn.attn_sink")};
        aiter_mla__span outs[4];
        outs[0] = aiter_mla__span_of(a->workspace, r.workspace_need, 1, "workspace"); /* what it writes */
        outs[1] = aiter_mla__span_of(a->attn.workspace, r.split_bytes, 1, "attn.workspace");
        outs[2] = aiter_mla__span_strided(a->attn.o, T, a->attn.num_heads, a->attn.o_stride_token, a->attn.o_stride_head,
                                          AITER_MLA_V4_HEAD_DIM, aiter_mla_dtype_size(a->attn.o_dtype), "attn.o");
        outs[3] = aiter_mla__span_of(a->attn.lse, T * a->attn.num_heads, 4, "attn.lse");
        AITER_MLA__CHECK(aiter_mla__check_arrays(op, outs, 4, ins, 9));
    }
    for (c0 = 0; r.tokens > 0 && c0 < r.a.batch; c0 += r.a.chunk_size) {
        const aiter_mla_v4_prefill_args *a = &r.a;
        const int cs = (int)c0, n = a->batch - cs < a->chunk_size ? a->batch - cs : a->chunk_size;
        const int32_t *qsl = gpu ? a->query_start_loc_host : a->query_start_loc; /* as the host reads it */
        const int64_t row0 = (int64_t)qsl[cs] - qsl[0], tokens = (int64_t)qsl[cs + n] - qsl[cs];
        aiter_mla_v4_gather_args gc, gs;
        aiter_mla_v4_combine_args c;
        aiter_mla_v4_attention_args at;
        int i;
        if (tokens == 0) continue; /* no new tokens: nothing attends */
        if (gpu) {
            AITER_MLA__CHECK(AITER_MLA__LAUNCH(op, aiter_mla__launch_v4_prefill_lens(a->query_start_loc + cs, a->seq_lens + cs, n,
                                                                                     (int32_t)tokens, a->window, a->compress_ratio,
                                                                                     r.chunk_qsl, r.gather_lens, r.compressed_lens,
                                                                                     stream)));
        } else {
            for (i = 0; i < n; i++)
                aiter_mla__v4_prefill_lens(qsl[cs + i + 1] - qsl[cs + i], a->seq_lens[cs + i], a->window, a->compress_ratio,
                                           &r.gather_lens[i], &r.compressed_lens[i]);
        }
        aiter_mla__v4_prefill_chunk(&r, cs, n, row0, tokens, gpu ? r.chunk_qsl : qsl + cs, &gc, &gs, &c, &at);
        if (gpu) {
            if (a->compress_ratio > 1) AITER_MLA__CHECK(aiter_mla_v4_gather(&gc, stream));
            AITER_MLA__CHECK(aiter_mla_v4_gather(&gs, stream));
            AITER_MLA__CHECK(aiter_mla_v4_combine(&c, stream));
            AITER_MLA__CHECK(aiter_mla_v4_attention(&at, stream));
        } else {
            if (a->compress_ratio > 1) AITER_MLA__CHECK(aiter_mla_v4_gather_ref(&gc));
            AITER_MLA__CHECK(aiter_mla_v4_gather_ref(&gs));
            AITER_MLA__CHECK(aiter_mla_v4_combine_ref(&c));
            AITER_MLA__CHECK(aiter_mla_v4_attention_ref(&at));
        }
    }
    return gpu ? aiter_mla__nothing_to_launch(op) : AITER_MLA_OK; /* ERR_NO_GPU without a GPU, even for no tokens */
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_prefill_ref(const aiter_mla_v4_prefill_args *a) {
    return aiter_mla__v4_prefill_run("v4_prefill_ref", a, 0, NULL);
}

AITER_MLA_API aiter_mla_status aiter_mla_v4_prefill(const aiter_mla_v4_prefill_args *a, void *stream) {
    return aiter_mla__v4_prefill_run("v4_prefill", a, 1, stream);
}

#ifdef __cplusplus
}
#endif
#endif /* AITER_MLA_IMPLEMENTATION */
