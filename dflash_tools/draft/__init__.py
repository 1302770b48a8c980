"""The draft model and its rules: what a loaded checkpoint means and what is wrong with it.

`description` (the one normalized draft description every dialect reads into), `dialect_spec`
(what each dialect declares about itself: where its keys sit, its defaults; the modules here read
it instead of a dialect's name), `geometry` (the
block-size / sample_from_anchor rules: the only place they live), `trained_layout` (the trained
layout weighed from the draft's evidence, on which geometry builds), `tensors` (expected tensors and
their shapes), `checks` (config sanity), `config_keys` (the one table of
config keys engines read: type, range, readers, default; DFT006 / DFT058), `sliding_window` (which keys a sliding layer sees, trained
vs served; DFT055), `target` (pairing with a target model), `profiles` (known published
checkpoints) and `config_paths` (dotted paths into a config: read, read several, write; the one
home of those walks). The catalogue of finding codes is `dflash_tools.findings`, below every layer.

Imports: `reading`, `files`, `errors`, `findings`. Never `dialects` or a
command.
"""
