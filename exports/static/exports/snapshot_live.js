// A snapshot still being made keeps its jobs table current: every few seconds the page is
// fetched again and the table (with its history) replaced, until the snapshot is ready or
// failed. The rows are the exports' own (each runs as an engine job, linked from its row,
// whose page follows the engine's event stream), so there is no stream of them to follow;
// the page asks instead.
(function () {
  "use strict";
  var EVERY_MS = 5000;

  function open(section) {
    return section && section.getAttribute("data-open") === "true";
  }

  function refresh() {
    var section = document.getElementById("snapshot-jobs");
    if (!open(section) || document.hidden) {
      return schedule(section);
    }
    fetch(window.location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html) {
          var fresh = new DOMParser().parseFromString(html, "text/html")
            .getElementById("snapshot-jobs");
          if (fresh) {
            section.replaceWith(fresh);
            section = fresh;
          }
        }
        schedule(section);
      })
      .catch(function () { schedule(section); });
  }

  function schedule(section) {
    if (open(section)) {
      window.setTimeout(refresh, EVERY_MS);
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    schedule(document.getElementById("snapshot-jobs"));
  });
})();
