/* The onboarding quiz on the annotation pages and in a HIT (annotation/_onboarding.html):
   each item is answered through the API with the page's session token; the right answer
   and its explanation come back and are shown under it. Text goes through textContent. */
(function () {
  "use strict";

  function answerOf(form) {
    var checked = form.querySelector("input[name=answer]:checked");
    if (form.dataset.kind === "judge") return checked ? checked.value : null;
    if (checked) return { label: checked.value };
    var typed = form.querySelector("input[type=text][name=answer]");
    return typed && typed.value.trim() ? { text: typed.value.trim() } : null;
  }

  function post(section, body) {
    return fetch("/api/tasks/" + section.dataset.task + "/onboarding/answers/", {
      method: "POST", body: JSON.stringify(body),
      headers: { "X-Dynabench-Token": section.dataset.token, "Content-Type": "application/json",
                 "Accept": "application/json" }
    }).then(function (response) {
      return response.json().then(function (data) { return { ok: response.ok, data: data }; },
                                  function () { return { ok: response.ok, data: {} }; });
    });
  }

  function finished(section, data) {
    var outcome = document.getElementById("onboarding-outcome");
    var more = document.getElementById("onboarding-continue");
    var standing = data.standing;
    if (standing.passed) {
      outcome.textContent = "You passed (" + data.score + " of " + standing.items + " right). Thank you: the work is open to you now.";
      more.textContent = "Start the work";
    } else if (standing.blocked) {
      outcome.textContent = "You got " + data.score + " of " + standing.items + " right; " + standing.needed +
        " were needed, and that was the last try.";
      more.textContent = "Continue";
    } else {
      outcome.textContent = "You got " + data.score + " of " + standing.items + " right; " + standing.needed +
        " are needed. Read the explanations, then try again (" + standing.tries_left + " " +
        (standing.tries_left === 1 ? "try" : "tries") + " left).";
      more.textContent = "Try again";
    }
    more.hidden = false;
    var page = document.getElementById("annotate"), done = document.getElementById("hit-done");
    if (page && page.dataset.page === "onboarding" && done && (standing.passed || standing.blocked)) {
      done.textContent = "1";  /* an onboarding-only HIT: the quiz is over, the HIT may be submitted */
    }
    outcome.focus();
  }

  function init(section) {
    var more = document.getElementById("onboarding-continue");
    if (more) more.addEventListener("click", function () { window.location.reload(); });
    Array.prototype.forEach.call(section.querySelectorAll(".onboarding-form"), function (form) {
      var result = form.querySelector(".onboarding-result");
      form.addEventListener("submit", function (event) {
        event.preventDefault();
        var answer = answerOf(form);
        if (answer === null) {
          result.textContent = "Choose or type an answer first.";
          return;
        }
        var button = form.querySelector("button[type=submit]");
        if (button) button.disabled = true;
        post(section, { item: parseInt(form.dataset.number, 10), answer: answer }).then(function (r) {
          if (!r.ok) {
            result.textContent = (r.data && r.data.detail) || "Something went wrong; try again.";
            if (button) button.disabled = false;
            return;
          }
          result.textContent = (r.data.right ? "Right. " : "Not quite: the answer is " + r.data.known_answer + ". ") +
            r.data.explanation;
          Array.prototype.forEach.call(form.querySelectorAll("input"), function (n) { n.disabled = true; });
          if (button) button.remove();
          if (r.data.try_finished) {
            finished(section, r.data);
          } else {
            result.focus();
          }
        });
      });
    });
  }

  var section = document.getElementById("onboarding");
  if (section && section.dataset.token) init(section);
})();
