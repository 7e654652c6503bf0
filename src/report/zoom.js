// Swimlanes zoom along time: the wheel scales the lanes about the pointer, a drag pans, a
// double-click shows the whole window; the axis below is relabelled to what is in view.
document.querySelectorAll("svg.zoomable").forEach(function (svg) {
  var box = svg.viewBox.baseVal, full = box.width, t0 = +svg.dataset.t0, t1 = +svg.dataset.t1;
  var axis = svg.parentNode.querySelector(".axis");
  function clock(s) {
    var d = new Date(s * 1000), two = function (n) { return (n < 10 ? "0" : "") + n; };
    return two(d.getUTCMonth() + 1) + "-" + two(d.getUTCDate()) + " " + two(d.getUTCHours()) + ":" + two(d.getUTCMinutes()) +
      (box.width < full / 20 ? ":" + two(d.getUTCSeconds()) : "");
  }
  function show(x, width) {
    width = Math.min(full, Math.max(full / 2000, width));
    box.x = Math.max(0, Math.min(full - width, x));
    box.width = width;
    if (!axis) return;
    var labels = axis.children;
    for (var i = 0; i < labels.length; i++) {
      var at = box.x + box.width * i / (labels.length - 1);
      labels[i].textContent = clock(t0 + (t1 - t0) * at / full);
    }
  }
  svg.addEventListener("wheel", function (e) {
    e.preventDefault();
    var r = svg.getBoundingClientRect(), f = (e.clientX - r.left) / r.width, at = box.x + f * box.width;
    var width = box.width * (e.deltaY < 0 ? 0.8 : 1.25);
    show(at - f * Math.min(full, Math.max(full / 2000, width)), width);
  }, { passive: false });
  var drag = null;
  svg.addEventListener("mousedown", function (e) { drag = { x: e.clientX, from: box.x }; });
  window.addEventListener("mouseup", function () { drag = null; });
  window.addEventListener("mousemove", function (e) {
    if (!drag) return;
    var r = svg.getBoundingClientRect();
    show(drag.from - (e.clientX - drag.x) * box.width / r.width, box.width);
  });
  svg.addEventListener("dblclick", function () { show(0, full); });
});
