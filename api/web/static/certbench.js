/* certbench: optional enhancements. Every page reads and works without this file. */
(function () {
  "use strict";

  function fmt(value, percent) {
    return percent ? (value * 100).toFixed(1) + "%" : value.toFixed(3);
  }

  /* Value of a piecewise-linear series at x (series are compacted, so interpolate between kept points). */
  function valueAt(points, x) {
    if (!points.length || x < points[0][0] || x > points[points.length - 1][0]) return null;
    for (var i = 1; i < points.length; i++) {
      if (points[i][0] >= x) {
        var a = points[i - 1], b = points[i];
        if (b[0] === a[0]) return b[1];
        return a[1] + (b[1] - a[1]) * (x - a[0]) / (b[0] - a[0]);
      }
    }
    return points[points.length - 1][1];
  }

  /* Hover read-out on line charts: the value of every series at the pointer's x. */
  function enhanceChart(svg) {
    var figure = svg.closest("figure");
    if (!figure || !svg.dataset.plot) return;
    var plot = svg.dataset.plot.split(" ").map(Number);
    var x0 = Number(svg.dataset.x0), x1 = Number(svg.dataset.x1);
    var percent = svg.dataset.percent === "1";
    var series = Array.prototype.map.call(svg.querySelectorAll("g.series"), function (g) {
      return { label: g.dataset.label, colour: g.dataset.colour, points: JSON.parse(g.dataset.xy || "[]") };
    });
    var tip = document.createElement("div");
    tip.className = "chart-tip";
    tip.hidden = true;
    tip.setAttribute("role", "status");
    figure.appendChild(tip);
    svg.addEventListener("mousemove", function (event) {
      var box = svg.getBoundingClientRect();
      var scale = svg.viewBox.baseVal.width / box.width;
      var px = (event.clientX - box.left) * scale;
      if (px < plot[0] || px > plot[0] + plot[2]) { tip.hidden = true; return; }
      var x = x0 + (px - plot[0]) / plot[2] * (x1 - x0);
      tip.textContent = "";
      var head = document.createElement("div");
      head.textContent = svg.dataset.xlabel + ": " + x.toFixed(3);
      tip.appendChild(head);
      series.forEach(function (s) {
        var y = valueAt(s.points, x);
        if (y === null) return;
        var line = document.createElement("div");
        var swatch = document.createElement("span");
        swatch.className = "swatch";
        swatch.style.background = s.colour;
        line.appendChild(swatch);
        line.appendChild(document.createTextNode(s.label + ": " + fmt(y, percent)));
        tip.appendChild(line);
      });
      var fbox = figure.getBoundingClientRect();
      tip.hidden = false;
      var left = event.clientX - fbox.left + 14;
      if (left + tip.offsetWidth > fbox.width) left = Math.max(0, event.clientX - fbox.left - tip.offsetWidth - 14);
      tip.style.left = left + "px";
      tip.style.top = (event.clientY - fbox.top + 10) + "px";
    });
    svg.addEventListener("mouseleave", function () { tip.hidden = true; });
  }

  /* Leaderboard filters apply as soon as they change (the Apply button stays for no-JS use). */
  function enhanceFilters(form) {
    var timer = null;
    form.querySelectorAll("select").forEach(function (select) {
      select.addEventListener("change", function () { form.requestSubmit(); });
    });
    form.querySelectorAll("input[type=search], input[type=text]").forEach(function (input) {
      input.addEventListener("input", function () {
        clearTimeout(timer);
        timer = setTimeout(function () { form.requestSubmit(); }, 600);
      });
    });
    form.addEventListener("submit", function () {
      /* leave empty fields out of the URL */
      form.querySelectorAll("input, select").forEach(function (field) {
        if (field.name && field.value === "") field.disabled = true;
      });
    });
  }

  /* Compare: at most four ticks; the button says how many are selected. */
  function enhanceCompare(form) {
    var button = form.querySelector("#compare-button");
    var boxes = form.querySelectorAll("input[type=checkbox][name=id]");
    var max = 4;
    function update() {
      var n = form.querySelectorAll("input[type=checkbox][name=id]:checked").length;
      boxes.forEach(function (box) { box.disabled = !box.checked && n >= max; });
      if (button) {
        button.disabled = n < 2;
        button.textContent = "Compare selected (" + n + " of 2–" + max + ")";
      }
    }
    boxes.forEach(function (box) { box.addEventListener("change", update); });
    update();
  }

  /* A wide leaderboard scrolls sideways inside its wrapper: bring the sorted column into view
     (e.g. the base-classifier columns at the right end) without moving the page. */
  function revealSortedColumn(table) {
    var wrap = table.closest(".table-wrap");
    var th = table.querySelector("thead th.metric:not([aria-sort='none'])");
    if (!wrap || !th) return;
    var overflow = th.getBoundingClientRect().right - wrap.getBoundingClientRect().right;
    if (overflow > 0) wrap.scrollLeft += overflow + 16;
  }

  /* Copy buttons next to code one-liners (clipboard needs a secure context). */
  function enhanceCopy(code) {
    if (!navigator.clipboard || !window.isSecureContext) return;
    var button = document.createElement("button");
    button.type = "button";
    button.className = "copy-button";
    button.textContent = "copy";
    button.addEventListener("click", function () {
      navigator.clipboard.writeText(code.textContent).then(function () {
        button.textContent = "copied";
      }, function () {
        button.textContent = "copy failed";
      });
    });
    code.insertAdjacentElement("afterend", button);
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("svg.chart:not(.heatmap)").forEach(enhanceChart);
    var filters = document.querySelector("form.filters");
    if (filters) enhanceFilters(filters);
    var compare = document.getElementById("compare-form");
    if (compare) enhanceCompare(compare);
    var leaderboard = document.getElementById("leaderboard");
    if (leaderboard) revealSortedColumn(leaderboard);
    document.querySelectorAll("code.copy").forEach(enhanceCopy);
  });
})();
