// Polling that backs off: while something is still changing, ask again soon; while nothing
// changes, ask less and less often (up to maxMs); never while the tab is hidden; and after an
// error, wait at least what Retry-After said. So an open dashboard cannot become a request storm.
import { useEffect, useRef } from "preact/hooks";
import { ApiError } from "./api";

export interface PollOptions {
  active: boolean; // false: nothing left to wait for
  minMs?: number;
  maxMs?: number;
}

// `tick` fetches and says whether anything changed since the last time.
export function usePolling(tick: () => Promise<boolean>, { active, minMs = 2000, maxMs = 30000 }:
  PollOptions) {
  const tickRef = useRef(tick);
  tickRef.current = tick;
  useEffect(() => {
    if (!active) return;
    let delay = minMs;
    let timer: number | undefined;
    let stopped = false;
    const schedule = (ms: number) => {
      timer = window.setTimeout(run, ms);
    };
    const run = async () => {
      if (stopped) return;
      if (document.hidden) return; // resumed by visibilitychange
      try {
        const changed = await tickRef.current();
        delay = changed ? minMs : Math.min(maxMs, Math.round(delay * 1.6));
      } catch (e) {
        const retry = e instanceof ApiError && e.retryAfterSeconds ? e.retryAfterSeconds * 1000 : 0;
        delay = Math.min(maxMs, Math.max(retry, delay * 2));
      }
      if (!stopped) schedule(delay);
    };
    const onVisible = () => {
      if (!document.hidden && !stopped) {
        window.clearTimeout(timer);
        schedule(0);
      }
    };
    document.addEventListener("visibilitychange", onVisible);
    schedule(delay);
    return () => {
      stopped = true;
      window.clearTimeout(timer);
      document.removeEventListener("visibilitychange", onVisible);
    };
  }, [active, minMs, maxMs]);
}

// After a 429 or 503 that said when to come back (Retry-After), asks again then, as the error
// banner promises; a failure after that is handled the same way, and any other error waits for
// the person ("Try again").
export function useRetryAfter(error: unknown, retry: () => Promise<unknown>,
  onError: (e: unknown) => void) {
  useEffect(() => {
    if (!(error instanceof ApiError) || !error.retryAfterSeconds) return;
    if (error.status !== 429 && error.status !== 503) return;
    const timer = window.setTimeout(() => {
      retry().catch(onError);
    }, Math.min(60, error.retryAfterSeconds) * 1000);
    return () => window.clearTimeout(timer);
  }, [error]);
}
