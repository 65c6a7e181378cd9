#!/usr/bin/env bash
# Packs the source of an earlier commit for a same-call A/B on the GPU machine
# (`STAGES=abrev` of scripts/gpu_profile.sh): GPUs of the same kind differ by several percent
# between sessions, so a change is only measured against a build of its base made in the same
# call. Writes .gpu-carry/rev.tar.gz (git archive of REV without its test fixtures: what the
# mlxrt binary and the plug-in need, ~0.3 MB) and .gpu-carry/rev.txt.
#   bash scripts/pack_rev.sh REV       then carry [".debs", ".gpu-carry"] in the device call
set -euo pipefail
cd "$(dirname "$0")/.."
rev=$(git rev-parse --verify "${1:?usage: pack_rev.sh REV}^{commit}")
mkdir -p .gpu-carry
git archive --format=tar "$rev" -- . ':(exclude)tests/fixtures' ':(exclude)tests/corpus' ':(exclude)docs' |
  gzip -9 >.gpu-carry/rev.tar.gz
echo "$rev" >.gpu-carry/rev.txt
echo "packed $rev: $(du -h .gpu-carry/rev.tar.gz | cut -f1) in .gpu-carry/rev.tar.gz"
