#!/bin/sh
# check_kernel_symbols.sh OBJECT: what a compiled kernels.hip exports and needs. A program
# links it beside its own code, so its strong global symbols are the launchers and helpers
# (aiter_mla__*) and what the GPU compiler generates (anonymous-namespace names, which carry
# the file's hash, and its runtime's registration symbols): a kernel or helper with a plain
# name would clash with the user's. It may not call a public aiter_mla_ function:
# AITER_MLA_STATIC makes those static to the user's file (kernels.hip uses the header's
# internal inline helpers instead).
obj=$1
[ -f "$obj" ] || { echo "check_kernel_symbols: no object $obj"; exit 1; }
bad=0
exported=$(nm -g --defined-only "$obj" | awk '$2 ~ /^[TDBR]$/ { print $3 }' |
    grep -v -E '^aiter_mla__|_GLOBAL__N_|^__hip|^__cuda|^__nv|^__fatbin' || true)
if [ -n "$exported" ]; then
    echo "check_kernel_symbols: $obj exports symbols without the library's prefix:"
    echo "$exported" | c++filt | sed 's/^/  /'
    bad=1
fi
needed=$(nm -u "$obj" | awk '{ print $NF }' | grep -E '^aiter_mla_' || true)
if [ -n "$needed" ]; then
    echo "check_kernel_symbols: $obj calls public functions of the header (undefined under AITER_MLA_STATIC):"
    echo "$needed" | sed 's/^/  /'
    bad=1
fi
exit $bad
