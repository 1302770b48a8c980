"""Read a draft checkpoint's config and safetensors headers from the Hugging Face Hub.

Only metadata crosses the network:

- `config.json` and `model.safetensors.index.json` through `hf_hub_download`, which keeps them
  in the Hub cache (so a later offline run finds them). This module only ever *reads* the cache.
- the header of every safetensors file through ranged GET requests sent on huggingface_hub's
  own HTTP session (same auth, proxy, offline switch and user agent). The raw header bytes go
  through our own `parse_header`, with the real file size taken from `Content-Range`, so the
  DFT003 layout checks (holes, overlaps, overruns) apply to remote files exactly as to local
  ones. huggingface_hub's `parse_safetensors_file_metadata` returns parsed tensors only and
  cannot tell a truncated file from a healthy one, hence the raw fetch.

Weights are never downloaded: a response that ignores the `Range` header is streamed and cut
off as soon as the header has arrived.

Offline (`HF_HUB_OFFLINE=1`, or the Hub unreachable) only the local Hub cache is used: the
cached config, and the headers of whichever shards happen to be cached, read in place.
"""

from dflash_tools.reading.hub.headers import HEADER_PROBE_BYTES
from dflash_tools.reading.hub.repo import list_hub_models, load_hub_checkpoint, load_hub_config

__all__ = ["HEADER_PROBE_BYTES", "list_hub_models", "load_hub_checkpoint", "load_hub_config"]
