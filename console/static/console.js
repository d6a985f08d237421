// gpucloud console: a little progressive enhancement over server-rendered
// pages. Everything works without JavaScript except the live parts: the
// log tail, the chart refresh and the billing meter.
"use strict";

function getJSON(url) {
  return fetch(url, {headers: {"Accept": "application/json"}, credentials: "same-origin"})
    .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); });
}

// Log tail: fetch from the last offset every 2 s, keep the view at the
// bottom unless the reader scrolled up.
function tailLog(pre) {
  var offset = 0, busy = false;
  function poll() {
    if (busy) return;
    busy = true;
    getJSON(pre.dataset.src + "?offset=" + offset).then(function (c) {
      if (c.data) {
        var atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        pre.textContent += c.data;
        if (atBottom) pre.scrollTop = pre.scrollHeight;
      }
      offset = c.next;
      if (pre.textContent === "") pre.dataset.empty = "no output yet";
    }).catch(function () {}).finally(function () { busy = false; });
  }
  poll();
  setInterval(poll, 2000);
}

// Charts: reload the SVGs every 15 s.
function refreshCharts(div) {
  setInterval(function () {
    fetch(div.dataset.src, {credentials: "same-origin"}).then(function (r) { return r.ok ? r.text() : null; })
      .then(function (svg) {
        if (!svg) return;
        var tmp = document.createElement("div");
        tmp.innerHTML = svg;
        var fresh = tmp.querySelectorAll("svg"), old = div.querySelectorAll("svg");
        for (var i = 0; i < fresh.length && i < old.length; i++) old[i].replaceWith(fresh[i]);
      }).catch(function () {});
  }, 15000);
}

// Billing meter: re-read the current hour's spend every 5 s.
function liveMeter(el) {
  var asof = document.getElementById("meter-asof");
  setInterval(function () {
    getJSON(el.dataset.src).then(function (m) {
      el.textContent = m.spent_text;
      if (asof) asof.textContent = new Date(m.as_of).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
    }).catch(function () {});
  }, 5000);
}

document.addEventListener("DOMContentLoaded", function () {
  var log = document.getElementById("log");
  if (log) tailLog(log);
  var charts = document.getElementById("charts");
  if (charts) refreshCharts(charts);
  var meter = document.getElementById("meter");
  if (meter) liveMeter(meter);
  document.querySelectorAll("form[data-confirm]").forEach(function (f) {
    f.addEventListener("submit", function (e) { if (!window.confirm(f.dataset.confirm)) e.preventDefault(); });
  });
});
