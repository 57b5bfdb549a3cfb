"""Upload a folder to a Hugging Face Hub data set repository: run as a program by
``leaderboard.releases.hub`` in a child process, never imported by the platform.

It imports ``huggingface_hub`` and nothing of the platform: the platform's processes
force the Hub offline for everything else they do (``ml.configure_offline``: models
are never downloaded at run time), and the Hub reads that setting once, when it is
imported. The child starts without it. The token comes in the environment
(``HF_TOKEN``), never on the command line. It prints one JSON line: ``{"url", "commit"}``
on success, ``{"error", "kind"}`` (``unreachable``, ``refused``) on failure.

    python -P hub_upload.py FOLDER REPO_ID COMMIT_MESSAGE [--private]
"""

import json
import sys


def main(argv: list[str]) -> int:
    folder, repo_id, message = argv[:3]
    private = "--private" in argv[3:]
    import httpx2
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi()
    try:
        repo = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        commit = api.upload_folder(repo_id=repo_id, folder_path=folder, repo_type="dataset",
                                   commit_message=message)
    except HfHubHTTPError as exc:
        print(json.dumps({"kind": "refused", "error": str(exc).splitlines()[0]}))
        return 1
    except ValueError as exc:  # the Hub found the card's metadata invalid
        print(json.dumps({"kind": "refused", "error": " ".join(str(exc).split())}))
        return 1
    except (httpx2.TransportError, OSError) as exc:
        print(json.dumps({"kind": "unreachable", "error": f"{type(exc).__name__}: {exc}"}))
        return 1
    print(json.dumps({"url": str(repo), "commit": getattr(commit, "oid", "") or ""}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
