#!/bin/bash
# On the lent GPU machine (see prepare.sh): install the carried wheels, draw MiniLM-shaped random weights,
# then bench/step.py (the recipe's batch sizes with a profile, and batch 128) and bench/large_batch.py.
# Each benchmark runs under its own time limit; logs and JSON go to $OUT (the device tool brings them back).
# A fresh machine takes 30-40 s per step.py row (a process each), ~200 s per step stage: split the four over two calls.
# STAGES picks among step, step128, bert-base and large (default: all four; STEP_REPEAT=K runs the step stage's rows in K interleaved rounds; transient: step128 with workers that end with each epoch, as before they persisted by default; nobf16: every row without bf16 autocast, so `defaults` shows the rest of the defaults; nosync: the recipe's step without the trainer's per-step NaN check; PROFILE= leaves out the profile); LARGE_ARGS adds arguments to large_batch.py (e.g. --configs ...); STEP_ARGS adds arguments to every step.py stage (e.g. --candidate torch_compile=true: one more row, the defaults with that setting).
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=$PWD/.devcarry/shim:/tmp/site:$PWD MINILM_PATH=/tmp/minilm
[ -e ../shared/data ] || ln -s "$PWD/.devcarry/shared" ../shared
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 - <<'PY' || exit 4
import accelerate, datasets, peft, pyarrow, sentence_transformers, torch, transformers
print("torch", torch.__version__, torch.cuda.get_device_name(0))
for module in (transformers, sentence_transformers, datasets, pyarrow, peft, accelerate):
    print(module.__name__, module.__version__)
PY
python3 - <<'PY' || exit 5
import shutil
import torch
from transformers import AutoConfig, BertModel
shutil.copytree(".devcarry/minilm-shape", "/tmp/minilm", dirs_exist_ok=True)
torch.manual_seed(0)
BertModel(AutoConfig.from_pretrained("/tmp/minilm")).save_pretrained("/tmp/minilm")
PY
# Progress bars redraw with carriage returns: split them first, so a line printed after a bar (the trainer's
# summary) is not dropped with it.
quiet() { tr '\r' '\n' | grep -v -e Warning -e "it/s]" -e "s/it]" -e "Generating" -e "Creating parquet" -e '^ *$'; }
df -h /dev/shm | tail -1
# step NAME ARGS...: bench/step.py with the device defaults; should its dataloader workers fail (a small
# /dev/shm), once more with them in the main process, said in the log.
step() {
  local name=$1; shift
  echo "=== step.py $name"
  timeout ${STEP_SECONDS:-200} python3 bench/step.py --device cuda --random-weights --json "$OUT/$name.json" "$@" ${STEP_ARGS:-} \
    2>&1 | quiet | tee "$OUT/$name.log"
  local status=${PIPESTATUS[0]}
  # step.py rewrites its JSON after every row ("complete": false until the end), so a cut stage keeps its rows.
  [ "$status" = 124 ] && echo "=== step.py $name: cut by its ${STEP_SECONDS:-200} s limit (the rows above are in $name.json)"
  if [ "$status" != 0 ] && [ "$status" != 124 ]; then
    echo "=== step.py $name again, --workers 0"
    timeout ${STEP_SECONDS:-200} python3 bench/step.py --device cuda --random-weights --workers 0 \
      --json "$OUT/$name-workers0.json" "$@" ${STEP_ARGS:-} 2>&1 | quiet | tee "$OUT/$name-workers0.log"
  fi
}
case " ${STAGES:-step step128 bert-base large} " in *" step "*)
  step step ${PROFILE---profile} --steps 40 --warmup ${STEP_WARMUP:-5} --repeat ${STEP_REPEAT:-1} ;; esac
case " ${STAGES:-step step128 bert-base large} " in *" bert-base "*)
  step step-bert-base ${PROFILE---profile} --random-shape bert-base --batch-size 64 --steps 20 --warmup ${STEP_WARMUP:-5} ;; esac
case " ${STAGES:-step step128 bert-base large} " in *" step128 "*) step step128 --batch-size 128 --steps 30 --warmup 5 ;; esac
case " ${STAGES:-step step128 bert-base large} " in *" transient "*)
  step step128-transient --batch-size 128 --steps 30 --warmup 5 --set dataloader_persistent_workers=false ;; esac
case " ${STAGES:-step step128 bert-base large} " in *" nobf16 "*)
  step step-nobf16 --set bf16=false --steps 40 --warmup 5 ;; esac
case " ${STAGES:-step step128 bert-base large} " in *" nosync "*)
  step step-nosync --set logging_nan_inf_filter=false --steps 40 --warmup 5 ;; esac
case " ${STAGES:-step step128 bert-base large} " in *" large "*) ;; *) exit 0 ;; esac
echo "=== large_batch.py"
timeout ${LARGE_SECONDS:-200} python3 bench/large_batch.py --device cuda --rows 32 128 --tokens 8192 32768 \
  --sts-tokens 16384 ${LARGE_ARGS:-} --output "$OUT/large_batch.json" 2>&1 | quiet | tee "$OUT/large_batch.log"
