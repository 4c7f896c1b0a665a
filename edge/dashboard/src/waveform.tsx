// The recording's waveform, from the peaks the service computed once per recording
// (GET /api/public/v1/calls/{id}/waveform): one row per channel, drawn on a canvas, with the
// playhead; clicking seeks the player.
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, type Waveform } from "./api";
import { useSession } from "./session";

export function decodePeaks(w: Waveform): Int8Array {
  const bytes = atob(w.peaks);
  const out = new Int8Array(bytes.length);
  for (let i = 0; i < bytes.length; i++) out[i] = (bytes.charCodeAt(i) << 24) >> 24;
  return out;
}

export function WaveformView({ callId, position, length, onSeek }: {
  callId: number;
  position: number;
  length: number;
  onSeek: (seconds: number) => void;
}) {
  const { api } = useSession();
  const [wave, setWave] = useState<{ w: Waveform; peaks: Int8Array } | null>(null);
  const [missing, setMissing] = useState<string | null>(null);
  const canvas = useRef<HTMLCanvasElement>(null);

  useEffect(() => {
    api
      .get<Waveform>(`/api/public/v1/calls/${callId}/waveform`)
      .then((w) => setWave({ w, peaks: decodePeaks(w) }))
      .catch((e) => setMissing(e instanceof ApiError ? e.message : String(e)));
  }, [api, callId]);

  useEffect(() => {
    const c = canvas.current;
    if (!c || !wave) return;
    const { w, peaks } = wave;
    const width = (c.width = c.clientWidth * devicePixelRatio);
    const height = (c.height = c.clientHeight * devicePixelRatio);
    const g = c.getContext("2d");
    if (!g) return;
    g.clearRect(0, 0, width, height);
    const rowH = height / w.channels;
    const style = getComputedStyle(c);
    for (let ch = 0; ch < w.channels; ch++) {
      g.fillStyle = style.getPropertyValue(ch === 0 ? "--wave-a" : "--wave-b") || "#4a7";
      const mid = rowH * ch + rowH / 2;
      for (let px = 0; px < width; px++) {
        const from = Math.floor((px / width) * w.buckets), to = Math.max(from + 1, Math.floor(((px + 1) / width) * w.buckets));
        let lo = 0, hi = 0;
        for (let b = from; b < to && b < w.buckets; b++) {
          const at = (ch * w.buckets + b) * 2;
          lo = Math.min(lo, peaks[at]);
          hi = Math.max(hi, peaks[at + 1]);
        }
        const scale = (rowH / 2 - 1) / 128;
        g.fillRect(px, mid - hi * scale, 1, Math.max(1, (hi - lo) * scale));
      }
    }
  }, [wave]);

  if (missing) return <p class="muted wave-missing">No waveform: {missing}</p>;
  if (!wave) return <div class="waveform loading-wave" aria-hidden="true" />;
  const total = wave.w.duration_seconds || length;
  return (
    <div class="waveform-box" onClick={(e) => {
      const box = (e.currentTarget as HTMLElement).getBoundingClientRect();
      onSeek(((e.clientX - box.left) / box.width) * total);
    }}>
      <canvas ref={canvas} class="waveform" role="img"
        aria-label={`Waveform, ${wave.w.channels} channel${wave.w.channels > 1 ? "s" : ""}`} />
      <div class="wave-playhead" style={{ left: `${Math.min(100, (position / (total || 1)) * 100)}%` }} />
    </div>
  );
}
