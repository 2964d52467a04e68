/* A job's admin page follows the job (live.js, the engine's WebSocket): a progress step
   updates the progress in place; any other event (claimed, succeeded, failed, rescued,
   an operator's action) reloads the page, so that the why line, the lease, the buttons
   and the history are the server's again. Once the socket is subscribed, and after every
   reconnection, the page asks itself whether an event came in meanwhile (the last event
   id it was drawn with) and reloads if one did: nothing that happened between drawing
   the page and subscribing is missed. Once an operator submits one of the page's forms
   (Recover, Retry …), the page stops following: the job's own event for that action
   would otherwise reload the page over the form's answer, and lose its message. */
(function () {
  "use strict";

  var root = document.getElementById("job-live");
  if (!root || !window.ConveyorJobs) return;
  var jobId = Number(root.dataset.job);
  var lastEvent = Number(root.dataset.lastEvent);
  // Set once a form of the page is submitted: the answer is on its way.
  var leaving = false;
  document.addEventListener("submit", function () { leaving = true; }, true);

  function number(n) { return Number(n).toLocaleString("en-US"); }

  function showProgress(ev) {
    var cell = document.querySelector(".field-progress_display .readonly");
    var message = document.querySelector(".field-progress_message .readonly");
    if (!cell || !ev.progress) return;
    var done = ev.progress.done, total = ev.progress.total;
    cell.textContent = total ? number(done) + "/" + number(total) + " (" +
      Math.round(100 * done / total) + "%)" : number(done);
    if (message) message.textContent = ev.message || "";
  }

  function reloadIfBehind() {
    fetch(window.location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        // Read, not parsed: a parsed copy of the page would apply its styles' policy again.
        var found = html && /data-last-event="(\d+)"/.exec(html);
        if (found && Number(found[1]) > lastEvent && !leaving) window.location.reload();
      });
  }

  window.ConveyorJobs.watch([{job: jobId}], function (ev) {
    if (leaving || ev.job !== jobId || ev.id <= lastEvent) return;
    lastEvent = ev.id;
    if (ev.kind === "progress") showProgress(ev);
    else window.location.reload();
  }, reloadIfBehind);
})();
