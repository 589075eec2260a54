# Command line of the torch bridge (scripts/import-torch runs it): build a model from PACKAGE.MODULE.CALLABLE and
# write its shardplan.model/v1 file. Bad input: one line naming what was expected, exit status 2.
import argparse
import importlib
import json
import sys
import time

import torch

from .meta_trace import initialisers_skipped, on_meta
from .model_file import describe_model, write_model_file


def _callable(spec):
    module_name, _, attribute = spec.rpartition(".")
    if not module_name:
        raise ValueError(f"'{spec}': expected PACKAGE.MODULE.CALLABLE, e.g. torchvision.models.vit_b_16")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"'{spec}': cannot import {module_name} ({error})") from error
    if not hasattr(module, attribute):
        raise ValueError(f"'{spec}': {module_name} has no attribute {attribute!r}")
    return getattr(module, attribute)


def _example_input(text, model):
    """--input image:CxHxW | tokens:S (batch 1); default: an image of the model's image_size (3×224×224 without one)
    when it has a Conv2d, else 512 tokens of its first Embedding's vocabulary."""
    if text is None:
        if any(isinstance(m, torch.nn.Conv2d) for m in model.modules()):
            size = getattr(model, "image_size", 224)
            text = f"image:3x{size}x{size}"
        else:
            text = "tokens:512"
    kind, _, value = text.partition(":")
    generator = torch.Generator().manual_seed(0)
    expected = f"--input '{text}': expected image:CxHxW or tokens:S (e.g. image:3x224x224, tokens:512)"
    try:
        sizes = [int(v) for v in value.split("x")]
    except ValueError:
        raise ValueError(expected) from None
    if kind == "image" and len(sizes) == 3 and min(sizes) >= 1:
        return torch.randn([1] + sizes, generator=generator)
    if kind == "tokens" and len(sizes) == 1 and sizes[0] >= 1:
        embedding = next((m for m in model.modules() if isinstance(m, torch.nn.Embedding)), None)
        if embedding is None:
            raise ValueError("--input tokens:S: the model has no nn.Embedding to draw token ids from")
        return torch.randint(0, embedding.num_embeddings, (1, sizes[0]), generator=generator)
    raise ValueError(expected)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="scripts/import-torch", description=__doc__)
    parser.add_argument("callable", help="PACKAGE.MODULE.CALLABLE returning an nn.Module (or an nn.Module class)")
    parser.add_argument("--kwargs", default="{}", help="JSON object of keyword arguments for the callable")
    parser.add_argument("--out", required=True, help="the shardplan.model/v1 file to write")
    parser.add_argument("--input", help="image:CxHxW or tokens:S (batch 1); the model's default sequence")
    parser.add_argument("--wrap", help="comma-separated module classes to wrap (module.Class); default: detected")
    parser.add_argument("--causal", action="store_true", help="the blocks' attention is causal (decoders)")
    parser.add_argument("--name", help="the model's name in shardplan's output (default: the module's class)")
    parser.add_argument("--fast", action="store_true",
                        help="build without initialising and trace on the meta device: FLOPs and saved bytes from "
                             "shapes, nothing computed (seconds for ViT-H/14)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    start = time.monotonic()

    def progress(line):
        if not args.quiet:
            print(f"import-torch: [{time.monotonic() - start:6.1f} s] {line}", file=sys.stderr, flush=True)
    try:
        kwargs = json.loads(args.kwargs)
        if not isinstance(kwargs, dict):
            raise ValueError
    except ValueError:
        print(f"import-torch: --kwargs: expected a JSON object, got {args.kwargs!r}", file=sys.stderr)
        return 2
    try:
        build = _callable(args.callable)
        torch.manual_seed(0)
        progress(f"building {args.callable}" + (" (initialisers skipped, --fast)" if args.fast else ""))
        if args.fast:
            with initialisers_skipped():
                model = build(**kwargs)
        else:
            model = build(**kwargs)
        if not isinstance(model, torch.nn.Module):
            raise ValueError(f"'{args.callable}': returned {type(model).__name__}, expected a torch.nn.Module")
        progress(f"built {type(model).__name__}: {sum(p.numel() for p in model.parameters()):,} parameters")
        example = _example_input(args.input, model)
        if args.fast:
            model, example = on_meta(model, example)
        # Named after the module's class (a factory's name says how it was made, not what it is: issue 36).
        document = describe_model(model, example, name=args.name or type(model).__name__,
                                  wrap_classes=args.wrap.split(",") if args.wrap else None, causal=args.causal,
                                  source={"callable": args.callable, "kwargs": kwargs, "fast": args.fast},
                                  progress=progress)
    except (ValueError, TypeError) as error:
        print(f"import-torch: {error}", file=sys.stderr)
        return 2
    write_model_file(document, args.out)
    progress(f"wrote {args.out}: {document['params']} parameters, {len(document['layers'])} layers, "
             f"wrap candidates {', '.join(document['wrap_candidates'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
