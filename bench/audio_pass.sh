#!/usr/bin/env bash
# The audio pass against its budgets (DESIGN.md):
#  - time of `callevalctl analyze FILE` vs `ffmpeg -threads 1 -i FILE -f s16le -y /dev/null` on
#    the 10-minute corpus call as WAV, MP3 and M4A, both pinned to one core (budget 1.5x);
#  - peak resident memory of `callevalctl analyze` on a 60-minute stereo call (budget 150 MB).
# Medians of RUNS runs. usage: bench/audio_pass.sh [BUILD_DIR] (env RUNS=5, CORPUS=../shared/corpus)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
RUNS=${RUNS:-5}
CORPUS=${CORPUS:-../shared/corpus}
CTL="$BUILD_DIR/cmd/callevalctl/callevalctl"
SRC="$CORPUS/calls/pub13_ten_minutes.mp3"
TRANSCRIPT="$CORPUS/calls/pub13_ten_minutes.transcript.json"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

ffmpeg -v error -i "$SRC" -c:a pcm_s16le "$WORK/call.wav"
ffmpeg -v error -i "$SRC" -c:a aac -b:a 48k "$WORK/call.m4a"
cp "$SRC" "$WORK/call.mp3"

# Median wall time in seconds of a command over RUNS runs, on core 0.
median() {
  local times=()
  for _ in $(seq "$RUNS"); do
    local start end
    start=$(date +%s.%N)
    taskset -c 0 "$@" >/dev/null 2>&1
    end=$(date +%s.%N)
    times+=("$(echo "$end - $start" | bc)")
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

printf '%-6s %12s %12s %8s\n' format "ffmpeg s" "analyze s" ratio
for f in wav mp3 m4a; do
  ff=$(median ffmpeg -v error -threads 1 -i "$WORK/call.$f" -f s16le -y /dev/null)
  an=$(median "$CTL" analyze "$WORK/call.$f" --transcript "$TRANSCRIPT")
  printf '%-6s %12.3f %12.3f %7.2fx\n' "$f" "$ff" "$an" "$(echo "$an / $ff" | bc -l)"
done

# 60 minutes: the 10-minute call six times over.
for i in 1 2 3 4 5 6; do echo "file '$WORK/call.wav'"; done >"$WORK/list.txt"
ffmpeg -v error -f concat -safe 0 -i "$WORK/list.txt" -c copy "$WORK/hour.wav"
rss=$( { /usr/bin/time -v "$CTL" analyze "$WORK/hour.wav" >/dev/null; } 2>&1 |
  awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}')
echo "60-minute stereo WAV: peak RSS $((rss / 1024)) MB"
