#!/usr/bin/env bash
# The core without extras: `pip install transferlab` (this checkout, not editable) into a clean venv,
# with the constraints and the lock; then the core imports and runs, none of the extras is installed,
# and a command that needs one says which. Run by .ci/run; takes a few minutes (mostly pip).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d /tmp/transferlab-core-XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
py="$work/venv/bin/python"
"$py" -m pip install -q --disable-pip-version-check -c constraints.txt -c requirements.lock "$root"
cd "$work"  # away from the checkout: the installed package is what runs

echo "-- no extra is installed"
"$py" - <<'PY'
import importlib.util
present = [m for m in ("ray", "streamlit", "altair", "psycopg", "docker", "pytest") if importlib.util.find_spec(m)]
assert not present, f"installed without being asked for: {present}"
PY

echo "-- the core runs: grade the design note's buggy quick sort in the sandbox"
seed=$("$py" -c "import transferlab.coding_rl.tasks.seed as s, pathlib; print(pathlib.Path(list(s.__path__)[0]))")
"$work/venv/bin/transferlab" sandbox grade "$seed/quick_sort.json" "$seed/quick_sort_buggy.py" --json > grade.json
"$py" -c "import json; g = json.load(open('grade.json')); assert g['reward'] == 8.0, g; print('reward', g['reward'])"

echo "-- a command that needs an extra says which"
set +e
"$work/venv/bin/transferlab" review serve --db "sqlite:///$work/review.db" 2> serve.err
code=$?
set -e
cat serve.err
[ "$code" = 2 ] && grep -q "^error: the review app needs the 'app' extra" serve.err
echo "core install: ok"
