/* The engine's WebSocket (/ws/jobs/) for admin pages: ConveyorJobs.watch(subscriptions,
   onEvent, onOpen) subscribes (e.g. [{jobs: [1, 2]}] or [{type: "factors.aggregation"}]),
   hands each event to onEvent, and reconnects with a growing delay; onOpen(reconnected)
   runs on every (re)connection once the server has answered every subscription, so a
   page can refresh what it may have missed while disconnected: whatever happens after
   that refresh is sent on the socket. (Run at the socket's opening, the refresh could
   come before an event that the server then passes over, still unsubscribed.) The
   socket has no replay: the server closes it with 4000 when events may have been
   missed (the client fell behind, or the server's event source was interrupted), and
   this reconnects like after any drop. An event may come more than once; onEvent should
   apply events by id (newest per job wins), as the pages do. */
(function () {
  "use strict";

  var REFUSED = [4401, 4403];  // not logged in, or not allowed: waiting will not help
  var LAGGED = 4000;  // events may have been missed: reconnect at once, then onOpen refreshes

  function watch(subscriptions, onEvent, onOpen) {
    var delay = 1000;
    var opened = false;

    function connect() {
      var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
      var socket = new WebSocket(scheme + window.location.host + "/ws/jobs/");
      var started = Date.now();
      var unanswered = subscriptions.length;

      function subscribed() {
        if (onOpen) onOpen(opened);
        opened = true;
      }

      socket.addEventListener("open", function () {
        subscriptions.forEach(function (subscription) {
          socket.send(JSON.stringify({subscribe: subscription}));
        });
        if (!unanswered) subscribed();
      });
      socket.addEventListener("message", function (message) {
        var data = JSON.parse(message.data);
        if (data.event) onEvent(data.event);
        else if (data.error) window.console.warn("/ws/jobs/: " + data.error);
        // The server answers each subscription in turn, with its acknowledgement or an error
        // (the refusal of a stream over the user's cap, with its "limit", answers none).
        var answer = data.subscribed || (data.error && data.limit === undefined);
        if (answer && unanswered > 0 && --unanswered === 0) subscribed();
      });
      socket.addEventListener("close", function (event) {
        if (REFUSED.indexOf(event.code) >= 0) return;
        // The delay grows while connections fail or drop quickly, and starts over after a
        // connection that lasted; after a lag the server is up, so come back sooner.
        if (Date.now() - started > 10000) delay = 1000;
        window.setTimeout(connect, event.code === LAGGED ? delay / 4 : delay);
        delay = Math.min(delay * 2, 30000);
      });
    }

    connect();
  }

  window.ConveyorJobs = {watch: watch};
})();
