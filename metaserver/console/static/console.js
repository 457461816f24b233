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
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-poll]").forEach(function (el) { setTimeout(function () { poll(el); }, 1000); });
  });
})();
