"""Both CEL evaluators behind one interface, with provider-kubernetes' semantics.

cel-expr-python (Google's C++ CEL) type-checks like cel-go and is the
reference; cel-python (celpy) is the second opinion. Both return True,
False, or a CelError: an evaluation error is never folded into False here,
because provider-kubernetes reports it differently (Ready=False, reason
Unavailable, the error as message) and because a query that errors on some
shape of its object does not mean what it says. `ready()` is the provider's
reading of a result.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import celpy
from cel_expr_python import cel


@dataclass(frozen=True)
class CelError:
    """An evaluation error (a missing key, a type mismatch), or a non-bool result."""

    message: str


Result = bool | CelError


def ready(result: Result) -> bool:
    """provider-kubernetes: Ready only for a result that is exactly true."""
    return result is True


@cache
def _env() -> Any:
    # The provider's environment: one variable, `object`, of type dyn.
    return cel.NewEnv(variables={"object": cel.Type.DYN})


@cache
def compile_reference(query: str) -> Any:
    return _env().compile(query)


def is_statically_bool(query: str) -> bool:
    return bool(compile_reference(query).return_type() == cel.Type.BOOL)


def eval_reference(query: str, obj: Any) -> Result:
    """cel-expr-python."""
    try:
        value = compile_reference(query).eval(data={"object": obj})
        result = value.value()
    except Exception as e:  # the library raises plain exceptions for evaluation errors
        return CelError(f"{type(e).__name__}: {e}")
    if not isinstance(result, bool):
        return CelError(f"not a bool: {result!r}")
    return result


@cache
def _celpy_program(query: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(query))


def eval_celpy(query: str, obj: Any) -> Result:
    """cel-python."""
    try:
        result = _celpy_program(query).evaluate({"object": celpy.json_to_cel(obj)})
    except Exception as e:  # celpy raises CELEvalError and friends
        return CelError(f"{type(e).__name__}: {e}")
    if isinstance(result, celpy.CELEvalError):
        return CelError(str(result))
    if not isinstance(result, celpy.celtypes.BoolType):
        return CelError(f"not a bool: {result!r}")
    return bool(result)
