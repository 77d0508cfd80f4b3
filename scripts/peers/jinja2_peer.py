"""Renders chat templates with Python's Jinja2 configured as transformers' apply_chat_template
configures it (sandboxed, trim_blocks and lstrip_blocks, loop controls, its tojson,
raise_exception and strftime_now): the reference of package chat's engine. Input on stdin: a JSON
array of {template, context}; output on stdout: a JSON array of {out} or {err}, in order."""

import json
import sys
from datetime import datetime

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

results = []
compiled = {}
for case in json.load(sys.stdin):
    try:
        if case["template"] not in compiled:
            compiled[case["template"]] = env.from_string(case["template"])
        results.append({"out": compiled[case["template"]].render(**case["context"])})
    except Exception as e:  # the Go test compares refusals, not messages
        results.append({"err": "%s: %s" % (type(e).__name__, e)})
json.dump(results, sys.stdout)
