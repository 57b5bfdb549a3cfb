/* The leaderboard page: the weight sliders reweight the board in place. The form is a
   GET form, so without this script each change is a link to the reweighted board; with
   it, the board is fetched as that same page and swapped in, and the address follows. */
(function () {
  "use strict";

  function $(id) { return document.getElementById(id); }

  function leaderboardPage(form) {
    var timer = null, asked = 0;
    function refresh() {
      var query = new URLSearchParams(new FormData(form)).toString();
      var mine = ++asked;
      fetch(window.location.pathname + "?" + query, { headers: { Accept: "text/html" } })
        .then(function (r) { return r.text(); })
        .then(function (text) {
          if (mine !== asked) return;  /* a later move's board is on its way */
          var doc = new DOMParser().parseFromString(text, "text/html");
          var fresh = doc.getElementById("board");
          var old = $("weights-error");
          if (old) old.remove();
          if (fresh) {
            $("board").replaceWith(document.importNode(fresh, true));
            window.history.replaceState(null, "", "?" + query);
          } else {
            var error = doc.getElementById("weights-error");
            if (error) form.insertBefore(document.importNode(error, true), form.firstChild);
          }
        });
    }
    form.addEventListener("input", function (event) {
      var input = event.target;
      if (input.type === "range" && input.nextElementSibling) input.nextElementSibling.textContent = input.value;
      clearTimeout(timer);
      timer = setTimeout(refresh, 250);
    });
  }

  var weightsForm = $("weights-form");
  if (weightsForm && weightsForm.dataset.live && $("board")) leaderboardPage(weightsForm);
})();
