#!/usr/bin/env python3
"""examples/notebook_demo.py: what a notebook does with shardplan, as a script — plan two configurations, compare
them, and render what a notebook cell would show (each result's _repr_html_) into one HTML page.

    PYTHONPATH=build/python python3 examples/notebook_demo.py --html /tmp/notebook.html   # or after pip install .
    chromium --headless --no-sandbox --window-size=1280,1400 --screenshot=/tmp/notebook.png /tmp/notebook.html

In Jupyter, the same calls display as the tables and pictures of the page: `planned` alone in a cell renders it.
pandas is optional: `shardplan.compare(...).to_pandas()` where it is installed."""
import argparse
import html
import os

import shardplan


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", help="write the cells' HTML to this file")
    parser.add_argument("--model", default="llama3-8b")
    parser.add_argument("--cluster", default="8xH100-80GB")
    args = parser.parse_args()

    # Cell 1: the fastest plan at the model's sequence length, everything searched.
    long_context = shardplan.plan(model=args.model, cluster=args.cluster, seq_len=8192)
    # Cell 2: shorter sequences, a global batch of 64 sequences, tensor parallelism pinned to 2.
    batched = shardplan.plan(model=args.model, cluster=args.cluster, seq_len=2048, global_batch=64,
                             tensor_parallel="2")
    # Cell 3: side by side (speed-up in tokens/s over the first).
    table = shardplan.compare({"seq 8192": long_context, "seq 2048, batch 64, TP 2": batched})

    print(f"shardplan {shardplan.__version__}")
    print(repr(long_context))
    print(repr(batched))
    print(table)
    if args.html:
        cells = [("shardplan.plan(model, cluster, seq_len=8192)", long_context._repr_html_()),
                 ("shardplan.plan(..., seq_len=2048, global_batch=64, tensor_parallel='2')", batched._repr_html_()),
                 ("shardplan.compare({...})", table._repr_html_())]
        body = "".join(f'<div style="margin:0 0 18px"><pre style="color:#555;margin:4px 0">In: '
                       f"{html.escape(code)}</pre>{out}</div>" for code, out in cells)
        os.makedirs(os.path.dirname(os.path.abspath(args.html)), exist_ok=True)
        with open(args.html, "w") as page:
            page.write(f'<!doctype html><html><head><meta charset="utf-8"><title>shardplan in a notebook</title>'
                       f'</head><body style="margin:16px;max-width:1200px">{body}</body></html>\n')
        print(f"wrote {args.html}")


if __name__ == "__main__":
    main()
