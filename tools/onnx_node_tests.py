#!/usr/bin/env python3
"""Writes ONNX's backend node tests (from the `onnx` package's case
generators, so the data is built here, never committed) into DIR, one
folder per test: model.onnx and test_data_set_N/{input,output}_K.pb, the
layout of onnx/backend/test/data/node (a TensorProto, or a SequenceProto
or OptionalProto where the graph declares a sequence or optional). Then run them with

    tilejit onnx node-tests DIR

Usage: python3 tools/onnx_node_tests.py [DIR]   (default target/onnx-node)

tests/onnx-node-tests.txt is written against the data of onnx 1.23.2 with
ml_dtypes 0.6.0 (`pip install onnx==1.23.2 ml_dtypes==0.6.0`, as
.ci/python-env does): ml_dtypes computes the expected outputs of casts
to int4/int2, and from 0.7 it writes 0 for a value out of range (undefined
in ONNX's spec) where earlier versions wrapped.
"""
import os
import sys

import onnx
from onnx import numpy_helper
from onnx.backend.test.case import node


PINNED = {"onnx": "1.23.2", "ml_dtypes": "0.6.0"}


def warn_on_other_versions():
    import ml_dtypes

    found = {"onnx": onnx.__version__, "ml_dtypes": ml_dtypes.__version__}
    for name, want in PINNED.items():
        if found[name] != want:
            print(
                f"warning: {name} {found[name]} is not the {want} that "
                "tests/onnx-node-tests.txt expects; some expected outputs may differ",
                file=sys.stderr,
            )


def main():
    warn_on_other_versions()
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join("target", "onnx-node")
    cases = node.collect_testcases(None)
    for case in cases:
        d = os.path.join(out, case.name)
        os.makedirs(d, exist_ok=True)
        onnx.save(case.model, os.path.join(d, "model.onnx"))
        for i, (inputs, outputs) in enumerate(case.data_sets or []):
            s = os.path.join(d, f"test_data_set_{i}")
            os.makedirs(s, exist_ok=True)
            for kind, values, infos in (("input", inputs, case.model.graph.input), ("output", outputs, case.model.graph.output)):
                for k, v in enumerate(values):
                    name = infos[k].name if k < len(infos) else f"{kind}_{k}"
                    ty = infos[k].type if k < len(infos) else None
                    try:
                        if ty is not None and ty.HasField("sequence_type"):
                            t = numpy_helper.from_list(v, name)
                        elif ty is not None and ty.HasField("optional_type"):
                            t = numpy_helper.from_optional(v, name)
                        elif isinstance(v, onnx.TensorProto):  # cases that build their own (casts)
                            t = onnx.TensorProto()
                            t.CopyFrom(v)
                            t.name = name
                        else:
                            t = numpy_helper.from_array(v, name)
                    except Exception as e:  # maps, sparse tensors, dtypes numpy lacks
                        print(f"{case.name}: {kind} {k} not written ({e})", file=sys.stderr)
                        continue
                    with open(os.path.join(s, f"{kind}_{k}.pb"), "wb") as f:
                        f.write(t.SerializeToString())
    print(f"wrote {len(cases)} node tests to {out}")


if __name__ == "__main__":
    main()
