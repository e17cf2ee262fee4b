#!/bin/sh
# What converge must leave exactly as it found it (prepare.yml copies this into the container).
#
#   untouched record FILE PATH...   write the state of every entry under each PATH to FILE
#   untouched check FILE            compare the state now with FILE; prints the difference, exit 1
#
# The state of an entry: path, type, size, mode, owner, mtime (ns), link target, and the sha256 of a
# regular file. A directory's mtime changes when anything is created, renamed or removed in it.
set -eu

state() {
    for top in "$@"; do
        find "$top" -printf '%p %y %s %m %u:%g %T@ %l\n'
        find "$top" -type f -exec sha256sum {} +
    done | LC_ALL=C sort
}

case "${1:-}" in
record)
    file=$2; shift 2
    { printf '%s\n' "$*"; state "$@"; } >"$file"
    ;;
check)
    file=$2
    # shellcheck disable=SC2046 # the recorded paths, one word each
    set -- $(head -n 1 "$file")
    now=$(mktemp)
    { printf '%s\n' "$*"; state "$@"; } >"$now"
    if diff -u "$file" "$now"; then rm -f "$now"; else rm -f "$now"; exit 1; fi
    ;;
*)
    echo "usage: untouched record FILE PATH... | untouched check FILE" >&2
    exit 2
    ;;
esac
