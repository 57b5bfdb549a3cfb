"""The replay as an experiment: the leakage filter, the static control's pool, reference
lines, bootstrap intervals and paired tests, and pooling seeds into the report.

Plans are built from the made-up data directories of test_replay_data; the
statistics from hand-made score vectors whose answers are known."""

import json
from collections import Counter

import numpy as np
import pytest

from leaderboard.sampling import group_keys
from replay import stats
from replay.data import build_plan, reference_lines
from replay.report import markdown_tables
from replay.summary import build_report

from .test_replay_data import make_hate_dir, make_nli_dir, uids, write_csv, write_jsonl


def context_text(record):
    return " ".join((record.context or {}).get("fields", {}).values()).casefold()


# --- leakage --------------------------------------------------------------------


def test_training_never_sees_a_test_premise(tmp_path):
    base = make_nli_dir(tmp_path)
    # ANLI R1's dev rows 0-7 share premises with its test rows (as ANLI's do), and one
    # MNLI premise is also a premise of ANLI R2's test split.
    rows = [{"uid": f"r1-dev-{i}", "context": f"Round 1 test passage {i // 2}." if i < 8 else
             f"Round 1 dev passage {i // 2}.", "hypothesis": f"Dev hypothesis {i}.", "label": "enc"[i % 3],
             "model_label": "e", "emturk": False, "genre": "wiki", "reason": "", "tag": ""} for i in range(200)]
    write_jsonl(base / "anli/R1/dev.jsonl", rows)
    test_rows = [{"uid": f"r2-test-{i}", "context": "The museum on street 3 opens at nine." if i == 0 else
                  f"Round 2 test passage {i}.", "hypothesis": f"R2 test hypothesis {i}.", "label": "e",
                  "model_label": "n", "emturk": False, "genre": "wiki", "reason": "", "tag": ""}
                 for i in range(30)]
    write_jsonl(base / "anli/R2/test.jsonl", test_rows)
    plan = build_plan("nli", base, mode="full")
    test_premises = {context_text(r) for data in plan.rounds for r in data.test}
    for data in plan.rounds:
        for record in data.train + data.dev:
            assert context_text(record) not in test_premises, (data.name, record.external_uid)
    assert not {context_text(r) for r in plan.control_pool} & test_premises
    assert plan.leakage["ANLI R1"]["train"]["context"] + plan.leakage["ANLI R1"].get("dev", {}).get(
        "context", 0) == 8
    static_removed = sum(c["context"] for c in plan.leakage["static (MNLI+SNLI)"].values())
    assert static_removed == 3  # street 3's three MNLI hypotheses
    # Test splits are never touched.
    assert len(plan.rounds[1].test) == 30 and len(plan.rounds[2].test) == 30


def test_training_never_sees_a_test_text(tmp_path):
    base = make_hate_dir(tmp_path)
    # A DynaHate dev statement that is also a HateCheck case (differently spaced and cased),
    # and a Davidson tweet that is a DynaHate test statement.
    write_csv(base / "hatecheck/test_suite_cases.csv",
              ["", "functionality", "case_id", "test_case", "label_gold", "target_ident", "direction",
               "focus_words", "focus_lemma", "ref_case_id", "ref_templ_id", "templ_id", "case_templ"],
              [[i, "slur_h", i + 1, "Statement  DEV 1 4" if i == 0 else f"case {i}", "hateful", "women",
                "general", "", "", "", "", i, ""] for i in range(30)])
    rows = (base / "davidson/labeled_data.csv").read_text().splitlines()
    rows.append("999,3,3,0,0,0,statement test 1 2")
    (base / "davidson/labeled_data.csv").write_text("\n".join(rows) + "\n")
    plan = build_plan("hate", base, mode="full")
    train_texts = {" ".join(r.inputs["statement"].casefold().split())
                   for data in plan.rounds for r in data.train + data.dev + plan.control_pool}
    assert "statement dev 1 4" not in train_texts and "statement test 1 2" not in train_texts
    assert sum(c["text"] for c in plan.leakage["DynaHate R1"].values()) == 1
    in_test = any(r.inputs["statement"] == "statement test 1 2" for r in plan.rounds[0].test)
    removed = sum(c["text"] for c in plan.leakage.get("static (Davidson)", {}).values())
    assert removed == (0 if in_test else 1)


def test_a_contrastive_pair_with_a_side_in_test_leaves_training(tmp_path):
    """The published files put some pairs' two sides in training and test (DynaHate's
    acl.id.matched, HatemojiBuild's matched_id): the training side leaves, so each pair
    lies on one side, and the counts are reported per round and split."""
    from .test_replay_data import BUILD_HEADER, DYNAHATE_HEADER, dynahate_rows

    base = make_hate_dir(tmp_path)
    # DynaHate: three training perturbations of R2 test originals (the pair id points
    # training -> test), and one R3 test perturbation of a training original (test -> training).
    train = dynahate_rows("dev", 40)
    train += [[f"acl-x-{i}", f"cross perturbation {i}", "nothate", "notgiven", "notgiven", "perturbation",
               "dev", "2b", f"acl-test-2-{i}"] for i in (1, 3, 5)]
    write_csv(base / "dynahate/db_dev.csv", DYNAHATE_HEADER, train)
    test = dynahate_rows("test", 12)
    test.append(["acl-test-x", "test perturbation of a training row", "hate", "notgiven", "notgiven",
                 "perturbation", "test", "3b", "acl-dev-3-1"])
    write_csv(base / "dynahate/db_test.csv", DYNAHATE_HEADER, test)
    # HatemojiBuild R5: two test rows whose pairs are training rows (test -> train).
    for split, file_split, count in (("train", "train", 30), ("validation", "dev", 6), ("test", "test", 6)):
        write_csv(base / f"hatemoji/HatemojiBuild/{split}.csv", BUILD_HEADER, [
            [f"{split}-{r}-{i}", f"emoji text {split} {r} {i} \U0001F52A", "none", "[]", r, f"{r}a", "original",
             file_split, int(i % 2 == 0), "", f"train-5-{i}" if split == "test" and r == 5 and i < 2 else ""]
            for r in (5, 6, 7) for i in range(count)])
    plan = build_plan("hate", base, mode="full")
    test_ids = {r.external_uid for data in plan.rounds for r in data.test}
    training = {r.external_uid: r for data in plan.rounds for r in data.train + data.dev}
    for uid in ("acl-x-1", "acl-x-3", "acl-x-5", "acl-dev-3-1", "hatemoji-build-train-5-0",
                "hatemoji-build-train-5-1"):
        assert uid not in training
    for record in training.values():  # no training row is paired with a test row, in either direction
        assert record.metadata.get("matched_uid") not in test_ids
    assert "acl-test-x" in test_ids  # test splits are never touched
    removed = {name: sum(c["pair"] for c in splits.values()) for name, splits in plan.leakage.items()}
    assert removed["DynaHate R2"] == 3 and removed["DynaHate R3"] == 1 and removed["HatemojiBuild R5"] == 2
    assert removed.get("DynaHate R1", 0) == removed.get("DynaHate R4", 0) == 0
    assert plan.pairs["DynaHate R2"]["removed"] == 3 and plan.pairs["HatemojiBuild R5"]["removed"] == 2
    # The fixture's own pairs (every other 'a' entry and its 'b' perturbation) stay whole in training.
    assert plan.pairs["DynaHate R2"]["training"] == 20 and plan.pairs["DynaHate R2"]["test"] == 6
    summary = build_report(plan, [fake_run(plan, 0)], **META)["data"]["leakage"]
    assert summary["pairs"] == plan.pairs and "pair" in summary["rules"]
    # Without the pair ids nothing is removed by that rule (the negative case).
    clean = build_plan("hate", make_hate_dir(tmp_path / "clean"), mode="full")
    assert not any(c.get("pair") for splits in clean.leakage.values() for c in splits.values())
    assert all(v["removed"] == 0 for v in clean.pairs.values())


# --- the control pool -------------------------------------------------------------


def test_the_control_pool_is_static_training_data_that_m0_never_sees(tmp_path):
    plan = build_plan("nli", make_nli_dir(tmp_path, premises=600), mode="full")
    static = plan.rounds[0]
    pool = set(uids(plan.control_pool))
    assert pool and not pool & set(uids(static.train + static.dev + static.test))
    assert len(pool) == sum(len(d.train) + len(d.dev) for d in plan.rounds[1:])
    assert all(r.split == "train" and r.round is None for r in plan.control_pool)
    # A premise's hypotheses are all in the pool or all out of it.
    keys = dict(zip(uids(static.train + plan.control_pool),
                    group_keys(static.train + plan.control_pool), strict=True))
    assert not {keys[u] for u in pool} & {keys[u] for u in uids(static.train)}
    # Capped: a prefix of the full pool, as large as the capped rounds.
    capped = build_plan("nli", make_nli_dir(tmp_path / "again", premises=600), mode="full", limit=20)
    assert uids(capped.control_pool) == uids(plan.control_pool)[:len(capped.control_pool)]
    assert len(capped.control_pool) == sum(len(d.train) + len(d.dev) for d in capped.rounds[1:])


# --- reference lines --------------------------------------------------------------


def test_reference_lines_are_what_answers_that_look_at_nothing_score(tmp_path):
    plan = build_plan("hate", make_hate_dir(tmp_path), mode="full")
    lines = reference_lines(plan.labels, plan.suites[0].records)  # HateCheck: 20 hateful of 30
    assert lines == {"num_examples": 30, "chance": 0.5,
                     "constant": {"hateful": pytest.approx(2 / 3), "not-hateful": pytest.approx(1 / 3)},
                     "majority": {"label": "hateful", "accuracy": pytest.approx(2 / 3)}}
    references = build_report(plan, [fake_run(plan, 0)], **META)["references"]
    assert set(references) == {d.name for d in plan.rounds} | {"HateCheck", "HatemojiCheck"}
    assert references["HateCheck"]["by_functionality"]["slur_h"]["constant"]["hateful"] == 1.0
    assert references["HateCheck"]["by_functionality"]["counter_quote_nh"]["majority"]["label"] == "not-hateful"
    nli = build_plan("nli", make_nli_dir(tmp_path / "nli"), mode="full")
    assert reference_lines(nli.labels, nli.rounds[1].test)["chance"] == pytest.approx(1 / 3)
    assert reference_lines(nli.labels, [])["constant"]["neutral"] is None


# --- statistics -------------------------------------------------------------------


def test_an_accuracy_interval_covers_its_value_and_narrows_with_more_examples():
    small = stats.accuracy([1, 0] * 50, "set")
    large = stats.accuracy([1, 0] * 2000, "set")
    assert small["accuracy"] == large["accuracy"] == 0.5
    assert small["ci_low"] < 0.5 < small["ci_high"]
    assert (large["ci_high"] - large["ci_low"]) < (small["ci_high"] - small["ci_low"]) / 3
    # About the binomial's 95% half-width, 1.96 * sqrt(.25 / n).
    assert large["ci_high"] - 0.5 == pytest.approx(1.96 * (0.25 / 4000) ** 0.5, rel=0.25)
    assert stats.accuracy([1, 0] * 50, "set") == small  # seeded by the set's name
    assert stats.accuracy([1] * 10, "set")["ci_low"] == 1.0
    assert stats.accuracy([], "set")["accuracy"] is None


def clustered_scores(templates: int, per_template: int, seed: int = 7) -> tuple[list[float], list[str]]:
    """Cases written from templates: a template's cases mostly pass or fail together
    (each template has its own pass rate, near 0 or 1), as functional suites' do."""
    rng = np.random.default_rng(seed)
    scores, clusters = [], []
    for t in range(templates):
        rate = 0.9 if rng.random() < 0.6 else 0.1
        scores += [float(rng.random() < rate) for _ in range(per_template)]
        clusters += [f"t{t}"] * per_template
    return scores, clusters


def width(stat):
    return stat["ci_high"] - stat["ci_low"]


def test_a_template_suite_is_bootstrapped_by_template():
    scores, clusters = clustered_scores(60, 11)  # HatemojiCheck: about 11 cases a template
    by_case = stats.accuracy(scores, "suite")
    by_template = stats.accuracy(scores, "suite", clusters=clusters)
    assert by_template["accuracy"] == by_case["accuracy"]  # the point estimate does not change
    assert by_template["num_clusters"] == 60 and "num_clusters" not in by_case
    assert width(by_template) > 2 * width(by_case)  # cases of one template are not independent
    assert by_template["ci_low"] < by_template["accuracy"] < by_template["ci_high"]
    # Singleton clusters: the case bootstrap itself.
    singletons = stats.accuracy(scores, "suite", clusters=[f"c{i}" for i in range(len(scores))])
    assert width(singletons) == pytest.approx(width(by_case))
    # Independent cases grouped at random into "templates": about as wide as by case.
    rng = np.random.default_rng(3)
    independent = [float(x) for x in rng.random(660) < 0.6]
    loose = stats.accuracy(independent, "suite", clusters=[f"t{i // 11}" for i in range(660)])
    assert width(loose) == pytest.approx(width(stats.accuracy(independent, "suite")), rel=0.3)
    with pytest.raises(ValueError):
        stats.accuracy(scores, "suite", clusters=clusters[:-1])


def test_a_paired_difference_on_a_template_suite_resamples_templates():
    before, clusters = clustered_scores(60, 11, seed=1)
    # The later model fixes whole templates: 12 of them, all their cases.
    fixed = {f"t{t}" for t in range(0, 60, 5)}
    after = [1.0 if c in fixed else s for s, c in zip(before, clusters, strict=True)]
    by_case = stats.paired_difference(after, before, "suite")
    by_template = stats.paired_difference(after, before, "suite", clusters=clusters)
    assert by_template["difference"] == by_case["difference"] > 0
    assert width(by_template) > 2 * width(by_case) and by_template["num_clusters"] == 60
    assert by_template["p_value"] >= by_case["p_value"]


def test_the_balanced_sampler_matches_label_shares_fresh_rows_first():
    from datafiles.readers import Record
    from replay.controls import BalancedSampler, control_names, label_shares, quotas

    pool = [Record(line=i, external_uid=f"p{i}", inputs={"statement": f"s{i}"},
                   target={"label": "hateful" if i % 10 == 0 else "not-hateful"}) for i in range(100)]
    sampler = BalancedSampler(pool)  # 10 hateful, 90 not-hateful: a static pool's imbalance
    first = sampler.draw(20, {"hateful": 0.55, "not-hateful": 0.45})
    assert Counter(r.label for r in first) == {"hateful": 11, "not-hateful": 9}
    assert len({r.external_uid for r in first}) == 19 and sampler.repeated == 1  # 11 hateful from 10: one repeat
    second = sampler.draw(10, {"hateful": 0.5, "not-hateful": 0.5})
    assert Counter(r.label for r in second) == {"hateful": 5, "not-hateful": 5}
    assert not {r.external_uid for r in second if r.label == "not-hateful"} & {r.external_uid for r in first}
    assert sampler.repeated == 6
    assert quotas(7, {"a": 0.5, "b": 0.5}) == {"a": 4, "b": 3} and quotas(5, {}) == {}
    assert sampler.draw(4, {"neutral": 1.0}) == []  # a label the pool lacks: nothing drawn
    assert label_shares(first) == {"hateful": 0.55, "not-hateful": 0.45}
    assert control_names(None) == [] and control_names("static") == ["static"]
    assert control_names(["static", "balanced", "static"]) == ["static", "balanced"]
    assert control_names("static,balanced") == ["static", "balanced"]
    with pytest.raises(ValueError):
        control_names("prior")


def test_the_report_holds_both_controls_and_every_model_against_the_majority(tmp_path):
    plan = build_plan("hate", make_hate_dir(tmp_path, davidson=600), mode="full")
    runs = [fake_run(plan, 0, control=True, kinds=("static", "balanced"))]
    report = build_report(plan, runs, **{**META, "control": ["static", "balanced"]})
    assert report["control"] == "static" and report["control_names"] == ["static", "balanced"]
    assert set(report["controls"]) == {"static", "balanced"}
    r1 = report["rounds"][1]
    assert set(r1["vs_controls"]) == {"static", "balanced"} and r1["vs_control"] == r1["vs_controls"]["static"]
    # The balanced chain is 10 points below the static one in the fake scores: M1 beats it by more.
    name = "DynaHate R1"
    assert r1["vs_controls"]["balanced"][name]["difference"] > r1["vs_controls"]["static"][name]["difference"]
    # Against the majority answer: the model's accuracy minus the majority's share, on every set and suite.
    majority = report["references"][name]["majority"]["accuracy"]
    assert r1["vs_majority"][name]["difference"] == pytest.approx(r1["test"][name]["accuracy"] - majority)
    assert "HateCheck" in r1["vs_majority"] and r1["vs_majority"]["HateCheck"]["num_clusters"] > 0
    balanced_c1 = report["controls"]["balanced"]["rounds"][1]
    assert balanced_c1["vs_majority"][name]["difference"] == pytest.approx(
        balanced_c1["test"][name]["accuracy"] - majority)
    assert "resampled" in report["controls"]["balanced"]["description"]
    text = markdown_tables(report)
    assert "## Adversarial minus balanced control" in text and "## Adversarial minus static control" in text
    assert "## Against the majority answer" in text and "| hate-balanced-c1 |" in text.split(
        "## Against the majority answer")[1]
    single = build_report(plan, [fake_run(plan, 0, control=True)], **{**META, "control": "static"})
    assert single["control"] == "static" and single["control_names"] == ["static"]
    none = build_report(plan, [fake_run(plan, 0)], **META)
    assert none["control"] is None and none["controls"] == {} and "vs_controls" not in none["rounds"][1]


def test_the_report_bootstraps_suites_by_template(tmp_path):
    base = make_hate_dir(tmp_path)
    # HateCheck: 30 cases from 5 templates of 6.
    write_csv(base / "hatecheck/test_suite_cases.csv",
              ["", "functionality", "case_id", "test_case", "label_gold", "target_ident", "direction",
               "focus_words", "focus_lemma", "ref_case_id", "ref_templ_id", "templ_id", "case_templ"],
              [[i, ("derog_neg_emote_h", "slur_h")[i // 15], i + 1, f"case {i}", "hateful", "women", "general",
                "", "", "", "", i // 6, ""] for i in range(30)])
    plan = build_plan("hate", base, mode="full")
    assert plan.suites[0].clusters() == [str(i // 6) for i in range(30)]
    assert plan.suites[1].cluster_field == "templ_id"
    report = build_report(plan, [fake_run(plan, 0, control=True)], **{**META, "control": "static"})
    hatecheck = report["rounds"][1]["functional"]["HateCheck"]
    assert hatecheck["num_clusters"] == 5 and hatecheck["by_functionality"]["slur_h"]["num_clusters"] == 3
    assert report["rounds"][1]["vs_control"]["HateCheck"]["num_clusters"] == 5
    assert "num_clusters" not in report["rounds"][1]["test"]["DynaHate R1"]  # test splits: by example
    assert report["data"]["suites"][0]["clusters"] == 5
    text = markdown_tables(report)
    assert "cluster bootstraps that resample templates, each with all its cases: HateCheck (5 templates)" in text
    del report["rounds"][1]["functional"]["HateCheck"]["num_clusters"]
    for entry in report["rounds"]:
        for stat in (entry.get("functional") or {}).values():
            stat.pop("num_clusters", None)
    assert "cluster bootstrap" not in markdown_tables(report)


def test_seeds_are_pooled_per_example_and_kept_apart_in_by_seed():
    pooled = stats.accuracy([[1, 1, 0, 0], [1, 0, 0, 0]], "set")
    assert pooled["accuracy"] == pytest.approx(0.375) and pooled["by_seed"] == [0.5, 0.25]


def test_a_paired_difference_finds_a_real_gain_and_no_gain_where_there_is_none():
    rng = np.random.default_rng(7)
    before = (rng.random(1000) < 0.6).astype(float)
    after = before.copy()
    flip = np.flatnonzero(before == 0)[:80]  # the new model fixes 80 errors and breaks none
    after[flip] = 1
    gain = stats.paired_difference(after, before, "set")
    assert gain["difference"] == pytest.approx(0.08)
    assert 0 < gain["ci_low"] < 0.08 < gain["ci_high"] and gain["p_value"] < 0.01
    same = stats.paired_difference(before, before, "set")
    assert same["difference"] == 0 and same["p_value"] == 1.0
    # Two models that disagree at random, at equal accuracy: no significant difference.
    other = before.copy()
    swap = rng.permutation(1000)[:200]
    other[swap] = 1 - other[swap]
    other[np.flatnonzero(other != before)[:0]] = 0
    noisy = stats.paired_difference(other, before, "set")
    assert noisy["ci_low"] <= noisy["difference"] <= noisy["ci_high"]
    reverse = stats.paired_difference(before, after, "set")
    assert reverse["difference"] == pytest.approx(-0.08) and reverse["ci_high"] < 0
    with pytest.raises(ValueError, match="different examples"):
        stats.paired_difference([1, 0], [1, 0, 1], "set")


def test_wilson_interval():
    low, high = stats.wilson(50, 100)
    assert low == pytest.approx(0.404, abs=0.002) and high == pytest.approx(0.596, abs=0.002)
    assert stats.wilson(0, 10)[0] == 0.0 and stats.wilson(0, 0) == (None, None)


# --- pooling seeds into the report ------------------------------------------------

META = {"task": "hate", "mode": "full", "strategy": "cumulative", "training": {"epochs": 1},
        "started_at": "2026-01-01T00:00:00+00:00", "seconds": 10.0, "control": None}


def fake_scores(n: int, accuracy: float, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(x) for x in (rng.random(n) < accuracy)]


def fake_run(plan, seed: int, *, control: bool = False, control_gap: float = 0.0,
             kinds: tuple = ("static",)) -> dict:
    """What Replay.run returns for one seed: model r is 50% + 5 points a round on every set."""

    def scored(r: int, shift: float = 0.0) -> dict:
        return {
            "scores": {d.name: fake_scores(len(d.test), 0.5 + 0.05 * r - shift, 100 * seed + r)
                       for d in plan.rounds},
            "functional": {s.name: {"scores": fake_scores(len(s.records), 0.6 + 0.02 * r - shift, seed + r),
                                    "groups": [str(x.metadata.get(s.group_field) or "unknown")
                                               for x in s.records],
                                    "clusters": s.clusters()}
                           for s in plan.suites if s.from_round <= r}}

    rounds = []
    for data in plan.rounds:
        r = data.number
        rounds.append({"number": r, "name": data.name, "model": f"hate-m{r}", "train_seconds": 1.0,
                       "collection": None if r == 0 else {"submitted": 40, "fooled": 10 + seed, "refused": 0,
                                                          "model_error_rate": (10 + seed) / 40,
                                                          "target": f"hate-m{r - 1}"},
                       "training": {"counts": {"rounds": {"train": 36, "dev": 4}}}, **scored(r)})
    controls = {}
    for k, kind in enumerate(kinds if control else ()):
        prefix = "control" if kind == "static" else kind
        controls[kind] = [{"number": d.number, "name": d.name, "model": f"hate-{prefix}-c{d.number}",
                           "control_for": f"hate-m{d.number}", "train_seconds": 1.0, "training_rows": 72,
                           **scored(d.number, control_gap + 0.1 * k)} for d in plan.rounds[1:]]
    return {"seed": seed, "slug": f"hate-replay-full-s{seed}", "seconds": 5.0, "rounds": rounds,
            "controls": controls}


def test_the_report_pools_seeds_with_intervals_gains_and_the_control(tmp_path):
    plan = build_plan("hate", make_hate_dir(tmp_path, davidson=600), mode="full")
    runs = [fake_run(plan, seed, control=True, control_gap=0.3) for seed in (0, 1, 2)]
    report = build_report(plan, runs, **{**META, "control": "static"})
    json.dumps(report, allow_nan=False)
    assert report["seeds"] == [0, 1, 2] and report["control"] == "static"
    assert [r["number"] for r in report["rounds"]] == list(range(8))
    first, last = report["rounds"][1], report["rounds"][-1]
    # The interface scripts read.
    assert first["error_rate_at_collection"] == pytest.approx((10 + 11 + 12) / 3 / 40)
    assert first["collection"]["by_seed"] == [0.25, 0.275, 0.3]
    assert first["collection"]["ci_low"] < first["error_rate_at_collection"] < first["collection"]["ci_high"]
    assert report["rounds"][0]["error_rate_at_collection"] is None
    for entry in report["rounds"]:
        for name, value in entry["test"].items():
            assert value["ci_low"] <= value["accuracy"] <= value["ci_high"], name
            assert len(value["by_seed"]) == 3
            assert value["accuracy"] == pytest.approx(sum(value["by_seed"]) / 3)
    assert set(last["functional"]) == {"HateCheck", "HatemojiCheck"}
    assert "HatemojiCheck" not in report["rounds"][4]["functional"]
    assert set(last["functional"]["HateCheck"]["by_functionality"]) == {
        "counter_quote_nh", "derog_neg_emote_h", "slur_h"}
    # Paired gains: on round r's own test split, against the model before.
    gain = first["gain_over_previous"]
    assert gain["test_set"] == "DynaHate R1" and gain["previous_model"] == "hate-m0"
    assert gain["difference"] == pytest.approx(first["test"]["DynaHate R1"]["accuracy"]
                                               - report["rounds"][0]["test"]["DynaHate R1"]["accuracy"])
    assert "gain_over_previous" not in report["rounds"][0]
    # The control: 30 points worse everywhere, so the adversarial model wins everywhere.
    control = report["controls"]["static"]["rounds"]
    assert [c["model"] for c in control] == ["hate-m0", *(f"hate-control-c{r}" for r in range(1, 8))]
    for name, diff in last["vs_control"].items():
        assert diff["difference"] > 0, name
        if diff["num_examples"] >= 50:
            assert diff["ci_low"] > 0.1 and diff["p_value"] < 0.01, name
    assert set(last["vs_control"]) == {d.name for d in plan.rounds} | {"HateCheck", "HatemojiCheck"}
    assert [run["seed"] for run in report["runs"]] == [0, 1, 2]
    assert "scores" not in json.dumps(report)  # per-example scores stay out of the file


def test_a_report_without_control_has_an_empty_controls_object(tmp_path):
    plan = build_plan("hate", make_hate_dir(tmp_path), mode="full")
    report = build_report(plan, [fake_run(plan, 0)], **META)
    assert report["controls"] == {} and "vs_control" not in report["rounds"][1]
    assert report["rounds"][1]["test"]["DynaHate R1"]["by_seed"] == [
        report["rounds"][1]["test"]["DynaHate R1"]["accuracy"]]
