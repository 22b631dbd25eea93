// The console's only script: what moves on a page. Everything else is server-rendered.
// Data comes from data- attributes and from each run's /runs/{id}/live feed (server-sent
// events: status, second, step), never from inline scripts (the CSP allows none).
"use strict";

(function () {
  // Live runs in a table: their status cell follows the run's feed.
  function followRows() {
    document.querySelectorAll("tr[data-live][data-run-id]").forEach(function (row) {
      var feed = new EventSource("/runs/" + encodeURIComponent(row.dataset.runId) + "/live");
      feed.addEventListener("status", function (e) {
        var data = JSON.parse(e.data);
        if (data.status) {
          row.dataset.status = data.status;
          var cell = row.querySelector("td.status");
          if (cell) cell.textContent = data.status;
        }
        if (data.ended) feed.close();
      });
      feed.onerror = function () { if (feed.readyState === 2) row.dataset.feed = "closed"; };
    });
  }

  function width(el) {
    return Math.max(320, Math.min(1100, el.clientWidth || 900));
  }

  // A spec's latency thresholds as red dashed lines on the ms axis (data-thresholds:
  // [[label, ms], ...]); data-thresholds-drawn counts the lines of the last draw.
  function limits(el) {
    var given = [];
    try { given = JSON.parse(el.dataset.thresholds || "[]"); } catch (e) { given = []; }
    return function (u) {
      var drawn = 0;
      u.ctx.save();
      u.ctx.strokeStyle = "#c53030";
      u.ctx.fillStyle = "#c53030";
      u.ctx.setLineDash([3, 4]);
      u.ctx.font = "11px sans-serif";
      given.forEach(function (limit) {
        var y = u.valToPos(limit[1], "ms", true), label = limit[0];
        if (!isFinite(y)) return;
        // Far above the data (the axis does not stretch to it): on the top edge.
        if (y < u.bbox.top) { y = u.bbox.top; label += " (above the plot)"; }
        u.ctx.beginPath();
        u.ctx.moveTo(u.bbox.left, y);
        u.ctx.lineTo(u.bbox.left + u.bbox.width, y);
        u.ctx.stroke();
        u.ctx.fillText(label, u.bbox.left + 4, y < u.bbox.top + 14 ? y + 12 : y - 4);
        drawn += 1;
      });
      u.ctx.restore();
      el.dataset.thresholdsDrawn = String(drawn);
    };
  }

  // A load-like run: requests/s, errors/s (left axis) and p50/p99 in ms (right axis).
  function secondsPlot(el, feed) {
    var xs = [], rps = [], errors = [], p50 = [], p99 = [];
    var plot = null, warm = 0;
    // The warm-up's seconds (discarded from every figure) shaded behind the lines.
    function shade(u) {
      if (!warm) return;
      var x0 = Math.max(u.bbox.left, u.valToPos(0.5, "x", true));
      var x1 = u.valToPos(warm + 0.5, "x", true);
      u.ctx.save();
      u.ctx.fillStyle = "rgba(160, 174, 192, 0.25)";
      u.ctx.fillRect(x0, u.bbox.top, x1 - x0, u.bbox.height);
      u.ctx.restore();
    }
    function draw() {
      var data = [xs, rps, errors, p50, p99];
      if (plot) { plot.setData(data); return; }
      if (typeof uPlot === "undefined") return;
      plot = new uPlot({
        width: width(el), height: 300,
        // The ms axis reaches a threshold near the data (up to 3 times its top), as the
        // server-drawn plots do; a farther one is drawn on the top edge.
        scales: { x: { time: false }, ms: { range: function (u, min, max) {
          var top = max > 0 ? max : 1;
          JSON.parse(el.dataset.thresholds || "[]").forEach(function (l) {
            if (l[1] <= 3 * (max > 0 ? max : 1)) top = Math.max(top, l[1]);
          });
          return [0, top * 1.05];
        } } },
        hooks: { drawAxes: [shade], draw: [limits(el)] },
        axes: [
          { label: "second", incrs: [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600] },
          { label: "per second" },
          { scale: "ms", side: 1, label: "ms", grid: { show: false } },
        ],
        series: [
          { label: "second" },
          { label: "requests/s", stroke: "#2b6cb0", width: 2 },
          { label: "errors/s", stroke: "#c53030", width: 1 },
          { label: "p50 ms", scale: "ms", stroke: "#2f855a", width: 1 },
          { label: "p99 ms", scale: "ms", stroke: "#b7791f", width: 2 },
        ],
      }, data, el);
    }
    feed.addEventListener("second", function (e) {
      var s = JSON.parse(e.data);
      xs.push(xs.length + 1);
      rps.push(s.sent == null ? null : s.sent);
      errors.push(s.failed == null ? 0 : s.failed);
      p50.push(s.p50_ms == null ? null : s.p50_ms);
      p99.push(s.p99_ms == null ? null : s.p99_ms);
      if (s.phase === "warmup") warm = xs.length;
      draw();
      el.dataset.warmup = String(warm);
      el.dataset.seconds = String(xs.length);
    });
  }

  // A faults run: one line per timeline step, as it happens.
  function timeline(el, feed) {
    feed.addEventListener("step", function (e) {
      var li = document.createElement("li");
      li.textContent = JSON.parse(e.data).line;
      el.appendChild(li);
    });
  }

  // A live run ended: its record and outcome (result, findings) are read from the page
  // again and swapped in, leaving the plots as they are. data-ended says it is done.
  function refreshOutcome() {
    fetch(location.href, { credentials: "same-origin" })
      .then(function (answer) { return answer.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        ["record", "outcome"].forEach(function (id) {
          var now = document.getElementById(id), then = fresh.getElementById(id);
          if (now && then) now.replaceWith(document.importNode(then, true));
        });
      })
      .catch(function () {})
      .then(function () { document.body.dataset.ended = "1"; });
  }

  // A run's page: its status, plots and timeline share one feed.
  function followRun() {
    var status = document.getElementById("status");
    var plot = document.getElementById("plot");
    var steps = document.getElementById("timeline");
    var source = (plot || steps) ? (plot || steps).dataset.feed : null;
    if (!source && status && (status.dataset.status === "queued" || status.dataset.status === "running")) {
      source = "/runs/" + encodeURIComponent(status.dataset.run) + "/live";
    }
    if (!source) return;
    var wasLive = !!status && (status.dataset.status === "queued" || status.dataset.status === "running");
    var feed = new EventSource(source);
    if (plot) secondsPlot(plot, feed);
    if (steps) timeline(steps, feed);
    feed.addEventListener("status", function (e) {
      var data = JSON.parse(e.data);
      if (status && data.status) {
        status.dataset.status = data.status;
        status.textContent = data.status;
      }
      if (data.ended) {
        feed.close();
        if (wasLive) {
          refreshOutcome();
        } else {
          document.body.dataset.ended = "1";
        }
      }
    });
  }

  // Compare: once one run is picked and the other is not, the page is asked again, so
  // that the other picker offers only the runs that compare with it.
  function narrowPickers() {
    var form = document.getElementById("compare");
    if (!form) return;
    form.querySelectorAll("select").forEach(function (select) {
      select.addEventListener("change", function () {
        var empty = Array.prototype.some.call(form.querySelectorAll("select"), function (s) { return !s.value; });
        if (select.value && empty) form.submit();
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    followRows();
    narrowPickers();
    if (document.body.dataset.page === "run") followRun();
  });
})();
