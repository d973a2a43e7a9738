#!/bin/bash
# Device-side runner: run.sh BUDGET_S TASK... ; each task's log under $OUT. Starts no task after BUDGET_S.
set -u
start=$(date +%s); budget=$1; shift
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD
export PYTHONUNBUFFERED=1 MOJO_CACHE_DIR=/tmp/mojo-cache NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
for t in "$@"; do
  now=$(date +%s); left=$((budget - (now - start)))
  if [ $left -lt 20 ]; then echo "SKIP $t (budget)"; continue; fi
  echo "=== $t (left ${left}s) $(date +%T)"
  case $t in
    [1-6]) timeout $((left - 5)) python3 scripts/gpu_verify.py --shard $t/6 -n 16 --out $OUT/part$t.json \
             > $OUT/shard$t.log 2>&1; echo "rc=$?"; tail -4 $OUT/shard$t.log ;;
    r[1-9]) k=${t#r}; timeout $((left - 5)) python3 scripts/gpu_verify.py --rerun scratch/dev/part$k.json -n 16 \
             --out $OUT/part$k.json > $OUT/shard$k.log 2>&1; echo "rc=$?"; tail -4 $OUT/shard$k.log ;;
    decode) timeout $((left - 5)) python3 benchmarks/bench_decode.py --model llama,qwen3 --batch 1 --ctx 4096 \
             --impls inductor,mojo --parts step --budget-s 400 2>&1 | tee $OUT/decode.log | tail -15 ;;
    decodeq) timeout $((left - 5)) python3 benchmarks/bench_decode.py --model qwen3 --batch 1 --ctx 4096 \
             --impls inductor,mojo --parts step 2>&1 | tee $OUT/decodeq.log | tail -15 ;;
    generate) timeout $((left - 5)) python3 benchmarks/bench_decode.py --model llama,qwen3 --gen-runs 3 \
             --impls inductor,mojo --parts generate --budget-s 400 2>&1 | tee -a $OUT/generate.log | tail -22 ;;
    decodel) timeout $((left - 5)) python3 benchmarks/bench_decode.py --model llama --batch 1 --ctx 4096 \
             --impls inductor,mojo --parts step --budget-s 400 2>&1 | tee $OUT/decodel.log | tail -12 ;;
    genl) timeout $((left - 5)) python3 benchmarks/bench_decode.py --model llama --gen-runs 3 --gen-reps 3 \
             --impls inductor,mojo --parts generate --budget-s 400 2>&1 | tee $OUT/genl.log | tail -14 ;;
    lin) timeout $((left - 5)) python3 benchmarks/bench_linear.py --rows 1,4 2>&1 | tee $OUT/lin.log | tail -24 ;;
    lt) timeout $((left - 5)) python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_linear.py \
             tests/test_kernels_linear.py -W ignore 2>&1 | tail -15 ;;
    train) timeout $((left - 5)) python3 benchmarks/bench_train.py --model llama3-dims --impls liger,mojo \
             --profile mojo --profile-trace $OUT 2>&1 | tee $OUT/train.log | tail -30 ;;
    trainq) timeout $((left - 5)) python3 benchmarks/bench_train.py --model qwen3-8b-dims --impls liger,mojo \
             2>&1 | tee $OUT/trainq.log | tail -12 ;;
    chunk512) timeout $((left - 5)) python3 benchmarks/bench_train.py --model llama3-dims --impls mojo \
             --lce-chunk-mb 512 2>&1 | tee $OUT/chunk512.log | tail -8 ;;
    whole) MOJO_BACKWARD_PIECE_MB=0 timeout $((left - 5)) python3 benchmarks/bench_train.py --model llama3-dims \
             --impls mojo 2>&1 | tee $OUT/whole.log | tail -8 ;;
    gen2) timeout $((left - 5)) python3 benchmarks/bench_decode.py --model llama,qwen3 --gen-runs 3 --gen-reps 5 \
             --impls inductor,mojo --parts generate 2>&1 | tee $OUT/gen2.log | tail -22 ;;
    ship) python3 -c "from mojo_compile import cli; cli.main(['warm-cache', '--ship'])"  # (same bytes if current)
          cp mojo_compile/pattern_data/*py3.12* $OUT/ && ls -la $OUT/*.gz ;;
    compile) timeout $((left - 5)) python3 benchmarks/bench_compile.py --model llama,qwen3 --workload prefill,decode \
             --impls inductor,mojo-traced,mojo-cold --budget-s $((left - 120)) --phases --json $OUT/compile.json \
             2>&1 | tee $OUT/compile.log | grep -B2 -A8 "^| model | workload | Inductor" ;;
    compilestatic) TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=1 timeout $((left - 5)) python3 \
             benchmarks/bench_compile.py --model llama,qwen3 --workload decode --impls inductor,mojo-cold \
             --budget-s $((left - 120)) --phases 2>&1 | tee $OUT/compilestatic.log \
             | grep -B2 -A8 "^| model | workload | Inductor" ;;
    staticab) for v in 0 1; do TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=$v timeout 200 python3 \
             benchmarks/bench_compile.py --model llama,qwen3 --workload decode \
             --impls $([ $v = 0 ] && echo inductor,mojo-cold || echo mojo-cold) --budget-s 170 --phases \
             > $OUT/static$v.log 2>&1; echo "static=$v"; grep -A4 "^| model | workload |  *variant" $OUT/static$v.log; done ;;
    statictests) TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=1 timeout $((left - 5)) python3 -m pytest -q \
             -p no:cacheprovider -n 16 -W ignore tests/test_inline.py tests/test_hf_models.py tests/conformance \
             > $OUT/statictests.log 2>&1; echo "rc=$?"; tail -15 $OUT/statictests.log ;;
    staticl) for v in 0 1 0 1; do TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=$v timeout 100 python3 \
             benchmarks/bench_compile.py --model llama --workload decode --impls mojo-cold --budget-s 90 --phases \
             > $OUT/staticl$v.log 2>&1; echo "static=$v"; grep -A2 "^| model | workload |  *variant" $OUT/staticl$v.log \
             | tail -1; grep "load_by_key_path\|own passes" $OUT/staticl$v.log; done ;;
    dyn) timeout 120 python3 scratch/dev/dyn_debug.py > $OUT/dyn.log 2>&1; tail -c 6000 $OUT/dyn.log ;;
    *) echo "unknown task $t" ;;
  esac
done
echo "done $(( $(date +%s) - start ))s"
