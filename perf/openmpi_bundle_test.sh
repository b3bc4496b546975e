#!/usr/bin/env bash
# openmpi_bundle_test BUILD_DIR: scripts/bundle-openmpi's tree runs MPI
# programs on a machine without Open MPI.  The bundle is made, moved to
# another path, and used in a mount namespace where this machine's own Open
# MPI and PMIx (their libraries, plugins, help files and launcher) are
# hidden: OpenMPI's allreduce (mpi_allreduce_perf) and braid's all_reduce_perf
# under its mpirun, each at 3 processes, exact (both exit non-zero on a
# wrong value).  Root only (77 otherwise, or where a mount namespace or a
# mount in it is refused).
set -uo pipefail
build=$(realpath "$1")
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] && unshare -m mount -t tmpfs none /usr/share/openmpi 2> /dev/null ||
  { echo "skipped: needs root, unshare -m and mounts in it"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
scripts/bundle-openmpi "$tmp/made" > /dev/null || { echo "FAILED: bundle-openmpi"; exit 1; }
mv "$tmp/made" "$tmp/moved"
cat > "$tmp/hidden.sh" <<'EOF'
# Runs "$@" with the machine's Open MPI and PMIx out of sight.
set -e
lib=/usr/lib/$(gcc -print-multiarch)
for dir in "$lib/openmpi" "$lib/pmix2" /usr/share/openmpi /etc/openmpi; do
  [ -d "$dir" ] && mount -t tmpfs none "$dir"
done
for f in "$lib"/libmpi.so.40 "$lib"/libopen-pal.so.40 "$lib"/libopen-rte.so.40 "$lib"/libpmix.so.2 \
         /usr/bin/orterun /usr/bin/orted; do
  [ -e "$f" ] && mount --bind /dev/null "$(readlink -f "$f")"
done
"$@"
EOF
fail=0
run() {  # run WHAT COMMAND...: COMMAND in the namespace must succeed
  local what=$1; shift
  if unshare -m bash "$tmp/hidden.sh" "$@" > "$tmp/out.log" 2>&1; then
    echo "ok: $what"
  else
    echo "FAILED: $what"; cat "$tmp/out.log"; fail=1
  fi
}
mpirun=$tmp/moved/mpirun
run "the machine's own launcher is hidden" bash -c '! /usr/bin/orterun --version'
run "OpenMPI's allreduce, 3 processes" "$mpirun" -np 3 "$build/perf/mpi_allreduce_perf" -b 8 -e 64K -f 8 -n 2 -w 1
run "braid's all_reduce_perf under that mpirun, 3 processes" \
  "$mpirun" -np 3 "$build/perf/all_reduce_perf" -b 8 -e 64K -f 8 -n 2 -w 1
exit $fail
