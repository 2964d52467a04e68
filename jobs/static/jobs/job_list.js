/* The job list's live columns: each job row on the page follows its job's events
   (state badge, attempts, progress) over the engine's WebSocket (live.js). */
(function () {
  "use strict";

  var colours = JSON.parse(document.getElementById("job-state-colours").textContent);
  var rows = {};
  var newest = {};

  document.querySelectorAll("#result_list tbody tr").forEach(function (row) {
    var cell = row.querySelector(".field-id");
    var id = cell ? parseInt(cell.textContent.trim(), 10) : NaN;
    if (id) rows[id] = row;
  });
  var ids = Object.keys(rows).map(Number);
  if (!ids.length || !window.ConveyorJobs) return;

  function progressText(progress) {
    if (progress.total) {
      return progress.done + "/" + progress.total + " (" + Math.round(100 * progress.done / progress.total) + "%)";
    }
    return progress.done ? String(progress.done) : "—";
  }

  function update(ev) {
    var row = rows[ev.job];
    if (!row || ev.id <= (newest[ev.job] || 0)) return;
    newest[ev.job] = ev.id;
    var state = ev.state || ev.to_state;
    var badge = row.querySelector(".field-state_display .job-state");
    if (badge && state) {
      badge.className = "job-state job-state-" + state;
      badge.textContent = state;
      badge.style.background = colours[state] || "#4a5568";
      row.dataset.state = state;
    }
    var attempts = row.querySelector(".field-attempts_display");
    if (attempts && attempts.textContent.indexOf("/") >= 0) {
      attempts.textContent = ev.attempt + "/" + attempts.textContent.split("/")[1];
    }
    var progress = row.querySelector(".field-progress_display");
    if (progress && ev.progress) progress.textContent = progressText(ev.progress);
    if (progress && ev.kind === "retried") progress.textContent = "—";
  }

  window.ConveyorJobs.watch([{jobs: ids}], update);
})();
