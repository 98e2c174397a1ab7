/* certbench: optional enhancements. Every page reads and works without this file. */
(function () {
  "use strict";

  /* Figures: each <div class="vega-chart"> is drawn by vega-embed from the Vega-Lite spec in the
     JSON block beside it (SVG renderer, so text stays text). Tooltips are the hover read-outs.
     <html data-charts="drawn"> (or "failed") says when every figure is done. */
  function drawCharts() {
    var charts = document.querySelectorAll("div.vega-chart");
    if (!charts.length) return;
    if (typeof window.vegaEmbed !== "function") {
      document.documentElement.dataset.charts = "failed";
      return;
    }
    var drawn = Array.prototype.map.call(charts, function (div) {
      var spec = JSON.parse(document.getElementById(div.dataset.spec).textContent);
      return window.vegaEmbed(div, spec, { renderer: "svg", actions: false, tooltip: { theme: "light" } })
        .then(function (result) {
          var svg = div.querySelector("svg");
          if (svg) {
            svg.setAttribute("role", "img");
            svg.setAttribute("aria-label", div.getAttribute("aria-label") || "");
          }
          return result;
        });
    });
    Promise.all(drawn).then(function () {
      document.documentElement.dataset.charts = "drawn";
    }, function (error) {
      document.documentElement.dataset.charts = "failed";
      console.error("figure not drawn: " + error);
    });
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
    drawCharts();
    var filters = document.querySelector("form.filters");
    if (filters) enhanceFilters(filters);
    var compare = document.getElementById("compare-form");
    if (compare) enhanceCompare(compare);
    var leaderboard = document.getElementById("leaderboard");
    if (leaderboard) revealSortedColumn(leaderboard);
    document.querySelectorAll("code.copy").forEach(enhanceCopy);
  });
})();
