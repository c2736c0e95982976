#!/usr/bin/env bash
# README command (1): set up, build, and run the default pipeline on the built-in test source.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(bash scripts/build.sh release | tail -n 1)
exec "$build/sluiced" run config/pipelines/default.yaml
