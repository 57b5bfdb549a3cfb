/* The publish form's "at most" line: the most the batch can cost, updated as the
   amounts change, shown before the confirmation box. The same rule as the server's
   (crowd/costs.py: max_cost), which checks the account balance against it again. */
(function () {
  "use strict";
  var form = document.getElementById("publish-form");
  var out = document.getElementById("max-total");
  if (!form || !out) return;
  function cents(x) { return Math.round(x * 100 + 1e-9) / 100; }
  function value(name) { var f = form.elements[name]; return f ? parseFloat(f.value) : NaN; }
  function fee(amount, rate) { return amount > 0 ? Math.max(0.01, cents(amount * rate)) : 0; }
  function update() {
    var hits = value("hits"), per = value("assignments_per_hit"), reward = value("reward");
    var bonus = value("bonus_per_example"), examples = value("examples_per_assignment");
    var mode = form.elements.mode ? form.elements.mode.value : "create";
    if ([hits, per, reward].some(isNaN)) { out.textContent = ""; return; }
    var prolific = form.elements.platform && form.elements.platform.value === "prolific";
    var symbol = form.elements.currency && form.elements.currency.value === "GBP" ? "£" : "$";
    var each;
    if (prolific) {  // Prolific's fee: PROLIFIC_FEE_RATE of each reward and bonus (an estimate), no minimum
      var share = parseFloat(form.dataset.prolificFee);
      each = reward + cents(reward * share);
      if (mode === "create" && bonus > 0 && !isNaN(examples)) each += bonus * examples + cents(bonus * examples * share);
    } else {
      var rate = per >= parseInt(form.dataset.many, 10) ? parseFloat(form.dataset.manyFee) : parseFloat(form.dataset.fee);
      each = reward + Math.max(0.01, cents(reward * rate));
      if (mode === "create" && bonus > 0 && !isNaN(examples)) {
        var b = bonus * examples;
        each += b + fee(b, parseFloat(form.dataset.fee));
      }
    }
    var total = cents(each * hits * per);
    out.textContent = "This batch costs at most " + symbol + total.toFixed(2) + " (" + hits * per +
      " assignments at most " + symbol + cents(each).toFixed(2) + " each, " +
      (prolific ? "Prolific's estimated fees" : "MTurk's fees") + " included).";
  }
  form.addEventListener("input", update);
  form.addEventListener("change", update);
  update();
})();
