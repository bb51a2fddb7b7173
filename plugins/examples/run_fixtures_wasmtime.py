"""Runs plugin components against a fixtures folder in wasmtime (wasmtime-py), outside mimeo.

    python run_fixtures_wasmtime.py --fixtures <dir> --name <describe().name> <component.wasm>

The host side is set up the way mimeo's is meant to be: WASI 0.2 linked with an empty context (no
preopened folders, no environment, no arguments, no inherited stdio), `mimeo:transform/log`
recorded here, and a fresh store and instance for every call. The checks are those of
run-fixtures.mjs (see README.md in this folder): describe; validate-config; transform with the
object sent compact and then indented; the error substring, the outcome, the output object and one
`info` log line. Closes with "N passed, N failed"; exits 1 on any failure.
"""

import argparse
import json
import os
import sys
import time

import yaml
from wasmtime import Engine, Store, WasiConfig
from wasmtime.component import Component, Linker, Record

TRANSFORMER = "mimeo:transform/transformer@0.2.0"
LOG = "mimeo:transform/log@0.2.0"


def record(**fields):
    """A component-model record; WIT field names are kebab-case."""
    r = Record()
    for name, value in fields.items():
        setattr(r, name.replace("_", "-"), value)
    return r


class Plugin:
    def __init__(self, engine, path):
        started = time.monotonic()
        self.component = Component.from_file(engine, path)
        self.compile_seconds = time.monotonic() - started
        self.engine = engine
        self.logs = []
        self.linker = Linker(engine)
        self.linker.add_wasip2()
        with self.linker.root() as root:
            with root.add_instance(LOG) as log:
                log.add_func("log", lambda _store, level, message: self.logs.append((level, message)))

    def call(self, name, *args):
        """Calls one export in a fresh store and instance, as mimeo does."""
        store = Store(self.engine)
        store.set_wasi(WasiConfig())
        instance = self.linker.instantiate(store, self.component)
        iface = instance.get_export_index(store, TRANSFORMER)
        if iface is None:
            raise RuntimeError(f"the component does not export {TRANSFORMER}")
        func = instance.get_func(store, instance.get_export_index(store, name, iface))
        return func(store, *args)


def read(folder, name):
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return f.read()


def compact(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def object_ref(obj):
    """The object-ref of an object: its apiVersion, kind, namespace (None if absent) and name."""
    meta = obj.get("metadata") or {}
    return record(api_version=obj.get("apiVersion"), kind=obj.get("kind"),
                  namespace=meta.get("namespace"), name=meta.get("name"))


def read_inputs(folder, cluster):
    """The context's inputs: <case>/inputs/<name>.yaml, one object a file, in file-name order."""
    folder = os.path.join(folder, "inputs")
    if not os.path.isdir(folder):
        return []
    inputs = []
    for file in sorted(os.listdir(folder)):
        if not file.endswith(".yaml"):
            raise ValueError(f"inputs/{file} is not a .yaml file")
        obj = yaml.safe_load(read(folder, file))
        inputs.append(record(name=file.removesuffix(".yaml"), source=object_ref(obj), cluster=cluster,
                             object=compact(obj)))
    return inputs


def check_case(plugin, folder):
    problems = []
    obj = yaml.safe_load(read(folder, "object.yaml"))
    config = read(folder, "config.json") or "{}"
    context = json.loads(read(folder, "context.json") or "{}")
    expected = read(folder, "expected.yaml")
    expected_error = (read(folder, "expected-error.txt") or "").strip() or None
    expected_outcome = (read(folder, "expected-outcome.txt") or "").strip() or None
    meta = obj.get("metadata") or {}
    target_ns = context["targetNamespace"] if "targetNamespace" in context else meta.get("namespace")
    source_cluster = context.get("sourceCluster", "")
    ctx = record(
        rule=context.get("rule", "SyncRule/platform/fixtures"),
        source=object_ref(obj),
        source_cluster=source_cluster,
        target=record(cluster=context.get("targetCluster", ""), namespace=target_ns,
                      name=meta.get("name")),
        config=config,
        inputs=read_inputs(folder, source_cluster),
    )

    def check_error(where, err):
        if expected_error is None:
            problems.append(f"{where} failed: {err}")
        elif expected_error not in err:
            problems.append(f"{where} error {err!r} lacks {expected_error!r}")

    # result<_, string> comes back as None (ok) or the error string.
    err = plugin.call("validate-config", config)
    if err is not None:
        check_error("validate-config", err)
        return problems

    for style, text in (("compact", compact(obj)),
                        ("indented", json.dumps(obj, ensure_ascii=False, indent=2))):
        plugin.logs.clear()
        # result<outcome, string>: a Variant (tag, payload) for ok, the error string for err.
        result = plugin.call("transform", ctx, text)
        if isinstance(result, str):
            check_error(f"transform ({style} input)", result)
            continue
        if expected_error is not None:
            problems.append(f"{style} input: expected an error containing {expected_error!r}, got {result.tag}")
            continue
        if result.tag == "unchanged":
            output = obj
        elif result.tag == "write":
            output = json.loads(result.payload)
        else:
            problems.append(f"{style} input: unexpected outcome {result.tag}({result.payload})")
            continue
        if expected_outcome is not None and result.tag != expected_outcome:
            problems.append(f"{style} input: outcome is {result.tag}, expected {expected_outcome}")
        if output != yaml.safe_load(expected):
            problems.append(f"{style} input: output differs from expected.yaml:\n{yaml.safe_dump(output)}")
        if len(plugin.logs) != 1 or plugin.logs[0][0] != "info":
            problems.append(f"{style} input: expected one info log line, got {plugin.logs}")
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixtures", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("wasm")
    args = parser.parse_args()

    plugin = Plugin(Engine(), args.wasm)
    stem = os.path.basename(args.wasm).removesuffix(".wasm")
    print(f"{stem}: compiled in {plugin.compile_seconds:.1f} s")
    passed = failed = 0

    def report(name, problems):
        nonlocal passed, failed
        if problems:
            failed += 1
            print(f"FAIL  {stem} {name}")
            for p in problems:
                print(f"        {p}")
        else:
            passed += 1
            print(f"ok    {stem} {name}")

    info = plugin.call("describe")
    describe_problems = []
    if info.name != args.name:
        describe_problems.append(f"name is {info.name}, expected {args.name}")
    if info.version != "0.1.0":
        describe_problems.append(f"version is {info.version}, expected 0.1.0")
    if not info.description:
        describe_problems.append("description is empty")
    if list(info.kinds) != []:
        describe_problems.append(f"kinds is {info.kinds}, expected []")
    report("describe", describe_problems)

    for case in sorted(os.listdir(args.fixtures)):
        try:
            problems = check_case(plugin, os.path.join(args.fixtures, case))
        except Exception as e:  # a trap, or a value the runner could not convert
            problems = [f"{type(e).__name__}: {e}"]
        report(case, problems)

    print(f"{stem}: {passed} passed, {failed} failed")
    sys.exit(0 if failed == 0 else 1)


if __name__ == "__main__":
    main()
