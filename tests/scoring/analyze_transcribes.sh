#!/usr/bin/env bash
# `callevalctl analyze` with --transcript transcribes the recording with the embedded recognizer
# and reports transcription_accuracy with consistent counts; without --transcript, or with
# --stt none, the metric is not_applicable with its counts at 0. Skipped (77) without the corpus.
# usage: analyze_transcribes.sh CALLEVALCTL CORPUS_CALLS_DIR
set -euo pipefail
ctl=$1
calls=$2
if [ ! -f "$calls/pub12_very_short.wav" ]; then
  echo "corpus not found at $calls: skipped"
  exit 77
fi
check() {
  python3 -c '
import json, sys
expect = sys.argv[1]
metrics = json.load(sys.stdin)["standard_metrics"]
assert [m["metric_id"] for m in metrics] == list(range(1, 11)), metrics
m = metrics[6]
assert m["standard_metric_key"] == "transcription_accuracy", m
assert m["status"] == expect, m
r = m["result"]
if expect == "completed":
    errors = r["substitutions"] + r["deletions"] + r["insertions"]
    assert r["reference_words"] > 0, r
    assert abs(r["wer"] - errors / r["reference_words"]) < 1e-4, r
    assert abs(r["accuracy"] - max(0.0, 1 - errors / r["reference_words"])) < 1e-4, r
    assert m["score"] == r["accuracy"], m
else:
    assert r["reference_words"] == 0 and r["accuracy"] is None, r
print(expect, r)
' "$1"
}
"$ctl" analyze "$calls/pub12_very_short.wav" --transcript "$calls/pub12_very_short.transcript.json" | check completed
"$ctl" analyze --stt none "$calls/pub12_very_short.wav" --transcript "$calls/pub12_very_short.transcript.json" | check not_applicable
"$ctl" analyze "$calls/pub12_very_short.wav" | check not_applicable
