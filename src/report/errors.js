(function () {
  var seen = [];
  function keep(message) {
    seen.push(String(message));
    document.documentElement.setAttribute("data-errors", seen.join("\n"));
  }
  window.addEventListener("error", function (e) { keep(e.message || "error loading " + (e.target && e.target.src)); }, true);
  var original = console.error;
  console.error = function () {
    keep(Array.prototype.join.call(arguments, " "));
    return original.apply(console, arguments);
  };
})();
