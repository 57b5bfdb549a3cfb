"""The public pages of a task's data: its verified examples of closed rounds
(``leaderboard.releases.browse``) and the downloads of its releases' files."""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import FileResponse, Http404
from django.shortcuts import redirect, render

from annotation.models import Example
from core.errors import DomainError, InvalidInput
from registry import artifacts
from tasks.models import Task

from .models import Release
from .releases import browse
from .releases.public import withheld


def _visible_task(request, slug) -> Task:
    task = Task.objects.visible_to(request.user).filter(slug=slug).first()
    if task is None:
        raise Http404(f"No task {slug!r}.")
    return task


def public_examples(request, slug):
    """A task's verified examples of closed rounds, a page at a time, with the model's
    answer; searchable by text (``leaderboard.releases.browse``)."""
    task = _visible_task(request, slug)
    params = {"round_number": request.GET.get("round"), "split": request.GET.get("split"),
              "query": request.GET.get("q"), "before": request.GET.get("before")}
    context = {"task": task, "splits": Example.Split.values, "releases": browse.releases_with_downloads(task)}
    try:
        context["page"] = browse.browse(task, **params)
    except InvalidInput as exc:
        context["error"] = str(exc)
        return render(request, "leaderboard/examples.html", context, status=400)
    except DomainError as exc:  # NotFound: a round that is not closed (or not there)
        raise Http404(str(exc)) from None
    page = context["page"]
    if page.next_before:
        context["next_query"] = urlencode({k: v for k, v in (("round", page.round), ("split", page.split),
                                                             ("q", page.query), ("before", page.next_before)) if v})
    return render(request, "leaderboard/examples.html", context)


def release_file(request, slug, version, name):
    """One file of a task's release, as a download: from this machine's disk, or through a
    short-lived address of the object store."""
    task = _visible_task(request, slug)
    release = Release.objects.filter(task=task, version=version).first()
    if release is None or name not in release.files:
        raise Http404(f"Task {slug} has no release {version} with a file {name}.")
    if withheld(release, name):
        raise Http404(f"{name} of {release} is the leaderboard's test data, which this release's researcher did "
                      "not release on purpose: it is not public.")
    download_as = f"{slug}-v{version}-{name.rsplit('/', 1)[-1]}"
    if release.location.startswith("s3://"):
        return redirect(artifacts.stored_file_url(release.location, name, download_as=download_as))
    try:
        handle = open(artifacts.stored_file_path(release.location, name), "rb")  # noqa: SIM115 - FileResponse closes it
    except FileNotFoundError:
        raise Http404(f"{name} of {release} is missing from the artifact store.") from None
    return FileResponse(handle, as_attachment=True, filename=download_as, content_type=DOWNLOAD_TYPES.get(
        name.rsplit(".", 1)[-1], "application/octet-stream"))


DOWNLOAD_TYPES = {"parquet": "application/vnd.apache.parquet", "json": "application/ld+json",
                  "md": "text/markdown; charset=utf-8"}
