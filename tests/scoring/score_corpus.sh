#!/usr/bin/env bash
# Scores `callevalctl analyze` on the whole accuracy corpus with its own scorer (score.py);
# fails when any target of DESIGN.md's accuracy budget is missed. Skipped (77) without the corpus.
# usage: score_corpus.sh CALLEVALCTL CORPUS_DIR
set -euo pipefail
ctl=$1
corpus=$2
if [ ! -f "$corpus/score.py" ] || [ ! -d "$corpus/calls" ]; then
  echo "corpus not found at $corpus: skipped"
  exit 77
fi
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
cd "$corpus/calls"
# --stt none: score.py has no truth for transcription_accuracy, and transcribing the corpus's
# 23 minutes would add minutes of CPU to every run (the analyze_transcribes test covers it).
python3 ../score.py --truth-dir . --analyze-cmd "$ctl analyze --stt none" --results-dir "$results"
