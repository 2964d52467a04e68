/* The ingest admin's live parts (ingest/runs/admin.py). On every page: countdowns
   (<time class="ingest-countdown">) to a hook delivery's next attempt or a breaker's next
   probe, ticking each second. On a run's page: the timeline fetched again whenever the
   run's pipeline event stream (GET /sync/pipelines/<uuid>/events) says a job of the run
   moved, at most four times a second, and once when the stream (re)opens, for what
   happened while it was not listening. No framework, no inline script. */
(function () {
  "use strict";

  function waitText(seconds) {
    if (seconds <= 0) return "due";
    var whole = Math.ceil(seconds);
    if (whole < 60) return "in " + whole + " s";
    var minutes = Math.floor(whole / 60), secs = whole % 60;
    if (minutes < 60) return "in " + minutes + " min " + String(secs).padStart(2, "0") + " s";
    return "in " + Math.floor(minutes / 60) + " h " + String(minutes % 60).padStart(2, "0") + " min";
  }

  function tick() {
    document.querySelectorAll("time.ingest-countdown[datetime]").forEach(function (el) {
      el.textContent = waitText((new Date(el.getAttribute("datetime")) - new Date()) / 1000);
    });
  }

  function follow(root) {
    var source = null, timer = null, fetching = false, again = false;

    function live(text) { document.getElementById("ingest-live").textContent = text; }

    function refresh() {
      if (fetching) { again = true; return; }
      fetching = true;
      fetch(root.dataset.timelineUrl, {credentials: "same-origin", headers: {"Accept": "text/html"}})
        .then(function (response) {
          if (!response.ok) throw new Error("HTTP " + response.status);
          return response.text();
        })
        .then(function (html) {
          var template = document.createElement("template");
          template.innerHTML = html.trim();
          document.getElementById("ingest-timeline").replaceWith(template.content.firstElementChild);
          tick();
        })
        .catch(function (error) { live("could not refresh the timeline (" + error.message + ")"); })
        .finally(function () {
          fetching = false;
          if (again) { again = false; refresh(); }
        });
    }

    // A throttle, not a debounce: a steady stream of events still refreshes every 250 ms.
    function soon() {
      if (timer !== null) return;
      timer = window.setTimeout(function () { timer = null; refresh(); }, 250);
    }

    source = new EventSource(root.dataset.eventsUrl);
    source.addEventListener("open", function () { live("live"); refresh(); });
    source.addEventListener("job", soon);
    source.addEventListener("end", function () {
      source.close();
      live("the run's jobs are finished");
      refresh();
    });
    source.addEventListener("error", function () {
      if (source.readyState === EventSource.CLOSED) live("not live: reload the page to follow the run");
      else live("reconnecting…");
    });
  }

  function start() {
    tick();
    window.setInterval(tick, 1000);
    var root = document.getElementById("ingest-run");
    if (root && window.EventSource) follow(root);
  }

  // The admin loads a model admin's Media in the page head, before the page's body.
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
