#!/usr/bin/env bash
# Install the client (base dependencies + the cli extra) with every range at its
# lower bound into a throwaway venv, and run the client's tests there. Needs PyPI.
# The venv lives under build/ (ignored by git) and is removed afterwards.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$root/build/deps-lowest"
python="${PYTHON:-python3}"
rm -rf "$work"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
"$python" -m venv "$work/venv"
"$python" "$root/hack/lower_bounds.py" base cli > "$work/lowest.txt"
echo "==> lower bounds:"; sed 's/^/    /' "$work/lowest.txt"
# Resolve the package's own metadata against the bounds (fails if they conflict),
# then install; the test tools are not constrained.
"$work/venv/bin/pip" install -q -c "$work/lowest.txt" "$root[cli]" pytest==9.2.0 pytest-timeout==2.4.0 hypothesis==6.170.15
"$work/venv/bin/pip" freeze --exclude-editable | grep -iE "^($(sed 's/==.*//' "$work/lowest.txt" | paste -sd'|'))==" | sed 's/^/==> installed: /'
cd "$root"
# The tests that cover the base install and the CLI, from the source tree.
"$work/venv/bin/python" -m pytest -q -p no:cacheprovider \
  tests/core/test_rljob_models.py tests/core/test_rljob_validation.py tests/core/test_objects.py \
  tests/components/test_client_api.py tests/components/test_cli_views.py \
  tests/components/test_cli_output.py tests/components/test_packaging.py
