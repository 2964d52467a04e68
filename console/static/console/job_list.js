/* The job list's live columns: each job row on the page follows its job's events
   (state badge, attempts, progress) over the engine's WebSocket (live.js). After a
   reconnection (events may have been missed) the columns come again from the page. */
(function () {
  "use strict";

  var rows = {};
  var newest = {};
  var LIVE = [".field-state_display", ".field-attempts_display", ".field-progress_display"];
  var touched = null;  // jobs updated by events while a refresh is on its way

  document.querySelectorAll("#result_list tbody tr").forEach(function (row) {
    var cell = row.querySelector(".field-id");
    var id = cell ? parseInt(cell.textContent.trim(), 10) : NaN;
    if (id) rows[id] = row;
  });
  var ids = Object.keys(rows).map(Number);
  if (!ids.length || !window.ConveyorJobs) return;

  function number(n) { return Number(n).toLocaleString("en-US"); }

  function progressText(progress) {
    if (progress.total) {
      return number(progress.done) + "/" + number(progress.total) + " (" +
        Math.round(100 * progress.done / progress.total) + "%)";
    }
    return progress.done ? number(progress.done) : "—";
  }

  function update(ev) {
    var row = rows[ev.job];
    if (!row || ev.id <= (newest[ev.job] || 0)) return;  // a repeat, or older than shown
    newest[ev.job] = ev.id;
    if (touched) touched[ev.job] = true;
    var state = ev.state || ev.to_status;
    var badge = row.querySelector(".field-state_display .job-state");
    if (badge && state) {
      badge.className = "job-state job-state-" + state;
      badge.textContent = state;
      row.dataset.state = state;
    }
    var attempts = row.querySelector(".field-attempts_display");
    if (attempts && attempts.textContent.indexOf("/") >= 0) {
      attempts.textContent = ev.attempt + "/" + attempts.textContent.split("/")[1];
    }
    var progress = row.querySelector(".field-progress_display");
    if (progress && ev.progress) progress.textContent = progressText(ev.progress);
    if (progress && (ev.kind === "retried" || ev.kind === "replayed")) progress.textContent = "—";
  }

  /* The live cells of this page as the server renders them now; a row an event updated
     meanwhile keeps what the event showed. */
  function refresh(reconnected) {
    if (!reconnected) return;
    touched = {};
    fetch(window.location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (!html) return;
        var page = new DOMParser().parseFromString(html, "text/html");
        page.querySelectorAll("#result_list tbody tr").forEach(function (fresh) {
          var cell = fresh.querySelector(".field-id");
          var id = cell ? parseInt(cell.textContent.trim(), 10) : NaN;
          var row = rows[id];
          if (!row || touched[id]) return;
          LIVE.forEach(function (selector) {
            var from = fresh.querySelector(selector), to = row.querySelector(selector);
            if (from && to) to.innerHTML = from.innerHTML;
          });
          var badge = row.querySelector(".field-state_display .job-state");
          if (badge) row.dataset.state = badge.textContent.trim();
        });
      })
      .finally(function () { touched = null; });
  }

  window.ConveyorJobs.watch([{jobs: ids}], update, refresh);
})();
