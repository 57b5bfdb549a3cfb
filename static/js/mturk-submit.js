// Posts the finished HIT to MTurk's externalSubmit (the form's action) at once.
"use strict";
(function () {
  var form = document.getElementById("mturk-submit");
  if (form && form.dataset.autoSubmit === "true") { form.submit(); }
})();
