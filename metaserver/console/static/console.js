// Live panels: any element with data-poll="<url>" is refreshed from that URL every second.
// The fragment is server-rendered and escaped by Jinja2; it replaces the element's content as HTML.
"use strict";
(function () {
  function poll(el) {
    var url = el.getAttribute("data-poll");
    fetch(url, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { if (html !== null) { el.innerHTML = html; } })
      .catch(function () {})
      .finally(function () { setTimeout(function () { poll(el); }, 1000); });
  }
  // release markers (releases, gray releases, rollbacks, rollout steps, failovers: /console/data/markers) drawn
  // as dashed vertical lines on every chart of the page; the page names its scope in data-markers. The canvas's
  // title lists the markers drawn (time and label), read on hover and by screen readers
  var MARKERS = [];
  var MARK_COLORS = {release: "#2457c5", gray: "#9a6700", rollback: "#b42318", rollout: "#6e40c9", failover: "#b42318"};
  function hhmm(ms) { return new Date(ms).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"}); }
  var markerPlugin = {id: "releaseMarkers", afterDatasetsDraw: function (chart) {
    var x = chart.scales.x, area = chart.chartArea, ctx = chart.ctx, drawn = 0, titles = [];
    ctx.save(); ctx.setLineDash([4, 3]); ctx.lineWidth = 1; ctx.font = "10px sans-serif";
    MARKERS.forEach(function (m) {
      if (m.at < x.min || m.at > x.max) { return; }
      var px = x.getPixelForValue(m.at);
      ctx.strokeStyle = ctx.fillStyle = MARK_COLORS[m.kind] || "#555";
      ctx.beginPath(); ctx.moveTo(px, area.top); ctx.lineTo(px, area.bottom); ctx.stroke();
      var left = px > area.left + (area.right - area.left) / 2;  // a label reads away from the nearer edge
      ctx.textAlign = left ? "right" : "left";
      ctx.fillText(m.label, left ? px - 3 : px + 3, area.top + 10 + 11 * (drawn % 4));
      drawn += 1;
      titles.push(hhmm(m.at) + " " + m.label);
    });
    ctx.restore();
    chart.canvas.setAttribute("data-markers-drawn", String(drawn));
    if (drawn) { chart.canvas.setAttribute("title", "Changes: " + titles.join("; ")); }
  }};
  function line(canvas, datasets) {
    // whole minutes on the time axis (the data are per-minute windows): about eight labels, never one minute twice
    var xs = [];
    datasets.forEach(function (d) { d.data.forEach(function (p) { xs.push(p.x); }); });
    var span = xs.length ? Math.max.apply(null, xs) - Math.min.apply(null, xs) : 0;
    var step = 60000 * Math.max(1, Math.ceil(span / 60000 / 8));
    datasets.forEach(function (d) { d.backgroundColor = d.borderColor; });
    if (MARKERS.length && xs.length) {  // the axis reaches the latest marker, so a change just made shows
      var last = Math.max.apply(null, MARKERS.map(function (m) { return m.at; }));
      xs.push(Math.min(last, Date.now()));
    }
    var lo = xs.length ? Math.min.apply(null, xs) : undefined, hi = xs.length ? Math.max.apply(null, xs) : undefined;
    return new window.Chart(canvas, {
      type: "line",
      plugins: [markerPlugin],
      data: {datasets: datasets},
      options: {animation: false, parsing: false, normalized: true, maintainAspectRatio: false,
                scales: {x: {type: "linear", min: lo, max: hi, ticks: {stepSize: step, callback: hhmm}},
                         y: {beginAtZero: true}}}
    });
  }
  function points(rows) { return rows.map(function (r) { return {x: r[0], y: r[1]}; }); }
  function charts(el) {
    var note = document.getElementById("charts-note");
    fetch(el.getAttribute("data-src"), {credentials: "same-origin"})
      .then(function (r) { return r.json(); })
      .then(function (data) {
        var s = data.series || {};
        var points_ = ["send.msgs", "consume.msgs", "lag"].reduce(function (n, k) { return n + (s[k] || []).length; }, 0);
        if (!data.available || !window.Chart || points_ === 0) {
          if (data.command) {  // no pipeline has run yet: say what to run (as text, never as HTML)
            note.textContent = "";
            ["No charts yet: no pipeline has run. Start it with ", [data.command], " (continuously), or ",
             [data.command + " --once"], " for one pass; on the dev stack after ", ["source .ykafka/dev.env"], "."
            ].forEach(function (part) {
              var node = typeof part === "string" ? document.createTextNode(part) : document.createElement("code");
              if (typeof part !== "string") { node.textContent = part[0]; }
              note.appendChild(node);
            });
          } else {
            note.textContent = "No charts: " + (data.reason || (window.Chart ? "no produce / consume / lag data in the last hour"
                                                                            : "chart library not loaded"));
          }
          note.hidden = false;
          el.hidden = true;
          el.setAttribute("data-state", "empty");
          return;
        }
        el.setAttribute("data-state", "drawn");
        line(document.getElementById("chart-rates"), [
          {label: "produced", data: points(data.series["send.msgs"]), borderColor: "#2457c5"},
          {label: "consumed", data: points(data.series["consume.msgs"]), borderColor: "#1d7a46"}]);
        line(document.getElementById("chart-lag"), [
          {label: "max lag", data: points(data.series["lag"]), borderColor: "#b42318"}]);
      })
      .catch(function (err) {
        note.textContent = "No charts: " + err; note.hidden = false; el.setAttribute("data-state", "empty");
      });
  }
  var COLORS = ["#b42318", "#2457c5", "#1d7a46", "#9a6700", "#6e40c9"];
  function seriesChart(box) {
    // one line per series over time, from the server-rendered (escaped) JSON in data-series; the box holds its
    // canvas, and its note says why there is no chart
    var series = JSON.parse(box.getAttribute("data-series") || "{}");
    var names = Object.keys(series);
    var note = document.getElementById(box.getAttribute("data-note"));
    if (!window.Chart || names.length === 0) {
      note.textContent = "No chart: " + (window.Chart ? box.getAttribute("data-empty") : "chart library not loaded");
      note.hidden = false; box.hidden = true; box.setAttribute("data-state", "empty");
      return;
    }
    line(box.querySelector("canvas"), names.map(function (t, i) {
      return {label: t, data: points(series[t]), borderColor: COLORS[i % COLORS.length]};
    }));
    box.setAttribute("data-state", "drawn");
  }
  function chunkedReplay(form) {
    // re-publish the checked dead letters a few per request, showing progress between requests
    var status = document.getElementById("replay-status");
    var bar = document.getElementById("replay-progress");
    var all = document.getElementById("select-all");
    if (all) {
      all.addEventListener("change", function () {
        document.querySelectorAll("input[name=offsets][form=" + form.id + "]").forEach(function (b) { b.checked = all.checked; });
      });
    }
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var refs = Array.prototype.map.call(
        document.querySelectorAll("input[name=offsets][form=" + form.id + "]:checked"), function (b) { return b.value; });
      if (refs.length === 0) { status.textContent = "Select messages first."; return; }
      if (!window.confirm("Re-publish the " + refs.length + " selected message(s)?")) { return; }
      var size = parseInt(form.getAttribute("data-chunk") || "10", 10);
      var done = 0, failed = 0;
      bar.max = refs.length; bar.value = 0; bar.hidden = false;
      form.setAttribute("data-state", "running");
      function next(i) {
        if (i >= refs.length) {
          status.textContent = "Done: " + done + " of " + refs.length + " re-published" + (failed ? ", " + failed + " failed" : "") + ".";
          form.setAttribute("data-state", "done");
          return;
        }
        var body = new FormData();
        ["csrf", "group", "topic", "cluster"].forEach(function (n) { body.append(n, form.elements[n].value); });
        refs.slice(i, i + size).forEach(function (r) { body.append("offsets", r); });
        fetch(form.action, {method: "POST", body: body, credentials: "same-origin", headers: {"Accept": "application/json"}})
          .then(function (r) { return r.ok ? r.json() : Promise.reject(new Error("HTTP " + r.status)); })
          .then(function (res) {
            done += res.replayed; failed += res.failed;
            bar.value = Math.min(refs.length, i + size);
            status.textContent = done + " of " + refs.length + " re-published";
            next(i + size);
          })
          .catch(function (err) { status.textContent = "Stopped after " + done + ": " + err.message; form.setAttribute("data-state", "failed"); });
      }
      next(0);
    });
  }
  function draw() {
    var el = document.getElementById("charts");
    if (el) { charts(el); }
    document.querySelectorAll("[data-series]").forEach(seriesChart);
  }
  window.addEventListener("load", function () {
    var src = document.querySelector("[data-markers]");
    if (src) {
      fetch(src.getAttribute("data-markers"), {credentials: "same-origin"})
        .then(function (r) { return r.ok ? r.json() : {markers: []}; })
        .then(function (data) { MARKERS = data.markers || []; })
        .catch(function () {})
        .finally(draw);
    } else {
      draw();
    }
    var selected = document.getElementById("replay-selected");
    if (selected) { chunkedReplay(selected); }
  });
  // a button with data-confirm="text" asks before it submits; the text comes escaped from the template and is
  // read as data (never spliced into script), so a topic or group name cannot break out of it
  document.addEventListener("click", function (ev) {
    var btn = ev.target.closest ? ev.target.closest("[data-confirm]") : null;
    if (btn && !window.confirm(btn.getAttribute("data-confirm"))) { ev.preventDefault(); ev.stopImmediatePropagation(); }
  }, true);
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-poll]").forEach(function (el) { setTimeout(function () { poll(el); }, 1000); });
  });
})();
