// Long on purpose: the create and validate pages' one script, served as one cached file with no bundler: both use its API client (the session token's header, idempotency keys), its text-only rendering and its HIT bar.
/* Dynabench annotation pages. No framework; user text only ever goes through
   textContent, never innerHTML. API calls carry the signed session token in a
   header, so the pages work inside an MTurk iframe without cookies. */
(function () {
  "use strict";

  function $(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }
  function json(id) { var node = $(id); return node ? JSON.parse(node.textContent) : null; }
  function codePoints(s) { return Array.from(s).length; }

  /* A fresh key per submit: a retry of the same submit sends the same key, and the
     server answers it with the first answer, storing nothing twice. */
  function newIdempotencyKey() {
    if (window.crypto && window.crypto.randomUUID) return window.crypto.randomUUID();
    var bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    return Array.from(bytes, function (b) { return ("0" + b.toString(16)).slice(-2); }).join("");
  }

  /* Calls the API with the page's session token. A write given an idempotency key is
     retried once after a network failure (the server may have stored it already:
     the key makes the retry safe). Resolves to {ok, status, data}. */
  function api(root, method, path, body, idempotencyKey) {
    var options = { method: method, headers: { "X-Dynabench-Token": root.dataset.token, "Accept": "application/json" } };
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    if (idempotencyKey) options.headers["Idempotency-Key"] = idempotencyKey;
    function send(retries) {
      return fetch("/api/" + path, options).then(function (response) {
        return response.text().then(function (text) {
          var data = null;
          try { data = text ? JSON.parse(text) : null; } catch (e) { data = { detail: text }; }
          return { ok: response.ok, status: response.status, data: data };
        });
      }, function () {
        if (retries > 0) {
          return new Promise(function (resolve) { setTimeout(resolve, 1000); }).then(function () { return send(retries - 1); });
        }
        return { ok: false, status: 0, data: { detail: "The network failed; check your connection and try again." } };
      });
    }
    return send(idempotencyKey ? 1 : 0);
  }

  /* Ctrl+Enter (Cmd+Enter on a Mac) submits what the page is on: an example, a blind
     answer, a vote. A plain Enter keeps its usual meaning (a new line in a textarea). */
  function isSubmitKey(event) {
    return event.key === "Enter" && (event.ctrlKey || event.metaKey) && !event.altKey && !event.shiftKey;
  }
  function onSubmitKey(root, handler) {
    root.addEventListener("keydown", function (event) {
      if (isSubmitKey(event) && handler(event) !== false) event.preventDefault();
    });
  }

  function errorText(data) {
    if (!data) return "Something went wrong.";
    if (typeof data.detail === "string") return data.detail;
    return "Something went wrong.";
  }

  function renderField(container, name, label, text, cls) {
    var box = el("div", "field" + (cls ? " " + cls : ""));
    box.appendChild(el("span", "field-name", label || name));
    var p = el("p", "text", text);
    p.dataset.field = name;
    box.appendChild(p);
    container.appendChild(box);
    return p;
  }

  function heatColor(heat) {
    var a = Math.min(1, Math.abs(heat)) * 0.75;
    return heat >= 0 ? "rgba(220, 38, 38, " + a + ")" : "rgba(37, 99, 235, " + a + ")";
  }

  /* Render a text with its words highlighted by heat; offsets are in code points. */
  function heatText(text, words) {
    var chars = Array.from(text);
    var out = el("p", "text heat-text");
    var pos = 0;
    words.sort(function (a, b) { return a.start - b.start; }).forEach(function (w) {
      if (w.start < pos) return;
      if (w.start > pos) out.appendChild(document.createTextNode(chars.slice(pos, w.start).join("")));
      var span = el("span", "heat " + (w.heat >= 0 ? "towards" : "against"), chars.slice(w.start, w.end).join(""));
      span.style.backgroundColor = heatColor(w.heat);
      span.title = "attribution " + w.attribution.toFixed(4);
      out.appendChild(span);
      pos = w.end;
    });
    if (pos < chars.length) out.appendChild(document.createTextNode(chars.slice(pos).join("")));
    return out;
  }

  /* The heat as text (WCAG 1.1.1, 1.4.1): the words that pushed most towards the answer
     and most against it, strongest first, each with its signed attribution. */
  function heatSummary(text, words) {
    var chars = Array.from(text);
    function strongest(sign) {
      return words.filter(function (w) { return sign > 0 ? w.heat >= 0 : w.heat < 0; })
        .sort(function (a, b) { return Math.abs(b.attribution) - Math.abs(a.attribution); })
        .slice(0, 5)
        .map(function (w) {
          var n = Math.abs(w.attribution).toFixed(4);
          return "“" + chars.slice(w.start, w.end).join("") + "” (" + (sign > 0 ? "+" : "−") + n + ")";
        });
    }
    var towards = strongest(1), against = strongest(-1);
    return el("p", "meta heat-summary",
      "Most towards the answer: " + (towards.length ? towards.join(", ") : "none") +
      ". Most against it: " + (against.length ? against.join(", ") : "none") + ".");
  }

  function probabilityList(probabilities) {
    var list = el("ul", "probabilities");
    Object.keys(probabilities).forEach(function (label) {
      var item = el("li");
      var pct = (probabilities[label] * 100).toFixed(1) + "%";
      item.appendChild(el("span", "prob-label", label));
      var meter = el("meter");
      meter.min = 0; meter.max = 1; meter.value = probabilities[label];
      meter.setAttribute("aria-label", label + " " + pct);
      item.appendChild(meter);
      item.appendChild(el("span", "prob-value", pct));
      list.appendChild(item);
    });
    return list;
  }

  /* ---------------------------------------------------------------- create */
  function createPage(root) {
    var slug = root.dataset.task;
    var isSpan = root.dataset.answerShape === "span";
    var answerField = root.dataset.answerField;
    var inputFields = json("task-inputs");
    var contextFields = json("task-context-fields");
    var form = $("example-form");
    var context = null, example = null, lastInputs = null, answerStart = null;

    function clearErrors() {
      Array.prototype.forEach.call(root.querySelectorAll(".field-error"), function (n) { n.textContent = ""; });
      Array.prototype.forEach.call(form.querySelectorAll("[aria-invalid]"), function (n) { n.removeAttribute("aria-invalid"); });
    }
    /* The controls an error key names: they carry aria-invalid="true" while it shows. */
    function controlsFor(key) {
      if (key.indexOf("inputs.") === 0) return [$("input-" + key.slice(7))].filter(Boolean);
      if (key === "target.label") return Array.prototype.slice.call(form.querySelectorAll("input[name=label]"));
      if (key.indexOf("target") === 0 && $("answer-text")) return [$("answer-text")];
      return [];
    }
    /* Field errors next to their fields; anything else (503: the model is down)
       above the button. The form keeps what the annotator wrote either way. */
    function showErrors(data) {
      var shown = false;
      var errors = (data && data.errors) || {};
      Object.keys(errors).forEach(function (key) {
        var target = $("error-" + key) || (key.indexOf("target") === 0 && $("error-target")) || null;
        if (target) {
          target.textContent = [].concat(errors[key]).join(" ");
          shown = true;
          controlsFor(key).forEach(function (n) { n.setAttribute("aria-invalid", "true"); });
        }
      });
      if (!shown) $("error-form").textContent = errorText(data);
    }

    function locateAnswer() {
      var passage = context && context.fields[answerField];
      var typed = $("answer-text").value;
      var where = $("answer-where");
      answerStart = null;
      if (!typed) { where.textContent = ""; return; }
      var idx = passage.indexOf(typed);
      /* The server says why on Submit too (the answer must be a span of the passage). */
      if (idx < 0) { where.textContent = "Not in the passage: the answer must be a span of it, typed exactly as it appears."; return; }
      answerStart = codePoints(passage.slice(0, idx));
      where.textContent = "Found in the passage at character " + answerStart + ".";
    }

    function onPassageSelect(passageNode) {
      var selection = window.getSelection();
      if (!selection.rangeCount) return;
      var range = selection.getRangeAt(0);
      var textNode = passageNode.firstChild;
      if (range.startContainer !== textNode || range.endContainer !== textNode || range.collapsed) return;
      var full = textNode.textContent;
      var text = full.slice(range.startOffset, range.endOffset);
      if (!text.trim()) return;
      $("answer-text").value = text;
      answerStart = codePoints(full.slice(0, range.startOffset));
      $("answer-where").textContent = "Selected in the passage at character " + answerStart + ".";
    }

    function loadContext() {
      var box = $("context-fields");
      box.textContent = "";
      box.appendChild(el("p", "meta", "Loading a context…"));
      return api(root, "GET", "tasks/" + slug + "/contexts/next/").then(function (r) {
        box.textContent = "";
        if (!r.ok) { box.appendChild(el("p", "error", errorText(r.data))); return; }
        context = r.data;
        contextFields.forEach(function (f) {
          var p = renderField(box, f.name, f.label, context.fields[f.name]);
          if (isSpan && f.name === answerField) {
            p.id = "passage";
            p.classList.add("selectable");
            p.addEventListener("mouseup", function () { onPassageSelect(p); });
            p.addEventListener("keyup", function () { onPassageSelect(p); });
          }
        });
        if (r.data.session) updateCounters(r.data.session);
      });
    }

    function updateCounters(session) {
      $("count-written").textContent = session.examples_written;
      $("count-fooled").textContent = session.examples_fooled;
    }

    form.addEventListener("submit", function (event) {
      event.preventDefault();
      clearErrors();
      if (!context) return;
      var inputs = {};
      inputFields.forEach(function (f) { inputs[f.name] = form.elements[f.name].value; });
      var target;
      if (isSpan) {
        if (answerStart === null) locateAnswer();
        target = { text: $("answer-text").value, start: answerStart };
      } else {
        var checked = form.querySelector("input[name=label]:checked");
        target = { label: checked ? checked.value : null };
      }
      /* Every missing part at once, in plain words, before anything is sent. */
      var problems = {};
      inputFields.forEach(function (f) {
        if (!inputs[f.name].trim()) {
          var noun = (f.label || f.name).toLowerCase();
          problems["inputs." + f.name] = "Write " + (/^[aeiou]/.test(noun) ? "an " : "a ") + noun + ".";
        }
      });
      if (isSpan && !target.text.trim()) problems["target"] = "Give the answer: select it in the passage or type it.";
      if (!isSpan && !target.label) problems["target.label"] = "Pick the label your example truly has.";
      if (Object.keys(problems).length) { showErrors({ errors: problems }); return; }
      var button = $("submit-example");
      button.disabled = true;
      button.textContent = "The model is thinking…";
      var key = newIdempotencyKey();
      /* A model still loading answers 503 "warming_up": say so, and send the same
         example again shortly (nothing was stored), a few times before giving up. */
      function send(triesLeft) {
        api(root, "POST", "tasks/" + slug + "/examples/", { context: context.id, inputs: inputs, target: target }, key)
          .then(function (r) {
            if (r.status === 503 && r.data && r.data.code === "warming_up" && triesLeft > 0) {
              button.textContent = "The model is warming up (loading)… trying again in a moment";
              $("error-form").textContent = "";
              setTimeout(function () { send(triesLeft - 1); }, 2000);
              return;
            }
            button.disabled = false;
            button.textContent = "Submit to the model";
            if (!r.ok) { showErrors(r.data); return; }
            example = r.data;
            lastInputs = inputs;
            bumpHitDone(1);
            showResult(r.data, target);
          });
      }
      send(15);
    });

    function showResult(data, target) {
      form.hidden = true;
      $("result").hidden = false;
      $("explanation").hidden = true;
      $("result-status").textContent = "";
      var verdict = $("result-verdict");
      verdict.textContent = data.fooled ? "You fooled the model!" : "The model got it right. Try again?";
      verdict.className = "verdict " + (data.fooled ? "fooled" : "not-fooled");
      var answer = $("result-answer");
      answer.textContent = "";
      inputFields.forEach(function (f) {  /* what was written, repeated */
        answer.appendChild(el("p", "written", (f.label || f.name) + ": " + lastInputs[f.name]));
      });
      var yours = isSpan ? target.text : target.label;
      answer.appendChild(el("p", null, "Your answer: " + yours));
      var said = data.unreadable_answer != null  /* a model behind an endpoint answered off the format */
        ? "no answer it could read (it said: " + data.unreadable_answer + ")" : data.prediction;
      answer.appendChild(el("p", "model-answer", "Model (" + data.model + "): " + said));
      if (data.probabilities && data.unreadable_answer == null) answer.appendChild(probabilityList(data.probabilities));
      answer.appendChild(el("p", "meta", "Answered in " + Math.round(data.latency_ms) + " ms."));
      updateCounters(data.session);
      $("explain").disabled = false;
      $("retract").disabled = false;
      $("flag").disabled = false;
      /* The verdict first: reading on from the focus gives the answer, then "Write another". */
      verdict.focus();
    }

    $("explain").addEventListener("click", function () {
      var button = $("explain");
      button.disabled = true;
      $("result-status").textContent = "Computing the explanation…";
      api(root, "POST", "examples/" + example.id + "/explanation/", {}).then(function (r) {
        if (!r.ok) { $("result-status").textContent = errorText(r.data); button.disabled = false; button.focus(); return; }
        $("result-status").textContent = "";
        var body = $("explanation-body");
        body.textContent = "";
        var texts = Object.assign({}, context.fields, lastInputs);
        var byField = {};
        r.data.words.forEach(function (w) { (byField[w.field] = byField[w.field] || []).push(w); });
        Object.keys(byField).forEach(function (field) {
          var box = el("div", "field");
          box.appendChild(el("span", "field-name", field));
          box.appendChild(heatText(texts[field], byField[field]));
          box.appendChild(heatSummary(texts[field], byField[field]));
          body.appendChild(box);
        });
        $("explanation").hidden = false;
        $("explanation").focus();  /* the button disabled itself: the focus goes on to what it showed */
      });
    });

    $("retract").addEventListener("click", function () {
      api(root, "POST", "examples/" + example.id + "/retract/").then(function (r) {
        $("result-status").textContent = r.ok ? "Retracted: it will not count or be validated." : errorText(r.data);
        if (r.ok) { $("retract").disabled = true; bumpHitDone(-1); }
      });
    });

    $("flag").addEventListener("click", function () {
      var reason = window.prompt("Why flag this example? (optional)") || "";
      api(root, "POST", "examples/" + example.id + "/flag/", { reason: reason }).then(function (r) {
        $("result-status").textContent = r.ok ? "Flagged for the researchers." : errorText(r.data);
        if (r.ok) $("flag").disabled = true;
      });
    });

    $("another").addEventListener("click", function () {
      form.reset();
      answerStart = null;
      if ($("answer-where")) $("answer-where").textContent = "";
      $("result").hidden = true;
      form.hidden = false;
      loadContext().then(function () { form.querySelector("textarea").focus(); });
    });

    $("new-context").addEventListener("click", loadContext);
    if (isSpan) $("answer-text").addEventListener("input", locateAnswer);
    /* Ctrl+Enter: submit the example; on its result, load the next context (the focus
       goes to the first field, as "Write another" does). */
    onSubmitKey(root, function () {
      if (!form.hidden) {
        if (form.requestSubmit) form.requestSubmit($("submit-example")); else $("submit-example").click();
      } else if (!$("result").hidden) {
        $("another").click();
      } else {
        return false;
      }
    });
    loadContext();
  }

  /* -------------------------------------------------------------- validate */
  function validatePage(root) {
    var slug = root.dataset.task;
    var isSpan = root.dataset.answerShape === "span";
    var labels = json("task-labels") || [];
    var item = json("first-item");

    function answerText(target) { return isSpan ? target.text : target.label; }

    /* moveFocus: after a vote the focus goes to the next item's first control, or to
       the message that says there is none (never back to <body>). */
    function show(next, moveFocus) {
      item = next;
      $("validate-status").textContent = "";
      $("decide-step").hidden = true;
      $("blind-step").hidden = true;
      $("reason").value = "";
      var body = $("item-body");
      if (!item) {
        body.textContent = "";
        var empty = el("p", null, root.dataset.emptyText);
        empty.id = "empty";
        empty.tabIndex = -1;
        body.appendChild(empty);
        if (moveFocus) empty.focus();
        return;
      }
      body.textContent = "";
      Object.keys(item.context || {}).forEach(function (name) { renderField(body, name, name, item.context[name]); });
      Object.keys(item.inputs).forEach(function (name) { renderField(body, name, name, item.inputs[name], "written"); });
      if (item.blind) {
        var choices = $("blind-choices");
        choices.textContent = "";
        if (isSpan) {
          var label = el("label", null, "The answer you would give (copied from the passage)");
          label.htmlFor = "blind-answer";
          var input = el("input");
          input.type = "text"; input.id = "blind-answer";
          choices.appendChild(label);
          choices.appendChild(input);
        } else {
          labels.forEach(function (l) {
            var wrap = el("label", "choice");
            var radio = el("input");
            radio.type = "radio"; radio.name = "blind-label"; radio.value = l.name;
            wrap.appendChild(radio);
            wrap.appendChild(document.createTextNode(" " + l.name));
            choices.appendChild(wrap);
          });
        }
        $("blind-step").hidden = false;
        if (moveFocus) choices.querySelector("input").focus();
      } else {
        reveal(item.target, item.blind_answer ? answerText(item.blind_answer) : null);
      }
    }

    function reveal(target, guess) {
      var text = "The writer's answer: " + answerText(target);
      if (guess) text += guess === answerText(target) ? " (the same as yours)" : " (yours: " + guess + ")";
      $("writer-answer").textContent = text;
      $("blind-step").hidden = true;
      $("decide-step").hidden = false;
      $("decide-step").querySelector("button").focus();
    }

    /* A blind answer missing: the status says so and the controls carry aria-invalid
       until an answer is given. */
    function invalid(controls, message) {
      $("validate-status").textContent = message;
      Array.prototype.forEach.call(controls, function (n) {
        n.setAttribute("aria-invalid", "true");
        n.setAttribute("aria-describedby", "validate-status");
      });
      controls[0].focus();
    }
    $("blind-choices").addEventListener("input", function () {
      Array.prototype.forEach.call($("blind-choices").querySelectorAll("[aria-invalid]"), function (n) {
        n.removeAttribute("aria-invalid");
        n.removeAttribute("aria-describedby");
      });
    });

    /* Blind validation: the server stores this answer, and only then shows the writer's. */
    $("reveal").addEventListener("click", function () {
      var answer;
      if (isSpan) {
        var typed = $("blind-answer").value;
        if (!typed.trim()) { invalid([$("blind-answer")], "Type your answer first."); return; }
        answer = { text: typed };
      } else {
        var checked = root.querySelector("input[name=blind-label]:checked");
        if (!checked) { invalid(root.querySelectorAll("input[name=blind-label]"), "Choose your answer first."); return; }
        answer = { label: checked.value };
      }
      api(root, "POST", "examples/" + item.id + "/blind-answer/", { answer: answer }).then(function (r) {
        if (!r.ok) { $("validate-status").textContent = errorText(r.data); return; }
        $("validate-status").textContent = "";
        reveal(r.data.target, answerText(r.data.answer));
      });
    });

    Array.prototype.forEach.call($("decide-step").querySelectorAll("button[data-label]"), function (button) {
      button.addEventListener("click", function () {
        var body = { label: button.dataset.label, reason: $("reason").value };
        api(root, "POST", "examples/" + item.id + "/validations/", body, newIdempotencyKey()).then(function (r) {
          if (!r.ok) { $("validate-status").textContent = errorText(r.data); return; }
          $("count-validated").textContent = String(r.data.session.validations_done);
          bumpHitDone(1);
          api(root, "GET", "tasks/" + slug + "/validations/next/").then(function (n) {
            show(n.status === 200 ? n.data : null, true);
            // A decision that does not count says why (a new account, or not yet trusted on paid examples).
            $("validate-status").textContent = r.data.counted ? "Thanks, recorded." : "Thanks, recorded. " + r.data.note;
          });
        });
      });
    });

    /* Ctrl+Enter: the blind answer, then the vote whose button has the focus (the focus
       is on "Correct" once the writer's answer shows); the next item then takes the focus. */
    onSubmitKey(root, function () {
      if (!$("blind-step").hidden) { $("reveal").click(); return; }
      if ($("decide-step").hidden) return false;
      var focused = document.activeElement;
      if (focused && focused.dataset && focused.dataset.label && $("decide-step").contains(focused)) {
        focused.click();
        return;
      }
      $("validate-status").textContent = "Choose Correct, Incorrect or Flag (Tab to it), then press Ctrl+Enter or Enter.";
    });

    show(item);
  }

  /* ----------------------------------------------------------- leaderboard */
  /* The sliders rerank live: each move shows its value at once, and a moment later
     the board for the new weights replaces this one (the same page, fetched), and
     the address becomes that board's link. The form still works without script. */
  /* ------------------------------------------------------------- the HIT bar */
  /* "Done: n of N" follows the work (a retracted example stops counting), and Submit
     before the work is done stays on the page with what is left (the server checks too).
     A refusal shown earlier follows the counter: its numbers change with the work, and
     it goes once the work asked for is done. */
  var hitForm = $("hit-submit-form");
  function shortOfWork(done, required) {
    // The platform's words (the form's data: a HIT and "submit" on MTurk, a study and "finish" on Prolific).
    return "This " + hitForm.dataset.workName + " asks for " + required + " " + hitForm.dataset.what +
      "; you have done " + done + " so far. Do " + (required - done) + " more, then " + hitForm.dataset.handIn + ".";
  }
  function bumpHitDone(by) {
    var counter = $("hit-done");
    if (!counter) return;
    var done = Math.max(0, parseInt(counter.textContent, 10) + by);
    counter.textContent = String(done);
    var progress = $("hit-progress");
    if (progress) progress.value = Math.min(done, progress.max);
    var error = $("hit-submit-error");
    if (!hitForm || !error || !error.textContent) return;
    var required = parseInt(hitForm.dataset.required, 10);
    error.textContent = done >= required ? "" : shortOfWork(done, required);
  }
  if (hitForm) {
    hitForm.addEventListener("submit", function (event) {
      var done = parseInt($("hit-done").textContent, 10), required = parseInt(hitForm.dataset.required, 10);
      if (done < required) {
        event.preventDefault();
        $("hit-submit-error").textContent = shortOfWork(done, required);
      }
    });
  }

  var create = $("annotate");
  if (create && create.dataset.page === "create" && $("example-form")) createPage(create);
  var validate = $("validate");
  if (validate && validate.dataset.page === "validate" && $("item")) validatePage(validate);
})();
