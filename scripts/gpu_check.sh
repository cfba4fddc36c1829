#!/usr/bin/env bash
# The trainer's smoke path on a GPU: a randomly initialised Qwen2 of about 0.5B parameters in bf16,
# SFT (~20 steps) then GRPO (~5 steps) through `transferlab coding train`, then `coding eval --json`.
# Prints tokens/s and peak memory of each command; everything goes under $OUT (else a temp dir).
# Nothing is downloaded. CI never runs this; run it whenever a GPU machine is available and record
# the result in docs/results/.
#
#   scripts/gpu_check.sh                                   # make gpu-check does the same
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_SIZE=tiny scripts/gpu_check.sh   # flow check on a CPU machine
#
# Settings (environment): GPU_CHECK_DEVICE (cuda), GPU_CHECK_DTYPE (bfloat16 on cuda, float32 on cpu),
# GPU_CHECK_SIZE (0.5b), GPU_CHECK_FAMILY (qwen2), GPU_CHECK_SFT_STEPS (20), GPU_CHECK_GRPO_STEPS (5),
# GPU_CHECK_TASKS (toy), TRANSFERLAB (the CLI; default .venv/bin/transferlab, else transferlab).
set -euo pipefail

cd "$(dirname "$0")/.."
DEVICE="${GPU_CHECK_DEVICE:-cuda}"
SIZE="${GPU_CHECK_SIZE:-0.5b}"
FAMILY="${GPU_CHECK_FAMILY:-qwen2}"
SFT_STEPS="${GPU_CHECK_SFT_STEPS:-20}"
GRPO_STEPS="${GPU_CHECK_GRPO_STEPS:-5}"
TASKS="${GPU_CHECK_TASKS:-toy}"
if [[ "$DEVICE" == cpu ]]; then DTYPE="${GPU_CHECK_DTYPE:-float32}"; else DTYPE="${GPU_CHECK_DTYPE:-bfloat16}"; fi
if [[ -n "${TRANSFERLAB:-}" ]]; then CLI="$TRANSFERLAB"
elif [[ -x .venv/bin/transferlab ]]; then CLI=.venv/bin/transferlab
else CLI=transferlab; fi
if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi

if [[ "$DEVICE" == cuda* ]]; then
    if ! "$PY" - <<'EOF'
import sys
import torch
if not torch.cuda.is_available():
    sys.exit(f"error: gpu_check needs CUDA, but this torch ({torch.__version__}, CUDA build "
             f"{torch.version.cuda}) sees no CUDA device; run it on a GPU machine, or set "
             "GPU_CHECK_DEVICE=cpu GPU_CHECK_SIZE=tiny for a flow check on the CPU")
print(f"CUDA: {torch.cuda.get_device_name(0)}, torch {torch.__version__} (CUDA {torch.version.cuda})")
EOF
    then exit 2; fi
fi

WORK="${OUT:-$(mktemp -d -t gpu_check.XXXXXX)}"
mkdir -p "$WORK"
echo "gpu_check: $FAMILY $SIZE on $DEVICE ($DTYPE), tasks $TASKS; everything under $WORK"

# Small batches for a 0.5B model's first steps; the lr suits a random init (not a pretrained model).
cat > "$WORK/sft.json" <<EOF
{"steps": $SFT_STEPS, "batch_size": 8, "lr": 1e-4}
EOF
cat > "$WORK/grpo.json" <<EOF
{"steps": $GRPO_STEPS, "tasks_per_step": 8, "group_size": 4, "lr": 1e-5, "max_new_tokens": 24,
 "rollout_workers": 1, "checkpoint_every": 0}
EOF

run() {  # run a step, keep its output in $WORK/<name>.log, and stop on the first failure
    local name="$1"; shift
    echo "== $name: $*"
    local start=$SECONDS
    if ! "$@" > "$WORK/$name.log" 2> "$WORK/$name.err"; then
        tail -n 20 "$WORK/$name.err" >&2
        echo "gpu_check: $name failed (logs in $WORK/$name.log and $WORK/$name.err)" >&2
        exit 1
    fi
    cat "$WORK/$name.log"
    echo "   ($((SECONDS - start)) s)"
}

run init "$CLI" coding model init --family "$FAMILY" --size "$SIZE" --out "$WORK/base" --seed 0
run sft "$CLI" coding train sft --model "$WORK/base" --tasks "$TASKS" --out "$WORK/sft" \
    --config "$WORK/sft.json" --device "$DEVICE" --dtype "$DTYPE" --runs-root "$WORK/runs"
run grpo "$CLI" coding train grpo --model "$WORK/sft" --tasks "$TASKS" --out "$WORK/grpo" \
    --config "$WORK/grpo.json" --device "$DEVICE" --dtype "$DTYPE" --runs-root "$WORK/runs" \
    --rollout-backend local --rollout-workers 1
run eval "$CLI" coding eval --model "$WORK/grpo" --tasks "$TASKS" --samples 2 \
    --device "$DEVICE" --dtype "$DTYPE" --json

"$PY" - "$WORK" <<'EOF'
import json, pathlib, sys
work = pathlib.Path(sys.argv[1])
rows = []
for algo in ("sft", "grpo"):
    summary = sorted(work.glob(f"runs/coding-train-{algo}/*/artifacts/summary.json"))[-1]
    s = json.loads(summary.read_text())
    rows.append(f"| {algo} | {s['steps']} | {s['tokens_per_s']:.0f} | {s['peak_memory_gib']:.2f} "
                f"({s['peak_memory_kind']}) | {s['train_seconds']:.1f} |")
ev = json.loads((work / "eval.log").read_text())
table = "\n".join([
    "| command | steps | tokens/s | peak memory GiB | train s |",
    "|---|---|---|---|---|",
    *rows,
])
print(table)
print(f"eval: success {ev['success_rate']:.3f} [{ev['ci_low']:.3f}, {ev['ci_high']:.3f}] over {ev['n']} "
      f"episodes on {ev['tasks']} ({ev['split']}), {ev['seconds']:.1f} s on {ev['device']}, "
      f"peak memory {ev['peak_memory_gib']:.2f} GiB ({ev['peak_memory_kind']})")
(work / "gpu_check.md").write_text(table + "\n")
EOF
echo "gpu_check: done ($WORK)"
