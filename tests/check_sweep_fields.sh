#!/bin/sh
# check_sweep_fields.sh - tests/test_host.c's sweep ("scalar fields at their extremes") lists
# each args struct's scalar fields by hand, in its sweep_*_fields tables. This check reads the
# struct definitions in aiter_mla.h and fails when a table misses a scalar field of its struct
# (an int, int64_t, size_t, float or dtype; nested structs' fields by their dotted names), lists
# one twice, or when a public *_args / *_desc struct has no table.
# A field left out on purpose is named in its table's block as  sweep-skip: NAME (why).
# Usage: sh tests/check_sweep_fields.sh  (exit 0 when every table is complete)
set -eu
cd "$(dirname "$0")/.."
exec awk '
BEGIN {
    scalar["int"] = scalar["int32_t"] = scalar["int64_t"] = scalar["size_t"] = scalar["float"] = 1
    scalar["aiter_mla_dtype"] = 1
}
FNR == 1 { file++; in_comment = 0 }
# Comments out (both files), so that a field named in a comment does not count; a comment
# that opens with "sweep-skip:" is kept aside in skipline.
{
    line = $0; out = ""
    while (line != "") {
        if (in_comment) {
            e = index(line, "*/"); if (e == 0) { line = ""; break }
            line = substr(line, e + 2); in_comment = 0
        } else {
            s = index(line, "/*"); c = index(line, "//")
            if (c > 0 && (s == 0 || c < s)) { out = out substr(line, 1, c - 1); line = ""; break }
            if (s == 0) { out = out line; line = "" ; break }
            out = out substr(line, 1, s - 1); rest = substr(line, s + 2)
            if (file == 2 && rest ~ /^ *sweep-skip:/) skipline = rest
            line = rest; in_comment = 1
        }
    }
}
file == 1 && out ~ /^typedef struct aiter_mla_[a-z0-9_]* *\{/ && out !~ /aiter_mla__/ {
    split(out, w, /[ \t{]+/); cur = w[3]; body[cur] = ""; next
}
file == 1 && cur != "" {
    if (out ~ /^\} *aiter_mla_/) { nstructs++; order[nstructs] = cur; cur = ""; next }
    body[cur] = body[cur] " " out; next
}
file == 2 && out ~ /^#define SW_KEYS_\(k\)/ { in_keys = 1 }
file == 2 && in_keys {
    s = out
    while (match(s, /k\.[A-Za-z0-9_]+/)) { nkeys++; keyfield[nkeys] = substr(s, RSTART + 2, RLENGTH - 2); s = substr(s, RSTART + RLENGTH) }
    if (out !~ /\\$/) in_keys = 0
    next
}
# A table block: #define T_ STRUCT ... #undef T_. Its entries and its sweep-skip notes both
# count as listed fields of STRUCT (one table a struct).
file == 2 && out ~ /^#define T_ / { split(out, w, /[ \t]+/); ttype = w[3]; skipline = ""; next }
file == 2 && out ~ /^#undef T_/ { ttype = ""; next }
file == 2 && ttype != "" {
    if (skipline != "") {
        s = skipline; sub(/^.*sweep-skip: */, "", s); sub(/[ (].*$/, "", s); listed[ttype, s]++; skipline = ""
    }
    if (match(out, /sweep_field sweep_[a-z0-9_]+_fields/)) {
        f = substr(out, RSTART + 12, RLENGTH - 12)
        if (ttype in table_of) { printf "FAIL  struct %s has two tables, %s and %s\n", ttype, table_of[ttype], f; bad++ }
        else { table_of[ttype] = f; ntables++; tables[ntables] = ttype }
    }
    s = out
    while (match(s, /SWG?\(T_, *[A-Za-z0-9_.]+/)) {
        f = substr(s, RSTART, RLENGTH); sub(/^SWG?\(T_, */, "", f); listed[ttype, f]++; s = substr(s, RSTART + RLENGTH)
    }
    s = out
    while (match(s, /SW_KEYS_\([A-Za-z0-9_.]+\)/)) {
        p = substr(s, RSTART + 9, RLENGTH - 10)
        for (k = 1; k <= nkeys; k++) listed[ttype, p "." keyfield[k]]++
        s = substr(s, RSTART + RLENGTH)
    }
    next
}
# The scalar fields of struct t, each as prefix + its dotted name, into fields[1..nfields].
function collect(t, prefix,    n, decls, i, d, type, names, m, j, nm) {
    if (!(t in body)) { printf "FAIL  %s: no definition of struct %s in aiter_mla.h\n", prefix, t; bad++; return }
    n = split(body[t], decls, ";")
    for (i = 1; i <= n; i++) {
        d = decls[i]; gsub(/[ \t]+/, " ", d); sub(/^ /, "", d); sub(/ $/, "", d)
        if (d == "") continue
        sub(/^const /, "", d)
        type = d; sub(/[ *].*$/, "", type)
        d = substr(d, length(type) + 1)
        m = split(d, names, ",")
        for (j = 1; j <= m; j++) {
            nm = names[j]; gsub(/ /, "", nm)
            if (nm ~ /\*/) continue          # a pointer: not swept
            if (type in scalar) { nfields++; fields[nfields] = prefix nm }
            else if (type in body) collect(type, prefix nm ".")
            else { printf "FAIL  %s: field %s%s has type %s, which this check does not know\n", t, prefix, nm, type; bad++ }
        }
    }
}
END {
    checked = 0
    if (nkeys == 0) { print "FAIL  tests/test_host.c: no fields found in SW_KEYS_"; bad++ }
    for (i = 1; i <= ntables; i++) {
        t = tables[i]; table = table_of[t]; nfields = 0
        delete fields
        collect(t, "")
        for (j = 1; j <= nfields; j++) {
            c = listed[t, fields[j]] + 0; checked++
            if (c == 0) { printf "FAIL  %s (struct %s) misses field %s: add it to the table, or name it as sweep-skip: %s (why)\n", table, t, fields[j], fields[j]; bad++ }
            if (c > 1) { printf "FAIL  %s (struct %s) lists field %s %d times\n", table, t, fields[j], c; bad++ }
        }
    }
    for (i = 1; i <= nstructs; i++) {
        t = order[i]
        if (t ~ /_(args|desc)$/ && !(t in table_of)) {
            printf "FAIL  struct %s has no sweep table in tests/test_host.c\n", t; bad++
        }
    }
    if (ntables == 0) { print "FAIL  no sweep tables found in tests/test_host.c"; bad++ }
    printf "%d tables, %d fields checked against aiter_mla.h: %s\n", ntables, checked, bad ? bad " problems" : "complete"
    exit bad ? 1 : 0
}
' aiter_mla.h tests/test_host.c
