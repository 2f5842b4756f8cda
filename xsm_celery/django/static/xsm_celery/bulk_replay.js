/* Bulk replay with progress: the confirmed form is sent one record at a time. Without
   JavaScript the same form posts every id at once and the server answers with the summary. */
"use strict";
(function () {
  function row(cells) {
    var tr = document.createElement("tr");
    cells.forEach(function (text) {
      var td = document.createElement("td");
      td.textContent = text;
      tr.appendChild(td);
    });
    return tr;
  }

  function summarise(counts, list) {
    list.textContent = "";
    Object.keys(counts).sort().forEach(function (status) {
      var li = document.createElement("li");
      li.textContent = status + ": " + counts[status];
      list.appendChild(li);
    });
  }

  async function replayOne(form, id) {
    var data = new FormData(form);
    data.delete("ids");
    data.append("ids", id);
    data.append("format", "json");
    var response = await fetch(form.action, {method: "POST", body: data, credentials: "same-origin"});
    var body = await response.json();
    if (!response.ok) { throw new Error(body.error || response.statusText); }
    return body.results[0];
  }

  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("xsm-bulk-form");
    if (!form) { return; }
    form.addEventListener("submit", async function (event) {
      var reason = form.querySelector("[name=reason]");
      if (!reason || reason.value.trim().length < 3) { return; }
      event.preventDefault();
      var ids = Array.prototype.map.call(form.querySelectorAll("input[name=ids]"), function (i) { return i.value; });
      var box = document.getElementById("xsm-progress");
      var bar = document.getElementById("xsm-progress-bar");
      var text = document.getElementById("xsm-progress-text");
      var results = document.getElementById("xsm-live-results");
      var counts = {};
      form.querySelector("[type=submit]").disabled = true;
      box.hidden = false;
      for (var n = 0; n < ids.length; n++) {
        var outcome;
        try {
          outcome = await replayOne(form, ids[n]);
        } catch (error) {
          outcome = {record_id: ids[n], status: "failed", detail: String(error)};
        }
        counts[outcome.status] = (counts[outcome.status] || 0) + 1;
        var tr = row([outcome.record_id, outcome.status, outcome.detail]);
        tr.className = "xsm-" + outcome.status;
        results.appendChild(tr);
        bar.value = n + 1;
        text.textContent = (n + 1) + " / " + ids.length;
        summarise(counts, document.getElementById("xsm-live-summary"));
      }
      text.textContent = ids.length + " / " + ids.length + " \u2014 done";
      box.setAttribute("data-done", "true");
    });
  });
})();
