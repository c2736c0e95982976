#!/usr/bin/env bash
# Session 15, call E: where ResNet-50's time goes on the CPU backend (per-op profile, all cores and one) beside ORT.
cd "$(dirname "$0")/.."
MODELS="resnet50" REPS=3 PROFILE=1 timeout 400 bash .gpu/cpu-run.sh
