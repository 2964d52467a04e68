/* The engine's WebSocket (/ws/jobs/) for admin pages: ConveyorJobs.watch(subscriptions,
   onEvent, onOpen) subscribes (e.g. [{jobs: [1, 2]}] or [{type: "factors.aggregation"}]),
   hands each event to onEvent, and reconnects with a growing delay; onOpen runs on every
   (re)connection, so a page can refresh what it may have missed while disconnected. */
(function () {
  "use strict";

  var REFUSED = [4401, 4403];  // not logged in, or not allowed: waiting will not help

  function watch(subscriptions, onEvent, onOpen) {
    var delay = 1000;

    function connect() {
      var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
      var socket = new WebSocket(scheme + window.location.host + "/ws/jobs/");
      socket.addEventListener("open", function () {
        delay = 1000;
        subscriptions.forEach(function (subscription) {
          socket.send(JSON.stringify({subscribe: subscription}));
        });
        if (onOpen) onOpen();
      });
      socket.addEventListener("message", function (message) {
        var data = JSON.parse(message.data);
        if (data.event) onEvent(data.event);
      });
      socket.addEventListener("close", function (event) {
        if (REFUSED.indexOf(event.code) >= 0) return;
        window.setTimeout(connect, delay);
        delay = Math.min(delay * 2, 30000);
      });
    }

    connect();
  }

  window.ConveyorJobs = {watch: watch};
})();
