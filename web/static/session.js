// Where the sign-in comes from: the URL fragment (`#token=…&thread=…`), kept in localStorage.

export const TOKEN_KEY = "durable-chat.token";

/** The fragment's token (removed from the address bar at once) and thread. */
export function readFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("token");
  if (token) {
    params.delete("token");
    writeFragment(params);
  }
  return { token, threadId: params.get("thread") };
}

export function writeFragment(params) {
  const hash = params.toString();
  history.replaceState(null, "", location.pathname + location.search + (hash ? `#${hash}` : ""));
}

/** The user a token names (its second field, base64url), for display only: the server decides. */
export function userOf(token) {
  try {
    const encoded = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return new TextDecoder().decode(Uint8Array.from(atob(encoded), (c) => c.charCodeAt(0)));
  } catch {
    return null;
  }
}
