/* The pipeline page kept live (console/admin/pipeline.py renders it). Each event of the
   pipeline's stream (GET /sync/pipelines/<uuid>/events) patches its job's box; an event
   naming a job the page does not show yet (a chained child, a job queued by a running one) brings the graph
   fragment again. Every box knows the newest event it reflects, so an event is applied
   once whichever comes first, the stream or a fresh fragment; the same rule drops the
   repeats of the stream, which is at-least-once (a reconnection's replay overlaps what
   came before). No framework, no CDN. */
(function () {
  "use strict";

  function number(n) { return Number(n).toLocaleString("en-US"); }

  var root = document.getElementById("pipeline");
  if (!root) return;

  var STATES = ["pending", "running", "succeeded", "failed", "cancelled"];
  var FINISHED = ["succeeded", "failed", "cancelled"];
  var ERROR_KINDS = ["failed", "retry_scheduled", "rescued", "lease_lost"];
  var source = null;
  var lastId = Number(root.dataset.lastEvent || 0);
  var refreshing = false;
  var refreshAgain = false;
  var held = [];  // events received while the graph fragment is on its way

  function box(jobId) { return document.getElementById("job-" + jobId); }

  function setStateClass(el, state) {
    STATES.forEach(function (s) { el.classList.remove("pl-" + s); });
    el.classList.add("pl-" + state);
  }

  function live(text) { document.getElementById("pipeline-live").textContent = text; }

  function clock(iso) {
    return iso ? new Date(iso).toLocaleTimeString([], {hour12: false}) : "—";
  }

  function setTime(el, iso) {
    el.setAttribute("datetime", iso || "");
    el.textContent = clock(iso);
  }

  function formatDuration(seconds) {
    if (seconds < 1) return Math.round(seconds * 1000) + " ms";
    if (seconds < 60) return seconds.toFixed(1) + " s";
    var minutes = Math.floor(seconds / 60), secs = Math.floor(seconds % 60);
    if (minutes < 60) return minutes + " min " + String(secs).padStart(2, "0") + " s";
    return Math.floor(minutes / 60) + " h " + String(minutes % 60).padStart(2, "0") + " min";
  }

  function showDuration(el) {
    var started = el.querySelector(".pl-started").getAttribute("datetime");
    var finished = el.querySelector(".pl-finished").getAttribute("datetime");
    var out = el.querySelector(".pl-duration");
    if (!started || (!finished && el.dataset.state !== "running")) { out.textContent = "—"; return; }
    var end = finished ? new Date(finished) : new Date();
    var text = formatDuration(Math.max(0, (end - new Date(started)) / 1000));
    out.textContent = finished ? text : text + " so far";
  }

  function showProgress(el, done, total, message) {
    var bar = el.querySelector(".pl-bar"), holder = el.querySelector(".pl-progress");
    var text = "";
    if (total) {
      var percent = Math.min(100, 100 * done / total);
      bar.style.width = percent.toFixed(1) + "%";
      holder.classList.remove("pl-indeterminate");
      holder.setAttribute("aria-valuenow", percent.toFixed(0));
      text = number(done) + "/" + number(total) + " (" + percent.toFixed(0) + "%)";
    } else {
      holder.classList.add("pl-indeterminate");
      holder.removeAttribute("aria-valuenow");
      bar.style.width = el.dataset.state === "succeeded" ? "100%" : "0%";
      text = done ? number(done) : "";
    }
    if (message) text += (text ? " · " : "") + message;
    el.querySelector(".pl-progress-text").textContent = text;
  }

  function showButtons(el, state) {
    el.querySelectorAll(".pl-op").forEach(function (button) {
      button.hidden = button.dataset.states.split(" ").indexOf(state) < 0;
    });
  }

  function showError(el, text) {
    var pre = el.querySelector(".pl-error");
    pre.textContent = text || "";
    pre.hidden = !text;
  }

  /* One event onto its box: state, progress, attempts, timings, last error, buttons. */
  function patch(el, ev) {
    var state = ev.state || ev.to_status || el.dataset.state;
    el.dataset.event = ev.id;
    el.dataset.state = state;
    setStateClass(el, state);
    var badge = el.querySelector(".pl-state");
    setStateClass(badge, state);
    badge.textContent = state;
    var max = Number(el.dataset.maxAttempts);
    if (ev.kind === "recovered") max = Math.max(max, ev.attempt + 1);
    el.dataset.maxAttempts = max;
    el.querySelector(".pl-attempts").textContent = ev.attempt + "/" + max;
    if (ev.kind === "retried" || ev.kind === "replayed") {
      showProgress(el, 0, null, "");
      showError(el, "");
    } else if (ev.progress) {
      showProgress(el, ev.progress.done, ev.progress.total, ev.kind === "progress" ? ev.message : "");
    } else if (state === "succeeded" && el.querySelector(".pl-indeterminate")) {
      el.querySelector(".pl-bar").style.width = "100%";
    }
    if (ERROR_KINDS.indexOf(ev.kind) >= 0) showError(el, ev.message);
    var started = el.querySelector(".pl-started");
    if (ev.kind === "claimed" && !started.getAttribute("datetime")) setTime(started, ev.at);
    var finished = el.querySelector(".pl-finished");
    if (FINISHED.indexOf(state) >= 0) {
      if (ev.to_status === state && ev.from_status !== state) setTime(finished, ev.at);
    } else {
      setTime(finished, null);
    }
    showDuration(el);
    showButtons(el, state);
  }

  function apply(ev, replaying) {
    if (ev.id > lastId) lastId = ev.id;
    var el = box(ev.job);
    if (!replaying && (refreshing || !el)) held.push(ev);
    if (!el) {
      if (!replaying) refresh();
      return;
    }
    if (ev.id > Number(el.dataset.event || 0)) patch(el, ev);
    summarise();
  }

  function pipelineState(states) {
    if (states.some(function (s) { return FINISHED.indexOf(s) < 0; })) return "running";
    if (states.indexOf("failed") >= 0) return "failed";
    if (states.indexOf("cancelled") >= 0) return "cancelled";
    return "succeeded";
  }

  /* [[state, how many], ...] in the states' own order, absent ones left out. */
  function stateCounts(states) {
    return STATES.filter(function (s) { return states.indexOf(s) >= 0; }).map(function (s) {
      return [s, states.filter(function (x) { return x === s; }).length];
    });
  }

  function statesOf(boxes) {
    return Array.prototype.map.call(boxes, function (el) { return el.dataset.state; });
  }

  function summarise() {
    var states = statesOf(document.querySelectorAll(".pl-job"));
    var state = pipelineState(states);
    var badge = document.getElementById("pipeline-state");
    setStateClass(badge, state);
    badge.textContent = state;
    var counts = document.querySelector(".pl-counts");
    if (counts) {
      var parts = stateCounts(states).map(function (pair) { return pair[1] + " " + pair[0]; });
      counts.textContent = states.length + " job" + (states.length === 1 ? "" : "s") + ": " + parts.join(", ");
    }
    // A folded group's line counts its own boxes (not the jobs below them) by state.
    document.querySelectorAll(".pl-folded").forEach(function (folded) {
      var boxes = folded.querySelectorAll(":scope > details > ul.pl-fold-list > li > .pl-job");
      var summary = folded.querySelector(":scope > details > summary");
      summary.textContent = boxes.length + " more: ";
      stateCounts(statesOf(boxes)).forEach(function (pair, index) {
        if (index) summary.appendChild(document.createTextNode(", "));
        var span = document.createElement("span");
        span.className = "pl-count pl-" + pair[0];
        span.textContent = pair[1] + " " + pair[0];
        summary.appendChild(span);
      });
    });
  }

  /* The server gives each bar its width as data-percent: the Content-Security-Policy
     refuses style attributes, not styles set from a script. */
  function decorate(scope) {
    scope.querySelectorAll(".pl-bar[data-percent]").forEach(function (bar) {
      bar.style.width = bar.dataset.percent + "%";
    });
    scope.querySelectorAll("time[datetime]").forEach(function (el) {
      if (el.getAttribute("datetime")) el.textContent = clock(el.getAttribute("datetime"));
    });
    scope.querySelectorAll(".pl-job").forEach(showDuration);
  }

  /* The graph fragment again, then the events that arrived meanwhile on top of it. */
  function refresh() {
    if (refreshing) { refreshAgain = true; return; }
    refreshing = true;
    fetch(root.dataset.graphUrl, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) {
        if (!response.ok) throw new Error("graph: HTTP " + response.status);
        return response.text();
      })
      .then(function (html) {
        var template = document.createElement("template");
        template.innerHTML = html.trim();
        var fresh = template.content.firstElementChild;
        document.getElementById("pipeline-graph").replaceWith(fresh);
        decorate(fresh);
        var replay = held;
        held = [];
        replay.forEach(function (ev) { apply(ev, true); });
        summarise();
      })
      .catch(function (error) { live("could not refresh the graph (" + error.message + ")"); })
      .finally(function () {
        refreshing = false;
        if (refreshAgain) { refreshAgain = false; refresh(); }
      });
  }

  function finish(state) {
    if (source) { source.close(); source = null; }
    root.dataset.finished = "1";
    root.classList.add("pl-finished");
    live("finished: " + state);
    refresh();  // the server's own view of the end: exact errors and timings
  }

  /* Listen from the newest event the page reflects; EventSource resumes by itself
     (Last-Event-ID) after a dropped connection. */
  function listen() {
    if (source) return;
    root.dataset.finished = "0";
    root.classList.remove("pl-finished");
    source = new EventSource(root.dataset.eventsUrl + "?last_event_id=" + lastId);
    source.addEventListener("open", function () { live("live"); });
    source.addEventListener("job", function (message) { apply(JSON.parse(message.data), false); });
    source.addEventListener("end", function (message) { finish(JSON.parse(message.data).state); });
    source.addEventListener("error", function () {
      if (source && source.readyState === EventSource.CLOSED) {
        source = null;
        live("not live: the event stream refused the connection; reload the page");
      } else {
        live("reconnecting…");
      }
    });
  }

  function say(text, level) {
    var list = document.getElementById("pipeline-messages");
    var item = document.createElement("li");
    item.className = level;
    item.textContent = text;
    list.replaceChildren(item);
    list.hidden = false;
  }

  /* The job buttons post to the admin's operation views; the result shows up through
     the stream, which is opened again if the pipeline had finished. Taking a job from a
     live worker is asked twice: the view answers 409 with "confirm", and the same
     request goes again with confirm=yes once the operator agrees. */
  function operate(button, data) {
    return fetch(button.formAction, {
      method: "POST", body: data, credentials: "same-origin",
      headers: {"Accept": "application/json", "X-CSRFToken": data.get("csrfmiddlewaretoken")},
    })
      .then(function (response) {
        return response.json().then(function (body) { return {ok: response.ok, body: body}; });
      })
      .then(function (result) {
        if (result.body.confirm && !data.has("confirm")) {
          if (!window.confirm(result.body.message)) return;
          data.set("confirm", "yes");
          return operate(button, data);
        }
        say(result.body.message, result.ok ? "success" : "error");
        if (result.ok) listen();
      });
  }

  root.addEventListener("submit", function (event) {
    var form = event.target, button = event.submitter;
    if (!form.classList.contains("pl-ops") || !button) return;
    event.preventDefault();
    button.disabled = true;
    operate(button, new FormData(form))
      .catch(function (error) { say("The request failed: " + error.message, "error"); })
      .finally(function () { button.disabled = false; });
  });

  decorate(root);
  setInterval(function () {
    document.querySelectorAll('.pl-job[data-state="running"]').forEach(showDuration);
  }, 1000);
  if (root.dataset.finished !== "1") listen(); else root.classList.add("pl-finished");
})();
