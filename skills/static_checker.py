# cubicle's static policy checker (skills/static_policy.h, docs/skills.md
# "Static policy").
#
# Run as `python3 -I -c <this>` in a sandbox of the skill's profile — the
# skills it reads may be model-written, so it never runs in the daemon's own
# process — with one JSON object on stdin:
#
#   {"policy": {"deny_imports": [...], "deny_calls": [...], "deny_attributes": [...]},
#    "max_violations": 16, "scripts": [BASE64, ...]}
#
# and it writes one line on stdout, a result per script in the same order:
#
#   {"results": [{"violations": [{"rule": "deny_imports: subprocess",
#                                 "what": "import subprocess", "line": 3, "col": 1}],
#                 "truncated": false}, ...]}
#
# Each script is parsed with this Python's own `ast` module and never run.
# The tree is walked without recursion (ast.walk), so a deep script costs
# this program no stack; what ast.parse itself refuses is a violation.
#
# This file is embedded in the cubicle binary at build time; it reads stdin,
# writes stdout and nothing else.

import ast
import base64
import json
import sys

_MAX_WHAT = 120
# Calls whose constant first argument names a module to import.
_IMPORTERS = ("__import__", "importlib.import_module", "importlib.__import__")
# Calls whose constant second argument names an attribute.
_ATTRIBUTE_CALLS = ("getattr", "setattr", "delattr", "hasattr")


def _matches(pattern, name):
    # "a.b" matches a.b and a.b.c; "a.*" matches a.b and a.b.c, never a.
    if pattern.endswith(".*"):
        return name.startswith(pattern[:-1])
    return name == pattern or name.startswith(pattern + ".")


def _cut(text):
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text if len(text) <= _MAX_WHAT else text[:_MAX_WHAT - 3] + "..."


class _Check:
    def __init__(self, source, policy):
        self.lines = source.split("\n")
        self.imports = policy.get("deny_imports", [])
        self.calls = policy.get("deny_calls", [])
        self.attributes = set(policy.get("deny_attributes", []))
        self.found = []
        self.aliases = {}    # a name an import binds -> the dotted names it may stand for
        self.star_from = []  # modules imported with `from M import *`

    def report(self, kind, pattern, what, node):
        line = getattr(node, "lineno", 0) or 0
        col = getattr(node, "col_offset", 0) or 0
        if 0 < line <= len(self.lines):
            # col_offset counts UTF-8 bytes; people count characters.
            text = self.lines[line - 1].encode("utf-8", "surrogateescape")
            col = len(text[:col].decode("utf-8", "replace"))
        self.found.append((line, col + 1, "%s: %s" % (kind, pattern), _cut(what)))

    # -- imports ----------------------------------------------------------

    def bind(self, name, target):
        self.aliases.setdefault(name, set()).add(target)

    def check_module(self, module, what, node):
        for pattern in self.imports:
            if _matches(pattern, module):
                self.report("deny_imports", pattern, what, node)
                return

    def visit_import(self, node):
        for alias in node.names:
            what = "import " + alias.name + (" as " + alias.asname if alias.asname else "")
            self.check_module(alias.name, what, node)
            if alias.asname:
                self.bind(alias.asname, alias.name)
            else:
                top = alias.name.split(".")[0]
                self.bind(top, top)

    def visit_import_from(self, node):
        # A skill has no package, so a relative import cannot be resolved:
        # it is matched as if absolute, which errs on the side of denying.
        module = node.module or ""
        shown = "." * (node.level or 0) + module
        for alias in node.names:
            what = "from %s import %s" % (shown, alias.name) + (" as " + alias.asname if alias.asname else "")
            if alias.name == "*":
                if module:
                    self.check_module(module, what, node)
                    self.star_from.append(module)
                continue
            full = module + "." + alias.name if module else alias.name
            before = len(self.found)
            if module:
                self.check_module(module, what, node)
            if len(self.found) == before:
                self.check_module(full, what, node)
            self.bind(alias.asname or alias.name, full)

    # -- names ------------------------------------------------------------

    @staticmethod
    def chain(node):
        # a.b.c as ["a", "b", "c"]; None for anything else.
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(node.id)
        parts.reverse()
        return parts

    def resolve(self, parts):
        # The dotted names a chain may stand for, through the imports.
        head, rest = parts[0], parts[1:]
        bases = set(self.aliases.get(head, ()))
        if not bases:
            bases.add(head)
            bases.update(m + "." + head for m in self.star_from)
        if head == "__builtins__":
            bases.add("builtins")
        names = set()
        for base in bases:
            name = ".".join([base] + rest)
            names.add(name)
            if name.startswith("builtins."):
                names.add(name[len("builtins."):])
        return names

    def denied_call(self, names):
        # The first pattern that one of `names` matches, and that name.
        for pattern in self.calls:
            for name in sorted(names):
                if _matches(pattern, name):
                    return pattern, name
        return None, None

    @staticmethod
    def constant_string(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return None

    def visit_call(self, node):
        parts = self.chain(node.func)
        if parts is None:
            return
        names = self.resolve(parts)
        shown = ".".join(parts)
        pattern, name = self.denied_call(names)
        if pattern is not None:
            # Through an alias (`o.system` for os.system), the name it stands for.
            resolved = "" if name == shown else " (%s)" % name
            self.report("deny_calls", pattern, shown + "(...)" + resolved, node)
        first = self.constant_string(node.args[0]) if node.args else None
        second = self.constant_string(node.args[1]) if len(node.args) > 1 else None
        if first is not None and names.intersection(_IMPORTERS):
            self.check_module(first.lstrip("."), "%s(%r)" % (shown, first), node)
        if second is not None and names.intersection(_ATTRIBUTE_CALLS):
            target = self.chain(node.args[0])
            what = "%s(%s, %r)" % (shown, ".".join(target) if target is not None else "...", second)
            if second in self.attributes:
                self.report("deny_attributes", second, what, node)
            if target is not None:
                pattern, _ = self.denied_call({n + "." + second for n in self.resolve(target)})
                if pattern is not None:
                    self.report("deny_calls", pattern, what, node)

    def visit_reference(self, node, parent):
        # A denied callable named without being called (`f = eval`,
        # `map(os.system, cmds)`) is denied as its call would be.
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return  # not the whole chain
        if isinstance(parent, ast.Call) and parent.func is node:
            return  # a call: visit_call's
        if not isinstance(getattr(node, "ctx", None), ast.Load):
            return
        parts = self.chain(node)
        if parts is None:
            return
        pattern, name = self.denied_call(self.resolve(parts))
        if pattern is not None:
            shown = ".".join(parts)
            resolved = "" if name == shown else " (%s)" % name
            self.report("deny_calls", pattern, shown + resolved + ", named without a call", node)

    def visit_attribute(self, node):
        if node.attr in self.attributes:
            parts = self.chain(node)
            shown = ".".join(parts) if parts is not None else "(...)." + node.attr
            self.report("deny_attributes", node.attr, shown, node)

    # -- the whole script ---------------------------------------------------

    def run(self, source):
        try:
            tree = ast.parse(source, "<skill>")
        except SyntaxError as e:
            self.found.append((e.lineno or 0, e.offset or 0, "syntax", _cut("%s: %s" % (type(e).__name__, e.msg))))
            return
        except (RecursionError, MemoryError) as e:
            self.found.append((0, 0, "syntax", _cut("%s: the script is nested too deeply to check" %
                                                    type(e).__name__)))
            return
        except UnicodeError as e:  # python3 -c refuses such a script too
            self.found.append((0, 0, "syntax", "%s: the script is not UTF-8" % type(e).__name__))
            return
        except ValueError as e:  # a NUL byte, which a manifest's entry cannot hold
            self.found.append((0, 0, "syntax", _cut("ValueError: %s" % e)))
            return
        nodes = list(ast.walk(tree))
        parents = {}
        for node in nodes:
            for child in ast.iter_child_nodes(node):
                parents[child] = node
            if isinstance(node, ast.Import):
                self.visit_import(node)
            elif isinstance(node, ast.ImportFrom):
                self.visit_import_from(node)
        for node in nodes:
            if isinstance(node, ast.Call):
                self.visit_call(node)
            if isinstance(node, ast.Attribute):
                self.visit_attribute(node)
            if isinstance(node, (ast.Name, ast.Attribute)):
                self.visit_reference(node, parents.get(node))


def check(source, policy, max_violations):
    c = _Check(source, policy)
    c.run(source)
    found = sorted(set(c.found))
    return {"violations": [{"rule": rule, "what": what, "line": line, "col": col}
                           for line, col, rule, what in found[:max_violations]],
            "truncated": len(found) > max_violations}


def main():
    request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    policy = request["policy"]
    limit = int(request["max_violations"])
    results = []
    for encoded in request["scripts"]:
        # As `python3 -c SCRIPT` reads its argument: UTF-8, other bytes kept.
        source = base64.b64decode(encoded).decode("utf-8", "surrogateescape")
        results.append(check(source, policy, limit))
    sys.stdout.write(json.dumps({"results": results}) + "\n")
    sys.stdout.flush()


main()
