// seglog ui: live follow. The server renders every row (html/template
// escapes the content); this script only inserts those rows, over
// server-sent events.
"use strict";

function followSession(tl) {
  const id = tl.dataset.id;
  const src = new EventSource("/session/events?id=" + encodeURIComponent(id) + "&from=" + tl.dataset.from);
  const count = document.getElementById("count");
  const status = document.getElementById("status");
  src.addEventListener("open", () => { document.body.dataset.live = "1"; });
  src.addEventListener("event", (e) => {
    const closers = document.getElementById("closers");
    if (closers) closers.remove(); // the turn moved on: the closers shown are stale
    tl.insertAdjacentHTML("beforeend", e.data);
    const last = tl.lastElementChild;
    if (last && count) count.textContent = String(Number(last.dataset.seq) + 1);
    tl.dataset.from = count ? count.textContent : tl.dataset.from;
    if (window.innerHeight + window.scrollY >= document.body.scrollHeight - 200) last.scrollIntoView({block: "end"});
  });
  src.addEventListener("gone", (e) => { status.textContent = "deleted: " + e.data; src.close(); });
  src.addEventListener("failed", (e) => { status.textContent = "stopped following: " + e.data; src.close(); });
}

function followList(box) {
  const src = new EventSource("/changes");
  let timer = null;
  src.addEventListener("open", () => { document.body.dataset.live = "1"; });
  src.addEventListener("change", () => {
    if (timer) return;
    timer = setTimeout(async () => {
      timer = null;
      const u = new URL(location.href);
      u.searchParams.set("partial", "1");
      const r = await fetch(u, {credentials: "same-origin"});
      if (r.ok) box.innerHTML = await r.text(); // server-rendered, escaped rows
    }, 150);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const tl = document.getElementById("timeline");
  if (tl) followSession(tl);
  const box = document.getElementById("sessions");
  if (box && box.dataset.live === "1") followList(box);
  const all = document.getElementById("all");
  if (all) all.addEventListener("change", () => document.body.classList.toggle("all", all.checked));
});
