// The inspector's only script: the token chart loads after the page, a running
// task's page follows its commits, the write token is kept for this tab, and a
// proposal file fills the review form.
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

  // The review form of skillstate extract: a chosen file fills the proposal's text
  // (the form itself stays a plain URL-encoded one).
  function loadProposalFile() {
    const file = document.getElementById("proposal-file");
    if (!file) return;
    file.addEventListener("change", function () {
      if (!file.files || !file.files[0]) return;
      file.files[0].text().then(function (text) {
        file.form.querySelector("textarea[name=proposal]").value = text;
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    rememberToken();
    loadChart();
    follow();
    loadProposalFile();
  });
})();
