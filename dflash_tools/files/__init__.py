"""File primitives: atomic writes, staged folders, weight links, the Hugging Face cache guard.

`atomic` writes single files and publishes staged folders so that a reader or a crash sees the
old state or the new one, never half; `hf_cache` says whether a path could touch the Hub cache (by the cache's layout);
`locking` keeps two converts from writing one folder at once (flock).

Imports: the standard library and huggingface_hub's constants only; of ours, `errors` alone.
"""
