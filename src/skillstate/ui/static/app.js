// The inspector's only script: the token chart loads after the page, a running
// task's page follows its commits, and the write token is kept for this tab.
"use strict";

(function () {
  const KEY = "skillstate-ui-token";

  function rememberToken() {
    const match = location.hash.match(/token=([^&]+)/);
    if (match) {
      sessionStorage.setItem(KEY, decodeURIComponent(match[1]));
      history.replaceState(null, "", location.pathname + location.search);
    }
    const token = sessionStorage.getItem(KEY);
    document.querySelectorAll("input.token").forEach(function (input) {
      if (token && !input.value) input.value = token;
      input.addEventListener("change", function () { sessionStorage.setItem(KEY, input.value); });
    });
  }

  function loadChart() {
    const box = document.getElementById("chart");
    if (!box || !box.dataset.src) return;
    fetch(box.dataset.src, { headers: { Accept: "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { box.innerHTML = html; })
      .catch(function (status) { box.textContent = "the token chart did not load (" + status + ")"; });
  }

  // Poll the head's version; when it moves, fetch this page again and swap the
  // live part (card, timeline, pager) and the chart, without a reload.
  function follow() {
    const live = document.getElementById("live");
    if (!live || !live.dataset.head) return;
    let busy = false;
    setInterval(function () {
      if (busy || document.hidden) return;
      busy = true;
      fetch(live.dataset.head)
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (head) {
          const current = document.getElementById("live");
          if (!head || String(head.version) === current.dataset.version) return null;
          return fetch(location.href).then(function (r) { return r.text(); }).then(function (html) {
            const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
            if (fresh) { current.replaceWith(fresh); rememberToken(); loadChart(); }
          });
        })
        .catch(function () {})
        .finally(function () { busy = false; });
    }, 1000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    rememberToken();
    loadChart();
    follow();
  });
})();
