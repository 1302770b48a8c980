"""Reading a checkpoint: config.json and safetensors headers, never weights, never remote code.

`source.load_checkpoint` is the entry: it resolves SOURCE (folder, file, `example:NAME`, Hub repo)
and hands it to `local` or `hub`; both fill in a `checkpoint.LoadedCheckpoint` with the shard and
index helpers that live there, below both. `safetensors_header` parses headers from bytes;
`json_hazards` finds what JSON readers disagree on (duplicate keys, lone surrogates, deep nesting)
and reads a server's JSON within limits. `http` is the one bounded HTTP policy for every server
the tool talks to (the Hub through `hub.http`, and the servers smoke-test measures).

Imports: `files`, `errors`, and `findings` (the finding vocabulary, which imports nothing of
ours). Never `draft`'s rules, `dialects` or any command.
"""
