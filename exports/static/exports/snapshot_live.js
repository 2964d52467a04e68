// A snapshot still being made keeps its jobs table current. Its exports run as engine
// jobs of one pipeline, whose event stream says when any of them moved (claimed, polled,
// finished, cancelled); the page then fetches itself again and replaces the table (with
// its history), until the snapshot is ready or failed. Nothing is fetched while nothing
// moves, and EventSource resumes by itself after a dropped connection.
(function () {
  "use strict";
  var SETTLE_MS = 300;  // one refetch for a burst of events (a claim of several jobs)
  var source = null;
  var timer = null;

  function section() {
    return document.getElementById("snapshot-jobs");
  }

  function open(element) {
    return element && element.getAttribute("data-open") === "true";
  }

  function refresh() {
    timer = null;
    fetch(window.location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        var current = section();
        var fresh = html && new DOMParser().parseFromString(html, "text/html").getElementById("snapshot-jobs");
        if (current && fresh) {
          // Keep the histories the reader opened open.
          current.querySelectorAll("details[open]").forEach(function (details) {
            var row = details.closest("tr");
            var again = row && fresh.querySelector("#" + row.id + " details");
            if (again) again.open = true;
          });
          current.replaceWith(fresh);
        }
        if (!open(section())) stop();
      })
      .catch(function () { /* the next event tries again */ });
  }

  function soon() {
    if (timer === null) timer = window.setTimeout(refresh, SETTLE_MS);
  }

  function stop() {
    if (source) { source.close(); source = null; }
  }

  document.addEventListener("DOMContentLoaded", function () {
    var element = section();
    var url = element && element.getAttribute("data-events-url");
    if (!open(element) || !url) return;
    source = new EventSource(url);
    source.addEventListener("job", soon);
    source.addEventListener("end", function () { stop(); soon(); });
    source.addEventListener("error", function () {
      if (source && source.readyState === EventSource.CLOSED) source = null;
    });
  });
})();
