#!/usr/bin/env python3
"""Builds the test corpus: call recordings with exact ground truth, from tests/corpus/calls.json.

    python3 make_calls.py --out DIR [--scripts calls.json] [--only ID ...]
                          [--clip-root NAME=DIR ...]

For every call it writes into DIR:

    <id>.<wav|mp3|m4a>     the recording (codec "mulaw8k" is a WAV file of 8 kHz mu-law samples)
    <id>.transcript.json   the transcript in the ingest format, one entry per utterance
    <id>.truth.json        the standard metrics the service must report, and the turns behind them

Each utterance is spoken by eSpeak NG on its own, resampled to the call's rate by FFmpeg and
measured before anything else is added, so every speech boundary is known to the sample: speech
is the span from the first to the last sample whose magnitude reaches the level 35 dB under the
utterance's loudest 10 ms frame (frames every 5 ms). The audio outside that span is faded over
5 ms and silent beyond, so the boundaries do not depend on a detector's threshold as long as it
hears speech 35 dB under its peaks. The utterances are placed on the timeline by those
boundaries (`gap_ms` runs from the latest speech end so far to this entry's speech start; a
negative gap overlaps), mixed, optionally degraded (noise, crosstalk) and encoded; the encoded
file is decoded again and aligned against the mix, so the truth is on the decoded timeline.

The truth applies the metric definitions of docs/metrics.md to the exact per-party speech:
turns merge a party's speech across pauses under 700 ms; overlaps under 200 ms are neither a
latency turn nor an interruption; silence counts the edges of the recording. The generator
refuses a script whose timing would sit near one of those thresholds (a same-party gap between
550 and 850 ms, an overlap between 120 and 280 ms, a silence within 150 ms of 3000 ms), so no
truth depends on how a detector rounds a boundary.

A turn may play a recorded clip instead of synthesising its text (the real-speech calls, ids
`real_*`): `"clip": "alsa/Front_Left.wav"` names a file under a clip root (`--clip-root
alsa=/usr/share/sounds/alsa`, given by CMake: the Debian packages' install paths; nothing is
downloaded), `text` is what the clip says. The clip is resampled to the call's rate by FFmpeg
and its speech found by the same 35 dB rule, measured on 10 ms frames every 5 ms (the first and
last frames within 35 dB of the loudest, refined to their first and last sample at that level),
so a word-final release or fricative tail 20-30 dB under the peak is speech. It keeps 40 ms of
its own background before the speech (less where the recording starts sooner) and 80 ms after,
faded in and out, instead of the 5 ms gate, and is normalised to the same active level as a synthetic line. `speaker` (or the
script's `agent_speaker`/`user_speaker`) says who speaks in it: agent clips of different
speakers in a row are a voice change. A turn may barge in: `barge_in_ms` starts its speech that
many ms after the previous turn's speech start (instead of `gap_ms`), and `stop_ms` cuts the
previous turn's audio that many ms after this turn's speech start (10 ms fade); the cut turn's
speech end is measured again, and its `spoken_text` (required) is what it got out, the
transcript's content. A script may take its turns from another (`turns_of`).

Needs python3 (standard library; audioop, present up to Python 3.12), espeak-ng and ffmpeg.
The output depends only on the script, those programs' versions and the clips' contents; a stamp
of them is kept in DIR/.stamp so a build regenerates the corpus only when one of them changes.
"""

import argparse
import array
import concurrent.futures
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
import wave

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop  # noqa: E402  (the standard library's C loops; present up to Python 3.12)

TURN_MERGE_S = 0.7
SILENCE_THRESHOLD_MS = 3000
MIN_OVERLAP_S = 0.2
ACTIVITY_REL_DB = 35.0
FADE_S = 0.005
CLIP_PRE_S = 0.040   # a recorded clip's own background kept before its speech (faded in)
CLIP_POST_S = 0.080  # and after it (faded out)
CUT_FADE_S = 0.010   # a barge-in's cut of the interrupted turn
AGENT_LEVEL_DBFS = -22.0
USER_LEVEL_DBFS = -24.0
WIDTH = 2  # bytes per sample: every intermediate is 16-bit PCM
FULL_SCALE = 32768.0

ROLE_NAMES = {"agent": "AI Assistant", "user": "User"}
METRIC_NAMES = {
    1: ("latency", "Latency"),
    2: ("ai_interruptions", "AI Interruptions"),
    3: ("user_interruptions", "User Interruptions"),
    4: ("stop_time_after_interruption", "Stop Time After Interruption"),
    5: ("silence_detection", "Silence Detection"),
    6: ("words_per_minute", "Words Per Minute"),
    9: ("voice_change_detection", "Voice Change Detection"),
    10: ("talk_ratio", "Talk Ratio"),
}


def run(cmd, data=None):
    result = subprocess.run(cmd, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if result.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({result.returncode}): {result.stderr.decode()[-500:]}")
    return result.stdout


def tool_versions():
    espeak = run(["espeak-ng", "--version"]).decode().strip()
    ffmpeg = run(["ffmpeg", "-version"]).decode().splitlines()[0]
    return f"{espeak} | {ffmpeg}"


# --- one utterance ------------------------------------------------------------------------------

def synthesize(text, voice, rate_wpm, sample_rate):
    """eSpeak NG speech as 16-bit mono PCM at sample_rate."""
    wav = run(["espeak-ng", "-v", voice, "-s", str(rate_wpm), "--stdout", text])
    return run(["ffmpeg", "-nostdin", "-v", "error", "-i", "-", "-ac", "1", "-ar", str(sample_rate),
                "-f", "s16le", "-"], wav)


def frame_rms(pcm, sample_rate):
    """RMS of 10 ms frames every 5 ms: [(first_sample, rms)]."""
    frame = sample_rate // 100
    hop = sample_rate // 200
    n = len(pcm) // WIDTH
    return [(s, audioop.rms(pcm[s * WIDTH:(s + frame) * WIDTH], WIDTH))
            for s in range(0, max(1, n - frame + 1), hop)]


def speech_span(pcm, sample_rate):
    """(first, last, threshold): the samples at or above 35 dB under the loudest frame."""
    frames = frame_rms(pcm, sample_rate)
    loudest = max(rms for _, rms in frames)
    if loudest == 0:
        raise RuntimeError("utterance is silent")
    threshold = max(1, int(math.ceil(loudest * 10 ** (-ACTIVITY_REL_DB / 20))))
    samples = memoryview(pcm).cast("h")
    first = next(i for i in range(len(samples)) if abs(samples[i]) >= threshold)
    last = next(i for i in range(len(samples) - 1, -1, -1) if abs(samples[i]) >= threshold)
    return first, last, threshold


def longest_pause_s(pcm, sample_rate, first, last, threshold):
    """The longest run of frames under the threshold inside the speech span."""
    hop = sample_rate // 200
    run_start = None
    best = 0.0
    for start, rms in frame_rms(pcm, sample_rate):
        if start < first or start > last:
            continue
        if rms < threshold:
            run_start = start if run_start is None else run_start
            best = max(best, (start - run_start + hop) / sample_rate)
        else:
            run_start = None
    return best


def fade(pcm, fade_in):
    """A linear ramp over the given samples (in from silence, or out to it)."""
    samples = array.array("h", pcm)
    n = len(samples)
    for i in range(n):
        gain = (i + 1) / (n + 1) if fade_in else (n - i) / (n + 1)
        samples[i] = int(samples[i] * gain)
    return samples.tobytes()


def active_level_dbfs(pcm, sample_rate, threshold):
    """RMS over the frames at or above the activity threshold, in dBFS."""
    frames = [rms for _, rms in frame_rms(pcm, sample_rate) if rms >= threshold]
    power = sum(r * r for r in frames) / len(frames)
    return 10 * math.log10(power) - 20 * math.log10(FULL_SCALE)


def make_utterance(text, voice, rate_wpm, sample_rate, level_dbfs):
    """The utterance cut to its speech plus a 5 ms fade each side, at level_dbfs active level.

    Returns (pcm, lead_samples, speech_samples, longest_pause_s): the speech starts lead_samples
    into pcm and lasts speech_samples.
    """
    pcm = synthesize(text, voice, rate_wpm, sample_rate)
    first, last, threshold = speech_span(pcm, sample_rate)
    gain = 10 ** ((level_dbfs - active_level_dbfs(pcm, sample_rate, threshold)) / 20)
    if audioop.max(pcm, WIDTH) * gain >= 32767:
        raise RuntimeError(f"'{text}' would clip at {level_dbfs} dBFS")
    pcm = audioop.mul(pcm, WIDTH, gain)
    # Scaling moves the threshold with the signal; re-measure so the span is that of the scaled
    # samples exactly (a rounding can move an edge by a sample).
    first, last, threshold = speech_span(pcm, sample_rate)
    pause = longest_pause_s(pcm, sample_rate, first, last, threshold)
    ramp = int(round(FADE_S * sample_rate))
    head_start = max(0, first - ramp)
    tail_end = min(len(pcm) // WIDTH, last + 1 + ramp)
    head = fade(pcm[head_start * WIDTH:first * WIDTH], True)
    body = pcm[first * WIDTH:(last + 1) * WIDTH]
    tail = fade(pcm[(last + 1) * WIDTH:tail_end * WIDTH], False)
    return {"pcm": head + body + tail, "lead": first - head_start, "speech": last + 1 - first,
            "pause": pause, "threshold": threshold}


# --- one recorded clip --------------------------------------------------------------------------

def resolve_clip(clip, roots):
    """The file of a clip named ROOT/relative/path, under the clip root ROOT."""
    root, _, rest = clip.partition("/")
    if root not in roots or not rest:
        raise RuntimeError(f"clip '{clip}': no clip root '{root}' (give --clip-root {root}=DIR)")
    path = os.path.join(roots[root], rest)
    if not os.path.isfile(path):
        raise RuntimeError(f"clip '{clip}': no file {path} (scripts/setup installs the packages "
                           "the clips come from)")
    return path


def clip_span(pcm, sample_rate, threshold):
    """(first, last): the first and last frames whose RMS reaches threshold, refined to their
    first and last sample at that level; None when no frame does."""
    frame = sample_rate // 100
    active = [s for s, rms in frame_rms(pcm, sample_rate) if rms >= threshold]
    if not active:
        return None
    samples = memoryview(pcm).cast("h")
    first = next(i for i in range(active[0], active[0] + frame) if abs(samples[i]) >= threshold)
    end = min(len(samples), active[-1] + frame)
    last = next(i for i in range(end - 1, active[-1] - 1, -1) if abs(samples[i]) >= threshold)
    return first, last


def loudest_threshold(pcm, sample_rate):
    loudest = max(rms for _, rms in frame_rms(pcm, sample_rate))
    if loudest == 0:
        raise RuntimeError("clip is silent")
    return max(1, int(math.ceil(loudest * 10 ** (-ACTIVITY_REL_DB / 20))))


def make_clip_utterance(path, sample_rate, level_dbfs):
    """A recorded clip at the call's rate: its speech by the 35 dB rule, with up to 40 ms of its
    own background before and 80 ms after (faded), at level_dbfs active level (same dict as
    make_utterance)."""
    pcm = run(["ffmpeg", "-nostdin", "-v", "error", "-i", path, "-ac", "1", "-ar",
               str(sample_rate), "-f", "s16le", "-"])
    threshold = loudest_threshold(pcm, sample_rate)
    gain = 10 ** ((level_dbfs - active_level_dbfs(pcm, sample_rate, threshold)) / 20)
    if audioop.max(pcm, WIDTH) * gain >= 32767:
        raise RuntimeError(f"{path} would clip at {level_dbfs} dBFS")
    pcm = audioop.mul(pcm, WIDTH, gain)
    threshold = loudest_threshold(pcm, sample_rate)
    first, last = clip_span(pcm, sample_rate, threshold)
    pre = int(round(CLIP_PRE_S * sample_rate))
    post = int(round(CLIP_POST_S * sample_rate))
    n = len(pcm) // WIDTH
    for _ in range(8):
        a, b = max(0, first - pre), min(n, last + 1 + post)
        out = (fade(pcm[a * WIDTH:first * WIDTH], True) + pcm[first * WIDTH:(last + 1) * WIDTH] +
               fade(pcm[(last + 1) * WIDTH:b * WIDTH], False))
        # The frame grid starts again at the cut: measure the trimmed clip as it will be placed,
        # and trim again until its speech span is where it was cut for.
        span = clip_span(out, sample_rate, threshold)
        if span == (first - a, last - a):
            break
        first, last = a + span[0], a + span[1]
    else:
        raise RuntimeError(f"{path}: the speech span does not settle")
    pause = longest_pause_s(out, sample_rate, first - a, last - a, threshold)
    return {"pcm": out, "lead": first - a, "speech": last + 1 - first, "pause": pause,
            "threshold": threshold}


def cut_utterance(utterance, cut, sample_rate):
    """The utterance's audio cut `cut` samples into its pcm (a 10 ms fade before the cut) and its
    speech end measured again: a barge-in that makes the other party stop."""
    ramp = int(round(CUT_FADE_S * sample_rate))
    pcm = utterance["pcm"][:cut * WIDTH]
    pcm = pcm[:(cut - ramp) * WIDTH] + fade(pcm[(cut - ramp) * WIDTH:], False)
    span = clip_span(pcm, sample_rate, utterance["threshold"])
    if span is None or span[0] != utterance["lead"]:
        raise RuntimeError("a cut would remove the start of the interrupted speech")
    cut_utt = dict(utterance, pcm=pcm, speech=span[1] + 1 - span[0], truncated=True)
    cut_utt["pause"] = longest_pause_s(pcm, sample_rate, span[0], span[1], utterance["threshold"])
    return cut_utt


# --- the call -----------------------------------------------------------------------------------

def expand_turns(script):
    turns = script["turns"] * script.get("repeat", 1)
    out = []
    for i, turn in enumerate(turns):
        turn = dict(turn)
        if i > 0 and i % len(script["turns"]) == 0 and "repeat_gap_ms" in script:
            turn["gap_ms"] = script["repeat_gap_ms"]
        out.append(turn)
    return out


def voice_of(script, turn):
    """Who speaks: the espeak-ng voice, or a clip's speaker."""
    if "clip" in turn:
        speaker = turn.get("speaker", script.get(f"{turn['role']}_speaker"))
        if not speaker:
            raise RuntimeError(f"{script['id']}: clip {turn['clip']} names no speaker")
        return speaker
    if "voice" in turn:
        return turn["voice"]
    if turn["role"] == "agent":
        return script["agent_voice"]
    return script["user_voice"]


def place(script, utterances, sample_rate):
    """Start sample of each utterance's speech on the call's timeline, and the utterances as
    placed (an utterance cut by a barge-in replaced by its cut).

    An entry's gap_ms runs from the latest speech end so far: after a caller's short
    interjection inside an agent's utterance, the next gap counts from the agent's end. An entry
    with barge_in_ms starts that long after the previous entry's speech start; its stop_ms cuts
    the previous entry's audio that long after its own start.
    """
    utterances = list(utterances)
    turns = expand_turns(script)
    starts, ends = [], []
    for i, turn in enumerate(turns):
        if "barge_in_ms" in turn:
            if i == 0 or turns[i - 1]["role"] == turn["role"]:
                raise RuntimeError(f"{script['id']} turn {i}: a barge-in needs the other party "
                                   "speaking just before")
            start = starts[i - 1] + int(round(turn["barge_in_ms"] * sample_rate / 1000))
        else:
            start = max(ends, default=0) + int(round(turn["gap_ms"] * sample_rate / 1000))
        if "stop_ms" in turn:
            if "barge_in_ms" not in turn:
                raise RuntimeError(f"{script['id']} turn {i}: stop_ms needs barge_in_ms")
            cut_at = start + int(round(turn["stop_ms"] * sample_rate / 1000))
            if cut_at >= ends[i - 1]:
                raise RuntimeError(f"{script['id']} turn {i}: stop_ms cuts nothing")
            prev = utterances[i - 1]
            utterances[i - 1] = cut_utterance(prev, cut_at - (starts[i - 1] - prev["lead"]),
                                              sample_rate)
            ends[i - 1] = starts[i - 1] + utterances[i - 1]["speech"]
        if start - utterances[i]["lead"] < 0:
            raise RuntimeError("an utterance would start before the recording")
        starts.append(start)
        ends.append(start + utterances[i]["speech"])
    for i, (turn, utterance) in enumerate(zip(turns, utterances)):
        if bool(utterance.get("truncated")) != ("spoken_text" in turn):
            raise RuntimeError(f"{script['id']} turn {i}: spoken_text is for a turn cut by a "
                               "barge-in, and such a turn needs it")
    return starts, utterances


def mix(script, utterances, starts, sample_rate, total):
    """Per-channel 16-bit PCM: agent and user channels (stereo) or one channel (mono)."""
    mono = script.get("layout") == "mono"
    channels = [bytearray(total * WIDTH) for _ in range(1 if mono else 2)]
    agent_channel = script.get("agent_channel", 0)
    for turn, utterance, start in zip(expand_turns(script), utterances, starts):
        channel = 0 if mono else (agent_channel if turn["role"] == "agent" else 1 - agent_channel)
        a = (start - utterance["lead"]) * WIDTH
        b = a + len(utterance["pcm"])
        channels[channel][a:b] = audioop.add(bytes(channels[channel][a:b]), utterance["pcm"],
                                             WIDTH)
    return [bytes(c) for c in channels]


def add_crosstalk(channels, db):
    gain = 10 ** (db / 20)
    left, right = channels
    return [audioop.add(left, audioop.mul(right, WIDTH, gain), WIDTH),
            audioop.add(right, audioop.mul(left, WIDTH, gain), WIDTH)]


def add_noise(channels, snr_db, sample_rate, seed):
    """Pink noise at snr_db under the quieter party's active level, independent per channel."""
    level = min(AGENT_LEVEL_DBFS, USER_LEVEL_DBFS) - snr_db
    target_rms = FULL_SCALE * 10 ** (level / 20)
    out = []
    for i, pcm in enumerate(channels):
        seconds = len(pcm) / WIDTH / sample_rate
        noise = run(["ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i",
                     f"anoisesrc=d={seconds + 1:.3f}:c=pink:r={sample_rate}:a=0.25:s={seed + i}",
                     "-ac", "1", "-f", "s16le", "-"])[:len(pcm)]
        noise = audioop.mul(noise, WIDTH, target_rms / audioop.rms(noise, WIDTH))
        out.append(audioop.add(pcm, noise, WIDTH))
    return out


def interleave(channels):
    if len(channels) == 1:
        return channels[0]
    return audioop.add(audioop.tostereo(channels[0], WIDTH, 1, 0),
                       audioop.tostereo(channels[1], WIDTH, 0, 1), WIDTH)


def write_wav(path, pcm, channels, sample_rate):
    with wave.open(path, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(WIDTH)
        w.setframerate(sample_rate)
        w.writeframes(pcm)


def encode(script, wav_path, out_dir):
    codec = script.get("codec", "wav")
    base = os.path.join(out_dir, script["id"])
    bitrate = f"{script.get('bitrate_kbps', 64)}k"
    if codec == "wav":
        path = base + ".wav"
        os.replace(wav_path, path)
        return path
    args = {"mp3": (".mp3", ["-c:a", "libmp3lame", "-b:a", bitrate]),
            "m4a": (".m4a", ["-c:a", "aac", "-b:a", bitrate]),
            "mulaw8k": (".wav", ["-c:a", "pcm_mulaw"])}[codec]
    path = base + args[0]
    run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-i", wav_path, *args[1], "-map_metadata",
         "-1", "-fflags", "+bitexact", "-flags:a", "+bitexact", path])
    return path


def decode(path, channels, sample_rate):
    return run(["ffmpeg", "-nostdin", "-v", "error", "-i", path, "-ac", str(channels), "-ar",
                str(sample_rate), "-f", "s16le", "-"])


def best_lag(mono_mix, mono_decoded, first_speech, sample_rate):
    """Samples by which the decoded audio lags the mix (a lossy codec may shift it)."""
    search = sample_rate // 20  # 50 ms either way
    length = sample_rate // 2
    a = max(0, first_speech)
    fragment = mono_mix[a * WIDTH:(a + length) * WIDTH]
    lo = max(0, a - search)
    reference = mono_decoded[lo * WIDTH:(a + length + search) * WIDTH]
    offset, _ = audioop.findfit(reference, fragment)
    return lo + offset - a


# --- the truth ----------------------------------------------------------------------------------

def r4(x):
    return round(x + 0.0, 4)


def r1(x):
    return round(x + 0.0, 1)


def merge_turns(spans):
    turns = []
    for start, end in sorted(spans):
        if turns and start - turns[-1][1] < TURN_MERGE_S:
            turns[-1][1] = max(turns[-1][1], end)
        else:
            turns.append([start, end])
    return [(r4(s), r4(e)) for s, e in turns]


def percentile(values, q):
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def latency(agent, user):
    everyone = sorted([(s, e, "agent") for s, e in agent] + [(s, e, "user") for s, e in user])
    turns = []
    for us, ue in user:
        if any(s < ue < e for s, e in agent):
            continue  # the agent is still talking when the caller stops
        if any(us < s <= ue for s, e in agent):
            continue  # the agent started during the caller's turn
        later = [t for t in everyone if t[0] > ue]
        if later and later[0][2] == "agent":
            start = later[0][0]
            turns.append({"user_end_s": ue, "agent_start_s": start,
                          "latency_ms": r1((start - ue) * 1000)})
    values = [t["latency_ms"] for t in turns]
    stats = {"turns": turns, "average_ms": None, "p50_ms": None, "p90_ms": None, "p95_ms": None,
             "p99_ms": None, "min_ms": None, "max_ms": None, "count": len(turns)}
    if values:
        stats.update(average_ms=r1(sum(values) / len(values)),
                     p50_ms=r1(percentile(values, 50)), p90_ms=r1(percentile(values, 90)),
                     p95_ms=r1(percentile(values, 95)), p99_ms=r1(percentile(values, 99)),
                     min_ms=min(values), max_ms=max(values))
    return stats, stats["average_ms"]


def interruptions(interrupter, interrupted):
    events = []
    for s, e in interrupter:
        for us, ue in interrupted:
            if us < s < ue and min(e, ue) - s >= MIN_OVERLAP_S:
                events.append({"at_second": s, "duration_ms": r1((min(e, ue) - s) * 1000)})
                break
    return {"count": len(events), "events": events}, len(events)


def stop_time(agent, user):
    events = []
    for s, e in user:
        for a_s, a_e in agent:
            if a_s < s < a_e and min(e, a_e) - s >= MIN_OVERLAP_S:
                events.append({"at_second": s, "stop_ms": r1((a_e - s) * 1000)})
                break
    average = r1(sum(ev["stop_ms"] for ev in events) / len(events)) if events else None
    return {"average_ms": average, "events": events}, average


def silences(agent, user, duration):
    edges = sorted(agent + user)
    stretches = []
    cursor = 0.0
    for s, e in edges:
        if s > cursor:
            stretches.append((cursor, s))
        cursor = max(cursor, e)
    if duration > cursor:
        stretches.append((cursor, duration))
    found = [{"start_s": r4(s), "end_s": r4(e), "duration_ms": r1((r4(e) - r4(s)) * 1000)}
             for s, e in stretches if (e - s) * 1000 >= SILENCE_THRESHOLD_MS]
    total = r1(sum(f["duration_ms"] for f in found)) if found else 0
    return ({"count": len(found), "total_ms": total, "threshold_ms": SILENCE_THRESHOLD_MS,
             "silences": found}, len(found))


def count_words(text):
    return sum(1 for token in text.split() if any(ch.isalnum() for ch in token))


def words_per_minute(agent, user, transcript):
    result = {}
    for party, turns, role in (("ai", agent, "AI Assistant"), ("user", user, "User")):
        words = sum(count_words(t["content"]) for t in transcript if t["role"] == role)
        speaking = sum(e - s for s, e in turns)
        result[f"{party}_wpm"] = r1(words / (speaking / 60)) if speaking > 0 else None
        result[f"{party}_words"] = words
        result[f"{party}_speaking_s"] = r4(speaking)
    ordered = {k: result[k] for k in ("ai_wpm", "user_wpm", "ai_words", "ai_speaking_s",
                                       "user_words", "user_speaking_s")}
    ordered["transcript"] = "provided"  # the words counted are the call's transcript's
    return ordered, ordered["ai_wpm"]


def union_length(spans):
    total = 0.0
    cursor = -1.0
    for s, e in sorted(spans):
        if e > cursor:
            total += e - max(s, cursor)
            cursor = e
    return total


def talk_ratio(agent, user, duration):
    ai = sum(e - s for s, e in agent) / duration
    us = sum(e - s for s, e in user) / duration
    silence = (duration - union_length(agent + user)) / duration
    return {"ai_ratio": r4(ai), "user_ratio": r4(us), "silence_ratio": r4(silence)}, r4(ai)


def metric(metric_id, result, score):
    key, name = METRIC_NAMES[metric_id]
    return {"metric_id": metric_id, "standard_metric_key": key, "name": name,
            "status": "completed", "result": result, "score": score, "credits_used": 1,
            "error": None}


# --- one call end to end ------------------------------------------------------------------------

def check_timing(script, turns, spans):
    """Refuses timings near a definition's threshold (see the module comment)."""
    for i, (turn, (s, e)) in enumerate(zip(turns, spans)):
        for j in range(i):
            other, (os_, oe) = turns[j], spans[j]
            if other["role"] == turn["role"]:
                gap = s - oe
                if 0.55 <= gap <= 0.85:
                    raise RuntimeError(f"{script['id']} turn {i}: same-party gap {gap:.3f} s")
            else:
                overlap = min(e, oe) - max(s, os_)
                if 0.12 <= overlap <= 0.28:
                    raise RuntimeError(f"{script['id']} turn {i}: overlap {overlap:.3f} s")


def utterance_key(script, turn):
    level = AGENT_LEVEL_DBFS if turn["role"] == "agent" else USER_LEVEL_DBFS
    if "clip" in turn:
        return ("clip", turn["clip"], level)
    return (turn["text"], voice_of(script, turn), script[f"{turn['role']}_rate"], level)


def check_silences(script, agent, user, duration):
    """Refuses a stretch of nobody's turn within 150 ms of the silence threshold (call edges
    included)."""
    cursor = 0.0
    for s, e in sorted(agent + user) + [(duration, duration)]:
        if abs((s - cursor) * 1000 - SILENCE_THRESHOLD_MS) < 150:
            raise RuntimeError(f"{script['id']}: {s - cursor:.3f} s of silence at {cursor:.3f} s "
                               "is within 150 ms of the silence threshold")
        cursor = max(cursor, e)


def build_call(script, out_dir, pool, clip_roots, sources):
    sample_rate = 8000 if script.get("codec") == "mulaw8k" else script.get("sample_rate", 16000)
    turns = expand_turns(script)
    jobs = {}  # a repeated line is spoken once
    for turn in turns:
        key = utterance_key(script, turn)
        if key in jobs:
            continue
        if "clip" in turn:
            jobs[key] = pool.submit(make_clip_utterance, resolve_clip(turn["clip"], clip_roots),
                                    sample_rate, key[2])
        else:
            jobs[key] = pool.submit(make_utterance, *key[:3], sample_rate, key[3])
    utterances = [jobs[utterance_key(script, t)].result() for t in turns]
    starts, utterances = place(script, utterances, sample_rate)
    for turn, utterance in zip(turns, utterances):
        if utterance["pause"] >= 0.55:
            raise RuntimeError(f"{script['id']}: a pause of {utterance['pause']:.3f} s inside "
                               f"'{turn['text']}'")
    ends = [start + u["speech"] for start, u in zip(starts, utterances)]
    tail = int(round(script.get("tail_silence_ms", 800) * sample_rate / 1000))
    total = max(end + len(u["pcm"]) // WIDTH - u["lead"] - u["speech"]
                for end, u in zip(ends, utterances)) + tail
    total = max(total, max(ends) + tail)
    channels = mix(script, utterances, starts, sample_rate, total)
    if script.get("crosstalk_db") is not None:
        channels = add_crosstalk(channels, script["crosstalk_db"])
    if script.get("noise_snr_db") is not None:
        seed = int(hashlib.sha256(script["id"].encode()).hexdigest()[:6], 16)
        channels = add_noise(channels, script["noise_snr_db"], sample_rate, seed)
    mixed = interleave(channels)

    with tempfile.TemporaryDirectory() as tmp:
        wav_path = os.path.join(tmp, "mix.wav")
        write_wav(wav_path, mixed, len(channels), sample_rate)
        audio_path = encode(script, wav_path, out_dir)
    decoded = decode(audio_path, len(channels), sample_rate)
    offset = 0
    if script.get("codec", "wav") in ("mp3", "m4a"):
        mono_mix = channels[0] if len(channels) == 1 else audioop.tomono(mixed, WIDTH, 0.5, 0.5)
        mono_dec = decoded if len(channels) == 1 else audioop.tomono(decoded, WIDTH, 0.5, 0.5)
        offset = best_lag(mono_mix, mono_dec, min(starts), sample_rate)
    duration = len(decoded) / WIDTH / len(channels) / sample_rate

    spans = [((s + offset) / sample_rate, (e + offset) / sample_rate) for s, e in zip(starts, ends)]
    check_timing(script, turns, spans)
    agent = merge_turns([sp for t, sp in zip(turns, spans) if t["role"] == "agent"])
    user = merge_turns([sp for t, sp in zip(turns, spans) if t["role"] == "user"])
    if script.get("layout") == "mono" and (
            len(agent) + len(user) != len(turns)):
        raise RuntimeError(f"{script['id']}: a mono call needs one transcript entry per turn")

    check_silences(script, agent, user, duration)

    # A turn cut by a barge-in got out only its spoken_text; the transcript says what was said.
    said = [t.get("spoken_text", t.get("transcript", t["text"])) for t in turns]
    transcript = [{"role": ROLE_NAMES[t["role"]], "content": content,
                   "start_time": round(s, 3), "end_time": round(e, 3)}
                  for t, content, (s, e) in zip(turns, said, spans)]
    utterance_truth = []
    for t, u, content, (s, e) in zip(turns, utterances, said, spans):
        entry = {"role": t["role"], "text": t["text"], "spoken_text": content,
                 "start_s": r4(s), "end_s": r4(e), "truncated": bool(u.get("truncated"))}
        if "clip" in t:
            entry.update(clip=t["clip"], speaker=voice_of(script, t))
        else:
            entry["voice"] = voice_of(script, t)
        utterance_truth.append(entry)
    agent_voices = [voice_of(script, t) for i, t in enumerate(turns) if t["role"] == "agent"]
    agent_spans = [sp for t, sp in zip(turns, spans) if t["role"] == "agent"]
    change_points, change_windows = [], []
    for k in range(1, len(agent_voices)):
        if agent_voices[k] != agent_voices[k - 1]:
            change_points.append(r4(agent_spans[k][0]))
            change_windows.append([r4(agent_spans[k - 1][1]), r4(agent_spans[k][0])])
    silence_result, silence_score = silences(agent, user, duration)
    metrics = [metric(1, *latency(agent, user)), metric(2, *interruptions(agent, user)),
               metric(3, *interruptions(user, agent)), metric(4, *stop_time(agent, user)),
               metric(5, silence_result, silence_score),
               metric(6, *words_per_minute(agent, user, transcript)),
               metric(9, {"changed": bool(change_points), "change_points_s": change_points},
                      1.0 if change_points else 0.0),
               metric(10, *talk_ratio(agent, user, duration))]

    name = script["id"]
    transcript_file = f"{name}.transcript.json"
    analyze_args = ["--transcript", transcript_file]
    agent_channel = script.get("agent_channel", 0)
    if agent_channel != 0:
        analyze_args += ["--channel-map", "agent=1,user=0"]
    truth = {
        "format": "calleval-test-truth/1",
        "id": name,
        "description": script.get("description", ""),
        "tags": script.get("tags", []),
        "audio_file": os.path.basename(audio_path),
        "transcript_file": transcript_file,
        "analyze_args": analyze_args,
        "duration_seconds": r4(duration),
        "standard_metrics": metrics,
        "audio": {"codec": script.get("codec", "wav"), "sample_rate": sample_rate,
                  "channels": len(channels), "layout": script.get("layout", "stereo"),
                  "channel_map": None if len(channels) == 1 else
                  {"agent": agent_channel, "user": 1 - agent_channel},
                  "duration_samples": len(decoded) // WIDTH // len(channels),
                  "codec_offset_samples": offset,
                  "noise_snr_db": script.get("noise_snr_db"),
                  "crosstalk_db": script.get("crosstalk_db")},
        "turns": {"agent": [{"start_s": s, "end_s": e} for s, e in agent],
                  "user": [{"start_s": s, "end_s": e} for s, e in user]},
        "voice_change": {"changed": bool(change_points), "change_points_s": change_points,
                         "change_windows_s": change_windows},
        "utterances": utterance_truth,
        "clip_sources": {c: {k: v for k, v in sources[c].items() if k != "file"}
                         for c in sorted({t["clip"] for t in turns if "clip" in t})} or None,
        "definitions": {"turn_merge_ms": 700, "silence_threshold_ms": SILENCE_THRESHOLD_MS,
                        "interruption_min_overlap_ms": 200, "silence_includes_call_edges": True},
    }
    with open(os.path.join(out_dir, transcript_file), "w") as f:
        json.dump(transcript, f, indent=1)
    with open(os.path.join(out_dir, f"{name}.truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
    return name, duration, truth


def clip_sources(scripts, roots):
    """Every clip the scripts play: its file, its contents' SHA-256 and, where dpkg knows it, the
    Debian package (and version) that installed it."""
    clips = sorted({t["clip"] for script in scripts for t in script["turns"] if "clip" in t})
    sources = {}
    for clip in clips:
        path = resolve_clip(clip, roots)
        with open(path, "rb") as f:
            sources[clip] = {"file": path, "sha256": hashlib.sha256(f.read()).hexdigest(),
                             "package": None}
    if not clips:
        return sources
    owners = subprocess.run(["dpkg-query", "-S", *(s["file"] for s in sources.values())],
                            capture_output=True, text=True) if shutil.which("dpkg-query") else None
    packages = {}
    for line in (owners.stdout.splitlines() if owners else []):
        package, _, file = line.partition(": ")
        packages[file] = package.split(":")[0]
    if packages:
        versions = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\n",
                                   *sorted(set(packages.values()))],
                                  capture_output=True, text=True).stdout
        version_of = dict(line.split(" ", 1) for line in versions.splitlines() if " " in line)
        for source in sources.values():
            package = packages.get(source["file"])
            if package:
                source["package"] = f"{package} {version_of.get(package, '')}".strip()
    return sources


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for the generated calls")
    parser.add_argument("--scripts", default=os.path.join(here, "calls.json"))
    parser.add_argument("--only", nargs="*", help="ids of the calls to build (default: all)")
    parser.add_argument("--clip-root", action="append", default=[], metavar="NAME=DIR",
                        help="where clips named NAME/... are (repeatable)")
    args = parser.parse_args()
    roots = {}
    for root in args.clip_root:
        name, sep, directory = root.partition("=")
        if not sep or not name or not directory:
            parser.error(f"--clip-root {root}: give NAME=DIR")
        roots[name] = directory

    with open(args.scripts) as f:
        scripts = json.load(f)
    by_id = {script["id"]: script for script in scripts}
    for script in scripts:
        if "turns_of" in script:
            script["turns"] = by_id[script["turns_of"]]["turns"]
    with open(__file__, "rb") as f:
        generator = f.read()
    sources = clip_sources(scripts, roots)
    stamp = hashlib.sha256(generator + json.dumps(scripts, sort_keys=True).encode() +
                           tool_versions().encode() +
                           json.dumps({c: s["sha256"] for c, s in sources.items()},
                                      sort_keys=True).encode()).hexdigest()
    stamp_path = os.path.join(args.out, ".stamp")
    if not args.only and os.path.exists(stamp_path) and open(stamp_path).read() == stamp:
        os.utime(stamp_path)  # newer than the inputs that woke the build, which changed nothing
        return 0
    os.makedirs(args.out, exist_ok=True)
    if os.path.exists(stamp_path):
        os.remove(stamp_path)
    wanted = [s for s in scripts if not args.only or s["id"] in args.only]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for script in wanted:
            name, duration, truth = build_call(script, args.out, pool, roots, sources)
            latencies = [t["latency_ms"] for t in truth["standard_metrics"][0]["result"]["turns"]]
            print(f"{name}: {duration:.1f} s, {len(truth['turns']['agent'])} agent and "
                  f"{len(truth['turns']['user'])} caller turns, {len(latencies)} latencies" +
                  (f" {min(latencies):.0f}-{max(latencies):.0f} ms" if latencies else ""))
    if not args.only:
        with open(stamp_path, "w") as f:
            f.write(stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
