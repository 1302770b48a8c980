"""One Hub repo reference (`HubRepo`), and huggingface_hub clients that identify dflash-tools."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from huggingface_hub import constants
from huggingface_hub.utils import build_hf_headers

from dflash_tools._version import __version__

if TYPE_CHECKING:
    from huggingface_hub import HfApi, ModelInfo


LIBRARY_NAME = "dflash-tools"


@dataclass(frozen=True)
class HubRepo:
    repo_id: str
    revision: str | None
    token: str | None
    timeout: float

    @property
    def label(self) -> str:
        return f"{self.repo_id}@{self.revision or constants.DEFAULT_REVISION}"

    def headers(self) -> dict[str, str]:
        headers = build_hf_headers(token=self.token, library_name=LIBRARY_NAME, library_version=library_version())
        # Byte ranges must address the file itself, never a compressed encoding of it.
        headers["Accept-Encoding"] = "identity"
        return headers


def hf_api(token: str | None) -> HfApi:
    from huggingface_hub import HfApi

    return HfApi(token=token, library_name=LIBRARY_NAME, library_version=library_version())


def model_info(hub: HubRepo, *, files_metadata: bool = True) -> ModelInfo:
    return hf_api(hub.token).model_info(
        hub.repo_id, revision=hub.revision, files_metadata=files_metadata, timeout=hub.timeout
    )


def effective_timeout(timeout: float | None) -> float:
    # huggingface_hub's shared client has no timeout of its own: never send a request without one.
    return float(timeout) if timeout is not None else float(constants.HF_HUB_DOWNLOAD_TIMEOUT)


def library_version() -> str:
    return __version__
