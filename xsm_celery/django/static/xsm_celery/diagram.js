/* Chart diagrams wider or taller than their box scroll inside it; this brings the marked
   state (the active one, or where a dead letter stopped) into view, centred, without
   scrolling the page itself. Without JavaScript the box still scrolls by hand. */
"use strict";
(function () {
  function centre(box) {
    var marked = box.querySelector(".xsm-marked rect");
    if (!marked) { return; }
    var outer = box.getBoundingClientRect();
    var inner = marked.getBoundingClientRect();
    var left = box.scrollLeft + inner.left - outer.left;
    var top = box.scrollTop + inner.top - outer.top;
    box.scrollLeft = Math.max(0, left - (box.clientWidth - inner.width) / 2);
    box.scrollTop = Math.max(0, top - (box.clientHeight - inner.height) / 2);
    box.setAttribute("data-centred", "true");
  }

  document.addEventListener("DOMContentLoaded", function () {
    Array.prototype.forEach.call(document.querySelectorAll(".xsm-diagram"), centre);
  });
})();
