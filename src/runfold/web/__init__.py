"""A local web page over the ledger: the runs, every line, the request as sent at any seq, the
window by cause, diffs, a live tail and the actions (steer, cancel, fork, continue).

`create_app(workspace_dir)` builds the FastAPI app `runfold view` serves; `web_router(...)` is the
same pages as an `APIRouter` another server mounts, with its own `actions`. Every page is a fold
of the ledger through `runfold.api.Workspace`, as the CLI's; read-only pages never write.
"""

from __future__ import annotations

from runfold.web.actions import ActionError, LocalActions, WebActions
from runfold.web.app import create_app, web_router

__all__ = ["ActionError", "LocalActions", "WebActions", "create_app", "web_router"]
