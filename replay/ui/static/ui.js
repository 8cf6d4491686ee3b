// agentlog UI: live pages (server-sent events, then the page's #live part swapped in
// from a fresh fetch of the same URL) and action forms posted in the background.
"use strict";
(function () {
  const body = document.body;
  const root = body.dataset.root || "";
  const notice = document.getElementById("notice");

  function say(text, bad) {
    notice.textContent = text;
    notice.className = bad ? "bad" : "good";
  }

  async function refresh() {
    const res = await fetch(location.href, { credentials: "same-origin" });
    if (!res.ok) return;
    const doc = new DOMParser().parseFromString(await res.text(), "text/html");
    const fresh = doc.getElementById("live");
    const here = document.getElementById("live");
    if (fresh && here) {
      here.replaceWith(fresh);
      wire(fresh);
    }
  }

  function follow() {
    if (body.dataset.live === undefined) return;
    const run = body.dataset.live;
    const query = new URLSearchParams({ seen: body.dataset.seen || "" });
    if (run) query.set("run", run);
    const source = new EventSource(root + "/live?" + query);
    source.addEventListener("changed", refresh);
    source.onopen = () => document.getElementById("live-dot").className = "on";
    source.onerror = () => document.getElementById("live-dot").className = "";
  }

  function wire(scope) {
    scope.querySelectorAll("form[data-fetch]").forEach((form) => {
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
        const button = form.querySelector("button");
        if (button) button.disabled = true;
        say("working…", false);
        try {
          const res = await fetch(form.action, {
            method: "POST",
            body: new FormData(form),
            headers: { "X-Agentlog-Fetch": "1" },
            credentials: "same-origin",
          });
          const doc = await res.json();
          if (!res.ok) { say(doc.error || "refused", true); return; }
          say("run " + doc.run_id + ": " + doc.status, false);
          if (doc.location && !location.pathname.endsWith(doc.location)) {
            location.assign(doc.location);
          } else {
            refresh();
          }
        } catch (e) {
          say("the UI could not be reached: " + e, true);
        } finally {
          if (button) button.disabled = false;
        }
      });
    });
  }

  wire(document);
  follow();
})();
