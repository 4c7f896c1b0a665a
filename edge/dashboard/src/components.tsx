import type { ComponentChildren } from "preact";
import { describeError } from "./api";

export function StatusBadge({ status }: { status: string }) {
  return <span class={`badge status-${status}`}>{status.replace(/_/g, " ")}</span>;
}

export function ErrorBanner({ error, onRetry }: { error: unknown; onRetry?: () => void }) {
  if (!error) return null;
  return (
    <div class="error" role="alert">
      <span>{describeError(error)}</span>
      {onRetry && (
        <button type="button" onClick={onRetry}>
          Try again
        </button>
      )}
    </div>
  );
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <div class="empty">{children}</div>;
}

export function Loading() {
  return (
    <div class="loading" aria-live="polite">
      Loading…
    </div>
  );
}

export function Pager({ page, totalPages, onPage }: {
  page: number;
  totalPages: number;
  onPage: (page: number) => void;
}) {
  if (totalPages <= 1) return null;
  return (
    <nav class="pager" aria-label="Pages">
      <button type="button" disabled={page <= 1} onClick={() => onPage(page - 1)}>
        ← Newer
      </button>
      <span>
        Page {page} of {totalPages}
      </span>
      <button type="button" disabled={page >= totalPages} onClick={() => onPage(page + 1)}>
        Older →
      </button>
    </nav>
  );
}
