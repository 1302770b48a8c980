"""One Hub repo reference (`HubRepo`): its id, revision, token and the --timeout of its requests."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from huggingface_hub import constants
from huggingface_hub.utils import build_hf_headers

from dflash_tools._version import __version__

LIBRARY_NAME = "dflash-tools"


@dataclass(frozen=True)
class HubRepo:
    repo_id: str
    revision: str | None
    token: str | None
    timeout: float  # seconds: the deadline of every request (see reading.hub.http)

    @property
    def label(self) -> str:
        return f"{self.repo_id}@{self.revision or constants.DEFAULT_REVISION}"

    def headers(self) -> dict[str, str]:
        headers = build_hf_headers(token=self.token, library_name=LIBRARY_NAME, library_version=library_version())
        # Byte ranges and size caps must address the file itself, never a compressed encoding of it.
        headers["Accept-Encoding"] = "identity"
        return headers

    def repo_info_url(self) -> str:
        """The Hub API answer `HfApi.model_info` reads (the same URL, built the same way)."""
        url = f"{constants.ENDPOINT}/api/models/{self.repo_id}"
        return url if self.revision is None else f"{url}/revision/{quote(self.revision, safe='')}"


def effective_timeout(timeout: float | None) -> float:
    # Never send a request without a deadline: huggingface_hub's own default when none is given.
    return float(timeout) if timeout is not None else float(constants.HF_HUB_DOWNLOAD_TIMEOUT)


def library_version() -> str:
    return __version__
