"""Both CEL evaluators behind one interface, with provider-kubernetes' semantics.

cel-expr-python (Google's C++ CEL) type-checks like cel-go and is the
reference; cel-python (celpy) is the second opinion. An evaluation error
counts as "not ready", as it does in provider-kubernetes.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import celpy
from cel_expr_python import cel


@cache
def _env() -> Any:
    # The provider's environment: one variable, `object`, of type dyn.
    return cel.NewEnv(variables={"object": cel.Type.DYN})


@cache
def compile_reference(query: str) -> Any:
    return _env().compile(query)


def is_statically_bool(query: str) -> bool:
    return bool(compile_reference(query).return_type() == cel.Type.BOOL)


def eval_reference(query: str, obj: Any) -> bool:
    """cel-expr-python; errors count as not ready."""
    try:
        value = compile_reference(query).eval(data={"object": obj})
    except Exception:
        return False
    result = value.value()
    return result is True


@cache
def _celpy_program(query: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(query))


def eval_celpy(query: str, obj: Any) -> bool:
    """cel-python; errors count as not ready."""
    try:
        result = _celpy_program(query).evaluate({"object": celpy.json_to_cel(obj)})
    except Exception:
        return False
    return isinstance(result, celpy.celtypes.BoolType) and bool(result)
