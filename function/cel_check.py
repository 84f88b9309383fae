"""Type-checking a user's CEL readiness query as provider-kubernetes will.

provider-kubernetes compiles a `celQuery` with cel-go in an environment of
one variable, `object`, of type dyn, and leaves an Object silently not Ready
when the query's static type is not bool. cel-expr-python is Google's C++
CEL with the same checker, so a query that passes here is one cel-go
accepts as boolean. Imported only when a query is given: it is not needed
for anything else, and costs start-up time.
"""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def _env() -> Any:
    from cel_expr_python import cel  # noqa: PLC0415 - only when a query is given

    return cel, cel.NewEnv(variables={"object": cel.Type.DYN})


def boolean_problem(query: str) -> str | None:
    """Why the query is not a boolean CEL expression over `object`; None when it is."""
    cel, env = _env()
    try:
        compiled = env.compile(query)
    except Exception as e:  # the library raises plain exceptions for syntax and type errors
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"not a valid CEL expression over `object`: {first}"
    if compiled.return_type() != cel.Type.BOOL:
        return "must be a boolean CEL expression (provider-kubernetes leaves the Object not Ready otherwise)"
    return None
