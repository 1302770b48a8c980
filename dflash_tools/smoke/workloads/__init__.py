"""What a smoke test measures on, and what it is judged against.

    datasets.py      gsm8k, math500, humaneval, mbpp, mt-bench as prompts (local file, cache,
                     the `datasets` library)
    protocols.py     sampling protocols as data (configs/protocols): greedy, the cards' T=1
                     protocol (`MeasurementProtocol`)
    references.py    published acceptance lengths (configs/references) and the distance from them
    reference_al.py  the acceptance length a run is judged against (--reference-al, the bundled
                     demo drafts, a published card)

Imports: within `smoke`, `smoke.limits` and `smoke.acceptance`; below it, `draft` (where the
bundled configs live), `reading` and `plan` (its presets' readers).
"""
