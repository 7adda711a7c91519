// sesstree web view: live updates. Plain JavaScript, no build step, no dependencies.
// The pages work without it; this only polls the JSON API (docs/web.md) so that a session
// being written, or a forest that changes, updates without a reload.
"use strict";

const POLL_MS = 1000;

class Gone extends Error {}

async function getJSON(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
  if (response.status === 404) throw new Gone(url);
  if (!response.ok) throw new Error(url + ": " + response.status);
  return response.json();
}

// A session page at its head: ask what the session gained since the newest node shown.
function liveSession(body) {
  const name = body.dataset.session;
  const list = document.getElementById("conversation");
  let head = body.dataset.head;
  async function tick() {
    try {
      const data = await getJSON("/api/v1/web/tail/" + encodeURIComponent(name).replace(/%2F/g, "/") + "?after=" + head + (body.dataset.allEvents ? "&all-events=1" : ""));
      if (data.reset) { window.location.reload(); return; }
      if (data.head !== head && data.html) {
        // The server renders the new items with the same escaping as the page itself.
        const box = document.createElement("template");
        box.innerHTML = data.html;
        for (const el of box.content.querySelectorAll(".item")) {
          el.classList.add("fresh");
          // A turn's row replaces its row so far (a turn shown unfinished that now ended).
          if (el.dataset.turn) {
            for (const old of list.querySelectorAll(".item[data-turn]")) {
              if (old.dataset.turn === el.dataset.turn) old.remove();
            }
          }
        }
        list.append(box.content);
        head = data.head;
        body.dataset.head = head;
        if (window.innerHeight + window.scrollY >= document.body.scrollHeight - 300) {
          window.scrollTo(0, document.body.scrollHeight);
        }
      }
    } catch (err) {
      if (err instanceof Gone) {  // renamed or deleted meanwhile: nothing more will come
        document.getElementById("live-note").textContent =
          "This session was renamed or deleted; its reflog still has where it was.";
        return;
      }
      /* otherwise the server may be restarting: try again on the next tick */
    }
    setTimeout(tick, POLL_MS);
  }
  setTimeout(tick, POLL_MS);
}

// The forest's first page: when any ref moves, fetch the page again and swap the forest in.
function liveForest(body) {
  let version = body.dataset.version;
  async function tick() {
    try {
      const data = await getJSON("/api/v1/web/version");
      if (data.version !== version) {
        const response = await fetch(window.location.href, { cache: "no-store" });
        const doc = new DOMParser().parseFromString(await response.text(), "text/html");
        const fresh = doc.getElementById("forest");
        const summary = doc.getElementById("summary");
        if (fresh) document.getElementById("forest").replaceWith(fresh);
        if (summary) document.getElementById("summary").replaceWith(summary);
        version = doc.body.dataset.version || data.version;
        body.dataset.version = version;
      }
    } catch (err) { /* try again on the next tick */ }
    setTimeout(tick, POLL_MS);
  }
  setTimeout(tick, POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  const body = document.body;
  if (body.dataset.page === "session" && body.dataset.live) liveSession(body);
  if (body.dataset.page === "forest" && body.dataset.live) liveForest(body);
});
