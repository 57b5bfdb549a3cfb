import pytest

TINY = {"max_steps": 2, "epochs": 1, "batch_size": 4}


@pytest.fixture(scope="session")
def tiny_artifacts(tmp_path_factory):
    """One tiny trained artifact per demo task, trained once per test session."""
    import ml
    from leaderboard.services import read_seed_rows
    from tasks.config import validate_task_config
    from tasks.services import DEFAULT_TASK_SLUGS, load_definition

    root = tmp_path_factory.mktemp("tiny-models")
    artifacts = {}
    for slug in DEFAULT_TASK_SLUGS:
        definition = load_definition(slug)
        spec = ml.TaskSpec.from_dict(validate_task_config(definition["task_type"], definition["config"]).ml_spec_dict())
        rows = read_seed_rows(slug)["train"][:12]
        artifacts[slug] = ml.train(spec, rows, [], root / slug, **TINY)
    return artifacts


@pytest.fixture
def live_tasks(demo_tasks, tiny_artifacts):
    """The demo tasks with a registered target model on each open round."""
    from leaderboard.services import register_model

    for slug, task in demo_tasks.items():
        model = register_model(task, tiny_artifacts[slug], name=f"{slug}-tiny")
        task.open_round().target_models.add(model)
    return demo_tasks
