export BRAID_TIMEOUT=10
B=.devbuild
fails=0
for n in 2 4 8; do
  for t in all_reduce reduce_scatter reduce all_gather broadcast alltoall sendrecv gather scatter; do
    ops=""; case $t in all_reduce|reduce_scatter|reduce) ops="-o all" ;; esac
    if timeout 90 $B/perf/${t}_perf -t $n -b 8 -e 8M -f 32 -n 2 -w 1 -d all $ops > $OUT/${t}_t$n.log 2>&1; then r=ok; else r=FAIL; fails=$((fails+1)); fi
    echo "$t t$n: $r $(grep -E 'Out of bounds' $OUT/${t}_t$n.log)"
  done
done
echo "failures: $fails"
timeout 120 $B/perf/all_reduce_perf -t 2 -b 8 -e 256M -f 4 -n 20 -w 5 2>&1 | grep -E "^ +[0-9]|Out of|Avg"
timeout 60 $B/perf/all_gather_perf -t 2 -b 1M -e 256M -f 16 -n 20 -w 5 2>&1 | grep -E "^ +[0-9]|Out of"
nvidia-cuda-mps-control -d; sleep 1
LD_PRELOAD=$(realpath $B/libnccl.so.2) PYTHONUNBUFFERED=1 timeout 200 torchrun --nproc-per-node 2 tests/gpu/torch_braid.py 2>&1 | grep -E "ok:|FAIL|passed|Error|error" | tail -20
echo quit | nvidia-cuda-mps-control
