#!/usr/bin/env bash
# update-readme.sh SLUICED: regenerate README.md's stage reference from the stages' own declarations.
set -euo pipefail
cd "$(dirname "$0")/.."
sluiced=${1:-build/release/sluiced}
ref=$("$sluiced" inspect all)
python3 - "$ref" <<'PY'
import re, sys
text = open("README.md").read()
block = "<!-- stages:begin -->\n```text\n" + sys.argv[1].rstrip("\n") + "\n```\n<!-- stages:end -->"
text, n = re.subn(r"<!-- stages:begin -->.*?<!-- stages:end -->", lambda m: block, text, flags=re.S)
assert n == 1, "README.md lacks the stages markers"
open("README.md", "w").write(text)
PY
