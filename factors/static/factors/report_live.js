/* A report's modules kept live (factors/admin.py): any state change of a bulk job of the
   calculator (over the engine's WebSocket, console/live.js) refreshes the "Recalculating…"
   badges and the modules' figures from the report API, at most four times a second. */
(function () {
  "use strict";

  function start() {
    var TYPES = ["factors.csv_ingest", "factors.api_ingest", "factors.factor_ingest",
                 "factors.emission_recalc", "factors.aggregation"];
    var badges = document.querySelectorAll(".recalc-badge[data-report]");
    if (!badges.length || !window.ConveyorJobs) return;
    var reports = [];
    badges.forEach(function (badge) {
      if (reports.indexOf(badge.dataset.report) < 0) reports.push(badge.dataset.report);
    });
    var timer = null;

    function setCell(row, name, value) {
      var cell = row && row.querySelector(".field-" + name);
      if (!cell) return;
      var target = cell.querySelector("p") || cell;
      target.textContent = value;
    }

    function show(report) {
      report.modules.forEach(function (module) {
        var badge = document.querySelector('.recalc-badge[data-module="' + module.id + '"]');
        if (!badge) return;
        badge.dataset.busy = module.recalculating ? "1" : "0";
        badge.textContent = module.recalculating ? "Recalculating…" : "Up to date";
        var row = badge.closest("tr");
        setCell(row, "entries", module.stats.entries || 0);
        setCell(row, "kg_co2e", module.stats.kg_co2e || "0");
        setCell(row, "without_factor", module.stats.without_factor || 0);
      });
    }

    function refresh() {
      reports.forEach(function (id) {
        fetch("/v1/carbon_reports/" + id,
              {credentials: "same-origin", headers: {"Accept": "application/json"}})
          .then(function (response) { return response.ok ? response.json() : null; })
          .then(function (report) { if (report) show(report); });
      });
    }

    // A throttle, not a debounce: a steady stream of events still refreshes every 250 ms.
    function soon() {
      if (timer !== null) return;
      timer = window.setTimeout(function () { timer = null; refresh(); }, 250);
    }

    window.ConveyorJobs.watch(TYPES.map(function (type) { return {type: type}; }),
                              function (event) { if (event.kind !== "progress") soon(); }, soon);
  }

  // The admin loads a model admin's Media in the page head, before the inline's rows.
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
