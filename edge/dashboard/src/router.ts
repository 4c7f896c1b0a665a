// Hash routes (#/calls/12?agent_id=3): the edge serves one page at / and the API keeps every
// other path, so the dashboard's own addresses never collide with a route of the API.
import { useEffect, useState } from "preact/hooks";

export interface Route {
  path: string[]; // "#/calls/12" -> ["calls", "12"]
  query: URLSearchParams;
}

export function parseHash(hash: string): Route {
  const raw = hash.replace(/^#\/?/, "");
  const [path, query = ""] = raw.split("?", 2);
  return {
    path: path.split("/").filter(Boolean).map(decodeURIComponent),
    query: new URLSearchParams(query),
  };
}

export function href(path: string, query: Record<string, string | number | undefined> = {}) {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined && v !== "") params.set(k, String(v));
  }
  const q = params.toString();
  return `#${path}${q ? "?" + q : ""}`;
}

export function navigate(to: string, replace = false) {
  if (replace) {
    history.replaceState(null, "", to);
    window.dispatchEvent(new HashChangeEvent("hashchange"));
  } else {
    location.hash = to.replace(/^#/, "");
  }
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseHash(location.hash));
  useEffect(() => {
    const onChange = () => setRoute(parseHash(location.hash));
    window.addEventListener("hashchange", onChange);
    return () => window.removeEventListener("hashchange", onChange);
  }, []);
  return route;
}
