"""The Context is the one door to the adapters: a TxContext keeps what its transaction owns (the journal's
phases, the cards its stops wait on, the lock's wait, each profile as it resolved it, the signal mode) and never
forwards a part of its Context unchanged (issue 40: eight such properties and methods had grown on it, and
transaction code reached the same adapter by two names).

The guard reads ``service/transaction/context.py``'s AST: a method or property of ``TxContext`` whose body (its
docstring aside) is one ``return``/expression of ``self.ctx.<part>...`` - read, or called with nothing but its
own parameters and constants, possibly wrapped in ``list(...)`` and the like - is a forward, and fails the test.
A method that adds the transaction's own state (``self.gpus``, ``self.lock_timeout_s``) or behaviour (a guard,
a second statement) is not one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import servectl.service.transaction.context as tx_context

SOURCE = Path(tx_context.__file__)


def _is_ctx_chain(node: ast.expr) -> bool:
    """``self.ctx`` or an attribute chain below it (``self.ctx.clocks.wall``)."""
    while isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr == "ctx":
            return True
        node = node.value
    return False


def _mentions_self(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "self" for n in ast.walk(node))


def _forwards(fn: ast.FunctionDef) -> bool:
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Return | ast.Expr) or body[0].value is None:
        return False
    value = body[0].value
    # list(self.ctx.x(...)), tuple(...): a builtin around the forward is still the forward
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and len(value.args) == 1:
        value = value.args[0]
    if _is_ctx_chain(value):
        return True
    if isinstance(value, ast.Call) and _is_ctx_chain(value.func):
        passed = [*value.args, *(k.value for k in value.keywords)]
        return not any(_mentions_self(arg) for arg in passed)
    return False


def forwards_in(source: str, class_name: str = "TxContext") -> list[str]:
    """The methods and properties of ``class_name`` in ``source`` that only forward a part of ``self.ctx``."""
    tree = ast.parse(source)
    found = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name):
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            if _forwards(fn):
                found.append(f"{fn.name} (line {fn.lineno})")
    return found


def test_tx_context_forwards_nothing_of_its_context() -> None:
    found = forwards_in(SOURCE.read_text(encoding="utf-8"))
    assert found == [], (
        f"{SOURCE.name}: TxContext forwards its Context's parts unchanged: {', '.join(found)}; the Context is the "
        "one door to the adapters: callers read tx.ctx.<part>, and TxContext keeps only what the transaction owns"
    )


def test_the_guard_sees_each_kind_of_forward() -> None:
    """The shapes the guard was written against (the eight that stood on TxContext before issue 40), and the
    methods it must leave alone."""
    source = '''
class TxContext:
    @property
    def docker(self):
        return self.ctx.docker

    @property
    def state_dir(self):
        """The state folder."""
        return self.ctx.state_dir

    def clock(self):
        return self.ctx.clocks.monotonic()

    def sleep(self, seconds):
        self.ctx.clocks.sleep(seconds)

    def services(self, *, probe):
        return list(self.ctx.runtime.services(probe=probe, plan_hash_of=None))

    def lock(self, purpose):
        return self.ctx.lock(purpose, timeout_s=self.lock_timeout_s)

    def stop(self, service):
        return self.ctx.runtime.stop(service=service, gpus=self.gpus)

    def record(self, event):
        with suppress(OSError):
            self.ctx.history.record(event)

    def enter_restore(self):
        self.signals.mode = "abandon"
'''
    assert [f.split(" ")[0] for f in forwards_in(source)] == ["docker", "state_dir", "clock", "sleep", "services"]


def _is_ctx(node: ast.expr) -> bool:
    """``ctx`` or ``<x>.ctx``."""
    return (isinstance(node, ast.Name) and node.id == "ctx") or (isinstance(node, ast.Attribute) and node.attr == "ctx")


def _ctx_of_ctx(tree: ast.AST) -> list[int]:
    """Lines reading ``ctx.ctx`` or ``<x>.ctx.ctx``: a Context reached through two objects both called ``ctx``."""
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "ctx" and _is_ctx(node.value)
    )


def test_no_code_reads_the_context_as_ctx_of_ctx() -> None:
    """A transaction (``TxContext``) is called ``tx`` and the swap's ``SwapTx`` holds it as ``tx``: the Context
    is ``tx.ctx``, one name per object, never ``ctx.ctx`` (78 places read that before)."""
    src = SOURCE.parents[2]
    found = {
        path.relative_to(src).as_posix(): lines
        for path in sorted(src.rglob("*.py"))
        if (lines := _ctx_of_ctx(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert found == {}


def test_the_ctx_of_ctx_check_sees_both_spellings() -> None:
    tree = ast.parse("a = swap.ctx.ctx.docker\nb = ctx.ctx.state_dir\nc = tx.ctx.docker\n")
    assert _ctx_of_ctx(tree) == [1, 2]
