/* The leaderboard page: the weight sliders reweight the board in place. The form is a
   GET form, so without this script each change is a link to the reweighted board; with
   it, the board is fetched as that same page and swapped in, and the address follows.
   A refused weight comes back as the page does without the script: its message, and
   the board under the defaults with the slider reset. */
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
          var error = doc.getElementById("weights-error");
          if (error) {
            /* Weights refused (400): the message once, and the board under the weights the
               page fell back to, each refused slider back at its default, as here. */
            form.insertBefore(document.importNode(error, true), form.firstChild);
            var sent = doc.getElementById("weights-form");
            Array.prototype.forEach.call(form.querySelectorAll("input[type=range]"), function (input) {
              var shown = sent && sent.querySelector('input[name="' + CSS.escape(input.name) + '"]');
              if (!shown || shown.getAttribute("value") === input.value) return;
              input.value = shown.getAttribute("value");
              if (input.nextElementSibling) input.nextElementSibling.textContent = input.value;
            });
            query = new URLSearchParams(new FormData(form)).toString();
          }
          if (fresh) {
            $("board").replaceWith(document.importNode(fresh, true));
            window.history.replaceState(null, "", "?" + query);
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
