#!/usr/bin/env python3
"""Exports real models to ONNX with PyTorch (random weights, seed 0), runs
each through onnxruntime and `tilejit run`, and compares the outputs.

    python3 tools/onnx_models.py export [DIR] [--small]   # build DIR/<model>/
    python3 tools/onnx_models.py check [DIR] [--tilejit BIN] [--mode host|sim|verify]
    python3 tools/onnx_models.py bench [DIR] [--tilejit BIN] [--repeats N]

Each DIR/<model>/ holds model.onnx (weights as external data), its inputs
as <input name>.npy and onnxruntime's outputs as ort/<output name>.npy.
`check` runs `tilejit run` on the same inputs and reports, per output, the
largest difference relative to the output's largest magnitude (the bar is
1e-4). `bench` times onnxruntime (2 threads) and tract (the `tract`
wheel, one thread; skipped with the reason when it is missing or cannot
load a model) against `tilejit run --repeat`, all in one run. Needs torch,
torchvision, transformers, onnx, onnxscript and onnxruntime
(../shared/peers/setup.sh makes such a venv; `pip install tract` adds
tract). Default DIR: target/onnx-models; --small makes tiny configurations
(what a quick check wants), not the full-size models.
"""
import argparse
import json
import re
import os
import subprocess
import sys
import time

import numpy as np

OPSET = 18


def export(module, args, path, inputs, outputs, dynamic_shapes=None):
    import torch
    with torch.no_grad():
        torch.onnx.export(module.eval(), args, path, input_names=inputs, output_names=outputs,
                          opset_version=OPSET, dynamic_shapes=dynamic_shapes, dynamo=True,
                          external_data=True)


def gpt2(small):
    """GPT2LMHeadModel with past key/values: the cached decode step."""
    import torch
    from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000) if small else GPT2Config()
    model = GPT2LMHeadModel(cfg).eval()
    n, heads, hd = cfg.n_layer, cfg.n_head, cfg.n_embd // cfg.n_head
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (1, 1), generator=g)
    past = [torch.randn(1, heads, 16, hd, generator=g) for _ in range(2 * n)]

    class Decode(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, *past):
            cache = DynamicCache()
            for i in range(n):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.m(input_ids=input_ids, past_key_values=cache, use_cache=True)
            c = out.past_key_values
            return (out.logits, *[t for layer in c.layers for t in (layer.keys, layer.values)])

    names = [f"past_{i}_{k}" for i in range(n) for k in ("key", "value")]
    p = torch.export.Dim("past", min=1, max=cfg.n_positions - 1)
    return (Decode(), (ids, *past), ["input_ids"] + names,
            ["logits"] + [s.replace("past", "present") for s in names],
            ({}, tuple({2: p} for _ in past)))


def resnet18(small):
    import torch
    from torchvision.models import resnet18 as make
    x = torch.randn(2 if small else 8, 3, 64 if small else 224, 64 if small else 224,
                    generator=torch.Generator().manual_seed(1))
    return make().eval(), (x,), ["images"], ["logits"], ({0: torch.export.Dim("batch", min=1, max=256)},)


def bert(small):
    """A BERT-base encoder (BertModel, no pooler head): last hidden state."""
    import torch
    from transformers import BertConfig, BertModel
    cfg = (BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                      vocab_size=1000) if small else BertConfig())
    model = BertModel(cfg, add_pooling_layer=False).eval()
    g = torch.Generator().manual_seed(1)
    seq = 16 if small else 128
    ids = torch.randint(0, cfg.vocab_size, (2, seq), generator=g)
    mask = torch.ones(2, seq, dtype=torch.int64)
    mask[1, seq // 2:] = 0

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    s = torch.export.Dim("seq", min=2, max=512)
    return Encoder(), (ids, mask), ["input_ids", "attention_mask"], ["hidden"], ({1: s}, {1: s})


def unet(small):
    """A small U-Net (two downs, two ups: conv, batch norm, ReLU, max pool,
    ConvTranspose, skip concatenations), as segmentation nets write it."""
    import torch
    from torch import nn

    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),
                             nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self, c=8 if small else 32):
            super().__init__()
            self.d1, self.d2, self.mid = block(3, c), block(c, 2 * c), block(2 * c, 4 * c)
            self.u2, self.b2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2), block(4 * c, 2 * c)
            self.u1, self.b1 = nn.ConvTranspose2d(2 * c, c, 2, stride=2), block(2 * c, c)
            self.out = nn.Conv2d(c, 2, 1)

        def forward(self, x):
            a = self.d1(x)
            b = self.d2(nn.functional.max_pool2d(a, 2))
            m = self.mid(nn.functional.max_pool2d(b, 2))
            b = self.b2(torch.cat([self.u2(m), b], 1))
            return self.out(self.b1(torch.cat([self.u1(b), a], 1)))

    torch.manual_seed(0)
    net = UNet()
    with torch.no_grad():  # batch norm statistics that are not the identity
        for mod in net.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
    x = torch.randn(1, 3, 32 if small else 128, 32 if small else 128, generator=torch.Generator().manual_seed(1))
    return net.eval(), (x,), ["image"], ["mask"], None


MODELS = {"gpt2": gpt2, "resnet18": resnet18, "bert": bert, "unet": unet}


def do_export(root, small):
    import torch
    import onnxruntime as ort
    for name, make in MODELS.items():
        torch.manual_seed(0)
        d = os.path.join(root, name)
        os.makedirs(os.path.join(d, "ort"), exist_ok=True)
        module, args, inputs, outputs, dyn = make(small)
        export(module, args, os.path.join(d, "model.onnx"), inputs, outputs, dyn)
        feed = {n: a.numpy() for n, a in zip(inputs, args)}
        for n, a in feed.items():
            np.save(os.path.join(d, f"{n}.npy"), a)
        s = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
        for n, a in zip([o.name for o in s.get_outputs()], s.run(None, feed)):
            np.save(os.path.join(d, "ort", f"{n}.npy"), a)
        print(f"{name}: exported to {d}")


def tilejit_run(binary, d, out, mode, extra=()):
    inputs = sorted(f[:-4] for f in os.listdir(d) if f.endswith(".npy"))
    cmd = [binary, "run", os.path.join(d, "model.onnx"), "--output-dir", out, "--mode", mode, *extra]
    for n in inputs:
        cmd += ["--input", f"{n}={os.path.join(d, n + '.npy')}"]
    return subprocess.run(cmd, check=True, capture_output=True, text=True)


def do_check(root, binary, mode):
    worst = 0.0
    for name in MODELS:
        d = os.path.join(root, name)
        out = os.path.join(d, f"tilejit-{mode}")
        t0 = time.perf_counter()
        try:
            tilejit_run(binary, d, out, mode)
        except subprocess.CalledProcessError as e:
            print(f"{name}: tilejit run failed: {(e.stderr or e.stdout).strip().splitlines()[-1]}")
            worst = float("inf")
            continue
        secs = time.perf_counter() - t0
        for f in sorted(os.listdir(os.path.join(d, "ort"))):
            want, got = np.load(os.path.join(d, "ort", f)), np.load(os.path.join(out, f))
            assert got.shape == want.shape and got.dtype == want.dtype, (name, f, got.shape, want.shape)
            scale = max(float(np.abs(want).max()), 1e-30)
            rel = float(np.abs(got.astype(np.float64) - want).max()) / scale
            worst = max(worst, rel)
            print(f"{name} {f[:-4]} {list(want.shape)}: max |diff| / max |ort| = {rel:.1e}"
                  f"{'' if rel <= 1e-4 else '  OVER 1e-4'}")
        print(f"{name}: tilejit run ({mode}) took {secs:.2f} s end to end")
    print(f"worst relative difference: {worst:.1e} ({'within' if worst <= 1e-4 else 'OVER'} 1e-4)")
    return 0 if worst <= 1e-4 else 1


def tract_time(d, feed, outs, repeats):
    """tract (Sonos' Rust ONNX runtime, its `tract` wheel; one thread) on
    the same file: the median seconds of a call and the largest output
    difference relative to onnxruntime's, or why it could not run."""
    try:
        import tract
    except ImportError:
        return None, "the tract package is not installed"
    try:
        m = tract.onnx().load(os.path.join(d, "model.onnx"))
        names = [m.input_name(i) for i in range(m.input_count())]
        symbols = {}
        for i, n in enumerate(names):
            dims = str(m.input_fact(i)).split(",")[:-1]
            symbols.update({s.strip(): int(v) for s, v in zip(dims, feed[n].shape) if not s.strip().isdigit()})
        m = m.into_model()
        if symbols:
            m.transform(tract.SetSymbols(symbols))
        r = m.into_runnable()
        args = [feed[n] for n in names]
        got = r.run(args)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            r.run(args)
            times.append(time.perf_counter() - t0)
    except Exception as e:  # tract's errors name the node it stopped at
        return None, str(e).strip().splitlines()[0]
    worst = 0.0
    for n, t in zip(outs, got):  # tract keeps the graph's output order
        want = np.load(os.path.join(d, "ort", f"{n}.npy"))
        worst = max(worst, float(np.abs(t.to_numpy() - want).max()) / max(float(np.abs(want).max()), 1e-30))
    return float(np.median(times)), f"max |diff| / max |ort| = {worst:.1e}"


def do_bench(root, binary, repeats):
    import onnxruntime as ort
    for name in MODELS:
        d = os.path.join(root, name)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = 2, 1
        s = ort.InferenceSession(os.path.join(d, "model.onnx"), opts, providers=["CPUExecutionProvider"])
        feed = {i.name: np.load(os.path.join(d, i.name + ".npy")) for i in s.get_inputs()}
        s.run(None, feed)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            s.run(None, feed)
            times.append(time.perf_counter() - t0)
        ort_s = float(np.median(times))
        r = tilejit_run(binary, d, os.path.join(d, "tilejit-bench"), "host", ["--repeat", str(repeats)])
        tj = float(re.search(r"cached calls: median ([0-9.]+) ms", r.stdout).group(1)) / 1e3
        tract_s, tract_note = tract_time(d, feed, [o.name for o in s.get_outputs()], repeats)
        row = {"model": name, "onnxruntime_s": ort_s, "tilejit_s": tj, "ratio": ort_s / tj,
               "tract_s": tract_s, "tract_ratio": tract_s / tj if tract_s else None, "tract": tract_note}
        print(json.dumps(row))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["export", "check", "bench"])
    ap.add_argument("dir", nargs="?", default=os.path.join("target", "onnx-models"))
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--tilejit", default=os.path.join("target", "release", "tilejit"))
    ap.add_argument("--mode", default="host")
    ap.add_argument("--repeats", type=int, default=10)
    a = ap.parse_args()
    if a.what == "export":
        do_export(a.dir, a.small)
        return 0
    if a.what == "check":
        return do_check(a.dir, a.tilejit, a.mode)
    do_bench(a.dir, a.tilejit, a.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
