#!/usr/bin/env bash
# update-stage-docs.sh SLUICED: regenerate docs/stages.md's stage reference from the stages' own declarations.
set -euo pipefail
cd "$(dirname "$0")/.."
sluiced=${1:-build/release/sluiced}
ref=$("$sluiced" inspect all)
python3 - "$ref" <<'PY'
import re, sys
text = open("docs/stages.md").read()
block = "<!-- stages:begin -->\n```text\n" + sys.argv[1].rstrip("\n") + "\n```\n<!-- stages:end -->"
text, n = re.subn(r"<!-- stages:begin -->.*?<!-- stages:end -->", lambda m: block, text, flags=re.S)
assert n == 1, "docs/stages.md lacks the stages markers"
open("docs/stages.md", "w").write(text)
PY
