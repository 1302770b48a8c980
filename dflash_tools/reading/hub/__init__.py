"""Read a draft checkpoint's config and safetensors headers from the Hugging Face Hub.

Only metadata crosses the network, and every request goes through one I/O policy (`http`): a
deadline of --timeout seconds per request (connect, every read, the whole body, retries and
their waits), a size cap on every body before it is read, bounded retries, and errors that name
the file and the cause.

- The repo info (the commit a revision resolves to, and the file list), `config.json` and
  `model.safetensors.index.json` are read into memory with bounded GETs; nothing is written
  into the Hub cache.
- The header of every safetensors file comes from ranged GETs. The raw header bytes go
  through our own `parse_header`, with the real file size taken from `Content-Range`, so the
  DFT003 layout checks (holes, overlaps, overruns) apply to remote files exactly as to local
  ones. huggingface_hub's `parse_safetensors_file_metadata` returns parsed tensors only and
  cannot tell a truncated file from a healthy one, hence the raw fetch. Weights are never
  downloaded: a response that ignores the `Range` header is cut off once the header arrived.

Offline (`HF_HUB_OFFLINE=1`, or the Hub unreachable) only the local Hub cache is used: the
cached config, and the headers of whichever shards happen to be cached, read in place.
"""

from dflash_tools.reading.hub.headers import HEADER_PROBE_BYTES
from dflash_tools.reading.hub.repo import list_hub_models, load_hub_checkpoint, load_hub_config

__all__ = ["HEADER_PROBE_BYTES", "list_hub_models", "load_hub_checkpoint", "load_hub_config"]
