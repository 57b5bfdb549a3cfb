"""Celery tasks on the ``inference`` queue: thin, they take ids and texts.

The web process waits on their results (``annotation.inference``); a STARTED state
would cost one more write and message per call in the result backend and nobody
reads it, so these two do not report it (``track_started=False``, whatever
``CELERY_TASK_TRACK_STARTED`` says for the long jobs).
"""

from celery import shared_task

from leaderboard.models import ModelVersion


def _refs(model_version_ids):
    from leaderboard.services import ref_for

    models = {m.pk: m for m in ModelVersion.objects.filter(pk__in=model_version_ids, status="ready")}
    missing = [pk for pk in model_version_ids if pk not in models]
    if missing:
        raise ValueError(f"unknown or retired model versions: {missing}")
    return [(models[pk], ref_for(models[pk])) for pk in model_version_ids]


@shared_task(name="annotation.predict", track_started=False)
def predict(model_version_ids: list[int], rows_inputs: list[dict]) -> list[dict]:
    """Predict with one model or an ensemble (mean of probabilities / best span).

    Each result carries ``members``: each model's own prediction, keyed by
    model version id.
    """
    import ml

    pairs = _refs(model_version_ids)
    if len(pairs) == 1:
        results = ml.predict(pairs[0][1], rows_inputs)
        for result in results:
            result["members"] = {str(pairs[0][0].pk): {k: v for k, v in result.items() if k != "members"}}
        return results
    results = ml.predict_ensemble([ref for _, ref in pairs], rows_inputs)
    for result in results:
        result["members"] = {str(m.pk): member for (m, _), member in zip(pairs, result["members"], strict=True)}
    return results


@shared_task(name="annotation.explain", track_started=False)
def explain(model_version_id: int, inputs: dict, target=None, n_steps: int = 10) -> dict:
    import ml

    [(_, ref)] = _refs([model_version_id])
    return ml.explain(ref, inputs, target=target, n_steps=n_steps)
